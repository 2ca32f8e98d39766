"""`model.finetune` and the task registry: a tiny SST-2 run end to end, its
model directory, and `model.evaluate` on it.

The helpers here (`write_task_vocab`, `make_init`, `finetune_argv`) are shared
by test_glue.py, test_ner.py, test_swag.py and test_extract_features.py.
"""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

from model import model_dir, tasks
from tests.helpers import WORDS, tiny_vocabulary


# === Shared helpers ===

def write_task_vocab(path) -> str:
    """The tiny vocabulary (words, letters, `##` letters), each token once."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(dict.fromkeys(tiny_vocabulary())) + "\n")
    return str(path)


def make_init(parent) -> str:
    """A `tiny` pre-trained-encoder model directory (random weights) to fine-tune from."""
    from model.encoder import BertEncoder
    from model.tokenizer import load_vocabulary

    directory = os.path.join(str(parent), "init")
    if not os.path.isdir(directory):
        vocab = write_task_vocab(os.path.join(str(parent), "init-vocab.txt"))
        encoder = BertEncoder.from_preset("tiny", vocabulary_size=len(load_vocabulary(vocab)))
        model_dir.save(encoder, directory, vocab)
    return directory


def finetune_argv(task: str, data, init, output, epochs="1", batch_size=4, seq_len=24,
                  learning_rate="1e-3", extra=()) -> list[str]:
    """`python -m model.train` arguments of a seconds-long fine-tuning run."""
    return ["finetune", "--task", task, "--data", str(data), "--init", str(init),
            "--output", str(output), "--epochs", str(epochs), "--batch-size", str(batch_size),
            "--seq-len", str(seq_len), "--learning-rate", str(learning_rate), "--log-every", "1000",
            *map(str, extra)]


def sentence(rng: random.Random, words=WORDS, n=(3, 7)) -> str:
    return " ".join(rng.choice(words) for _ in range(rng.randint(*n)))


def write_sst2(directory, train: int = 24, dev: int = 12, seed: int = 0) -> str:
    """SST-2's layout (sentence<TAB>label, a header) where the label shows in the words."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    for name, n in (("train", train), ("dev", dev)):
        with open(os.path.join(directory, f"{name}.tsv"), "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n")
            for _ in range(n):
                label = rng.randint(0, 1)
                cue = "sun" if label else "moon"
                f.write(f"{sentence(rng)} {cue} {cue}\t{label}\n")
    with open(os.path.join(directory, "test.tsv"), "w", encoding="utf-8") as f:
        f.write("index\tsentence\n0\tthe cat sat\n1\ta dog ran\n")
    return str(directory)


def run_train(argv) -> int:
    from model.train import main

    return main(argv)


def run_evaluate(argv) -> int:
    from model.evaluate import main

    return main(argv)


# === The registry ===

def test_registry_knows_every_task_of_the_issue():
    expected = {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli",
                "conll2003", "swag", "squad1", "squad2"}
    assert set(tasks.TASKS) == expected
    for name in expected - {"squad1", "squad2"}:
        task = tasks.get(name)
        assert task.name == name
        assert task.head in model_dir.TASKS
    assert tasks.get("ner").name == "conll2003"
    assert tasks.get("SST-2").name == "sst2"
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        tasks.get("nope")


def test_registry_loads_squad_when_its_module_exists():
    pytest.importorskip("model.tasks.squad")
    for name in ("squad1", "squad2"):
        assert tasks.get(name).name == name


def test_task_files_find_train_and_dev(tmp_path):
    data = write_sst2(tmp_path / "SST-2")
    task = tasks.get("sst2")
    assert task.files(data) == (os.path.join(data, "train.tsv"), os.path.join(data, "dev.tsv"))
    # A train file: the dev file beside it.
    assert task.files(os.path.join(data, "train.tsv"))[1] == os.path.join(data, "dev.tsv")
    with pytest.raises(FileNotFoundError, match="no training file"):
        task.files(str(tmp_path))


# === One tiny run, end to end ===

@pytest.fixture(scope="module")
def sst2_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    data = write_sst2(root / "SST-2")
    init = make_init(root)
    output = root / "run"
    # 24 examples, batch 8: 3 steps an epoch; 1.5 epochs = 5 steps, two evaluations.
    argv = finetune_argv("sst2", data, init, output, epochs="1.5", batch_size=8,
                         extra=["--dropout", "0.05", "--warmup-steps", "1"])
    assert run_train(argv) == 0
    return root, data, str(output)


def test_finetune_writes_a_self_contained_model_directory(sst2_run):
    _, data, output = sst2_run
    for name in ("config.json", "vocab.txt", "model.weights.h5", "metrics.json",
                 "label_map.json"):
        assert os.path.isfile(os.path.join(output, name)), name
    info = model_dir.read_info(output)
    assert info["task"] == "classifier"
    assert info["id2label"] == {"0": "0", "1": "1"}
    assert info["finetuned_task"] == "sst2" and info["max_seq_length"] == 24
    assert info["encoder"]["dropout"] == 0.05 and info["dropout"] == 0.05
    # Strict load: no optimizer tensors or anything else beside the model's.
    model = model_dir.load(output)
    assert model.num_labels == 2
    with open(os.path.join(output, "label_map.json")) as f:
        assert json.load(f)["id2label"] == {"0": "0", "1": "1"}


def test_finetune_metrics_json_records_the_run(sst2_run):
    _, data, output = sst2_run
    with open(os.path.join(output, "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["task"] == "sst2" and metrics["main_metric"] == "accuracy"
    assert metrics["steps"] == 5 and metrics["warmup_steps"] == 1
    assert metrics["examples_seen"] == 24 + 16
    assert [h["step"] for h in metrics["history"]] == [3, 5]
    best = max(metrics["history"], key=lambda h: h["accuracy"])
    assert metrics["dev"]["accuracy"] == best["accuracy"]
    assert metrics["dev"]["examples"] == 12
    assert metrics["wall_seconds"] > 0
    assert metrics["command"].startswith("python -m model.train finetune --task sst2")
    assert "--epochs 1.5" in metrics["command"]


def test_evaluate_scores_the_model_directory_as_training_did(sst2_run, tmp_path, capsys):
    _, data, output = sst2_run
    out = tmp_path / "m.json"
    capsys.readouterr()
    assert run_evaluate(["--task", "sst2", "--model", output, "--data",
                         os.path.join(data, "dev.tsv"), "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    with open(out) as f:
        written = json.load(f)
    with open(os.path.join(output, "metrics.json")) as f:
        trained = json.load(f)
    assert printed["accuracy"] == written["accuracy"]
    assert printed["accuracy"] == pytest.approx(trained["dev"]["accuracy"])


def test_evaluate_refuses_unlabelled_files_and_other_heads(sst2_run, capsys):
    _, data, output = sst2_run
    rc = run_evaluate(["--task", "sst2", "--model", output,
                       "--data", os.path.join(data, "test.tsv")])
    assert rc == 1
    err = capsys.readouterr().err
    assert "test.tsv:2: no label" in err and "unlabelled" in err
    rc = run_evaluate(["--task", "conll2003", "--model", output,
                       "--data", os.path.join(data, "dev.tsv")])
    assert rc == 1
    assert "holds a 'classifier' model" in capsys.readouterr().err
    rc = run_evaluate(["--task", "rte", "--model", output, "--data", os.path.join(data, "dev.tsv")])
    assert rc == 1
    assert "labels" in capsys.readouterr().err


def test_finetune_stops_on_bad_data_before_loading_the_model(tmp_path, capsys):
    data = write_sst2(tmp_path / "SST-2")
    with open(os.path.join(data, "train.tsv"), "a", encoding="utf-8") as f:
        f.write("a sentence with no label\n")
    # --init points nowhere: the data error must come first.
    rc = run_train(finetune_argv("sst2", data, tmp_path / "missing", tmp_path / "out"))
    assert rc == 1
    assert "train.tsv:26: expected 2 tab-separated columns, found 1" in capsys.readouterr().err


def test_finetune_refuses_an_unlabelled_train_file(tmp_path, capsys):
    data = write_sst2(tmp_path / "SST-2")
    init = make_init(tmp_path)
    rc = run_train(finetune_argv("sst2", os.path.join(data, "test.tsv"), init, tmp_path / "out"))
    assert rc == 1
    assert "no label" in capsys.readouterr().err


def test_finetune_learns_an_easy_task(tmp_path):
    """Enough steps on cue-word sentences to move dev accuracy well above chance
    (a randomly initialised tiny encoder needs a high learning rate)."""
    data = write_sst2(tmp_path / "SST-2", train=64, dev=32, seed=1)
    init = make_init(tmp_path)
    output = tmp_path / "run"
    argv = finetune_argv("sst2", data, init, output, epochs="6", batch_size=16, seq_len=16,
                         learning_rate="1e-2", extra=["--dropout", "0.0", "--warmup-steps", "0"])
    assert run_train(argv) == 0
    with open(os.path.join(output, "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["dev"]["accuracy"] >= 0.8, metrics["history"]


def test_command_line_repeats_the_arguments():
    import argparse

    from model.finetune import command_line

    args = argparse.Namespace(command="finetune", task="rte", data="d", init="i", output="o",
                              epochs=3.0, jit=True, mixed_precision="float32", tpu=None)
    assert command_line(args) == ("python -m model.train finetune --task rte --data d --init i "
                                  "--output o --epochs 3.0 --jit --mixed-precision float32")


def test_stack_and_predict_in_batches_handle_empty_and_dicts():
    from model.tasks.base import predict_in_batches, stack_packed

    empty = stack_packed([], 8)
    assert empty["token_ids"].shape == (0, 8)
    x = {"a": np.arange(10).reshape(5, 2)}
    out = predict_in_batches(lambda b: {"s": b["a"].sum(-1)}, x, 2)
    np.testing.assert_array_equal(out["s"], [1, 5, 9, 13, 17])
