"""`BertBiLstmEncoder` and `finetune --bilstm UNITS` (BERT Table 5's "+ BiLSTM"): padding-free
outputs, the pooled output from both directions, and a fine-tuned model directory that records
the BiLSTM so loading, re-loading and `model.evaluate` need no flag."""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import pytest

from model.checkpoints import model_dir
from model.heads.bilstm_encoder import BertBiLstmEncoder
from model.networks.encoder import BertEncoder
from tests.helpers import (
    finetune_argv,
    make_init,
    random_encoder_inputs,
    run_evaluate,
    run_train,
    write_sst2,
)
from tests.test_ner import random_sentences, write_conll


def test_outputs_ignore_padding_and_pool_both_directions():
    encoder = BertEncoder.from_preset("tiny", vocabulary_size=60)
    top = BertBiLstmEncoder(encoder, units=4)
    x = random_encoder_inputs(3, 12, 60, lengths=[12, 7, 3])
    out = {k: np.asarray(v) for k, v in top.predict_on_batch(x).items()}
    assert out["sequence_output"].shape == (3, 12, 8) and out["pooled_output"].shape == (3, 8)
    # The forward LSTM's last real state and the backward one's at [CLS].
    for row, length in enumerate([12, 7, 3]):
        states = out["sequence_output"][row]
        np.testing.assert_allclose(out["pooled_output"][row, :4], states[length - 1, :4], atol=1e-6)
        np.testing.assert_allclose(out["pooled_output"][row, 4:], states[0, 4:], atol=1e-6)
        assert not np.any(states[length:])  # padding: zeros
    # Cut to 8 columns, rows 1 and 2 keep their outputs at the real tokens.
    short = {
        k: np.asarray(v)
        for k, v in top.predict_on_batch({k: v[1:, :8] for k, v in x.items()}).items()
    }
    np.testing.assert_allclose(
        short["sequence_output"][0, :7], out["sequence_output"][1, :7], atol=1e-5
    )
    np.testing.assert_allclose(short["pooled_output"], out["pooled_output"][1:], atol=1e-5)
    with pytest.raises(ValueError, match="positive integer"):
        BertBiLstmEncoder(encoder, units=0)


def test_a_keras_file_round_trips_the_bilstm(tmp_path):
    from model.heads.token_classifier import BertTokenClassifier

    encoder = BertEncoder.from_preset("tiny", vocabulary_size=60)
    model = BertTokenClassifier(BertBiLstmEncoder(encoder, units=4), num_labels=5)
    x = random_encoder_inputs(2, 10, 60, lengths=[10, 4])
    path = str(tmp_path / "model.keras")
    model.save(path)
    again = keras.saving.load_model(path)
    assert isinstance(again.encoder, BertBiLstmEncoder) and again.encoder.units == 4
    np.testing.assert_allclose(
        np.asarray(again.predict_on_batch(x)), np.asarray(model.predict_on_batch(x)), atol=1e-6
    )


@pytest.fixture(scope="module")
def ner_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bilstm")
    data = root / "conll2003"
    data.mkdir()
    write_conll(data / "train.txt", random_sentences(12, seed=1))
    write_conll(data / "valid.txt", random_sentences(6, seed=2))
    init = make_init(root)
    output = root / "ner"
    argv = finetune_argv("conll2003", data, init, output, extra=["--bilstm", "4"])
    assert run_train(argv) == 0
    return {"root": root, "data": str(data), "init": init, "output": str(output)}


def test_finetune_with_bilstm_records_it_and_reloads_the_same_model(ner_run, tmp_path):
    output = ner_run["output"]
    with open(os.path.join(output, "config.json")) as f:
        info = json.load(f)
    assert info["task"] == "token_classifier" and info["bilstm_units"] == 4
    with open(os.path.join(output, "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["bilstm_units"] == 4 and "--bilstm 4" in metrics["command"]
    assert metrics["pooler_frozen"]
    model = model_dir.load(output)
    assert isinstance(model.encoder, BertBiLstmEncoder)
    assert isinstance(model_dir.encoder_of(model), BertEncoder)
    # Saved again and loaded again: the same weights, the same predictions.
    vocab = os.path.join(output, "vocab.txt")
    model_dir.save(model, str(tmp_path / "again"), vocab)
    again = model_dir.load(str(tmp_path / "again"))
    x = random_encoder_inputs(
        3, 12, model_dir.encoder_of(model).config.vocabulary_size, lengths=[12, 5, 2]
    )
    np.testing.assert_array_equal(
        np.asarray(again.predict_on_batch(x)), np.asarray(model.predict_on_batch(x))
    )
    # model.evaluate, no flag: the dev F1 the run measured with the model in memory.
    scores = tmp_path / "scores.json"
    argv = ["--task", "conll2003", "--model", output, "--data"]
    assert (
        run_evaluate([*argv, os.path.join(ner_run["data"], "valid.txt"), "--out", str(scores)]) == 0
    )
    with open(scores) as f:
        evaluated = json.load(f)
    f1 = evaluated.get("f1", evaluated.get("metrics", {}).get("f1"))
    assert f1 == pytest.approx(metrics["dev"]["f1"], abs=1e-9)


def test_export_refuses_a_bilstm_model_by_name(ner_run, tmp_path, capsys):
    """LiteRT's built-in ops cannot run the LSTM: a clear refusal, nothing written."""
    from export.__main__ import main as export_main

    out = tmp_path / "bundle"
    assert export_main(["--model", ner_run["output"], "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "--bilstm" in err and ner_run["output"] in err
    assert not out.exists()


def test_a_sentence_task_pools_from_the_bilstm_and_inits_from_a_bilstm_model(ner_run, tmp_path):
    data = write_sst2(tmp_path / "SST-2")
    output = tmp_path / "sst2"
    # --init a BiLSTM model: its BERT encoder alone is taken, the new BiLSTM starts fresh.
    argv = finetune_argv("sst2", data, ner_run["output"], output, extra=["--bilstm", "3"])
    assert run_train(argv) == 0
    model = model_dir.load(str(output))
    assert model_dir.describe(model)["bilstm_units"] == 3
    assert model.logits_dense.kernel.shape == (6, 2)  # reads the BiLSTM's 2 x 3 pooled output
    ner = model_dir.encoder_of(model_dir.load(ner_run["output"]))
    assert model_dir.encoder_of(model).config == ner.config.replace(dropout=0.1)
