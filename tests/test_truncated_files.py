"""Truncated model files stop with an error naming the file: never a partial load or a crash.

    PYTHONPATH=. TF_CPP_MIN_LOG_LEVEL=3 python -m pytest -q tests/test_truncated_files.py

Every format the project loads is written by the project's own writer (a model
directory's model.weights.h5, a Hugging Face model.safetensors and its sharded
form, a training checkpoint, a LiteRT bundle's model.tflite), then cut short (to
half, to one byte short, to 8 bytes, to nothing, as an interrupted download or
copy leaves it) and loaded through each entry point that reads it: the loader
must raise ValueError (a command: exit 1 with `error: ...`) whose message names
the file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import REPO_ROOT, run_evaluate, subprocess_env
from tests.test_export import sst2, sst2_bundle  # noqa: F401 (fixtures: a classifier, its bundle)

CUTS = {
    "half": lambda n: n // 2,
    "one byte short": lambda n: n - 1,
    "8 bytes": lambda n: 8,
    "empty": lambda n: 0,
}


def truncate(path, cut: str) -> int:
    """Cuts the file at `path` to `CUTS[cut]` of its size; returns the new size.
    A JSON file is measured without its final newline (JSON still whole without it)."""
    data = open(path, "rb").read()
    size = CUTS[cut](len(data.rstrip() if str(path).endswith(".json") else data))
    assert 0 <= size < len(data)
    with open(path, "wb") as f:
        f.write(data[:size])
    return size


def copy(directory, tmp_path, name: str = "copy") -> str:
    target = str(tmp_path / name)
    shutil.copytree(directory, target)
    return target


def names(path) -> str:
    """A regex for a message that names `path`."""
    return re.escape(str(path))


# === A model directory's model.weights.h5 ===


@pytest.mark.parametrize("cut", sorted(CUTS))
def test_truncated_model_weights(sst2, tmp_path, cut, capsys):  # noqa: F811
    import model
    from model.checkpoints import model_dir
    from model.convert import main as convert

    directory = copy(sst2[0], tmp_path)
    weights = os.path.join(directory, "model.weights.h5")
    truncate(weights, cut)
    for load in (model_dir.load, model.load):
        with pytest.raises(ValueError, match=names(weights) + ": truncated or corrupt weights"):
            load(directory)
    capsys.readouterr()
    out = str(tmp_path / "hf")
    assert convert(["--from", "keras", directory, "--to", "hf", out]) == 1
    assert re.search(f"error: {names(weights)}: truncated or corrupt", capsys.readouterr().err)
    assert not os.path.exists(out)  # nothing written
    assert run_evaluate(["--task", "sst2", "--model", directory, "--data", sst2[1]]) == 1
    assert re.search(f"error: {names(weights)}: truncated or corrupt", capsys.readouterr().err)


# === Hugging Face model.safetensors (one file, or shards and their index) ===


@pytest.fixture(scope="module")
def hf_dir(sst2, tmp_path_factory):  # noqa: F811
    """The classifier as a Hugging Face folder, written by `python -m model.convert`."""
    from model.convert import main as convert

    out = str(tmp_path_factory.mktemp("hf") / "model")
    assert convert(["--from", "keras", sst2[0], "--to", "hf", out]) == 0
    return out


@pytest.mark.parametrize("cut", sorted(CUTS))
def test_truncated_safetensors(hf_dir, tmp_path, cut, capsys):
    import model
    from model.checkpoints import safetensors_io
    from model.convert import main as convert

    directory = copy(hf_dir, tmp_path)
    weights = os.path.join(directory, "model.safetensors")
    size = truncate(weights, cut)
    message = names(weights) + r": truncated (file|safetensors file|or not a safetensors file)"
    for load in (safetensors_io.read, lambda p: safetensors_io.read_header(p)):
        with pytest.raises(ValueError, match=message):
            load(weights)
    with pytest.raises(ValueError, match=message):
        model.load(directory)
    capsys.readouterr()
    out = str(tmp_path / "keras")
    assert convert(["--from", "hf", directory, "--to", "keras", out]) == 1
    err = capsys.readouterr().err
    assert re.search("error: " + message, err), err
    assert f"{size} bytes" in err  # how long the file is, to compare with the download
    assert not os.path.exists(out)


@pytest.fixture(scope="module")
def sharded_hf_dir(hf_dir, tmp_path_factory):
    """`hf_dir` with its weights in two shards and a model.safetensors.index.json."""
    from model.checkpoints import safetensors_io
    from model.io.files import write_json

    directory = copy(hf_dir, tmp_path_factory.mktemp("sharded"), "model")
    single = os.path.join(directory, "model.safetensors")
    tensors = safetensors_io.read(single)
    os.remove(single)
    ordered = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": ordered[::2],
        "model-00002-of-00002.safetensors": ordered[1::2],
    }
    for shard, keys in shards.items():
        safetensors_io.write(os.path.join(directory, shard), {k: tensors[k] for k in keys})
    write_json(
        os.path.join(directory, "model.safetensors.index.json"),
        {"metadata": {}, "weight_map": {k: s for s, keys in shards.items() for k in keys}},
    )
    return directory


@pytest.mark.parametrize("cut", sorted(CUTS))
@pytest.mark.parametrize(
    "damaged", ["model-00002-of-00002.safetensors", "model.safetensors.index.json"]
)
def test_truncated_shard_or_index(sharded_hf_dir, tmp_path, cut, damaged):
    import model

    directory = copy(sharded_hf_dir, tmp_path)
    model.load(directory)  # whole, the sharded folder loads
    path = os.path.join(directory, damaged)
    truncate(path, cut)
    with pytest.raises(ValueError, match=names(path) + ": (truncated|not a JSON|no 'weight_map')"):
        model.load(directory)


# === Training checkpoints (model/training/checkpointing.py) ===


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A checkpoint directory with ckpt-00000004 and ckpt-00000005 (different
    weights), and the weights of each."""
    from model.training.checkpointing import ResumableCheckpoint
    from tests.test_train import tiny_compiled_pretrainer

    directory = str(tmp_path_factory.mktemp("checkpoints") / "checkpoints")
    model = tiny_compiled_pretrainer(seed=1)
    saver = ResumableCheckpoint(directory, every=1)
    saver.set_model(model)
    saved = {}
    for step in (4, 5):
        model.set_weights([w + step for w in model.get_weights()])
        saver.save(step)
        saved[step] = model.get_weights()
    return directory, saved


def restore(directory):
    from model.training.checkpointing import ResumableCheckpoint
    from tests.test_train import tiny_compiled_pretrainer

    fresh = tiny_compiled_pretrainer(seed=2)
    return ResumableCheckpoint(directory, every=1).restore(fresh), fresh


@pytest.mark.parametrize("cut", sorted(CUTS))
@pytest.mark.parametrize("damaged", ["model.weights.h5", "rng.npz", "state.json"])
def test_truncated_checkpoint_falls_back_to_the_one_before(
    checkpoints, tmp_path, cut, damaged, capsys
):
    """A damaged newest checkpoint is skipped, with a warning naming the file,
    for the one before, loaded whole (no mix of the two)."""
    directory = copy(checkpoints[0], tmp_path)
    path = os.path.join(directory, "ckpt-00000005", damaged)
    truncate(path, cut)
    step, fresh = restore(directory)
    assert step == 4
    for expected, got in zip(checkpoints[1][4], fresh.get_weights()):
        np.testing.assert_array_equal(got, expected)
    out = capsys.readouterr().out
    assert re.search(
        rf"warning: checkpoint .*ckpt-00000005 is unreadable \({names(path)}: ", out
    ), out


@pytest.mark.parametrize("cut", sorted(CUTS))
@pytest.mark.parametrize("damaged", ["model.weights.h5", "rng.npz"])
def test_every_checkpoint_truncated_stops_naming_the_file(checkpoints, tmp_path, cut, damaged):
    """Nothing loads: resuming stops (the training command exits 1 with this
    message) instead of starting over, which would rotate the checkpoints away."""
    directory = copy(checkpoints[0], tmp_path)
    for step in (4, 5):
        truncate(os.path.join(directory, f"ckpt-{step:08d}", damaged), cut)
    newest = os.path.join(directory, "ckpt-00000005", damaged)
    with pytest.raises(
        ValueError,
        match=rf"{names(directory)}: no checkpoint .*\(the newest: "
        rf"{names(newest)}: ",
    ):
        restore(directory)


# === A LiteRT bundle's model.tflite ===


@pytest.mark.parametrize("cut", sorted(CUTS))
def test_truncated_tflite(sst2, sst2_bundle, tmp_path, cut, capsys):  # noqa: F811
    from export import runtime
    from export.interpreter import TFLiteModel

    bundle = copy(sst2_bundle[0], tmp_path)
    path = os.path.join(bundle, "model.tflite")
    truncate(path, cut)
    with pytest.raises(ValueError, match=names(path) + r": .* changed or damaged since export"):
        runtime.load(bundle)  # bundle.json's "files" record; without it, LiteRT's own check:
    info_path = os.path.join(bundle, "bundle.json")
    info = json.loads(open(info_path).read())
    del info["files"]
    open(info_path, "w").write(json.dumps(info))
    message = names(path) + ": not a loadable LiteRT model"
    # First in a child process: were LiteRT to crash on the file, only the child would die.
    child = subprocess.run(
        [sys.executable, "-m", "export.runtime", bundle, "classify", "A film."],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 1, (child.returncode, child.stderr[-2000:])
    assert re.search("error: " + message, child.stderr), child.stderr[-2000:]
    assert "Traceback" not in child.stderr
    with pytest.raises(ValueError, match=message):
        TFLiteModel(path)
    with pytest.raises(ValueError, match=message):
        runtime.load(bundle)
    capsys.readouterr()
    assert run_evaluate(["--task", "sst2", "--model", bundle, "--data", sst2[1]]) == 1
    assert re.search("error: " + message, capsys.readouterr().err)
