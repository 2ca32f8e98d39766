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


def test_extract_takes_texts_and_pairs_from_python(init):
    """A notebook's list of strings: each a text (a 2-character one was read as a pair)."""
    from model.features.layers import LayerFeatures, extract, load_encoder
    from model.text.tokenizer import WordPieceTokenizer

    encoder, vocab = load_encoder(init)
    tokenizer = WordPieceTokenizer(vocab, lowercase=encoder.config.lowercase)
    features = LayerFeatures(encoder, (-1,))
    rows = list(extract(features, tokenizer, ["hi", ("ok", None), ("the cat", "sat")], 16))
    assert [tokens.count("[SEP]") for tokens, _ in rows] == [1, 1, 2]
    assert "".join(rows[0][0]).replace("#", "") == "[CLS]hi[SEP]"
    assert rows[2][1].shape == (len(rows[2][0]), 1, encoder.config.hidden_dim)
    with pytest.raises(TypeError, match="a text or a \\(text_a, text_b\\) pair, not 3"):
        list(extract(features, tokenizer, [3], 16))
    with pytest.raises(TypeError, match=r"a list of texts or pairs; for one text: \['the cat'\]"):
        list(extract(features, tokenizer, "the cat", 16))  # not 7 one-letter texts


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
    # Output line i is input line i's, an empty line's too (google-research/bert's reader).
    assert [line["linex_index"] for line in lines] == [0, 1, 2]
    assert [f["token"] for f in lines.pop(1)["features"]] == ["[CLS]", "[SEP]"]
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


@pytest.mark.slow
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
    # Where a model directory is read (evaluate --task mlm, export), it is named for what it is
    with pytest.raises(ValueError, match="a feature-based tagger .* over the frozen encoder"):
        model_dir.read_info(str(output))


def test_embeddings_and_sums_of_layers_against_a_direct_computation(init):
    from model.features.layers import LayerFeatures, parse_layers
    from tests.helpers import random_encoder_inputs

    encoder = model_dir.load(init)  # 2 blocks of 32
    x = random_encoder_inputs(3, 10, encoder.config.vocabulary_size, lengths=[10, 6, 3])
    assert parse_layers("embeddings,all", 2) == ("embeddings", 0, 1)
    with pytest.raises(ValueError, match="not known"):
        parse_layers("all")
    with pytest.raises(ValueError, match="'embeddings'"):
        parse_layers("embedding", 2)

    blocks = LayerFeatures(encoder, (-1, -2))(x)  # (3, 10, 2, 32)
    embeddings = LayerFeatures(encoder, ("embeddings",))
    assert embeddings.width == 32
    direct = np.asarray(encoder.embed(x["token_ids"], x["segment_ids"]))  # (3, 10, 32)
    np.testing.assert_allclose(embeddings(x)[:, :, 0], direct, atol=1e-5)

    summed = LayerFeatures(encoder, (-1, -2), combine="sum")
    assert summed.width == 32 and summed.layers == (-1, -2)
    values = summed(x)
    assert values.shape == (3, 10, 1, 32)
    np.testing.assert_allclose(values[:, :, 0], blocks[:, :, 0] + blocks[:, :, 1], atol=1e-5)
    # "all": every block, the embeddings left out (the paper's "all 12 layers").
    every = LayerFeatures(encoder, parse_layers("all", 2), combine="sum")
    np.testing.assert_allclose(every(x), values, atol=1e-6)
    concat = LayerFeatures(encoder, ("embeddings", -1))
    assert concat.width == 64
    np.testing.assert_allclose(concat(x)[:, :, 0], direct, atol=1e-5)
    np.testing.assert_allclose(concat(x)[:, :, 1], blocks[:, :, 0], atol=1e-5)
    with pytest.raises(ValueError, match="combine 'mean'"):
        LayerFeatures(encoder, (-1,), combine="mean")


@pytest.mark.parametrize(
    "flags, layers, combine, width",
    [
        (["--layers=embeddings"], ["embeddings"], "concat", 32),
        (["--layers=all", "--combine", "sum"], [0, 1], "sum", 32),
    ],
)
def test_feature_tagger_records_the_layers_and_how_they_combine(
    init, tmp_path, flags, layers, combine, width
):
    from model.feature_tagger import main
    from model.features.layers import LayerFeatures
    from model.features.tagger import word_features
    from model.text.tokenizer import WordPieceTokenizer

    data = tmp_path / "conll2003"
    data.mkdir()
    write_conll(data / "train.txt", random_sentences(8, seed=1))
    write_conll(data / "valid.txt", random_sentences(4, seed=2))
    output = tmp_path / "tagger"
    argv = ["--model", init, "--data", str(data), "--output", str(output), *flags]
    argv += ["--lstm-units", "4", "--lstm-layers", "1", "--epochs", "1", "--max-seq-length", "16"]
    assert main(argv) == 0
    with open(output / "config.json") as f:
        info = json.load(f)
    assert info["layers"] == layers and info["combine"] == combine
    features = LayerFeatures(model_dir.load(init), tuple(info["layers"]), info["combine"])
    tokenizer = WordPieceTokenizer(os.path.join(init, "vocab.txt"))
    assert word_features(features, tokenizer, [["the", "cat"]], seq_len=8)[0].shape == (2, width)
    # model.evaluate rebuilds the same features from config.json: the run's dev F1 again.
    from model.evaluate import evaluate_task

    with open(output / "metrics.json") as f:
        metrics = json.load(f)
    again = evaluate_task("conll2003", str(output), str(data / "valid.txt"))
    assert again["f1"] == pytest.approx(metrics["dev"]["f1"], abs=1e-9)


def test_bad_numbers_and_empty_training_data_are_refused_in_one_line(init, tmp_path, capsys):
    """`feature_tagger --epochs 0` crashed (AttributeError), an empty train.txt was "no
    examples to evaluate", `extract_features --batch-size 0` said "range() arg 3 must not be
    zero"; none leaves an output behind."""
    from model import extract_features, feature_tagger

    data = tmp_path / "conll2003"
    data.mkdir()
    write_conll(data / "train.txt", random_sentences(4, seed=1))
    write_conll(data / "valid.txt", random_sentences(2, seed=2))
    base = ["--model", init, "--data", str(data), "--output", str(tmp_path / "tagger")]
    assert feature_tagger.main([*base, "--epochs", "0"]) == 1
    assert "error: --epochs must be positive, got 0" in capsys.readouterr().err
    (data / "train.txt").write_text("")
    assert feature_tagger.main(base) == 1
    assert "train.txt: no sentences to train on" in capsys.readouterr().err
    text = tmp_path / "input.txt"
    text.write_text("the cats sat\n", encoding="utf-8")
    argv = ["--model", init, "--input", str(text), "--output", str(tmp_path / "f.jsonl")]
    assert extract_features.main([*argv, "--batch-size", "0"]) == 1
    assert "--batch-size must be positive" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["conll2003", "input.txt"]
