"""Pre-training under KERAS_BACKEND=jax: the same batches and the same loss curve as TensorFlow.

    PYTHONPATH=. python -m pytest tests/test_jax_backend.py

- `PretrainingPyDataset` (model/pretraining/pydataset.py) yields exactly the
  batches of the tf.data pipeline: same examples in the same order, same
  dynamic masks, same weights, over several epochs, after a restart at a
  later step, per worker, with TensorFlow's graph seed set or not, for
  dynamic and static records, with more shards than interleave cycles.
- `python -m model.train pretrain` runs under each backend in a child
  process from the same initial weights (`--init-checkpoint`: the backends'
  initialisers draw different numbers from the same seed) and data, with
  dropout 0 (each backend draws its own dropout masks). Everything else is
  the same computation in float32, so the losses agree to float rounding:
  the first steps exactly, then within 2e-3 (measured: at most 4e-4 over 20
  steps at learning rate 1e-3; Adam's first updates are about lr * sign(g),
  so rounding differences in near-zero gradients grow slightly). A batch
  out of place would show: the losses of different batches of these
  records differ by 1e-2 to 1e-1.
- `--strategy data-parallel` on two host devices trains like one device
  (slow: two more runs).
- A JAX run imports no TensorFlow (a machine with JAX and no TensorFlow):
  the child blocks `import tensorflow`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from model import data
from model.pretraining.masking import Masker, MaskingConfig
from model.pretraining.pydataset import PretrainingPyDataset
from model.text.wordpiece import load_vocabulary
from tests.helpers import (
    NO_TENSORFLOW,
    REPO_ROOT,
    make_records,
    module_command,
    pretrain_argv,
    subprocess_env,
    weights_of,
    write_corpus,
    write_vocab,
)

STEPS = 20
RUN_TIMEOUT = 240


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return make_records(tmp_path_factory.mktemp("data"))


def flat(batch) -> list:
    """The arrays of an `(x, y, sample_weight)` batch in a fixed order."""
    return [tree[k] for tree in batch for k in sorted(tree)]


def assert_same_batches(tf_dataset, py_dataset, steps):
    for i, theirs in enumerate(tf_dataset.take(steps)):
        theirs = [t.numpy() for t in flat(theirs)]
        ours = flat(py_dataset[i])
        assert len(ours) == len(theirs)
        for a, b in zip(theirs, ours):
            assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, b.dtype)
            np.testing.assert_array_equal(a, b, err_msg=f"step {i}")


@pytest.mark.parametrize("graph_seed", [None, 7])
def test_pydataset_yields_the_tf_pipeline_batches(tmp_path, graph_seed):
    import tensorflow as tf

    from model.pretraining.dataset import pretraining_dataset

    vocab = write_vocab(str(tmp_path / "vocab.txt"))
    corpus = write_corpus(str(tmp_path / "corpus.txt"), 20, sentences=(3, 6))
    dynamic, static = str(tmp_path / "dynamic"), str(tmp_path / "static")
    # 10 shards: more than the 8 files interleaved at once, of unequal sizes.
    assert (
        data.main(
            [
                "--input",
                corpus,
                "--vocab",
                vocab,
                "--output",
                dynamic,
                "--max-seq-length",
                "32",
                "--num-shards",
                "10",
            ]
        )
        == 0
    )
    assert (
        data.main(
            [
                "--input",
                corpus,
                "--vocab",
                vocab,
                "--output",
                static,
                "--max-seq-length",
                "32",
                "--num-shards",
                "3",
                "--masking",
                "static",
                "--max-predictions",
                "5",
            ]
        )
        == 0
    )
    masker = Masker(load_vocabulary(vocab), MaskingConfig(max_predictions=5))
    cases = [
        (dynamic, dict(start_step=0)),
        (dynamic, dict(start_step=7)),
        (dynamic, dict(start_step=3, worker_index=1, num_workers=2)),
        (static, dict(start_step=2)),
    ]
    tf.random.set_seed(graph_seed)
    try:
        for pattern, kwargs in cases:
            common = dict(batch_size=4, seed=123, shuffle_buffer=16, **kwargs)
            ours = PretrainingPyDataset(pattern, masker=masker, graph_seed=graph_seed, **common)
            if "num_workers" in kwargs:
                common["replica_batch_size"] = 2
            theirs = pretraining_dataset(pattern, masker=masker, **common)
            # 40 batches of 4: several epochs of these ~40 instances
            assert_same_batches(theirs, ours, steps=40)
        # A PyDataset asked out of order restarts at that position.
        ours = PretrainingPyDataset(
            dynamic, 4, masker, seed=123, shuffle_buffer=16, graph_seed=graph_seed
        )
        later, first = flat(ours[5]), flat(ours[0])
        for a, b in zip(later, flat(ours[5])):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(first, flat(ours[0])):
            np.testing.assert_array_equal(a, b)
    finally:
        tf.random.set_seed(None)


def test_jax_strategies():
    from model.training.strategy import StrategyError, make_jax_distribution, make_strategy

    with pytest.raises(StrategyError, match="mirrored is a tf.distribute strategy"):
        make_jax_distribution("mirrored")
    with pytest.raises(StrategyError, match="--cpu-replicas"):
        make_jax_distribution("auto", cpu_replicas=2)
    assert make_jax_distribution("auto") is None
    with pytest.raises(StrategyError, match="data-parallel is for KERAS_BACKEND=jax"):
        make_strategy("data-parallel")


@pytest.fixture(scope="module")
def initial_weights(records, tmp_path_factory):
    """A `tiny` pre-training model directory both backends start from."""
    import keras

    from model.checkpoints import model_dir
    from model.heads.pretrainer import BertPretrainer
    from model.networks.encoder import BertEncoder

    vocab = os.path.join(records, "vocab.txt")
    keras.utils.set_random_seed(0)
    model = BertPretrainer(
        BertEncoder.from_preset("tiny", vocabulary_size=len(load_vocabulary(vocab))),
        next_sentence=True,
    )
    directory = str(tmp_path_factory.mktemp("init") / "init")
    model_dir.save(model, directory, vocab)
    return directory


def train(backend, records, init, output, steps=STEPS, python_prefix=(), extra=(), env=None):
    env = {**subprocess_env(), **(env or {})}
    env["KERAS_BACKEND"] = backend
    argv = pretrain_argv(
        records,
        output,
        steps=steps,
        checkpoint_every=1,
        extra=[
            "--dropout",
            "0.0",
            "--init-checkpoint",
            init,
            "--learning-rate",
            "1e-3",
            "--warmup-steps",
            "2",
            *extra,
        ],
    )
    command = [*python_prefix, *argv] if python_prefix else module_command("model.train", argv)
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with open(os.path.join(output, "train_summary.json"), encoding="utf-8") as f:
        return json.load(f), done


@pytest.mark.slow
def test_jax_training_follows_tensorflow(records, initial_weights, tmp_path):
    every = ["--log-every", "2"]
    ours, _ = train("jax", records, initial_weights, str(tmp_path / "jax"), extra=every)
    theirs, _ = train("tensorflow", records, initial_weights, str(tmp_path / "tf"), extra=every)
    assert (ours["backend"], theirs["backend"]) == ("jax", "tensorflow")
    # The curves: TensorBoard's on TensorFlow; a JAX run writes the same scalars as CSV,
    # TensorFlow installed (as here) or not
    assert "train" in os.listdir(tmp_path / "tf" / "logs")
    assert os.listdir(tmp_path / "jax" / "logs") == ["scalars.csv"]
    with open(tmp_path / "jax" / "logs" / "scalars.csv", encoding="utf-8") as f:
        rows = [line.split(",") for line in f.read().splitlines()]
    losses = [step for tag, step, _ in rows[1:] if tag == "train/loss"]
    assert losses == [str(s) for s in range(2, STEPS + 1, 2)]
    a, b = np.array(theirs["interval_losses"]), np.array(ours["interval_losses"])
    assert len(a) == len(b) == STEPS
    np.testing.assert_allclose(b[:2], a[:2], rtol=1e-5)
    np.testing.assert_allclose(b, a, atol=2e-3)
    w_tf = weights_of(os.path.join(tmp_path / "tf", "model.weights.h5"))
    w_jax = weights_of(os.path.join(tmp_path / "jax", "model.weights.h5"))
    assert set(w_tf) == set(w_jax)
    for name in w_tf:
        np.testing.assert_allclose(w_jax[name], w_tf[name], atol=2e-3, err_msg=name)


@pytest.mark.slow
def test_data_parallel_on_two_devices_trains_like_one(records, initial_weights, tmp_path):
    """keras.distribution.DataParallel over two host devices: the global batch
    split in two, the same loss as one device to float rounding."""
    two = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    steps = 6
    one, _ = train("jax", records, initial_weights, str(tmp_path / "one"), steps=steps, env=two)
    split, done = train(
        "jax",
        records,
        initial_weights,
        str(tmp_path / "two"),
        steps=steps,
        extra=["--strategy", "data-parallel"],
        env=two,
    )
    assert "DataParallel with 2 replica(s)" in done.stdout
    assert split["replicas"] == 2
    np.testing.assert_allclose(split["interval_losses"], one["interval_losses"], atol=1e-4)


def _imports_the_tokenizer(module: str) -> bool:
    with open(os.path.join(REPO_ROOT, "model", module), encoding="utf-8") as f:
        return "from model.text.tokenizer import" in f.read()


@pytest.mark.xfail(
    _imports_the_tokenizer("pretraining/masking.py")
    or _imports_the_tokenizer("checkpoints/model_dir.py"),
    reason="model/pretraining/masking.py and model/checkpoints/model_dir.py take SPECIAL_TOKENS and "
    "load_vocabulary from model.text.tokenizer, which imports tensorflow_text; "
    "model.text.wordpiece has the same names without TensorFlow",
    raises=AssertionError,
    strict=True,
)
@pytest.mark.slow
def test_a_jax_run_imports_no_tensorflow(records, initial_weights, tmp_path):
    summary, done = train(
        "jax",
        records,
        initial_weights,
        str(tmp_path / "run"),
        steps=2,
        python_prefix=[sys.executable, "-c", NO_TENSORFLOW],
    )
    assert summary["steps"] == 2
    assert not os.path.isdir(tmp_path / "run" / "logs")  # no TensorBoard without TensorFlow
