"""Ctrl-C reaches a training run wherever it waits (model/training/interrupts.py), and a
machine without TensorFlow is told which backend to set (model/io/backend.py)."""

from __future__ import annotations

import os
import signal

import pytest

from model.io import backend
from model.training.interrupts import interruptible


def test_an_interrupt_lost_where_it_was_raised_is_raised_at_the_next_batch_end():
    """numpy loses an exception raised inside np.array(jax_array), where a device-path step
    waits: the interrupt is noted, and the callback raises it at the next batch end."""
    before = signal.getsignal(signal.SIGINT)
    with interruptible() as interrupts:
        interrupts.on_train_batch_end(0)  # nothing noted: nothing raised
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass
        except KeyboardInterrupt:
            pass  # as numpy's C code drops it
        with pytest.raises(KeyboardInterrupt):
            interrupts.on_train_batch_end(1)
        interrupts.on_test_batch_end(2)  # raised once
    assert signal.getsignal(signal.SIGINT) is before


def test_a_sigterm_is_raised_at_the_next_batch_end_alone():
    """Under exit_on_sigterm (model.train's main) a SIGTERM raises SystemExit(143), at the
    next batch end alone (raised inside TensorFlow's C++ it crashed the process); by
    default a SIGTERM kills, left as it is."""
    from model.io.files import TERMINATED, exit_on_sigterm

    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # pytest-xdist's workers set one
    try:
        with interruptible():
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        restore = exit_on_sigterm()
        with interruptible() as interrupts:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass  # nothing raised here
            with pytest.raises(SystemExit) as stop:
                interrupts.on_train_batch_end(1)
            assert stop.value.code == TERMINATED
            interrupts.on_train_batch_end(2)  # raised once
        restore()
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_stopped_run_names_the_checkpoint_it_goes_on_from(tmp_path):
    """model.train's last line after a signal: each seed's newest complete checkpoint."""
    from argparse import Namespace

    from model.train import stopped

    args = Namespace(output=str(tmp_path / "sst2-seed{seed}"), seeds=[1, 2])
    assert stopped(args, "Ctrl-C") == (
        "stopped by Ctrl-C before a checkpoint was saved: the same command starts over"
    )
    for seed, step in ((1, 40), (1, 80), (2, 80)):
        path = tmp_path / f"sst2-seed{seed}" / "checkpoints" / f"ckpt-{step:08d}"
        path.mkdir(parents=True)
        (path / "state.json").write_text(f'{{"step": {step}}}')
    (tmp_path / "sst2-seed2" / "checkpoints" / "ckpt-00000120").mkdir()  # a save cut short
    newest = [tmp_path / f"sst2-seed{seed}" / "checkpoints" / "ckpt-00000080" for seed in (1, 2)]
    assert stopped(args, "SIGTERM") == (
        f"stopped by SIGTERM; kept {newest[0]} (step 80), {newest[1]} (step 80): "
        "the same command goes on from the newest step they all have"
    )


def test_an_ignored_interrupt_stays_ignored():
    """A background job of a script runs with SIGINT ignored: nothing is installed."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interruptible():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_machine_without_tensorflow_is_told_to_set_keras_backend(tmp_path, monkeypatch):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.setattr(backend, "has_tensorflow", lambda: False)
    assert backend.keras_backend() == "tensorflow"
    with pytest.raises(SystemExit, match="set KERAS_BACKEND=jax"):
        backend.check_keras_backend()
    (tmp_path / "keras.json").write_text('{"backend": "jax"}')
    assert backend.keras_backend() == "jax"
    backend.check_keras_backend()  # keras.json chose JAX: fine
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    (tmp_path / "keras.json").unlink()
    backend.check_keras_backend()
