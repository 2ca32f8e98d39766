"""`model.training.finetune` and the task registry: a tiny SST-2 run end to end, its
model directory, and `model.evaluate` on it.
"""

from __future__ import annotations

import glob
import importlib
import json
import os
import shutil
import sys

import numpy as np
import pytest

from model import tasks
from model.checkpoints import model_dir
from model.tasks import dev_units
from tests.helpers import (
    BERT_VOCAB,
    finetune_argv,
    make_init,
    run_evaluate,
    run_train,
    write_sst2,
    write_task_vocab,
)

# === The registry ===


def test_registry_knows_every_task_of_the_issue():
    """The paper's tasks are registered (a new one may join them), each under its own name in
    the module `_MODULES` says defines it, and each module's tasks are all registered."""
    expected = {
        "cola",
        "sst2",
        "mrpc",
        "stsb",
        "qqp",
        "mnli",
        "qnli",
        "rte",
        "wnli",
        "conll2003",
        "swag",
        "squad1",
        "squad2",
    }
    assert expected <= set(tasks.TASKS)
    for module in set(tasks._MODULES.values()):
        defined = set(importlib.import_module(module).TASKS)
        registered = {name for name, m in tasks._MODULES.items() if m == module}
        assert defined == registered, f"{module}: register {defined - registered} in _MODULES"
    for name in expected - {"squad1", "squad2"}:
        task = tasks.get(name)
        assert task.name == name
        assert task.head in model_dir.TASKS
    assert tasks.get("ner").name == "conll2003"
    assert tasks.get("SST-2").name == "sst2"
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        tasks.get("nope")


def test_registry_loads_squad():
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
    argv = finetune_argv(
        "sst2",
        data,
        init,
        output,
        epochs="1.5",
        batch_size=8,
        extra=["--dropout", "0.05", "--warmup-steps", "1"],
    )
    assert run_train(argv) == 0
    return root, data, str(output)


def test_finetune_writes_a_self_contained_model_directory(sst2_run):
    _, data, output = sst2_run
    for name in ("config.json", "vocab.txt", "model.weights.h5", "metrics.json", "label_map.json"):
        assert os.path.isfile(os.path.join(output, name)), name
    info = model_dir.read_info(output)
    assert info["task"] == "classifier"
    assert info["id2label"] == {"0": "negative", "1": "positive"}
    assert info["finetuned_task"] == "sst2" and info["max_seq_length"] == 24
    assert info["encoder"]["dropout"] == 0.05 and info["dropout"] == 0.05
    # Strict load: no optimizer tensors or anything else beside the model's.
    model = model_dir.load(output)
    assert model.num_labels == 2
    with open(os.path.join(output, "label_map.json")) as f:
        assert json.load(f)["id2label"] == {"0": "negative", "1": "positive"}


def test_finetune_logs_training_and_dev_scalars_for_tensorboard(sst2_run):
    import tensorflow as tf

    output = sst2_run[2]
    logs = os.path.join(output, "logs")
    assert {"train", "dev"} <= set(os.listdir(logs))  # TensorBoard's, on TensorFlow
    (events,) = glob.glob(os.path.join(logs, "dev", "events.out.tfevents.*"))
    dev = [
        (e.step, v.tag)
        for record in tf.data.TFRecordDataset(events)
        for e in [tf.compat.v1.Event.FromString(record.numpy())]
        for v in e.summary.value
    ]
    assert ("accuracy" in {tag for _, tag in dev}) and {3, 5} <= {step for step, _ in dev}


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


def test_the_same_command_on_a_finished_run_trains_nothing(sst2_run, capsys):
    """A finished run keeps no checkpoint: the same command again retrained from scratch over
    it (and replaced its results); now it trains nothing, as pre-training's does."""
    root, data, output = sst2_run
    before = {name: os.stat(os.path.join(output, name)).st_mtime_ns for name in os.listdir(output)}
    argv = finetune_argv(
        "sst2",
        data,
        root / "init",
        output,
        epochs="1.5",
        batch_size=8,
        extra=["--dropout", "0.05", "--warmup-steps", "1"],
    )
    capsys.readouterr()
    assert run_train(argv) == 0
    assert capsys.readouterr().out.startswith(
        f"nothing to train: {output} holds a finished run (its metrics.json, no checkpoint left)"
    )
    # ... nor with flags that change how it is watched or kept, or its --output spelt "run/"
    watched = [*argv, "--verbose", "--log-every", "1", "--keep-checkpoints", "2"]
    watched[watched.index(str(output))] = f"{output}/"
    assert run_train(watched) == 0
    assert capsys.readouterr().out.startswith("nothing to train: ")
    # Another command (another task, a sweep's next learning rate) is not skipped silently
    other = [*argv[:-4], "--learning-rate", "1e-3"]
    assert run_train(other) == 1
    assert f"{output} holds a finished run of another command (--dropout 0.05 (this command: " in (
        capsys.readouterr().err
    )
    assert before == {n: os.stat(os.path.join(output, n)).st_mtime_ns for n in os.listdir(output)}


def test_evaluate_scores_the_model_directory_as_training_did(sst2_run, tmp_path, capsys):
    _, data, output = sst2_run
    out = tmp_path / "m.json"
    capsys.readouterr()
    assert (
        run_evaluate(
            [
                "--task",
                "sst2",
                "--model",
                output,
                "--data",
                os.path.join(data, "dev.tsv"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    with open(out) as f:
        written = json.load(f)
    with open(os.path.join(output, "metrics.json")) as f:
        trained = json.load(f)
    assert printed["accuracy"] == written["accuracy"]
    assert printed["accuracy"] == pytest.approx(trained["dev"]["accuracy"])


def test_evaluate_refuses_unlabelled_files_and_other_heads(sst2_run, capsys):
    _, data, output = sst2_run
    rc = run_evaluate(
        ["--task", "sst2", "--model", output, "--data", os.path.join(data, "test.tsv")]
    )
    assert rc == 1
    err = capsys.readouterr().err
    assert "test.tsv:2: no label" in err and "unlabelled" in err
    assert "--predictions-dir DIR writes its predictions as GLUE's submission" in err
    rc = run_evaluate(
        ["--task", "conll2003", "--model", output, "--data", os.path.join(data, "dev.tsv")]
    )
    assert rc == 1
    assert "holds a 'classifier' model" in capsys.readouterr().err
    rc = run_evaluate(["--task", "rte", "--model", output, "--data", os.path.join(data, "dev.tsv")])
    assert rc == 1
    assert "labels" in capsys.readouterr().err


def test_evaluate_writes_glue_submission_files_for_test_and_dev(sst2_run, tmp_path, capsys):
    """--predictions-dir: a test.tsv is predicted (no metrics), a dev file's predictions
    agree with the accuracy printed beside them."""
    _, data, output = sst2_run
    out = tmp_path / "glue"
    argv = ["--task", "sst2", "--model", output, "--predictions-dir", str(out), "--data"]
    assert run_evaluate([*argv, os.path.join(data, "test.tsv")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["labelled"] is False and "accuracy" not in printed
    assert printed["examples"] == 2 and printed["predictions_dir"] == str(out)
    rows = [line.split("\t") for line in (out / "SST-2.tsv").read_text().splitlines()]
    assert rows[0] == ["index", "prediction"] and [r[0] for r in rows[1:]] == ["0", "1"]
    assert {r[1] for r in rows[1:]} <= {"0", "1"}
    assert run_evaluate([*argv, os.path.join(data, "dev.tsv")]) == 0
    accuracy = json.loads(capsys.readouterr().out)["accuracy"]
    predicted = [r.split("\t")[1] for r in (out / "SST-2.dev.tsv").read_text().splitlines()[1:]]
    with open(os.path.join(data, "dev.tsv"), encoding="utf-8") as f:
        gold = [line.rstrip("\n").split("\t")[1] for line in f.readlines()[1:]]
    assert len(predicted) == len(gold) == 12
    assert accuracy == pytest.approx(np.mean([p == g for p, g in zip(predicted, gold)]))
    # fine-tuning kept its best epoch's dev predictions the same way
    kept = os.path.join(output, "SST-2.dev.tsv")
    assert open(kept, encoding="utf-8").readline() == "index\tprediction\n"
    # and its dev units, whose mean is the accuracy it kept (model/tasks/dev_units.py)
    with open(os.path.join(output, "metrics.json"), encoding="utf-8") as f:
        best = json.load(f)["dev"]["accuracy"]
    kind, units = dev_units.read(output).metrics["accuracy"]
    assert kind == "mean" and len(units) == 12 and units[:, 0].mean() == pytest.approx(best)
    # a model of another task (its config says so) is refused on a file without labels
    other = tmp_path / "other"
    shutil.copytree(output, other)
    config = json.loads((other / "config.json").read_text()) | {"finetuned_task": "imdb"}
    (other / "config.json").write_text(json.dumps(config))
    rc = run_evaluate([*argv[:2], "--model", str(other), *argv[4:], os.path.join(data, "test.tsv")])
    assert rc == 1 and "fine-tuned on imdb, not sst2" in capsys.readouterr().err


def test_finetune_stops_on_bad_data_before_loading_the_model(tmp_path, capsys, monkeypatch):
    from model.checkpoints import formats

    data = write_sst2(tmp_path / "SST-2")
    with open(os.path.join(data, "train.tsv"), "a", encoding="utf-8") as f:
        f.write("a sentence with no label\n")
    # Reading --init's weights would fail the test: the data error must come first.
    monkeypatch.setattr(formats, "read", lambda *a, **k: pytest.fail("the model was read"))
    rc = run_train(finetune_argv("sst2", data, make_init(tmp_path), tmp_path / "out"))
    assert rc == 1
    assert "train.tsv:26: expected 2 tab-separated columns, found 1" in capsys.readouterr().err


def test_finetune_refuses_an_unlabelled_train_file(tmp_path, capsys):
    data = write_sst2(tmp_path / "SST-2")
    init = make_init(tmp_path)
    rc = run_train(finetune_argv("sst2", os.path.join(data, "test.tsv"), init, tmp_path / "out"))
    assert rc == 1
    assert "no label" in capsys.readouterr().err


@pytest.mark.parametrize("grouping", [[], ["--group-by-length"]])
def test_finetune_learns_an_easy_task(tmp_path, grouping):
    """Enough steps on cue-word sentences to move dev accuracy well above chance
    (a randomly initialised tiny encoder needs a high learning rate), with
    random batches and with batches grouped by length."""
    data = write_sst2(tmp_path / "SST-2", train=64, dev=32, seed=1)
    init = make_init(tmp_path)
    output = tmp_path / "run"
    argv = finetune_argv(
        "sst2",
        data,
        init,
        output,
        epochs="6",
        batch_size=16,
        seq_len=40,
        learning_rate="1e-2",
        extra=["--dropout", "0.0", "--warmup-steps", "0", *grouping],
    )
    assert run_train(argv) == 0
    with open(os.path.join(output, "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["dev"]["accuracy"] >= 0.8, metrics["history"]


def test_command_line_repeats_the_arguments():
    import argparse

    from model.training.run_command import command_line

    args = argparse.Namespace(
        command="finetune",
        task="rte",
        data="d",
        init="i",
        output="o",
        epochs=3.0,
        jit=True,
        mixed_precision="float32",
        tpu=None,
    )
    assert command_line(args) == (
        "python -m model.train finetune --task rte --data d --init i "
        "--output o --epochs 3.0 --jit --mixed-precision float32"
    )


def test_pack_rows_and_predict_in_batches_handle_empty_and_dicts():
    from model.tasks.base import pack_rows, predict_in_batches
    from model.text.wordpiece import WordPieceTokenizer

    tokenizer = WordPieceTokenizer(BERT_VOCAB)
    empty = pack_rows(tokenizer, [], None, 8)
    assert empty["token_ids"].shape == (0, 8)
    x = {"a": np.arange(10).reshape(5, 2), "padding_mask": np.ones((5, 2), np.int32)}
    out = predict_in_batches(lambda b: {"s": b["a"].sum(-1)}, x, 2)
    np.testing.assert_array_equal(out["s"], [1, 5, 9, 13, 17])


def test_trim_batch_cuts_inputs_and_per_token_labels_only():
    import tensorflow as tf

    from model.training.finetune_tfdata import trim_batch

    mask = np.zeros((3, 40), np.int32)
    mask[0, :5], mask[1, :18], mask[2, :2] = 1, 1, 1
    x = {"token_ids": mask * 7, "segment_ids": mask * 0, "padding_mask": mask}
    tags = np.where(mask == 1, 1, -1).astype(np.int32)  # NER: (batch, seq_len)
    labels = np.array([0, 1, 0], np.int32)  # GLUE: (batch,)
    x2, tags2, labels2 = trim_batch(40)(*tf.nest.map_structure(tf.constant, (x, tags, labels)))
    assert x2["token_ids"].shape == (3, 32) and x2["padding_mask"].shape == (3, 32)
    np.testing.assert_array_equal(tags2.numpy(), tags[:, :32])
    np.testing.assert_array_equal(labels2.numpy(), labels)
    swag = {k: np.stack([v, v, v, v], 1) for k, v in x.items()}  # (batch, choices, seq_len)
    (cut,) = trim_batch(40)(tf.nest.map_structure(tf.constant, swag))
    assert cut["token_ids"].shape == (3, 4, 32)


@pytest.mark.parametrize("head", ["classifier", "token_classifier"])
def test_trimmed_batches_give_the_outputs_of_full_length_ones(head):
    """predict_in_batches sorts rows by length and cuts each batch to its
    longest row: outputs at real tokens equal those of the full-length batch,
    in the input order, and sequence outputs are padded back."""
    from model.config import BertConfig
    from model.heads.classifier import BertClassifier
    from model.heads.token_classifier import BertTokenClassifier
    from model.networks.encoder import BertEncoder
    from model.tasks.base import PADDED_LOGIT, predict_in_batches
    from tests.helpers import random_encoder_inputs

    config = BertConfig.preset("tiny").replace(vocabulary_size=50, max_sequence_length=48)
    encoder = BertEncoder.from_config_object(config)
    head_class = BertClassifier if head == "classifier" else BertTokenClassifier
    model = head_class(encoder, num_labels=3)
    lengths = [40, 3, 47, 5, 9, 2, 30, 12, 6, 48, 4]
    x = random_encoder_inputs(len(lengths), 48, 50, lengths=lengths)
    full = np.asarray(model.predict_on_batch(x))
    widths = []

    def predict(batch):
        widths.append(batch["token_ids"].shape[1])
        return model.predict_on_batch(batch)

    out = predict_in_batches(predict, x, 4, sequence_outputs=head == "token_classifier")
    assert widths == [16, 32, 48]  # sorted lengths 2-5, 6-30, 40-48, rounded up to 16
    if head == "classifier":
        np.testing.assert_allclose(out, full, atol=1e-5)
        return
    real = x["padding_mask"].astype(bool)
    np.testing.assert_allclose(out[real], full[real], atol=1e-5)
    assert out.shape == full.shape
    assert np.all(out[1, 16:] == PADDED_LOGIT)  # length 3: computed in a 16-wide batch
    # Every padding position, computed or not: no output depends on the row's batch.
    assert np.all(out[~real] == PADDED_LOGIT)
    again = predict_in_batches(predict, x, 1, sequence_outputs=True)
    np.testing.assert_allclose(again, out, atol=1e-5)


# === Task defaults, the best epoch's predictions, the unused pooler ===


def test_unset_flags_take_the_task_default_then_the_papers():
    import argparse

    from model.training.finetune import resolve_defaults

    unset = argparse.Namespace(epochs=None, batch_size=None, learning_rate=None, seq_len=None)
    squad2 = resolve_defaults(unset, tasks.get("squad2"))
    assert (squad2.epochs, squad2.batch_size, squad2.learning_rate, squad2.seq_len) == (
        2.0,
        48,
        5e-5,
        384,
    )
    # GLUE sets no epochs or batch size of its own: the paper's 3 and 32.
    sst2 = resolve_defaults(unset, tasks.get("sst2"))
    assert (sst2.epochs, sst2.batch_size, sst2.learning_rate, sst2.seq_len) == (3.0, 32, 2e-5, 128)
    swag = resolve_defaults(unset, tasks.get("swag"))  # the paper's section 4.4
    assert (swag.epochs, swag.batch_size, swag.learning_rate) == (3.0, 16, 2e-5)
    assert unset.epochs is None  # a copy; the caller's namespace is left alone
    given = argparse.Namespace(epochs=1.0, batch_size=4, learning_rate=1e-3, seq_len=16)
    assert vars(resolve_defaults(given, tasks.get("squad2"))) == vars(given)


def test_finetune_publishes_only_the_best_epochs_predictions(tmp_path, monkeypatch, capsys):
    """A task that scores epoch 1 best and writes its epoch number as its
    predictions: OUTPUT ends with epoch 1's file and epoch 1's weights. It
    also sets default_epochs/default_batch_size, which the run (flags unset,
    as train.py gives them once its defaults are None) must take."""
    from model.io.files import write_json
    from model.train import parse_args
    from model.training.finetune import SCRATCH_PREFIX, finetune

    scores = iter([0.9, 0.1])

    class Scripted(type(tasks.get("sst2"))):
        default_epochs = 2.0
        default_batch_size = 8

        def evaluate(self, predict, examples, tokenizer, seq_len, batch_size=64, output_dir=None):
            metrics = super().evaluate(predict, examples, tokenizer, seq_len, batch_size)
            score = next(scores)
            write_json(os.path.join(output_dir, "predictions.json"), {"score": score})
            return {**metrics, "real_accuracy": metrics["accuracy"], "accuracy": score}

    monkeypatch.setattr(tasks, "get", lambda name: Scripted())
    data = write_sst2(tmp_path / "SST-2")
    init = make_init(tmp_path)
    output = tmp_path / "run"
    args = parse_args(
        [
            "finetune",
            "--task",
            "sst2",
            "--data",
            data,
            "--init",
            init,
            "--output",
            str(output),
            "--seq-len",
            "24",
            "--learning-rate",
            "1e-2",
            "--log-every",
            "1000",
        ]
    )
    args.epochs = args.batch_size = None
    assert finetune(args) == 0
    monkeypatch.undo()

    with open(output / "metrics.json") as f:
        metrics = json.load(f)
    assert metrics["epochs"] == 2.0 and metrics["batch_size"] == 8
    assert metrics["steps"] == 6  # 24 examples, batch 8, 2 epochs
    assert "--epochs 2.0 --seq-len 24" in metrics["command"]
    assert metrics["best_epoch"] == 1 and [h["accuracy"] for h in metrics["history"]] == [0.9, 0.1]
    with open(output / "predictions.json") as f:
        assert json.load(f) == {"score": 0.9}
    assert not [n for n in os.listdir(output) if n.startswith(SCRATCH_PREFIX)]
    out = capsys.readouterr().out
    assert out.count("saved ") == 1 and out.count("the best epoch so far") == 1  # said once
    # The saved weights are epoch 1's too (its real accuracy, not epoch 2's).
    assert (
        run_evaluate(
            [
                "--task",
                "sst2",
                "--model",
                str(output),
                "--batch-size",
                "16",
                "--data",
                os.path.join(data, "dev.tsv"),
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed["accuracy"] == pytest.approx(metrics["history"][0]["real_accuracy"])


def test_publish_predictions_moves_a_tree(tmp_path):
    from model.training.finetune import publish_predictions

    scratch = tmp_path / "out" / ".epoch-predictions-x"
    (scratch / "matched").mkdir(parents=True)
    (scratch / "predictions.json").write_text("new")
    (scratch / "matched" / "predictions.json").write_text("m")
    (tmp_path / "out" / "predictions.json").write_text("old")
    published = publish_predictions(str(scratch), str(tmp_path / "out"))
    assert sorted(os.path.relpath(p, tmp_path / "out") for p in published) == [
        os.path.join("matched", "predictions.json"),
        "predictions.json",
    ]
    assert (tmp_path / "out" / "predictions.json").read_text() == "new"
    assert (tmp_path / "out" / "matched" / "predictions.json").read_text() == "m"
    assert not any(f for _, _, f in os.walk(scratch))


def test_frozen_pooler_silences_the_gradient_warning_and_round_trips(tmp_path):
    import warnings

    import keras

    from model.networks.encoder import BertEncoder
    from model.text.tokenizer import load_vocabulary
    from model.training.finetune import freeze_unused_pooler
    from model.training.optimizer import create_optimizer_variables
    from tests.helpers import random_encoder_inputs

    vocab = write_task_vocab(tmp_path / "vocab.txt")
    size = len(load_vocabulary(vocab))
    ner, sst2 = tasks.get("conll2003"), tasks.get("sst2")
    x = random_encoder_inputs(4, 8, size)
    y = np.ones((4, 8), "int32")

    def train(freeze: bool):
        keras.utils.set_random_seed(0)
        encoder = BertEncoder.from_preset("tiny", vocabulary_size=size)
        model = ner.build_model(encoder)
        if freeze:
            assert freeze_unused_pooler(ner, encoder)
        before = [w.copy() for w in encoder.pooled_dense.get_weights()]
        model.compile(
            optimizer=keras.optimizers.AdamW(1e-2),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        create_optimizer_variables(model)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        warned = any("Gradients do not exist" in str(w.message) for w in caught)
        return model, before, warned

    trainable, _, warned = train(freeze=False)
    assert warned  # the warning this guards against is real
    model, before, warned = train(freeze=True)
    assert not warned
    pooler = {id(v) for v in model.encoder.pooled_dense.weights}
    assert pooler.isdisjoint(id(v) for v in model.trainable_variables)
    # No AdamW moments (two per variable) for the pooler's kernel and bias.
    assert len(trainable.optimizer.variables) - len(model.optimizer.variables) == 4

    # Saved as finetune saves (weights alone) and reloaded strictly: the pooler
    # is the one it started with, every other weight the trained one.
    export = model_dir.build_model(model_dir.describe(model))
    export.set_weights(model.get_weights())
    model_dir.save(export, str(tmp_path / "model"), vocab)
    loaded = model_dir.load(str(tmp_path / "model"))
    for a, b in zip(loaded.encoder.pooled_dense.get_weights(), before):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)

    # Heads that read the pooled output keep it trainable.
    encoder = BertEncoder.from_preset("tiny", vocabulary_size=size)
    assert not freeze_unused_pooler(sst2, encoder) and encoder.pooled_dense.trainable


def test_evaluate_refuses_flags_its_task_does_not_take(sst2_run, capsys):
    _, data, output = sst2_run
    dev = os.path.join(data, "dev.tsv")
    capsys.readouterr()
    assert (
        run_evaluate(
            ["--task", "sst2", "--model", output, "--data", dev, "--null-threshold", "1.5"]
        )
        == 1
    )
    assert "--null-threshold: task sst2 has no null answer" in capsys.readouterr().err
    assert run_evaluate(["--task", "sst2", "--model", output, "--data", dev, "--skip-invalid"]) == 1
    assert "--skip-invalid: task sst2 reads its files strictly" in capsys.readouterr().err
    # and every flag a task would pass over (each was ignored, or refused after TensorFlow)
    for task, flags, said in (
        ("mlm", ["--skip-invalid", "--predictions-dir", "d"], "--skip-invalid, --predictions-dir"),
        ("rtd", ["--max-predictions", "5", "--format", "lines"], "--max-predictions, --format"),
        ("sst2", ["--seed", "1", "--max-predictions", "5"], "--max-predictions, --seed"),
        ("sst2", ["--seed", "0"], "--seed"),  # a zero is given too
        ("mlm", ["--null-threshold", "0"], "--null-threshold"),
    ):
        assert run_evaluate(["--task", task, "--model", output, "--data", dev, *flags]) == 1
        assert f"{said}: --task {task} takes no such flag" in capsys.readouterr().err
    assert not os.path.exists("d")


@pytest.fixture
def empty_memo(monkeypatch):
    """The process's remembered reads, empty for the test and restored after it."""
    from model.io.memo import Memo
    from model.training import finetune

    monkeypatch.setattr(finetune, "MEMO", Memo(finetune.MEMO.entries))


def test_runs_of_one_process_share_what_they_read_until_the_file_changes(tmp_path, empty_memo):
    """The experiments fine-tune every seed of a task in one process: the examples are read
    once, and read again when the file is rewritten."""
    from model.io.memo import stamp
    from model.training import finetune

    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\ngood film\t1\n")
    reads = []

    def read(p):
        reads.append(p)
        return open(p).read().splitlines()

    first = finetune.MEMO.get(("read", "t", stamp(path)), read, path)
    again = finetune.MEMO.get(("read", "t", stamp(path)), read, path)
    assert first is again and len(reads) == 1
    path.write_text("sentence\tlabel\ngood film\t1\nbad film\t0\n")
    changed = finetune.MEMO.get(("read", "t", stamp(path)), read, path)
    assert len(changed) == 3 and len(reads) == 2
    for i in range(finetune.MEMO.entries + 2):  # bounded: the oldest entries go
        finetune.MEMO.get(("other", i), list, ())
    assert len(finetune.MEMO.made) == finetune.MEMO.entries


def test_a_remembered_read_warns_again_of_what_it_skipped(tmp_path, capsys, empty_memo):
    """The second run of a process reads the file from memory, and still says which rows the
    read skipped (it said nothing before); the first read says it as it reads."""
    from model import tasks
    from model.io.memo import stamp
    from model.training import finetune
    from tests.helpers import two_question_squad

    path = tmp_path / "train.json"
    path.write_text(json.dumps(two_question_squad("the cat sat on the mat", "mat", 400)))
    task = tasks.get("squad1")
    task.skip_invalid = True
    for _ in range(2):
        key = ("read", "squad1-skip-test", stamp(path))
        finetune.MEMO.get(key, task.read, str(path))
        assert capsys.readouterr().err.count("skipped 1 invalid question(s)") == 1

    def slow_read():
        print("a warning while reading", file=sys.stderr)
        assert capsys.readouterr().err == "a warning while reading\n"  # shown at once
        return []

    finetune.MEMO.get(("read", "streams"), slow_read)

    def fails():
        print("a warning, then a failure", file=sys.stderr)
        raise ValueError("bad row")

    with pytest.raises(ValueError, match="bad row"):
        finetune.MEMO.get(("read", "fails"), fails)
    assert capsys.readouterr().err == "a warning, then a failure\n"


def test_a_model_with_another_number_of_outputs_is_refused():
    """STS-B's regression model (one output, no labels to compare) on RTE, and a two-label
    classifier on STS-B, are refused; a bundle's output width counts as its num_labels."""
    from export import bundle
    from model.evaluate import _bundle_as_info, _check_model

    stsb = {"task": "classifier", "num_labels": 1, "finetuned_task": "stsb"}
    with pytest.raises(ValueError, match=r"has 1 output\(s\), task rte needs 2"):
        _check_model(tasks.get("rte"), "m", stsb)
    rte = {"task": "classifier", "num_labels": 2, "finetuned_task": "rte"}
    with pytest.raises(ValueError, match="task stsb needs 1 .a regression score"):
        _check_model(tasks.get("stsb"), "m", rte)
    # transformers' default names (LABEL_0, LABEL_1) name nothing: the count decides
    hub = {"task": "classifier", "num_labels": 2, "id2label": {"0": "LABEL_0", "1": "LABEL_1"}}
    _check_model(tasks.get("sst2"), "m", hub)
    shipped = os.path.join(os.path.dirname(__file__), "..", "assets", "models", "sst2")
    assert _bundle_as_info(bundle.read_info(shipped))["num_labels"] == 2


def test_seeds_stopped_while_finishing_go_on_or_finish(tmp_path):
    """--seeds wrote each seed's metrics.json and removed its checkpoints one seed after
    another: stopped between, a finished seed beside an unfinished one was refused ("remove
    it"). The metrics now all come first; a stop among them resumes every seed, a stop
    among the removals finishes them."""
    from model import train
    from model.training import finetune as ft
    from model.training import layout
    from model.training.run_command import command_line

    argv = ["finetune", "--task", "sst2", "--data", str(tmp_path), "--init", str(tmp_path)]
    argv += ["--output", str(tmp_path / "s{seed}"), "--seeds", "1,2", "--device-data"]
    args = train.parse_args(argv)
    args = ft.resolve_defaults(args, ft.task_of(args))
    runs = layout.per_seed(args)

    def state(metrics: tuple, checkpoints: tuple) -> None:
        for run in runs:
            shutil.rmtree(run.output, ignore_errors=True)
            os.makedirs(run.output)
        for i in metrics:
            with open(os.path.join(runs[i].output, "metrics.json"), "w") as f:
                json.dump({"command": command_line(runs[i])}, f)
        for i in checkpoints:
            step = os.path.join(runs[i].output, "checkpoints", "ckpt-00000010")
            os.makedirs(step)
            with open(os.path.join(step, "state.json"), "w") as f:
                f.write('{"step": 10}')

    state(metrics=(0,), checkpoints=(0, 1))  # stopped among the metrics: all go on
    assert ft._finished(args) == []
    state(metrics=(0, 1), checkpoints=(1,))  # stopped among the removals: both finished
    assert ft._finished(args) == [run.output for run in runs]
    assert not os.path.exists(os.path.join(runs[1].output, "checkpoints"))
    state(metrics=(0,), checkpoints=(1,))  # seed 1 finished alone: cannot train together
    with pytest.raises(ValueError, match="holds a finished run, the other seeds' do not"):
        ft._finished(args)
