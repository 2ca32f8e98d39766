"""Training faults: kill -9 again and again (mid-save too), NaN, an unwritable or full disk,
and atomic outputs.

    PYTHONPATH=. python -m pytest tests/test_faults.py

The repeated-kill tests run the real command (`python -m model.train ...`) in a
child process, kill it with SIGKILL three times at seeded moments (when a
checkpoint's temporary directory appears, i.e. in the middle of a save, and a
random delay after a checkpoint), restart the same command each time, and
check that every restart resumes from the newest *complete* checkpoint (so no
more than the steps since it are lost), never from a half-written one, and that
the run ends with the weights of an uninterrupted run of the same seed.
"""

from __future__ import annotations

import ast
import errno
import json
import os
import random
import re
import signal
import subprocess
import time

import numpy as np
import pytest

from model.training.checkpointing import ResumableCheckpoint
from tests.helpers import (
    REPO_ROOT,
    assert_same_weights,
    finetune_argv,
    make_init,
    make_records,
    module_command,
    pretrain_argv,
    run_train,
    subprocess_env,
    weights_of,
    write_sst2,
)
from tests.test_objectives import INPUTS  # the record format each objective trains on

_TMP = re.compile(r"^\.ckpt-(\d{8})\.tmp-")


def complete_checkpoints(checkpoints: str) -> list[int]:
    """Steps of the `ckpt-*` directories, each checked whole: its weights file
    opens, its state.json names its step."""
    steps = []
    for step, path in ResumableCheckpoint(checkpoints, 1).checkpoints():
        assert weights_of(os.path.join(path, "model.weights.h5")), path
        with open(os.path.join(path, "state.json"), encoding="utf-8") as f:
            assert json.load(f)["step"] == step, path
        steps.append(step)
    return steps


def partial_saves(checkpoints: str, ignore=()) -> list[int]:
    """Steps of the `.ckpt-*.tmp-*` directories (saves in progress, or left by a kill)."""
    if not os.path.isdir(checkpoints):
        return []
    return [
        int(m.group(1))
        for name in os.listdir(checkpoints)
        if name not in ignore
        for m in [_TMP.match(name)]
        if m
    ]


def newest_step(checkpoints: str) -> int:
    return max((step for step, _ in ResumableCheckpoint(checkpoints, 1).checkpoints()), default=0)


def kill_when(argv, log: str, condition, delay: float, sig=signal.SIGKILL) -> None:
    """Runs `python -m model.train argv` (stdout to `log`) and sends it `sig` (SIGKILL)
    `delay` seconds after `condition()` holds; it must die of that signal."""
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(log, "w", encoding="utf-8") as out:
        child = subprocess.Popen(
            module_command("model.train", argv),
            cwd=REPO_ROOT,
            env=subprocess_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.time() + 300
            while not condition():
                assert child.poll() is None, f"the run ended before the kill:\n{open(log).read()}"
                assert time.time() < deadline, "no kill point after 300 s"
                time.sleep(0.0005)
            time.sleep(delay)
            os.kill(child.pid, sig)
            child.wait(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
            child.wait()
    assert child.returncode == -sig, open(log).read()[-3000:]


def resumed_step(text: str) -> int:
    m = re.search(r"resuming from step (\d+)", text)
    return int(m.group(1)) if m else 0


def kill_three_times(argv, output: str, every: int, last_step: int, seed: int, finished: str):
    """Kills the command three times (mid-save, a random checkpoint step + a
    random delay, mid-save), checking that each restart resumed from the
    newest complete checkpoint the kill before left. Returns [[kind, newest
    complete step after the kill, whether a .tmp was left]]; the caller runs
    the command a last time and checks it resumes from events[-1][1]."""
    rng = random.Random(seed)
    checkpoints = os.path.join(output, "checkpoints")
    events, resumed = [], 0
    plans = ["mid-save", "random", "mid-save"]
    for i, kind in enumerate(plans):
        after = resumed
        # A temporary left by the last kill is not a new save in progress.
        stale = set(os.listdir(checkpoints)) if os.path.isdir(checkpoints) else set()
        if kind == "mid-save":

            def condition(after=after, stale=stale):
                return any(s > after for s in partial_saves(checkpoints, stale))
        else:
            target = min(after + every * rng.randint(1, 2), last_step - 2 * every)
            target = max(target, after + 1)

            def condition(target=target):
                return newest_step(checkpoints) >= target

        log = os.path.join(os.path.dirname(output), f"run{i}.log")
        kill_when(argv, log, condition, rng.uniform(0, 0.05) if kind == "random" else 0)
        assert not os.path.exists(os.path.join(output, finished)), "killed too late"
        newest = max(complete_checkpoints(checkpoints), default=0)
        assert newest >= after  # a kill never destroys a complete checkpoint
        events.append([kind, newest, bool(partial_saves(checkpoints))])
        # The next run (killed in the next round, or the last, in-process one)
        # must resume from exactly `newest`; checked below from its output.
        resumed = newest
        with open(os.path.join(os.path.dirname(output), f"run{i}.log"), encoding="utf-8") as f:
            assert resumed_step(f.read()) == (events[i - 1][1] if i else 0), events
    return events


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return make_records(tmp_path_factory.mktemp("data"))


# === Pre-training: killed three times ===


@pytest.mark.slow
def test_pretraining_killed_three_times_resumes_each_time_and_matches(records, tmp_path, capsys):
    run = {"steps": 40, "batch_size": 4, "checkpoint_every": 5, "extra": ["--strategy", "cpu"]}
    straight = str(tmp_path / "straight" / "run")
    assert run_train(pretrain_argv(records, straight, **run)) == 0
    output = str(tmp_path / "killed" / "run")
    argv = pretrain_argv(records, output, **run)
    events = kill_three_times(
        argv, output, every=5, last_step=40, seed=10, finished="model.weights.h5"
    )
    # Whatever the last kill left, a save of a later step cut off mid-write is there too
    # (a truncated weights file): the last run must ignore it, resume from the newest
    # complete checkpoint and remove it.
    partial = os.path.join(output, "checkpoints", ".ckpt-00000039.tmp-k1ll3d")
    os.makedirs(partial)
    with open(os.path.join(partial, "model.weights.h5"), "wb") as f:
        f.write(b"\x89HDF\r\n\x1a\n truncated")
    with open(os.path.join(partial, "state.json"), "w") as f:
        f.write('{"step": 39}')
    capsys.readouterr()
    assert run_train(argv) == 0  # in this process: another TensorFlow start-up tests nothing more
    out = capsys.readouterr().out
    assert resumed_step(out) == events[-1][1], (events, out[-2000:])
    print("pretraining kills (kind, newest complete checkpoint, a .tmp left):", events)
    assert not partial_saves(os.path.join(output, "checkpoints"))  # cleaned on restart
    with open(os.path.join(output, "train_summary.json"), encoding="utf-8") as f:
        assert json.load(f)["steps"] == run["steps"]
    assert_same_weights(
        os.path.join(straight, "model.weights.h5"), os.path.join(output, "model.weights.h5")
    )
    assert_same_weights(
        os.path.join(straight, "checkpoints", "ckpt-00000040", "model.weights.h5"),
        os.path.join(output, "checkpoints", "ckpt-00000040", "model.weights.h5"),
    )
    # Asked for fewer steps than the checkpoint holds: it says so, and leaves the run as it is.
    with open(os.path.join(output, "train_summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    capsys.readouterr()
    assert run_train(pretrain_argv(records, output, **{**run, "steps": 30})) == 0
    out = capsys.readouterr().out
    assert "nothing to train: the newest checkpoint is at step 40, at or past --steps 30" in out
    with open(os.path.join(output, "train_summary.json"), encoding="utf-8") as f:
        assert json.load(f) == summary


@pytest.mark.slow
@pytest.mark.parametrize("sig, how", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
def test_a_run_stopped_by_a_signal_names_the_checkpoint_it_goes_on_from(
    records, tmp_path, sig, how
):
    """Ctrl-C or `kill`: the run dies of that signal (a shell loop stops too), its last line
    names the newest checkpoint, and no traceback is printed."""
    output = str(tmp_path / "run")
    checkpoints = os.path.join(output, "checkpoints")
    log = str(tmp_path / "run.log")
    argv = pretrain_argv(records, output, steps=100_000, checkpoint_every=4)
    kill_when(argv, log, lambda: newest_step(checkpoints) >= 4, 0, sig=sig)
    with open(log, encoding="utf-8") as f:
        text = f.read()
    last = text.strip().splitlines()[-1]
    said = re.fullmatch(
        rf"stopped by {how}; kept (\S+) \(step (\d+)\): the same command goes on from there", last
    )
    assert said, text[-3000:]
    assert int(said.group(2)) == newest_step(checkpoints) >= 4
    assert said.group(1) == os.path.join(checkpoints, f"ckpt-{int(said.group(2)):08d}")
    assert "Traceback" not in text


# === Every other pre-training objective: killed once ===


@pytest.mark.parametrize(
    "objective, inputs",
    [(name, INPUTS[name]) for name in ("roberta", "spanbert", "ltr", "electra")],
)
@pytest.mark.slow
def test_every_objective_resumes_after_kill_to_the_uninterrupted_weights(
    objective, inputs, tmp_path, capsys
):
    """BERT's objective has the three-kill test above; each other one is killed once
    after its first checkpoint and must end with the uninterrupted run's weights (its
    batch transform draws from (seed, position) alone, so the resumed data is the same)."""
    records = make_records(tmp_path, extra=["--inputs", inputs])
    run = {"steps": 12, "batch_size": 4, "checkpoint_every": 4, "extra": ["--objective", objective]}
    straight = str(tmp_path / "straight" / "run")
    assert run_train(pretrain_argv(records, straight, **run)) == 0
    output = str(tmp_path / "killed" / "run")
    argv = pretrain_argv(records, output, **run)
    checkpoints = os.path.join(output, "checkpoints")
    kill_when(argv, str(tmp_path / "killed" / "run0.log"), lambda: newest_step(checkpoints) >= 4, 0)
    assert not os.path.exists(os.path.join(output, "model.weights.h5")), "killed too late"
    newest = max(complete_checkpoints(checkpoints))
    capsys.readouterr()
    assert run_train(argv) == 0
    assert resumed_step(capsys.readouterr().out) == newest > 0
    assert_same_weights(
        os.path.join(straight, "model.weights.h5"), os.path.join(output, "model.weights.h5")
    )


@pytest.mark.slow
def test_electra_with_held_out_scores_resumes_to_the_uninterrupted_weights(tmp_path):
    """Scoring the held-out records draws the generator's samples too: it must not move the
    training's sampling state, which the checkpoint (saved before the scoring) holds. A run
    resumed from a checkpoint whose scores were cut off (here: their row removed, as a kill
    between the save and the scoring leaves it) scores it first: the same curve."""
    records = make_records(tmp_path, extra=["--inputs", INPUTS["electra"]])
    extra = ["--objective", "electra", "--eval-data", records, "--eval-steps", "2"]
    run = {"steps": 12, "batch_size": 4, "checkpoint_every": 4, "extra": extra}
    straight = str(tmp_path / "straight")
    assert run_train(pretrain_argv(records, straight, **run)) == 0
    parted = str(tmp_path / "parted")
    stopped = {**run, "extra": [*extra, "--stop-at", "8"]}
    assert run_train(pretrain_argv(records, parted, **stopped)) == 0
    log = os.path.join(parted, "eval.json")
    with open(log, encoding="utf-8") as f:
        cut = [r for r in json.load(f)["rows"] if r["step"] < 8]
    with open(log, "w", encoding="utf-8") as f:
        json.dump({"rows": cut}, f)
    assert run_train(pretrain_argv(records, parted, **run)) == 0
    assert_same_weights(
        os.path.join(straight, "model.weights.h5"), os.path.join(parted, "model.weights.h5")
    )
    rows = {}
    for name in (straight, parted):
        with open(os.path.join(name, "eval.json"), encoding="utf-8") as f:
            rows[name] = json.load(f)["rows"]
    assert [r["step"] for r in rows[parted]] == [4, 8, 12]
    for mine, theirs in zip(rows[straight], rows[parted]):
        assert mine == pytest.approx(theirs, rel=1e-5), mine["step"]


# === Fine-tuning: killed three times ===


def _finetune_argv(data, init, output, extra=()):
    # 48 examples, batch 4: 12 steps an epoch, 2 epochs, a checkpoint every 3; batches
    # grouped by length and dropout on, so a resumed run must restore the data order
    # and the dropout masks to end like the uninterrupted one.
    return finetune_argv(
        "sst2",
        data,
        init,
        output,
        epochs="2",
        batch_size=4,
        seq_len=40,
        extra=[
            "--dropout",
            "0.1",
            "--checkpoint-every",
            "3",
            "--group-by-length",
            "--strategy",
            "cpu",
            *extra,
        ],
    )


@pytest.mark.slow
def test_finetuning_killed_three_times_resumes_each_time_and_matches(tmp_path, capsys):
    data = write_sst2(tmp_path / "SST-2", train=48, dev=12, seed=3)
    init = make_init(tmp_path)
    straight = tmp_path / "straight"
    assert run_train(_finetune_argv(data, init, straight)) == 0
    output = str(tmp_path / "killed" / "run")
    argv = _finetune_argv(data, init, output)
    events = kill_three_times(argv, output, every=3, last_step=24, seed=11, finished="metrics.json")
    capsys.readouterr()
    assert run_train(argv) == 0
    out = capsys.readouterr().out
    assert resumed_step(out) == events[-1][1], (events, out[-2000:])
    print("fine-tuning kills (kind, newest complete checkpoint, a .tmp left):", events)
    assert_same_weights(straight / "model.weights.h5", os.path.join(output, "model.weights.h5"))
    history = [
        json.loads(open(os.path.join(d, "metrics.json")).read())["history"]
        for d in (straight, output)
    ]
    assert [r["step"] for r in history[1]] == [12, 24]
    for a, b in zip(*history):
        assert b["accuracy"] == pytest.approx(a["accuracy"])
    assert not os.path.exists(os.path.join(output, "checkpoints"))
    assert not os.path.exists(os.path.join(straight, "checkpoints"))


def test_finetune_resumed_on_other_examples_is_refused_and_on_the_same_ones_goes_on(
    tmp_path, capsys
):
    """A resumed fine-tuning starts at step x batch of the same data order: another --seq-len,
    --seed, --group-by-length or number of examples is refused, naming it; a
    --max-train-examples above the data's size keeps the same examples and resumes (a review:
    it was refused, as "--max-train-examples None")."""
    data = write_sst2(tmp_path / "SST-2", train=48, dev=12, seed=3)
    init = make_init(tmp_path)
    output = tmp_path / "run"

    def argv(*more, seq_len=24):
        extra = ["--warmup-steps", "0", "--checkpoint-every", "1", "--strategy", "cpu", *more]
        return finetune_argv(
            "sst2", data, init, output, learning_rate="1e30", seq_len=seq_len, extra=extra
        )

    assert run_train(argv()) == 3  # stopped by its NaN loss, the good checkpoints kept
    steps = complete_checkpoints(str(output / "checkpoints"))
    capsys.readouterr()
    for more, seq_len, said in [
        ((), 32, "--seq-len 24 (this command: 32)"),
        (("--seed", "5"), 24, "--seed 12345 (this command: 5)"),
        (("--group-by-length",), 24, "--group-by-length False (this command: True)"),
        (
            ("--max-train-examples", "20"),
            24,
            "training examples 48 (this command: 20); steps an epoch 12 (this command: 5)",
        ),
    ]:
        assert run_train(argv(*more, seq_len=seq_len)) == 1
        assert "(other examples at each step: " + said + ")" in capsys.readouterr().err
    assert complete_checkpoints(str(output / "checkpoints")) == steps
    assert run_train(argv("--max-train-examples", "1000")) == 3  # resumed, and its NaN again
    assert f"resuming from step {max(steps)}" in capsys.readouterr().out


# === NaN in fine-tuning ===


def test_finetune_nan_loss_stops_with_a_message_and_keeps_the_last_good_checkpoint(
    tmp_path, capsys
):
    data = write_sst2(tmp_path / "SST-2", train=48, dev=12, seed=3)
    init = make_init(tmp_path)
    output = tmp_path / "run"
    # A learning rate of 1e30: the first update blows the weights up, a later
    # forward pass overflows to NaN.
    rc = run_train(
        finetune_argv(
            "sst2",
            data,
            init,
            output,
            epochs="1",
            batch_size=4,
            learning_rate="1e30",
            extra=["--warmup-steps", "0", "--checkpoint-every", "1", "--strategy", "cpu"],
        )
    )
    err = capsys.readouterr().err
    assert rc == 3, err[-2000:]
    assert "the loss is not finite" in err and "last good checkpoint is kept" in err
    steps = complete_checkpoints(str(output / "checkpoints"))
    assert steps and max(steps) < 12, steps  # the NaN step is not among them
    for step in steps:
        path = output / "checkpoints" / f"ckpt-{step:08d}" / "model.weights.h5"
        for name, value in weights_of(path).items():
            assert np.all(np.isfinite(value)), (step, name)
    # Nothing published: no model, no metrics.
    assert not (output / "metrics.json").exists()
    assert not (output / "model.weights.h5").exists()


# === An unwritable or full output disk: a clear error at start ===


def _both_commands(records, tmp_path, output):
    data = write_sst2(tmp_path / "SST-2", train=8, dev=4)
    init = make_init(tmp_path)
    return {
        "pretrain": pretrain_argv(records, output, steps=2),
        "finetune": finetune_argv("sst2", data, init, output),
    }


@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_output_under_a_file_fails_at_start(records, tmp_path, command, capsys):
    """--output inside a regular file (an unwritable place, even for root): refused with the
    flags, before any framework loads."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    argv = _both_commands(records, tmp_path, str(blocker / "out"))[command]
    assert run_train(argv) == 1
    said = f"{blocker / 'out'}: cannot be made, {blocker} is a file, not a folder"
    assert said in capsys.readouterr().err


def test_an_output_directory_that_is_a_file_is_named_so(tmp_path):
    from model.io.files import check_writable_dir

    (tmp_path / "afile").write_text("x")
    with pytest.raises(SystemExit, match="afile' is a file, not a directory"):
        check_writable_dir(str(tmp_path / "afile"))


@pytest.mark.parametrize("command", ["export", "model.convert"])
def test_a_bundle_or_conversion_that_cannot_be_written_fails_at_start(
    tmp_path, command, monkeypatch, capsys
):
    """Under a file, in a folder that refuses writes or on a full disk: one line naming both,
    before the work (export and model.convert printed a traceback, export after its 11 s
    conversion)."""
    import shutil
    import tempfile

    from export.__main__ import main as export
    from model.convert import main as convert

    def run(out):
        if command == "export":
            return export(["--model", str(tmp_path / "no-model"), "--output", out])
        with pytest.raises(SystemExit) as e:
            convert(["--from", "keras", str(tmp_path), "--to", "hf", out])
        return e.value.code

    code = 1 if command == "export" else 2  # export's failure; argparse's usage error
    (tmp_path / "no-model").mkdir()
    (tmp_path / "afile").write_text("x")
    out = str(tmp_path / "afile" / "sub" / "bundle")
    assert run(out) == code
    said = f"{out}: cannot be made, {tmp_path / 'afile'} is a file, not a folder"
    assert said in capsys.readouterr().err

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=2**20))
    out = str(tmp_path / "full" / "bundle")
    assert run(out) == code
    said = f"{out}: cannot be written, {tmp_path}: the disk is full (1.0 MiB free)"
    assert said in capsys.readouterr().err
    monkeypatch.undo()

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")  # as a read-only folder (root ignores)

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)
    out = str(tmp_path / "locked" / "bundle")
    assert run(out) == code
    said = f"{out}: cannot be written, {tmp_path}: Permission denied"
    assert said in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["afile", "no-model"]
    monkeypatch.undo()
    if os.geteuid() != 0:  # and a real read-only folder
        locked = tmp_path / "ro"
        locked.mkdir(mode=0o500)
        try:
            out = str(locked / "bundle")
            assert run(out) == code
            assert (
                f"{out}: cannot be written, {locked}: Permission denied" in capsys.readouterr().err
            )
        finally:
            locked.chmod(0o700)


@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_unwritable_output_fails_at_start(records, tmp_path, command, monkeypatch):
    """A read-only folder; as root (CI), which writes everywhere, one that refuses as a
    read-only folder does."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    if os.geteuid() == 0:
        makedirs = os.makedirs

        def refuse(path, *args, **kwargs):
            if str(path).startswith(str(locked)):
                raise PermissionError(13, "Permission denied", str(path))
            return makedirs(path, *args, **kwargs)

        monkeypatch.setattr(os, "makedirs", refuse)
    try:
        argv = _both_commands(records, tmp_path, str(locked / "out"))[command]
        with pytest.raises(SystemExit) as e:
            run_train(argv)
        assert re.search(
            r"output directory .*locked/out.* is not writable: Permission denied", str(e.value.code)
        ), e.value.code
        assert os.listdir(locked) == []
    finally:
        locked.chmod(0o700)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_full_disk_fails_at_start(records, tmp_path, command, monkeypatch, capsys):
    """Simulated full disk (no tmpfs here): statvfs says 0 bytes free. A new --output is
    refused with the flags (its parent's disk), an existing one when the run starts."""
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9, 0))
    output = tmp_path / "out"
    argv = _both_commands(records, tmp_path, str(output))[command]
    started = time.time()
    assert run_train(argv) == 1
    said = f"{output}: cannot be written, {tmp_path}: the disk is full (0.0 MiB free)"
    assert said in capsys.readouterr().err
    assert not output.exists()
    output.mkdir()
    with pytest.raises(SystemExit) as e:
        run_train(argv)
    assert re.search(
        r"output directory .*out.*: the disk is full \(0\.0 MiB free\)", str(e.value.code)
    ), e.value.code
    assert not (output / "checkpoints").exists() and not (output / "logs").exists()
    assert time.time() - started < 60


def test_no_space_left_on_writing_fails_at_start(tmp_path, monkeypatch):
    """ENOSPC when the start-up probe writes its bytes."""
    import tempfile

    from model.io.files import check_writable_dir

    real = tempfile.NamedTemporaryFile

    class Full:
        def __init__(self, *a, **k):
            self.f = real(*a, **k)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", Full)
    with pytest.raises(SystemExit) as e:
        check_writable_dir(str(tmp_path / "out"))
    assert "is not writable: No space left on device" in str(e.value.code)
    assert os.listdir(tmp_path / "out") == []  # the probe is gone too


# === Atomic outputs ===

# Writers whose target is a temporary by construction, though its name does
# not say "tmp": (file, source of the path argument) -> why it is safe.
_WRITES_INTO_A_TEMPORARY = {
    ("export/__main__.py", "path"): "build() writes into export_bundle()'s temporary directory",
    (
        "model/checkpoints/model_dir.py",
        "reference",
    ): "a file in a TemporaryDirectory, never published",
    ("export/convert.py", "saved_model"): "a TemporaryDirectory, converted and deleted",
    ("model/pretraining/records.py", "path"): "RecordWriter: the shards of build()'s mkdtemp",
    ("model/pretraining/tokenized.py", "buffer"): "an in-memory BytesIO, then mkstemp + replace",
    # not a result: a log, written as its command runs (what it holds after a crash is the point)
    ("model/recipes/runner.py", "path"): "a concurrent command's log, its output as it comes",
}
_WRITERS = {"save_weights", "savez", "save", "write_out", "export"}


def _writes(tree, source):
    """(line, what, path source) of every open-for-writing and library save."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = (
            func.id
            if isinstance(func, ast.Name)
            else (func.attr if isinstance(func, ast.Attribute) else None)
        )
        if name == "open":
            mode = (
                node.args[1]
                if len(node.args) > 1
                else next((k.value for k in node.keywords if k.arg == "mode"), None)
            )
            if (
                isinstance(mode, ast.Constant)
                and isinstance(mode.value, str)
                and set(mode.value) & set("wax")
                and "+" not in mode.value
            ):
                yield node.lineno, "open", ast.get_source_segment(source, node.args[0])
        elif name in _WRITERS and isinstance(func, ast.Attribute):
            base = ast.get_source_segment(source, func.value)
            if name == "save" and base != "model":  # model_dir.save, self.save: wrappers
                continue
            if name == "export" and "model" not in base:
                continue
            yield node.lineno, name, ast.get_source_segment(source, node.args[0])


def test_every_project_writer_writes_to_a_temporary_name():
    """A static scan of model/, export/ and app/: every `open(..., "w")`,
    `save_weights`, `np.savez`, `model.save` and `write_out` writes to a
    temporary path (renamed by atomic_path, atomic_open, mkdtemp + os.replace)
    or is one of the reviewed exceptions above."""
    offenders, seen = [], 0
    for package in ("model", "export", "app"):
        for root, _, files in os.walk(os.path.join(REPO_ROOT, package)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(root, name)
                rel = os.path.relpath(path, REPO_ROOT)
                with open(path, encoding="utf-8") as f:
                    source = f.read()
                for line, what, target in _writes(ast.parse(source), source):
                    seen += 1
                    if "tmp" in target.lower() or (rel, target) in _WRITES_INTO_A_TEMPORARY:
                        continue
                    offenders.append(f"{rel}:{line}: {what}({target}, ...)")
    assert seen >= 6  # the scan finds the known writers at all
    assert not offenders, "written in place, not to a temporary name:\n" + "\n".join(offenders)


def test_atomic_open_leaves_the_old_file_when_the_writer_fails(tmp_path):
    from model.io.files import atomic_open, write_json

    path = tmp_path / "metrics.json"
    write_json(str(path), {"old": 1})
    with pytest.raises(RuntimeError):
        with atomic_open(str(path)) as f:
            f.write('{"new": ')
            raise RuntimeError("killed")
    assert json.loads(path.read_text()) == {"old": 1}
    assert os.listdir(tmp_path) == ["metrics.json"]


def test_a_failed_staged_directory_leaves_neither_it_nor_the_parents_it_made(tmp_path):
    """A refused output under folders that did not exist (model.convert --to keras-hub
    new/a/b of a model keras-hub lacks): the folders made for it go too; ones that existed,
    or that another writer filled meanwhile, stay."""
    from model.io.files import atomic_path, staged_directory

    (tmp_path / "kept").mkdir()
    with pytest.raises(ValueError):
        with staged_directory(str(tmp_path / "kept" / "a" / "b" / "out")) as tmp:
            (tmp_path / "kept" / "a" / "other.txt").write_text("another writer's")
            open(os.path.join(tmp, "half.txt"), "w").close()
            raise ValueError("refused")
    assert sorted(os.listdir(tmp_path / "kept" / "a")) == ["other.txt"]
    with pytest.raises(ValueError):
        with staged_directory(str(tmp_path / "new" / "a" / "out")):
            raise ValueError("refused")
    assert sorted(os.listdir(tmp_path)) == ["kept"]
    with pytest.raises(ValueError):  # a file's writer (model.convert --to keras new/a/m.keras)
        with atomic_path(str(tmp_path / "new" / "a" / "m.keras")):
            raise ValueError("refused")
    assert sorted(os.listdir(tmp_path)) == ["kept"]
