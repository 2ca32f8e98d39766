"""Fine-tuning from one step of a pre-training run: `finetune --init RUN/checkpoints/ckpt-N`
(`model.training.checkpointing.load_checkpoint`), and the clear stop on a checkpoint that is
missing, partial or damaged (BERT Figure 5's points)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from model.checkpoints import model_dir
from model.training.checkpointing import load_checkpoint
from model.training.layout import checkpoint_of
from tests.helpers import finetune_argv, make_records, pretrain_argv, run_train
from tests.test_ner import random_sentences, write_conll


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished 4-step `tiny` run keeping its checkpoints of steps 2 and 4, and CoNLL data."""
    root = tmp_path_factory.mktemp("checkpoints")
    records = make_records(root)
    output = str(root / "run")
    argv = pretrain_argv(records, output, steps=4, checkpoint_every=2)
    assert run_train([*argv, "--keep-checkpoints", "10", "--learning-rate", "1e-3"]) == 0
    data = root / "conll2003"
    data.mkdir()
    write_conll(data / "train.txt", random_sentences(8, seed=1))
    write_conll(data / "valid.txt", random_sentences(4, seed=2))
    return {"root": root, "run": output, "data": str(data)}


def ckpt(run_dir: str, step: int) -> str:
    return os.path.join(run_dir, "checkpoints", f"ckpt-{step:08d}")


def encoder_weights(model) -> list[np.ndarray]:
    return [np.asarray(w) for w in model_dir.encoder_of(model).get_weights()]


def test_a_checkpoint_loads_as_the_runs_model_at_that_step(run):
    model, vocab, step = load_checkpoint(ckpt(run["run"], 2))
    assert step == 2 and vocab == os.path.join(run["run"], "vocab.txt")
    assert model_dir.describe(model) == model_dir.describe(model_dir.load(run["run"]))
    # Step 4's checkpoint is the finished run; step 2's weights are earlier ones.
    final = encoder_weights(model_dir.load(run["run"]))
    at_4 = encoder_weights(load_checkpoint(ckpt(run["run"], 4) + "/model.weights.h5")[0])
    assert all(np.array_equal(a, b) for a, b in zip(at_4, final))
    assert not all(np.allclose(a, b) for a, b in zip(encoder_weights(model), final))
    assert checkpoint_of(ckpt(run["run"], 2) + "/model.weights.h5") == ckpt(run["run"], 2)
    assert checkpoint_of(run["run"]) is None


def test_finetune_starts_from_the_checkpoints_encoder(run, tmp_path):
    output = tmp_path / "ner"
    # A learning rate of 1e-9 moves no weight by more than ~1e-8: the run's encoder is the
    # checkpoint's, not the finished run's.
    argv = finetune_argv(
        "conll2003", run["data"], ckpt(run["run"], 2), output, learning_rate="1e-9"
    )
    assert run_train(argv) == 0
    with open(output / "metrics.json") as f:
        metrics = json.load(f)
    assert metrics["init_step"] == 2 and metrics["init"] == ckpt(run["run"], 2)
    tuned = encoder_weights(model_dir.load(str(output)))
    start = encoder_weights(load_checkpoint(ckpt(run["run"], 2))[0])
    final = encoder_weights(model_dir.load(run["run"]))
    assert all(np.allclose(a, b, atol=1e-6) for a, b in zip(tuned, start))
    assert not all(np.allclose(a, b, atol=1e-6) for a, b in zip(tuned, final))


def copy_run(run, tmp_path) -> str:
    """A copy of the run (config, vocabulary, checkpoints) to damage."""
    copy = str(tmp_path / "run")
    shutil.copytree(run["run"], copy, ignore=shutil.ignore_patterns("logs"))
    return copy


def refused(run, init: str, tmp_path, capsys) -> str:
    """finetune --init `init` exits 1 before writing a model; its error message."""
    output = tmp_path / "out"
    capsys.readouterr()
    assert run_train(finetune_argv("conll2003", run["data"], init, output)) == 1
    assert not (output / "config.json").exists() and not (output / "metrics.json").exists()
    return capsys.readouterr().err


def test_a_missing_partial_or_damaged_checkpoint_stops_with_its_name(run, tmp_path, capsys):
    copy = copy_run(run, tmp_path)
    missing = ckpt(copy, 3)
    err = refused(run, missing, tmp_path, capsys)
    assert missing in err and "no such checkpoint" in err and "ckpt-00000002" in err

    partial = os.path.join(copy, "checkpoints", ".ckpt-00000006.tmp-x1")
    shutil.copytree(ckpt(copy, 2), partial)
    err = refused(run, partial, tmp_path, capsys)
    assert partial in err and "not a complete checkpoint" in err

    # Truncated weights: h5py's own message names no file; ours does.
    weights = os.path.join(ckpt(copy, 2), "model.weights.h5")
    with open(weights, "rb") as f:
        head = f.read(os.path.getsize(weights) // 2)
    with open(weights, "wb") as f:
        f.write(head)
    err = refused(run, ckpt(copy, 2), tmp_path, capsys)
    assert weights in err
    with pytest.raises(ValueError, match="model.weights.h5"):
        load_checkpoint(ckpt(copy, 2))

    os.remove(os.path.join(ckpt(copy, 4), "state.json"))
    err = refused(run, ckpt(copy, 4), tmp_path, capsys)
    assert os.path.join(ckpt(copy, 4), "state.json") in err and "missing" in err


def test_a_checkpoint_of_another_model_is_refused_tensor_by_tensor(run, tmp_path):
    copy = copy_run(run, tmp_path)
    config = os.path.join(copy, "config.json")
    with open(config) as f:
        info = json.load(f)
    info["encoder"]["intermediate_dim"] *= 2  # the config no longer fits the weights
    with open(config, "w") as f:
        json.dump(info, f)
    with pytest.raises(ValueError, match=r"ckpt-00000002/model.weights.h5: weights do not match"):
        load_checkpoint(ckpt(copy, 2))


def test_an_unfinished_run_has_no_config_to_read_a_checkpoint_with(run, tmp_path):
    copy = copy_run(run, tmp_path)
    os.remove(os.path.join(copy, "config.json"))
    with pytest.raises(FileNotFoundError, match="config.json: missing"):
        load_checkpoint(ckpt(copy, 2))
