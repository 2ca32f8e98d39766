"""Fine-tuning under KERAS_BACKEND=jax: TensorFlow's batches and weights, without TensorFlow.

    PYTHONPATH=. python -m pytest tests/test_jax_finetune.py

- `FinetunePyDataset` (model/training/finetune_pydataset.py) yields exactly the
  batches of the tf.data pipeline (`model.training.finetune_tfdata.tf_dataset`): same rows in
  the same order, same trimmed length, same dtypes, for inputs of one row
  (GLUE) or several (SWAG), labels per feature, per token (NER) or by name
  (SQuAD), sample weights, over several epochs, from a later batch (a
  restart), with `--group-by-length`, for `--seed` 0 and another.
- `python -m model.train finetune` runs under each backend in a child
  process from the same encoder (`--init`) and the same head: a fresh head
  is drawn by each backend's own random generator, so the children load one
  head from a file. With dropout 0 and `--group-by-length` both train the
  same float32 computation on the same batches, so after 6 steps at learning
  rate 1e-3 the weights agree to float rounding (measured: at most 7.5e-9
  apart; asserted: 1e-5), and so do the printed losses (4 decimals: equal;
  asserted: 1.5e-4). A batch out of place would show: each step moves a
  weight by about the learning rate. (At learning rate 1e-2 over 18 steps
  the weights drift apart to 8e-5: Adam's early updates are about
  lr * sign(g), so rounding in near-zero gradients grows.)
- The JAX child blocks `import tensorflow` (a machine without it) and the
  model directory it writes scores the same under `python -m model.evaluate`
  (TensorFlow) as in its own dev evaluation.
- A JAX run killed after a checkpoint and started again ends with the
  uninterrupted run's weights (dropout 0.1: its seed state is restored too),
  and `--strategy data-parallel` on two host devices trains like one device
  (both slow: three and one more runs, `--runslow`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest

from model.tasks.base import Encoded
from model.training.checkpointing import ResumableCheckpoint
from model.training.finetune_pydataset import (
    FinetunePyDataset,
    epoch_batches,
    epoch_order,
    feature_lengths,
    grouped_batch_count,
    length_boundaries,
)
from tests.helpers import (
    NO_TENSORFLOW,
    REPO_ROOT,
    assert_same_weights,
    finetune_argv,
    kill_when_exists,
    make_init,
    run_evaluate,
    run_train,
    subprocess_env,
    weights_of,
    write_sst2,
)

RUN_TIMEOUT = 300


# === The batches ===


def synthetic(kind: str, n: int = 37, seq_len: int = 48, seed: int = 0) -> Encoded:
    """Features of random lengths (2 to seq_len: every bucket of 48 tokens)
    shaped as task `kind` encodes them."""
    rng = np.random.default_rng(seed)
    shape = (n, 4, seq_len) if kind == "swag" else (n, seq_len)
    lengths = rng.integers(2, seq_len + 1, size=shape[:-1])
    mask = (np.arange(seq_len) < lengths[..., None]).astype(np.int32)
    x = {
        "token_ids": rng.integers(5, 90, size=shape).astype(np.int32) * mask,
        "segment_ids": (np.arange(seq_len) >= lengths[..., None] // 2).astype(np.int32) * mask,
        "padding_mask": mask,
    }
    if kind == "ner":
        tags = np.where(mask == 1, rng.integers(0, 9, size=shape), -1).astype(np.int32)
        return Encoded(x=x, y=tags, sample_weight=mask.astype(np.float32))
    if kind == "squad":
        starts = rng.integers(0, seq_len, size=n).astype(np.int32)
        return Encoded(x=x, y={"start_logits": starts, "end_logits": starts + 1})
    labels = rng.integers(0, 4 if kind == "swag" else 2, size=n)
    return Encoded(x=x, y=labels.astype(np.int32 if kind == "swag" else np.int64))


def assert_same_batches(theirs, ours, what: str) -> None:
    theirs = [keras.tree.map_structure(lambda t: t.numpy(), b) for b in theirs]
    assert len(ours) == len(theirs), what
    for i, (a, b) in enumerate(zip(theirs, ours)):
        a, b = keras.tree.flatten(a), keras.tree.flatten(b)
        assert len(a) == len(b), what
        for u, v in zip(a, b):
            assert u.dtype == v.dtype and u.shape == v.shape, (what, i, u.shape, v.shape)
            np.testing.assert_array_equal(u, v, err_msg=f"{what}: batch {i}")


@pytest.mark.parametrize("kind", ["glue", "ner", "swag", "squad"])
def test_pydataset_yields_the_tf_pipeline_batches(kind):
    import tensorflow as tf

    from model.training.finetune_tfdata import tf_dataset

    encoded, seq_len, batch_size = synthetic(kind), 48, 5
    try:
        for seed in (12345, 0):
            keras.utils.set_random_seed(seed)  # as finetune does: TensorFlow's global seed
            for grouped in (False, True):
                for epoch, start in ((0, 0), (1, 0), (2, 3)):
                    what = f"{kind}, seed {seed}, grouped {grouped}, epoch {epoch} from {start}"
                    theirs = tf_dataset(
                        encoded, batch_size, seq_len, seed + epoch, group_by_length=grouped
                    ).skip(start)
                    ours = FinetunePyDataset(
                        encoded,
                        batch_size,
                        seq_len,
                        seed,
                        epoch,
                        start=start,
                        group_by_length=grouped,
                    )
                    assert_same_batches(theirs, ours, what)
    finally:
        tf.random.set_seed(None)


def test_grouped_batches_are_trimmed_per_bucket_and_flushed_in_bucket_order():
    encoded = synthetic("glue")
    ours = FinetunePyDataset(encoded, 5, 48, seed=3, epoch=0, group_by_length=True)
    widths = [x["token_ids"].shape[1] for x, _ in ours]
    assert set(widths) == {16, 32, 48}
    # After the full batches come the leftovers of each bucket, shortest first.
    sizes = [len(b) for b in ours.batches]
    leftovers = [w for w, s in zip(widths, sizes) if s < 5]
    assert widths[-len(leftovers) :] == leftovers == sorted(leftovers)
    assert sorted(i for b in ours.batches for i in b) == list(range(len(encoded)))


def test_a_grouped_epoch_has_as_many_steps_as_batches_so_every_feature_is_trained():
    """finetune's steps_per_epoch with --group-by-length: the tf.data epoch's
    batch count, whatever the shuffle (it was ceil(n / batch), which left the
    last part-filled buckets of every epoch untrained)."""
    import tensorflow as tf

    from model.training.finetune_tfdata import tf_dataset

    encoded, seq_len, batch_size = synthetic("glue", n=37), 48, 5
    count = grouped_batch_count(feature_lengths(encoded), length_boundaries(seq_len), batch_size)
    assert count > -(-len(encoded) // batch_size)  # more than ungrouped: the test means something
    try:
        keras.utils.set_random_seed(7)
        for epoch in range(3):
            batches = list(
                tf_dataset(encoded, batch_size, seq_len, 7 + epoch, group_by_length=True)
            )
            assert len(batches) == count
            rows = sum(len(x["token_ids"]) for x, _ in batches)
            assert rows == len(encoded)
    finally:
        tf.random.set_seed(None)


def test_data_parallel_batches_keep_a_multiple_of_the_devices():
    """37 features, batch 8 over 4 devices: the short last batch of 5 keeps 4
    rows; grouped, every bucket's leftover keeps a multiple of 4 (or goes)."""
    encoded = synthetic("glue")
    plain = FinetunePyDataset(encoded, 8, 48, seed=1, epoch=0)
    split = FinetunePyDataset(encoded, 8, 48, seed=1, epoch=0, multiple_of=4)
    assert [len(b) for b in plain.batches] == [8, 8, 8, 8, 5]
    assert [len(b) for b in split.batches] == [8, 8, 8, 8, 4]
    np.testing.assert_array_equal(split.batches[-1], plain.batches[-1][:4])
    grouped = FinetunePyDataset(
        encoded, 8, 48, seed=1, epoch=0, group_by_length=True, multiple_of=4
    )
    assert all(len(b) and len(b) % 4 == 0 for b in grouped.batches)
    with pytest.raises(ValueError, match="not a multiple of 4"):
        FinetunePyDataset(encoded, 6, 48, seed=1, epoch=0, multiple_of=4)


def test_epoch_order_and_batches_helpers():
    order = epoch_order(10, seed=5, epoch=0)
    assert sorted(order) == list(range(10)) and order != list(range(10))
    assert order == epoch_order(10, seed=5, epoch=0) != epoch_order(10, seed=5, epoch=1)
    batches = epoch_batches(list(range(7)), 3)
    assert [b.tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]
    # Lengths 1 (bucket 0), 20 (bucket 1): bucket 1 fills first and comes first.
    lengths = np.array([1, 20, 20, 1, 20])
    batches = epoch_batches([0, 1, 2, 3, 4], 2, lengths, [17])
    assert [b.tolist() for b in batches] == [[1, 2], [0, 3], [4]]


# === Runs under both backends ===

# Gives the classifier a head read from $HEAD_WEIGHTS in every backend.
_SAME_HEAD = """
import os
import numpy as np
from model.tasks.glue import GlueTask

_build_model = GlueTask.build_model

def _same_head(self, encoder, dropout=0.1):
    model = _build_model(self, encoder, dropout)
    head = np.load(os.environ["HEAD_WEIGHTS"])
    model.get_layer("logits").set_weights([head["kernel"], head["bias"]])
    return model

GlueTask.build_model = _same_head
"""
_RUN_MAIN = """
import sys
from model.train import main
sys.exit(main(sys.argv[1:]))
"""
STEP_LOSS = re.compile(r"^step (\d+)/\d+ loss ([0-9.]+)", re.M)


def finetune_child(backend: str, argv, head: str, block_tensorflow: bool = False, env=None):
    """`python -m model.train argv` under `backend` with the head from `head`;
    with `block_tensorflow`, a child that cannot import TensorFlow and checks
    it imported none."""
    script = _SAME_HEAD + (NO_TENSORFLOW if block_tensorflow else _RUN_MAIN)
    env = {**subprocess_env(), **(env or {}), "KERAS_BACKEND": backend, "HEAD_WEIGHTS": head}
    done = subprocess.run(
        [sys.executable, "-c", script, *map(str, argv)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def same_run_argv(data, init, output, extra=()):
    """6 steps (24 examples, batch 4), dropout 0, grouped by length, every loss printed."""
    return finetune_argv(
        "sst2",
        data,
        init,
        output,
        epochs="1",
        batch_size=4,
        seq_len=40,
        extra=[
            "--dropout",
            "0.0",
            "--warmup-steps",
            "1",
            "--log-every",
            "1",
            "--group-by-length",
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The same fine-tuning (`same_run_argv`) under JAX (TensorFlow blocked)
    and under TensorFlow, from one encoder and one head."""
    from model.config import BertConfig

    root = tmp_path_factory.mktemp("jax_finetune")
    data = write_sst2(root / "SST-2", train=24, dev=12, seed=2)
    init = make_init(root)
    rng = np.random.default_rng(0)
    hidden = BertConfig.preset("tiny").hidden_dim
    head = str(root / "head.npz")
    np.savez(
        head,
        kernel=rng.normal(0, 0.02, (hidden, 2)).astype(np.float32),
        bias=np.zeros(2, np.float32),
    )
    runs = {}
    for backend in ("jax", "tensorflow"):
        output = root / backend
        done = finetune_child(
            backend, same_run_argv(data, init, output), head, block_tensorflow=backend == "jax"
        )
        runs[backend] = (str(output), done.stdout)
    return data, runs, init, head


@pytest.mark.slow
def test_a_jax_finetune_imports_no_tensorflow_and_evaluate_scores_it(two_runs, capsys):
    data, runs, _, _ = two_runs
    output, stdout = runs["jax"]
    assert "backend: jax; strategy: one device with 1 replica(s)" in stdout
    with open(os.path.join(output, "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["backend"] == "jax" and metrics["steps"] == 6
    # No TensorBoard without TensorFlow: the same scalars as CSV.
    assert os.listdir(os.path.join(output, "logs")) == ["scalars.csv"]
    with open(os.path.join(output, "logs", "scalars.csv")) as f:
        rows = f.read().splitlines()
    assert rows[0] == "tag,step,value" and "dev/accuracy,6," in "\n".join(rows)
    assert sum(r.startswith("train/loss,") for r in rows) == 6
    capsys.readouterr()
    assert (
        run_evaluate(["--task", "sst2", "--model", output, "--data", os.path.join(data, "dev.tsv")])
        == 0
    )
    scored = json.loads(capsys.readouterr().out)
    assert scored["accuracy"] == pytest.approx(metrics["dev"]["accuracy"])


@pytest.mark.slow
def test_jax_finetuning_follows_tensorflow(two_runs):
    _, runs, _, _ = two_runs
    losses = {
        backend: [float(v) for _, v in STEP_LOSS.findall(stdout)]
        for backend, (_, stdout) in runs.items()
    }
    assert len(losses["jax"]) == len(losses["tensorflow"]) == 6
    np.testing.assert_allclose(losses["jax"], losses["tensorflow"], rtol=0, atol=1.5e-4)
    w_tf = weights_of(os.path.join(runs["tensorflow"][0], "model.weights.h5"))
    w_jax = weights_of(os.path.join(runs["jax"][0], "model.weights.h5"))
    assert set(w_tf) == set(w_jax)
    for name in w_tf:
        np.testing.assert_allclose(w_jax[name], w_tf[name], rtol=0, atol=1e-5, err_msg=name)
    dev = {b: json.load(open(os.path.join(o, "metrics.json")))["dev"] for b, (o, _) in runs.items()}
    assert dev["jax"]["accuracy"] == dev["tensorflow"]["accuracy"]


@pytest.mark.slow
def test_data_parallel_on_two_devices_finetunes_like_one(two_runs, tmp_path):
    """keras.distribution.DataParallel over two host devices (every batch
    here even, so the same batches): one device's weights to float rounding."""
    data, runs, init, head = two_runs
    output = tmp_path / "two"
    argv = same_run_argv(data, init, output, ["--strategy", "data-parallel"])
    done = finetune_child(
        "jax", argv, head, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    )
    assert "strategy: DataParallel with 2 replica(s)" in done.stdout
    one, two = (weights_of(os.path.join(d, "model.weights.h5")) for d in (runs["jax"][0], output))
    for name in one:
        np.testing.assert_allclose(two[name], one[name], rtol=0, atol=1e-5, err_msg=name)


# === Resuming ===


def run_module_ok(module: str, argv) -> str:
    """`python -m module argv` in a child (this test's environment); its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", module, *map(str, argv)],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_killed_jax_finetune_resumes_and_matches_an_uninterrupted_run(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "jax")  # the children's environment
    data = write_sst2(tmp_path / "SST-2", train=32, dev=8, seed=3)
    init = make_init(tmp_path)

    def argv(output):  # 8 steps an epoch, 2 epochs, a checkpoint every 5 steps
        return finetune_argv(
            "sst2",
            data,
            init,
            output,
            epochs="2",
            batch_size=4,
            seq_len=40,
            extra=["--dropout", "0.1", "--checkpoint-every", "5", "--group-by-length"],
        )

    def run(output):
        return run_module_ok("model.train", argv(output))

    straight = tmp_path / "straight"
    run(straight)
    output = tmp_path / "killed"
    # At any complete checkpoint (ckpt-00000005 alone was rotated away before a loaded
    # machine's poll saw it, and the run went on to its end)
    saved = ResumableCheckpoint(str(output / "checkpoints"), every=1)
    kill_when_exists(argv(output), lambda: bool(saved.checkpoints()), timeout=RUN_TIMEOUT)
    assert not (output / "metrics.json").exists(), "killed too late"
    assert "resuming from step" in run(output)
    assert_same_weights(straight / "model.weights.h5", output / "model.weights.h5")
    history = [json.loads((d / "metrics.json").read_text())["history"] for d in (straight, output)]
    assert [r["step"] for r in history[1]] == [8, 16]
    assert [r["accuracy"] for r in history[1]] == [r["accuracy"] for r in history[0]]
    assert not (output / "checkpoints").exists()


# === --device-data: the features on the device, several steps a call ===


@pytest.mark.slow
def test_device_data_finetune_rounds_to_calls_resumes_and_scores(tmp_path, monkeypatch):
    """An epoch of 8 batches at 3 steps a call is 9 steps. The uninterrupted run trains
    seeds 12345 and 7 together (`--seeds`, one compiled program); a run of seed 12345 alone,
    killed after its first checkpoint and resumed, ends with the together run's weights and
    dev history for that seed (so both the resume and the seeds' program change nothing of
    what a seed computes), and seed 7 is a run of its own. The saved model scores under
    model.evaluate as in the run's own dev evaluation."""
    monkeypatch.setenv("KERAS_BACKEND", "jax")  # the children's environment
    data = write_sst2(tmp_path / "SST-2", train=32, dev=8, seed=3)
    init = make_init(tmp_path)

    def argv(output, *more):
        extra = ["--device-data", "--steps-per-call", "3", "--checkpoint-every", "3", *more]
        return finetune_argv("sst2", data, init, output, epochs="2", batch_size=4, extra=extra)

    stdout = run_module_ok("model.train", argv(tmp_path / "straight-{seed}", "--seeds", "12345,7"))
    assert "features on it, 3 steps a call" in stdout and "18 steps (9 an epoch)" in stdout
    assert re.search(r"step 18/18: loss [0-9.]+/[0-9.]+,", stdout)  # both seeds' losses
    straight, other = tmp_path / "straight-12345", tmp_path / "straight-7"
    metrics = json.loads((straight / "metrics.json").read_text())
    assert [r["step"] for r in metrics["history"]] == [9, 18]
    assert metrics["seed"] == 12345 and "--seeds" not in metrics["command"]
    assert json.loads((other / "metrics.json").read_text())["seed"] == 7
    assert not (straight / "checkpoints").exists() and not (other / "checkpoints").exists()
    a, b = (weights_of(d / "model.weights.h5") for d in (straight, other))
    assert any(not np.allclose(a[k], b[k]) for k in a)  # seed 7 trained apart
    output = tmp_path / "killed"
    kill_when_exists(argv(output), output / "checkpoints" / "ckpt-00000003", timeout=RUN_TIMEOUT)
    assert not (output / "metrics.json").exists(), "killed too late"
    assert "resuming from step" in run_module_ok("model.train", argv(output))
    assert_same_weights(straight / "model.weights.h5", output / "model.weights.h5", atol=1e-5)
    history = json.loads((output / "metrics.json").read_text())["history"]
    assert [r["accuracy"] for r in history] == [r["accuracy"] for r in metrics["history"]]
    dev = os.path.join(data, "dev.tsv")
    out = run_module_ok("model.evaluate", ["--task", "sst2", "--model", straight, "--data", dev])
    scored = json.loads(out[out.index("{") :])
    assert scored["accuracy"] == pytest.approx(metrics["dev"]["accuracy"])

    # --seeds stopped between its seeds' saves (seed 12345 at step 6, seed 7 at 3): each goes
    # back to step 3, the newest both have, and ends as the straight run (it was refused).
    half = tmp_path / "half-{seed}"
    seven = tmp_path / "half-7" / "checkpoints"
    kill_when_exists(argv(half, "--seeds", "12345,7"), seven / "ckpt-00000006", timeout=RUN_TIMEOUT)
    assert not (tmp_path / "half-7" / "metrics.json").exists(), "killed too late"
    shutil.rmtree(seven / "ckpt-00000006")
    assert (tmp_path / "half-12345" / "checkpoints" / "ckpt-00000006").is_dir()
    stdout = run_module_ok("model.train", argv(half, "--seeds", "12345,7"))
    assert "back to step 3, the newest every seed has" in stdout
    for seed in ("12345", "7"):
        done = tmp_path / f"half-{seed}" / "model.weights.h5"
        assert_same_weights(tmp_path / f"straight-{seed}" / "model.weights.h5", done, atol=1e-5)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--seeds", "1,2"], "--seeds trains its seeds together: it needs --device-data"),
        (["--seeds", "1,1", "--device-data"], "a seed is given twice"),
        (["--seeds", "1,2", "--device-data"], "--output names each seed's directory"),
    ],
)
def test_seeds_flags_are_checked_before_anything_is_read(tmp_path, capsys, extra, message):
    argv = finetune_argv("sst2", tmp_path, tmp_path, tmp_path / "out")  # no data, no model
    assert run_train([*argv, *extra]) == 1
    assert message in capsys.readouterr().err


def jax_tree_leaves(out):
    return [out[k] for k in sorted(out)] if isinstance(out, dict) else [out]


def test_device_data_evaluation_runs_one_shape_and_answers_as_trimmed_batches():
    """`fixed_shape` pads every batch to one (rows, seq_len) and cuts the outputs back:
    `predict_in_batches` returns what it returns on trimmed batches, per token and per row."""
    from model.tasks.base import predict_in_batches
    from model.training.finetune import fixed_shape

    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 30, 21)
    mask = (np.arange(32)[None, :] < lengths[:, None]).astype(np.int32)
    x = {"token_ids": rng.integers(5, 99, (21, 32)) * mask, "padding_mask": mask}
    shapes = []

    def per_token(batch):  # a token's output depends on that token only
        shapes.append(batch["token_ids"].shape)
        return {"start": batch["token_ids"] * 2.0, "end": batch["token_ids"] * 3.0}

    def per_row(batch):  # padding tokens are 0: they add nothing
        shapes.append(batch["token_ids"].shape)
        return batch["token_ids"].sum(-1, keepdims=True)

    for predict, sequence in ((per_token, True), (per_row, False)):
        shapes.clear()
        trimmed = predict_in_batches(predict, x, 8, sequence_outputs=sequence)
        assert len(set(shapes)) > 1  # trimmed batches: several widths
        shapes.clear()
        fixed = predict_in_batches(fixed_shape(predict, 8, 32), x, 8, sequence_outputs=sequence)
        assert set(shapes) == {(8, 32)}
        for got, want in zip(jax_tree_leaves(fixed), jax_tree_leaves(trimmed)):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--steps-per-call", "5"], "--steps-per-call takes a positive number, with --device-data"),
        (["--device-data"], "--device-data runs under KERAS_BACKEND=jax"),  # tests: TensorFlow
    ],
)
def test_device_data_flags_are_checked_before_anything_is_read(tmp_path, capsys, extra, message):
    argv = finetune_argv("sst2", tmp_path, tmp_path, tmp_path / "out")  # no data, no model
    assert run_train([*argv, *extra]) == 1
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_multiple_choice_model_builds_and_runs_under_jax():
    """JAX builds functional models by shape inference: the SWAG head's reshape
    layer must say its output shape (it did not, and JAX runs of SWAG failed)."""
    script = (
        "import numpy as np\n"
        "from model.networks.encoder import BertEncoder\n"
        "from model.heads.multiple_choice import BertMultipleChoice\n"
        "model = BertMultipleChoice(BertEncoder.from_preset('tiny'), num_choices=4)\n"
        "x = {k: np.ones((2, 4, 8), 'int32') for k in ('token_ids', 'segment_ids', 'padding_mask')}\n"
        "print(tuple(model.predict_on_batch(x).shape))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**subprocess_env(), "KERAS_BACKEND": "jax"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "(2, 4)"
