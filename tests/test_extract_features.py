"""Feature-based mode: `model.extract_features` (chosen layers per token) and
`model.feature_tagger` (a BiLSTM on frozen features, CoNLL-2003)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from model.checkpoints import model_dir
from tests.helpers import make_init
from tests.test_ner import random_sentences, write_conll


@pytest.fixture(scope="module")
def init(tmp_path_factory):
    return make_init(tmp_path_factory.mktemp("features"))


def test_layer_features_are_the_encoders_hidden_states(init):
    from model.features.layers import LayerFeatures
    from tests.helpers import random_encoder_inputs

    encoder = model_dir.load(init)
    x = random_encoder_inputs(3, 10, encoder.config.vocabulary_size, lengths=[10, 6, 3])
    features = LayerFeatures(encoder, (-1, 0))
    values = features(x)
    assert values.shape == (3, 10, 2, encoder.config.hidden_dim)
    expected = np.asarray(encoder.predict_on_batch(x)["sequence_output"])
    np.testing.assert_allclose(values[:, :, 0], expected, atol=1e-5)
    assert not np.allclose(values[:, :, 1], expected)  # block 0 is another layer
    with pytest.raises(ValueError, match="the model has 2 layers"):
        LayerFeatures(encoder, (-3,))


def test_extract_features_cli_writes_googles_jsonl(init, tmp_path):
    from model.extract_features import main

    text = tmp_path / "input.txt"
    text.write_text("the cats sat\n\na dog ||| ran fast\n", encoding="utf-8")
    out = tmp_path / "features.jsonl"
    assert (
        main(
            [
                "--model",
                init,
                "--input",
                str(text),
                "--output",
                str(out),
                "--layers=-1,-2",
                "--max-seq-length",
                "16",
            ]
        )
        == 0
    )
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [line["linex_index"] for line in lines] == [0, 1]
    assert [f["token"] for f in lines[0]["features"]] == [
        "[CLS]",
        "the",
        "cat",
        "##s",
        "sat",
        "[SEP]",
    ]
    assert [f["token"] for f in lines[1]["features"]] == [
        "[CLS]",
        "a",
        "dog",
        "[SEP]",
        "ran",
        "fast",
        "[SEP]",
    ]
    layers = lines[0]["features"][0]["layers"]
    assert [layer["index"] for layer in layers] == [-1, -2]
    assert len(layers[0]["values"]) == 32  # the tiny preset's hidden_dim
    assert main(["--model", init, "--input", str(text), "--output", str(out), "--layers=-1,x"]) == 1


def test_word_features_take_each_words_first_piece(init, tmp_path):
    from model.features.layers import LayerFeatures
    from model.features.tagger import word_features
    from model.text.tokenizer import WordPieceTokenizer

    encoder = model_dir.load(init)
    tokenizer = WordPieceTokenizer(os.path.join(init, "vocab.txt"))
    features = LayerFeatures(encoder, (-1, -2))
    sentences = [["the", "cats", "sat"], ["a", "dog"] * 6]
    out = word_features(features, tokenizer, sentences, seq_len=8)
    assert [o.shape for o in out] == [(3, 64), (12, 64)]
    # "the cats sat" fits one feature: word 2's first piece is token 4 ([CLS] the cat ##s sat).
    x = {"token_ids": np.array([[2, *tokenizer.encode(["the cats sat"])[0], 3]], np.int32)}
    x["segment_ids"] = np.zeros_like(x["token_ids"])
    x["padding_mask"] = np.ones_like(x["token_ids"])
    direct = features(x)[0].reshape(x["token_ids"].shape[1], -1)
    np.testing.assert_allclose(out[0][2], direct[4], atol=2e-3)  # float16 storage


def test_feature_tagger_trains_on_frozen_features(init, tmp_path):
    from model.feature_tagger import main

    data = tmp_path / "conll2003"
    data.mkdir()
    write_conll(data / "train.txt", random_sentences(12, seed=1))
    write_conll(data / "valid.txt", random_sentences(6, seed=2))
    output = tmp_path / "tagger"
    # The tiny encoder has 2 layers (the paper's default is the last four).
    assert (
        main(
            [
                "--model",
                init,
                "--data",
                str(data),
                "--output",
                str(output),
                "--layers=-1,-2",
                "--lstm-units",
                "8",
                "--epochs",
                "2",
                "--batch-size",
                "4",
                "--max-seq-length",
                "16",
            ]
        )
        == 0
    )
    with open(output / "metrics.json") as f:
        metrics = json.load(f)
    assert {"precision", "recall", "f1"} <= set(metrics["dev"])
    assert len(metrics["history"]) == 2
    with open(output / "config.json") as f:
        info = json.load(f)
    assert info["task"] == "feature_tagger" and info["layers"] == [-1, -2]
    assert list(info["id2label"].values())[:3] == ["O", "B-PER", "I-PER"]
    assert os.path.isfile(output / "tagger.weights.h5")
    # model.evaluate scores the saved tagger on any CoNLL file: its dev figure again.
    from model.evaluate import evaluate_task

    again = evaluate_task("conll2003", str(output), str(data / "valid.txt"))
    best = metrics["history"][metrics["best_epoch"] - 1]
    assert again["f1"] == pytest.approx(best["f1"], abs=1e-9)
    with pytest.raises(ValueError, match="scores task conll2003, not sst2"):
        evaluate_task("sst2", str(output), str(data / "valid.txt"))
