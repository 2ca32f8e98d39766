"""export/runtime.py: every EdgeModel method on stub and tiny Keras models, on tiny
LiteRT bundles, and in a virtual environment without TensorFlow.

    PYTHONPATH=. python -m pytest -q tests/test_runtime.py
    BERT_EDGE_VENV=/tmp/edge-venv PYTHONPATH=. python -m pytest -q tests/test_runtime.py

Stubs (a `predict` that computes logits from the token ids) check what each
method makes of a model's outputs: answers and entities mapped back to the
text's own characters, [MASK] positions, windows, truncation. Tiny random
Keras models check shapes and that a Keras model serves through the same
class; tiny bundles (written by `export.__main__.export_bundle`) check that
`runtime.load` gives the Keras model's answers. The last test runs every
method on the bundles in a virtual environment of `export/requirements-edge.txt`
alone and checks that neither tensorflow nor keras was imported. That
environment is built in pytest's temporary directory (~15 s with a warm pip
cache), or at $BERT_EDGE_VENV if that directory is missing or empty; an
existing $BERT_EDGE_VENV is used as it is and never modified. The test fails,
never skips, when the environment cannot be built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from export import runtime, runtime_command
from export.runtime import EdgeModel
from model.tasks import ner, squad_examples, squad_windows
from model.text.wordpiece import WordPieceTokenizer
from tests.helpers import isolated_python

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = os.path.join(ROOT, "tests", "fixtures", "bert-base-uncased-vocab.txt")
EDGE_REQUIREMENTS = os.path.join(ROOT, "export", "requirements-edge.txt")
CONLL = list(ner.CONLL2003_LABELS)
SEQ_LEN = 64


@pytest.fixture(scope="module")
def tok():
    return WordPieceTokenizer(VOCAB)


def ids_of(tok, *words) -> list[int]:
    return [tok.token_to_id[w] for w in words]


# === Stubs: what the methods make of a model's outputs ===


def stub(fn):
    """A predict that checks the input contract, then returns fn(x)."""

    def predict(x):
        for name in ("token_ids", "segment_ids", "padding_mask"):
            assert x[name].dtype == np.int32 and x[name].ndim == 2, name
        return fn(x)

    return predict


def test_classify(tok):
    good = tok.token_to_id["good"]

    def logits(x):
        return {
            "logits": np.stack(
                [np.zeros(len(x["token_ids"])), 3.0 * (x["token_ids"] == good).any(-1)], -1
            )
        }

    m = EdgeModel(
        stub(logits),
        tok,
        {
            "task": "classifier",
            "max_seq_length": 16,
            "id2label": {"1": "positive", "0": "negative"},
        },
    )
    assert m.labels == ["negative", "positive"]
    out = m.classify("A good film.")
    assert out["label"] == "positive" and out["value"] is None and not out["truncated"]
    assert out["scores"]["positive"] == pytest.approx(1 / (1 + np.exp(-3)))
    assert sum(out["scores"].values()) == pytest.approx(1)
    assert m.classify("A bad film.", "")["label"] == "negative"  # an empty pair is no pair
    cut = m.classify("a " * 20 + "good", long_texts="truncate")
    assert cut["truncated"] and cut["label"] == "negative"  # cut before "good"
    assert (cut["windows"], cut["wordpieces"], cut["window_wordpieces"]) == (1, 21, 14)
    assert [(w["start"], w["end"]) for w in cut["window_results"]] == [(0, 14)]
    read = m.classify("a " * 20 + "good")  # in windows: the last one reads "good"
    assert not read["truncated"] and read["windows"] == 2 and read["label"] == "positive"
    assert m.classify("A film.", "good " * 30)["truncated"]  # a pair is cut
    assert m.classify("A film.", "good " * 30)["label"] == "positive"
    assert m.classify("A film.", "good " * 30)["windows"] == 1
    with pytest.raises(ValueError, match="long_texts must be one of"):
        m.classify("A film.", long_texts="all")


def test_a_glue_model_reads_one_text_or_a_pair_as_its_task_did(tok):
    """SST-2 reads one text, MNLI a pair: the other is refused (both answered anything);
    a model of no known GLUE task takes either."""
    logits = stub(lambda x: np.zeros((len(x["token_ids"]), 2)))
    info = {"task": "classifier", "max_seq_length": 16}
    sst2 = EdgeModel(logits, tok, {**info, "finetuned_task": "sst2"})
    with pytest.raises(
        ValueError, match=r"fine-tuned on SST2, which reads one text \(no text_pair"
    ):
        sst2.classify("A gripping film.", "Second text")
    assert sst2.classify("A gripping film.", "")["windows"] == 1  # an empty pair is no pair
    mnli = EdgeModel(logits, tok, {**info, "finetuned_task": "mnli"})
    with pytest.raises(ValueError, match=r"MNLI, which reads a pair of texts"):
        mnli.classify("Only one text.")
    assert mnli.classify("A man plays.", "A man is playing.")["windows"] == 1
    assert EdgeModel(logits, tok, info).classify("a", "b")["windows"] == 1


def test_classify_regression_and_unnamed_labels(tok):
    m = EdgeModel(
        stub(lambda x: np.full((1, 1), 3.25)),
        tok,
        {"task": "classifier", "max_seq_length": 16, "finetuned_task": "stsb"},
    )
    assert m.classify("A man plays.", "A man is playing.") == {
        "label": None,
        "scores": {},
        "value": 3.25,
        "truncated": False,
        "windows": 1,
        "wordpieces": 9,  # "a man plays ." + "a man is playing ."
        "window_wordpieces": 13,
    }
    m = EdgeModel(
        stub(lambda x: np.array([[0.0, 1.0, 0.0]])),
        tok,
        {"task": "classifier", "max_seq_length": 16},
    )
    assert m.labels is None and m.classify("x")["label"] == "1"


def cue_logits(tok):
    """Logits of a stub classifier: "positive" by twice the count of "good" less "bad"."""
    good, bad = tok.token_to_id["good"], tok.token_to_id["bad"]

    def logits(x):
        ids, real = x["token_ids"], x["padding_mask"] > 0
        score = ((ids == good) & real).sum(-1) - ((ids == bad) & real).sum(-1)
        return {"logits": np.stack([np.zeros(len(ids)), 2.0 * score], -1).astype(np.float32)}

    return logits


SST2_INFO = {"task": "classifier", "max_seq_length": 16, "id2label": {"0": "neg", "1": "pos"}}


def test_classify_a_short_text_as_before(tok):
    """A text that fits is read as one input at its own length, exactly as before windows."""
    calls = []
    logits = cue_logits(tok)
    m = EdgeModel(stub(lambda x: calls.append(x) or logits(x)), tok, SST2_INFO)
    text = "A good, if bad-tempered film."
    out = m.classify(text)
    ids = tok.encode([text])[0]
    assert len(calls) == 1 and calls[0]["token_ids"][0].tolist() == [
        tok.cls_id,
        *ids,
        tok.sep_id,
    ]
    probs = runtime.softmax(logits(calls[0])["logits"][0].astype(np.float64))
    before = {  # what classify returned before it read long texts in windows
        "label": "pos" if probs[1] > probs[0] else "neg",
        "scores": {"neg": float(probs[0]), "pos": float(probs[1])},
        "value": None,
        "truncated": False,
    }
    assert {k: out[k] for k in before} == before
    assert m.classify(text, long_texts="truncate") == out
    assert (out["windows"], out["wordpieces"], out["window_wordpieces"]) == (1, len(ids), 14)
    (window,) = out["window_results"]
    assert (window["start"], window["end"], window["char_start"], window["char_end"]) == (
        0,
        len(ids),
        0,
        len(text),
    )
    assert window["weight"] == 1.0 and window["scores"] == out["scores"]


def test_classify_a_long_text_in_windows(tok):
    """Windows of the text (`glue.text_windows`), their probabilities averaged by length."""
    from model.tasks import glue

    logits = cue_logits(tok)
    m = EdgeModel(stub(logits), tok, SST2_INFO)
    text = "The cast is good. " * 3 + "The plot is so bad. " * 4 + "An ending."
    ids = tok.encode([text])[0]
    out = m.classify(text)
    spans = glue.text_windows(ids, 14, None, glue.sentence_end_ids(tok))
    assert [(w["start"], w["end"]) for w in out["window_results"]] == spans
    assert out["windows"] == len(spans) > 2 and out["wordpieces"] == len(ids)
    assert not out["truncated"]
    # Every WordPiece is read; windows start and end at sentence ends here.
    assert set().union(*(range(s, e) for s, e in spans)) == set(range(len(ids)))
    for w in out["window_results"]:
        assert text[w["char_start"] : w["char_end"]].split()[0] in ("The", "An")
        assert text[w["char_start"] : w["char_end"]].endswith(".")
    # The combination, computed directly from each window's own input.
    probs, weights = [], []
    for start, end in spans:
        row = np.array([[tok.cls_id, *ids[start:end], tok.sep_id]], np.int32)
        x = {"token_ids": row, "padding_mask": np.ones_like(row)}
        probs.append(runtime.softmax(logits(x)["logits"][0].astype(np.float64)))
        weights.append(end - start)
    expected = np.average(probs, axis=0, weights=weights)
    assert out["scores"] == pytest.approx({"neg": expected[0], "pos": expected[1]}, rel=1e-9)
    assert out["label"] == "neg" and sum(w["weight"] for w in out["window_results"]) == 1.0
    assert [w["label"] for w in out["window_results"]][0] == "pos"  # the good part
    cut = m.classify(text, long_texts="truncate")
    assert cut["truncated"] and cut["label"] == "pos"  # the beginning alone
    # A regression: the weighted mean of the windows' values.
    value = EdgeModel(
        stub(lambda x: logits(x)["logits"][:, 1:]),
        tok,
        {"task": "classifier", "max_seq_length": 16},
    ).classify(text)
    assert value["label"] is None and value["windows"] == len(spans)
    assert value["value"] == pytest.approx(
        np.average([w["value"] for w in value["window_results"]], weights=weights)
    )


def test_fill_mask(tok):
    calls = []

    def topk(x):
        positions = x["mask_positions"]
        calls.append(positions.shape)
        # The model sees [MASK] at every position it is asked about.
        assert (np.take_along_axis(x["token_ids"], positions, 1) == tok.mask_id).all()
        answers = ids_of(tok, "paris", "[UNK]", "he", ".", "##s")
        k = len(answers)
        ids = np.tile(np.array(answers, np.int32), (1, positions.shape[1], 1))
        return {
            "topk_ids": ids,
            "topk_probs": np.tile(np.linspace(0.5, 0.1, k), (1, positions.shape[1], 1)),
            "nsp_probs": np.array([[0.9, 0.1]], np.float32),
        }

    m = EdgeModel(stub(topk), tok, {"task": "pretraining", "max_seq_length": 32, "top_k": 5})
    out = m.fill_mask("The capital of France is [MASK], said [mask].", top_k=3)
    assert out["tokens"] == [
        "[CLS]",
        "the",
        "capital",
        "of",
        "france",
        "is",
        "[MASK]",
        ",",
        "said",
        "[MASK]",
        ".",
        "[SEP]",
    ]
    assert [mask["position"] for mask in out["masks"]] == [6, 9]
    assert [p["token"] for p in out["masks"][0]["predictions"]] == ["paris", "[UNK]", "he"]
    assert out["masks"][0]["predictions"][0] == {"token": "paris", "token_id": 3000, "score": 0.5}
    assert out["filled"] == "The capital of France is paris, said paris."
    assert [mask["best"] for mask in out["masks"]] == [0, 0]
    assert not out["truncated"] and calls == [(1, 2)]
    # Without top_k: 5, or fewer where the bundle keeps fewer (a --top-k 3 bundle's view and
    # command line failed when 5 became an error above the bundle's).
    assert len(m.fill_mask("a [MASK]")["masks"][0]["predictions"]) == 5
    m.info["top_k"] = 3
    assert len(m.fill_mask("a [MASK]")["masks"][0]["predictions"]) == 3
    m.info["top_k"] = 5
    # A bundle with one mask position a call asks once per [MASK].
    calls.clear()
    m.info["inputs"] = {"mask_positions": [-1, 1]}
    assert len(m.fill_mask("[MASK] and [MASK] and [MASK]", top_k=5)["masks"][2]["predictions"]) == 5
    assert calls == [(1, 1)] * 3
    # A long text keeps a window around the masks.
    out = m.fill_mask("word " * 100 + "[MASK] end")
    assert out["truncated"] and len(out["tokens"]) == 32 and out["tokens"].count("[MASK]") == 1
    assert out["filled"].endswith(" paris end")


def test_fill_mask_fills_the_likeliest_word_and_says_which(tok):
    """[UNK] first, then "##s": a [MASK] that starts a word gets the likeliest whole word
    ("paris"), one glued to a word's start its likeliest piece; `best` says which (the app
    labels that one)."""

    def topk(x):
        ids = np.array([[ids_of(tok, "[UNK]", "##s", "paris")]], np.int32)
        return {"topk_ids": ids, "topk_probs": np.array([[[0.6, 0.3, 0.1]]], np.float32)}

    m = EdgeModel(stub(topk), tok, {"task": "pretraining", "max_seq_length": 32, "top_k": 3})
    out = m.fill_mask("It [MASK].", top_k=3)
    assert out["masks"][0]["best"] == 2 and out["filled"] == "It paris."
    glued = m.fill_mask("Cat[MASK] sat.", top_k=3)
    assert glued["masks"][0]["best"] == 1 and glued["filled"] == "Cats sat."
    assert [mask["fill"] for mask in glued["masks"]] == ["s"]
    # A CJK character is a word of its own, written without spaces.
    cjk = np.array([[ids_of(tok, "[UNK]", "##s", "王")]], np.int32)
    m_cjk = EdgeModel(
        stub(lambda x: {"topk_ids": cjk, "topk_probs": np.array([[[0.6, 0.3, 0.1]]])}),
        tok,
        {"task": "pretraining", "max_seq_length": 32, "top_k": 3},
    )
    after_cjk = m_cjk.fill_mask("首[MASK]。", top_k=3)
    assert after_cjk["masks"][0]["best"] == 2 and after_cjk["filled"] == "首王。"
    assert m_cjk.fill_mask("play[MASK]", top_k=3)["filled"] == "plays"
    # Nor after kana or Thai (no spaces between words: "東京は の" before), which a "##" piece
    # may still continue (the tokenizer splits off CJK ideographs alone); Hangul has spaces.
    from export.written_words import best_word, glued, written

    for before, word, filled in (
        ("東京は", "の", "東京はの"),
        ("ภาษา", "ไทย", "ภาษาไทย"),
        ("ภาษา", "##ไทย", "ภาษาไทย"),
        ("カタカナ", "語", "カタカナ語"),
        ("한국", "어", "한국 어"),
        ("play", "on", "play on"),
    ):
        assert before + written(word, glued(before, 0), before) == filled, before
    thai = [{"token": "##ไทย", "token_id": 7}, {"token": "ไทย", "token_id": 8}]
    assert best_word(thai, set(), starts_word=not glued("ภาษา", 0)) == 0
    # A whole word glued to another [MASK] or a word is written after a space ("nextof" before).
    words = np.array([ids_of(tok, "[UNK]", "paris", ".")], np.int32)

    def whole_words(x):
        n = x["mask_positions"].shape[1]
        return {"topk_ids": np.stack([words] * n, 1), "topk_probs": np.full((1, n, 3), 0.3)}

    m = EdgeModel(
        stub(whole_words),
        tok,
        {"task": "pretraining", "max_seq_length": 32, "top_k": 3},
    )
    twice = m.fill_mask("The [MASK][MASK] went to[MASK]", top_k=3)
    assert [mask["fill"] for mask in twice["masks"]] == ["paris", " paris", " paris"]
    assert twice["filled"] == "The paris paris went to paris"
    from app.predict import filled_spans

    assert filled_spans("It [MASK].", out["masks"])[1] == ("paris", "[MASK] 1, 10% sure")


def test_fill_mask_errors(tok, tmp_path):
    m = EdgeModel(stub(lambda x: None), tok, {"task": "pretraining", "max_seq_length": 32})
    for text, message in (
        ("No mask here.", "no \\[MASK\\] in the text"),
        ("  ", "text is empty"),
        (None, "must be a string"),
    ):
        with pytest.raises(ValueError, match=message):
            m.fill_mask(text)
    with pytest.raises(ValueError, match="top_k must be a positive"):
        m.fill_mask("a [MASK]", top_k=0)
    kept = EdgeModel(
        stub(lambda x: None), tok, {"task": "pretraining", "max_seq_length": 32, "top_k": 5}
    )
    with pytest.raises(ValueError, match="top_k 6: this bundle keeps the 5 likeliest WordPieces"):
        kept.fill_mask("a [MASK]", top_k=6)  # it answered with 5, silently
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\na\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no \\[MASK\\] token"):
        EdgeModel(None, WordPieceTokenizer(str(path)), m.info).fill_mask("a [MASK]")
    # A model whose vocabulary is bigger than the bundle's vocab.txt (a bare IndexError before).
    beyond = len(tok.vocabulary)

    def too_far(x):
        shape = (*x["mask_positions"].shape, 2)
        return {"topk_ids": np.full(shape, beyond, np.int32), "topk_probs": np.ones(shape) / 2}

    past = EdgeModel(stub(too_far), tok, {"task": "pretraining", "max_seq_length": 32})
    with pytest.raises(ValueError, match=f"predicts WordPiece id {beyond}, beyond the {beyond}"):
        past.fill_mask("a [MASK]")


def span_logits(tok, start_word: str, end_word: str, null: float = -10.0):
    """A QA stub: start at the token `start_word`, end at `end_word`, [CLS] at `null`."""
    start_id, end_id = tok.token_to_id[start_word], tok.token_to_id[end_word]

    def predict(x):
        ids = x["token_ids"]
        context = x["segment_ids"] == 1
        start = np.where((ids == start_id) & context, 5.0, -5.0)
        end = np.where((ids == end_id) & context, 5.0, -5.0)
        start[:, 0] = end[:, 0] = null / 2
        return {"start_logits": start, "end_logits": end}

    return stub(predict)


def test_answer_maps_back_to_the_contexts_characters(tok):
    context = "The Café  Zürich opened\tin 1895 (or so). Its owner, Ève, was 30."
    m = EdgeModel(
        span_logits(tok, "zurich", "1895"),
        tok,
        {"task": "question_answerer", "max_seq_length": SEQ_LEN},
    )
    out = m.answer("When did it open?", context)
    assert out["text"] == "Zürich opened\tin 1895" == context[out["start"] : out["end"]]
    assert out["score"] == pytest.approx(10.0)
    assert not out["no_answer"] and out["null_score"] is None and out["windows"] == 1
    assert out["nbest"][0] == {
        "text": out["text"],
        "start": out["start"],
        "end": out["end"],
        "score": out["score"],
        "probability": out["nbest"][0]["probability"],
        "span_probability": out["span_probability"],
    }
    assert 0.5 < out["nbest"][0]["probability"] <= 1.0
    # Inside a word: the answer is only that word's part ("1895" of "(1895-1943)").
    m = EdgeModel(
        span_logits(tok, "1895", "1895"),
        tok,
        {"task": "question_answerer", "max_seq_length": SEQ_LEN},
    )
    out = m.answer("When?", "Born (1895-1943) in Ève.")
    assert (out["text"], out["start"], out["end"]) == ("1895", 6, 10)


def test_answer_in_a_later_window_of_a_long_context(tok):
    filler = "The cat sat on the mat and looked at the garden. " * 30
    context = filler + "The treasure lies under the old oak tree. " + filler
    m = EdgeModel(
        span_logits(tok, "oak", "tree"),
        tok,
        {"task": "question_answerer", "max_seq_length": SEQ_LEN},
    )
    out = m.answer("Where is the treasure? " * 20, context, n_best=3)
    assert out["windows"] > 10 and out["truncated"]  # the question was cut to its first tokens
    assert out["text"] == "oak tree" == context[out["start"] : out["end"]]
    assert out["start"] == context.index("oak tree")
    assert len(out["nbest"]) <= 3


def test_answer_null_for_squad2_bundles(tok):
    info = {
        "task": "question_answerer",
        "max_seq_length": SEQ_LEN,
        "finetuned_task": "squad2",
        "null_threshold": 0.0,
    }
    context = "The cat sat on the mat."
    out = EdgeModel(span_logits(tok, "mat", "mat", null=20.0), tok, info).answer("Where?", context)
    assert out["no_answer"] and (out["text"], out["start"], out["end"]) == ("", -1, -1)
    assert out["null_score"] == pytest.approx(20.0) == out["score"]
    assert any(e["text"] == "mat" for e in out["nbest"])
    out = EdgeModel(
        span_logits(tok, "mat", "mat", null=20.0), tok, dict(info, null_threshold=15.0)
    ).answer("Where?", context)
    assert not out["no_answer"] and out["text"] == "mat" and out["start"] == 19
    assert out["null_score"] == pytest.approx(20.0)
    out = EdgeModel(span_logits(tok, "mat", "mat", null=-20.0), tok, info).answer("Where?", context)
    assert out["text"] == "mat" and not out["no_answer"]


def test_answer_probabilities_are_the_models_own_and_ignore_the_n_best_size(tok):
    """span_probability = P(start) x P(end) under the softmaxes over the window's real
    tokens, the same for any n_best (the n-best "probability" is not); the null answer's
    from [CLS]."""
    info = {"task": "question_answerer", "max_seq_length": SEQ_LEN, "finetuned_task": "squad2"}
    context = "The cat sat on the mat."
    m = EdgeModel(span_logits(tok, "mat", "mat", null=4.0), tok, info)
    many, one = m.answer("Where?", context, n_best=20), m.answer("Where?", context, n_best=1)
    n = len(tok.encode(["Where?"])[0]) + len(tok.encode([context])[0]) + 3  # [CLS] q [SEP] c [SEP]
    # One context token at 5, [CLS] at 2, the other n - 2 tokens at -5 (start and end alike).
    log_z = np.log(np.exp(5.0) + np.exp(2.0) + (n - 2) * np.exp(-5.0))
    assert many["span_probability"] == pytest.approx(np.exp(10.0 - 2 * log_z))
    assert many["null_probability"] == pytest.approx(np.exp(4.0 - 2 * log_z))
    assert (one["span_probability"], one["null_probability"]) == pytest.approx(
        (many["span_probability"], many["null_probability"])
    )
    assert one["nbest"][0]["probability"] != pytest.approx(many["nbest"][0]["probability"])
    assert len(many["nbest"]) > 2 and all(
        0 < e["span_probability"] < many["span_probability"] for e in many["nbest"][2:]
    )


def test_answer_without_any_valid_span(tok):
    """Every candidate start in the question: no span (google's "empty"), so no answer."""
    m = EdgeModel(
        span_logits(tok, "mat", "mat"),
        tok,
        {"task": "question_answerer", "max_seq_length": SEQ_LEN},
    )

    def in_question(x):
        start = np.where(x["segment_ids"] == 0, 5.0, -5.0)
        return {"start_logits": start, "end_logits": start}

    m.predict = stub(in_question)
    out = m.answer("Where?", "The cat sat on the mat.", n_best=1)
    assert out["no_answer"] and (out["text"], out["start"], out["end"]) == ("", -1, -1)
    assert out["null_score"] is None and [e["start"] for e in out["nbest"]] == [-1]


def test_answer_errors(tok):
    m = EdgeModel(
        span_logits(tok, "mat", "mat"),
        tok,
        {"task": "question_answerer", "max_seq_length": SEQ_LEN},
    )
    with pytest.raises(ValueError, match="the question is empty"):
        m.answer(" ", "The cat.")
    with pytest.raises(ValueError, match="the context is empty"):
        m.answer("Who?", "")
    with pytest.raises(ValueError, match="context has no words"):
        m.answer("Who?", "\u200b\x07")
    with pytest.raises(ValueError, match="n_best"):
        m.answer("Who?", "The cat.", n_best=0)
    with pytest.raises(
        ValueError,
        match="this is a question_answerer bundle; tag\\(\\) needs a token_classifier bundle",
    ):
        m.tag("The cat.")


def test_qa_windows_equal_squads_encoder(tok):
    """The runtime's windows (squad_windows.encode_squad with the pure-Python
    tokenizer) equal those made with the TensorFlow tokenizer."""
    from model.text.tokenizer import WordPieceTokenizer as TfTokenizer

    context = ("Zürich's Café (1895-1943) served crêpes\u00a0and tea. " * 12).strip()
    example = squad_examples.SquadExample(
        "q", "Which café served crêpes?", squad_examples.Paragraph(context), []
    )
    m = EdgeModel(None, tok, {"task": "question_answerer", "max_seq_length": SEQ_LEN})
    x, windows, _ = m._qa_features(example)
    question = len(tok.encode([example.question])[0])
    assert m.qa_stride(question) == (SEQ_LEN - question - 3) // 2
    expected = squad_windows.encode_squad(
        [example], TfTokenizer(VOCAB), SEQ_LEN, m.qa_stride(question), m.max_query_length
    )
    assert len(windows.example_index) > 3
    for name in x:
        np.testing.assert_array_equal(x[name], expected.x[name], err_msg=name)
    np.testing.assert_array_equal(windows.token_to_word, expected.meta.token_to_word)
    np.testing.assert_array_equal(windows.max_context, expected.meta.max_context)


def tag_logits(tok, tags: dict[str, str]):
    """A NER stub: each word's tag at its first piece's id ("O" for other ids)."""
    table = np.zeros((tok.vocabulary_size, len(CONLL)))
    table[:, 0] = 5.0
    for word, tag in tags.items():
        first = tok.encode([word])[0][0]
        table[first] = 0.0
        table[first, CONLL.index(tag)] = 5.0
    return stub(lambda x: table[x["token_ids"]])


def test_tag_words_and_entities_with_character_spans(tok):
    m = EdgeModel(
        tag_logits(
            tok,
            {
                "angela": "B-PER",
                "merkel": "I-PER",
                "paris": "B-LOC",
                "u": "B-LOC",
                "reuters": "B-ORG",
            },
        ),
        tok,
        {"task": "token_classifier", "max_seq_length": SEQ_LEN, "id2label": dict(enumerate(CONLL))},
    )
    text = "(Reuters)  Angela\u00a0Merkel visited Paris and the U.S., Germany's ally."
    out = m.tag(text)
    assert [w["word"] for w in out["words"]] == [
        "(",
        "Reuters",
        ")",
        "Angela",
        "Merkel",
        "visited",
        "Paris",
        "and",
        "the",
        "U.S.",
        ",",
        "Germany",
        "'s",
        "ally",
        ".",
    ]
    assert all(text[w["start"] : w["end"]] == w["word"] for w in out["words"])
    assert [w["tag"] for w in out["words"]][:7] == [
        "O",
        "B-ORG",
        "O",
        "B-PER",
        "I-PER",
        "O",
        "B-LOC",
    ]
    assert [(e["type"], e["text"]) for e in out["entities"]] == [
        ("ORG", "Reuters"),
        ("PER", "Angela\u00a0Merkel"),
        ("LOC", "Paris"),
        ("LOC", "U.S."),
    ]
    assert all(text[e["start"] : e["end"]] == e["text"] for e in out["entities"])
    assert all(0.9 < e["score"] <= 1 for e in out["entities"]) and not out["truncated"]


def test_tag_a_text_longer_than_the_model(tok):
    m = EdgeModel(
        tag_logits(tok, {"paris": "B-LOC"}),
        tok,
        {"task": "token_classifier", "max_seq_length": 16, "finetuned_task": "conll2003"},
    )
    out = m.tag("We saw Paris. " * 40)
    assert len(out["words"]) == 160
    assert [e["start"] for e in out["entities"]] == [7 + 14 * i for i in range(40)]


def test_tag_words_follow_conll(tok):
    m = EdgeModel(None, tok, {"task": "token_classifier", "max_seq_length": 16})
    for text, words in [
        ('"Hello," she said...', ['"', "Hello", ",", '"', "she", "said", ".", ".", "."]),
        ("a.m. 1996-08-22 don't e-mail", ["a.m.", "1996-08-22", "don't", "e-mail"]),
        ("John’s (U.K.) ...", ["John", "’s", "(", "U.K.", ")", ".", ".", "."]),
        ("東京 is big", ["東京", "is", "big"]),
        ("x\u200by s", ["x\u200by", "s"]),
        ("Paris,London;Rome", ["Paris", ",", "London", ";", "Rome"]),
        (
            "1,000 12,900-13,100 U.S., Bonn(Germany)",
            ["1,000", "12,900-13,100", "U.S.", ",", "Bonn", "(", "Germany", ")"],
        ),
        ("a,1 1,a", ["a", ",", "1", "1", ",", "a"]),
    ]:
        assert [text[s:e] for s, e in m.tag_words(text)] == words, text


def test_wrong_task_and_empty_text(tok):
    m = EdgeModel(None, tok, {"task": "classifier", "max_seq_length": 16})
    for call, method, needs in (
        (lambda: m.fill_mask("a [MASK]"), "fill_mask", "a pretraining"),
        (lambda: m.answer("q", "c"), "answer", "a question_answerer"),
        (lambda: m.attention("a"), "attention", "an encoder"),
        (lambda: m.features("a"), "features", "an encoder"),
    ):
        with pytest.raises(
            ValueError, match=f"this is a classifier bundle; {method}\\(\\) needs {needs}"
        ):
            call()
    with pytest.raises(ValueError, match="the text is empty"):
        m.classify("\n\t")
    with pytest.raises(ValueError, match="no words the model can read"):
        m.classify("\u200b")
    with pytest.raises(ValueError, match="lacks 'max_seq_length'"):
        EdgeModel(None, tok, {"task": "classifier"})


# === Tiny Keras models (the app's --backend keras) ===


def keras_predict(model):
    """Calls a Keras model eagerly; outputs as numpy (a dict, or the array)."""

    def predict(x):
        out = model({k: np.asarray(v) for k, v in x.items()}, training=False)
        if isinstance(out, dict):
            return {k: np.asarray(v) for k, v in out.items()}
        return np.asarray(out)

    return predict


def test_the_generator_draws_words_in_the_app_and_in_evaluation_alike(tok):
    """A generator sure of [MASK] and [UNK]: neither the app's corruption nor the evaluation's
    (export.examples) writes one into the text; before, the evaluation drew from all tokens."""
    from export import examples

    specials = tok.special_ids()
    logits = np.zeros(len(tok.vocabulary), np.float32)
    logits[specials] = 12.0  # ~0.8 of the mass on five special tokens

    def generator(x):
        return {"mlm": np.broadcast_to(logits, (*x["mask_positions"].shape, len(logits)))}

    rng = np.random.default_rng(0)
    drawn = runtime.draw_words(runtime.softmax(np.stack([logits] * 200)), specials, rng)
    assert not np.isin(drawn, specials).any() and len(set(drawn.tolist())) > 100
    rows = examples.replaced_tokens(tok, 32, None, None, generator)
    written = rows.corrupted.x["token_ids"][rows.labels > 0]
    assert written.size > 0 and not np.isin(written, specials).any()


@pytest.fixture(scope="session")
def keras_models():
    """Tiny random models over the BERT vocabulary, one per bundle task."""
    import keras

    from model.heads.classifier import BertClassifier
    from model.heads.pretrainer import BertPretrainer
    from model.heads.question_answerer import BertQuestionAnswerer
    from model.heads.token_classifier import BertTokenClassifier
    from model.networks.encoder import BertEncoder

    keras.utils.set_random_seed(0)
    encoder = BertEncoder.from_preset("tiny", vocabulary_size=30522)
    id2label = {"0": "negative", "1": "positive"}
    return {
        "encoder": (encoder, {}),
        "pretraining": (BertPretrainer(encoder), {"top_k": 5}),
        "classifier": (
            BertClassifier(encoder, num_labels=2, id2label=id2label),
            {"id2label": id2label},
        ),
        "token_classifier": (
            BertTokenClassifier(encoder, num_labels=len(CONLL), id2label=dict(enumerate(CONLL))),
            {"id2label": {str(i): t for i, t in enumerate(CONLL)}},
        ),
        "question_answerer": (BertQuestionAnswerer(encoder), {}),
    }


def keras_edge_model(keras_models, tok, task) -> EdgeModel:
    model, extra = keras_models[task]
    if task == "encoder":
        model = model.with_attention()
    return EdgeModel(keras_predict(model), tok, {"task": task, "max_seq_length": SEQ_LEN, **extra})


# Each method's call on the tiny models (Keras and bundles alike).
CALLS = {
    "pretraining": ("fill_mask", ("Paris is the [MASK] of France, [MASK] said.",)),
    "classifier": ("classify", ("A gorgeous, witty film.", "It was fine.")),
    "token_classifier": ("tag", ("Angela Merkel visited Paris on Monday.",)),
    "question_answerer": (
        "answer",
        ("Where did the cat sit?", "The cat sat on the mat. " * 12 + "The dog ran."),
    ),
    "encoder": ("attention", ("The cat sat.", "On the mat.")),
}


def test_every_method_on_tiny_keras_models(keras_models, tok):
    results = {
        task: getattr(keras_edge_model(keras_models, tok, task), method)(*args)
        for task, (method, args) in CALLS.items()
    }
    check_contract(results)
    m = keras_edge_model(keras_models, tok, "encoder")
    features = m.features("The cat sat on the mat.")
    assert features["sequence_output"].shape == (9, 32) and features["pooled_output"].shape == (32,)
    assert features["tokens"][0] == "[CLS]" and features["tokens"][-1] == "[SEP]"
    long = m.attention("word " * 100)
    assert long["truncated"] and long["attention"].shape == (2, 2, SEQ_LEN, SEQ_LEN)


def check_contract(results: dict) -> None:
    """The types and shapes export/README.md promises, for `CALLS`' results."""
    fill = results["pretraining"]
    assert [m["position"] for m in fill["masks"]] == [4, 8]
    assert [fill["tokens"][m["position"]] for m in fill["masks"]] == ["[MASK]", "[MASK]"]
    assert all(
        len(m["predictions"]) == 5 and set(m["predictions"][0]) == {"token", "token_id", "score"}
        for m in fill["masks"]
    )
    assert "[MASK]" not in fill["filled"] and fill["filled"].startswith("Paris is the ")
    label = results["classifier"]
    assert label["label"] in ("negative", "positive") and set(label["scores"]) == {
        "negative",
        "positive",
    }
    tags = results["token_classifier"]
    assert [w["word"] for w in tags["words"]] == [
        "Angela",
        "Merkel",
        "visited",
        "Paris",
        "on",
        "Monday",
        ".",
    ]
    assert all(w["tag"] in CONLL and 0 < w["score"] <= 1 for w in tags["words"])
    assert all(e["type"] in ("PER", "ORG", "LOC", "MISC") for e in tags["entities"])
    answer = results["question_answerer"]
    context = CALLS["question_answerer"][1][1]
    assert answer["windows"] >= 2 and answer["text"] == context[answer["start"] : answer["end"]]
    assert set(answer["nbest"][0]) == {
        "text", "start", "end", "score", "probability", "span_probability"
    }  # fmt: skip
    attention = results["encoder"]
    assert attention["tokens"] == [
        "[CLS]",
        "the",
        "cat",
        "sat",
        ".",
        "[SEP]",
        "on",
        "the",
        "mat",
        ".",
        "[SEP]",
    ]
    assert attention["segment_ids"] == [0] * 6 + [1] * 5
    assert attention["attention"].shape == (2, 2, 11, 11)
    assert attention["attention"].dtype == np.float32
    np.testing.assert_allclose(attention["attention"].sum(-1), 1.0, atol=1e-4)


def test_raw_masked_lm_logits(keras_models, tok):
    """A Keras pre-trainer's own `mlm` logits are turned into top-k words too."""
    logits = np.full((1, 1, tok.vocabulary_size), -10.0, np.float32)
    logits[..., tok.token_to_id["paris"]] = 10.0
    m = EdgeModel(
        stub(lambda x: {"mlm": np.repeat(logits, x["mask_positions"].shape[1], 1)}),
        tok,
        {"task": "pretraining", "max_seq_length": 16},
    )
    out = m.fill_mask("The [MASK] of it.", top_k=2)
    assert out["filled"] == "The paris of it."
    assert out["masks"][0]["predictions"][0]["score"] > 0.9


# === Tiny bundles: runtime.load ===


@pytest.fixture(scope="session")
def bundles(tmp_path_factory, keras_models):
    """{"dirs": {task: bundle directory}, "models": keras_models}: the tiny
    Keras models exported as `python -m export` does."""
    from export.__main__ import export_bundle
    from model.text.tokenizer import WordPieceTokenizer as TfTokenizer

    models = keras_models
    root = tmp_path_factory.mktemp("bundles")
    model_dir = root / "model"
    model_dir.mkdir()
    (model_dir / "vocab.txt").write_bytes(open(VOCAB, "rb").read())
    tokenizer = TfTokenizer(VOCAB)
    out = {}
    for task, (model, extra) in models.items():
        encoder = model if task == "encoder" else model.encoder
        info = {
            "task": task,
            "encoder": encoder.config.to_dict(),
            "max_seq_length": SEQ_LEN,
            **{k: v for k, v in extra.items() if k != "top_k"},
        }
        if task == "pretraining":
            info["next_sentence"] = True
        export_bundle(
            str(model_dir),
            str(root / task),
            "float32",
            verify_examples=4,
            seq_len=SEQ_LEN,
            loaded=(model, info, tokenizer),
            log=lambda message: None,
        )
        out[task] = str(root / task)
    return {"dirs": out, "models": models}


@pytest.mark.slow
def test_load_bundles_answers_as_keras(bundles, tok):
    results = {}
    for task, (method, args) in CALLS.items():
        m = runtime.load(bundles["dirs"][task])
        assert m.task == task and m.max_seq_length == SEQ_LEN and m.info["format"] == 1
        keras_m = keras_edge_model(bundles["models"], tok, task)
        got, expected = getattr(m, method)(*args), getattr(keras_m, method)(*args)
        results[task] = got
        assert_same(task, got, expected)
    check_contract(results)
    m = runtime.load(bundles["dirs"]["classifier"])
    assert m.labels == ["negative", "positive"] and "classifier" in repr(m)
    features = runtime.load(bundles["dirs"]["encoder"]).features("The cat sat.")
    assert features["sequence_output"].shape == (6, 32)


def assert_same(task: str, got: dict, expected: dict) -> None:
    """The bundle's answer is the Keras model's, to float32 rounding."""
    if task == "pretraining":
        assert [m["position"] for m in got["masks"]] == [m["position"] for m in expected["masks"]]
        for a, b in zip(got["masks"], expected["masks"]):
            scores = [p["score"] for p in b["predictions"]]
            np.testing.assert_allclose([p["score"] for p in a["predictions"]], scores, rtol=1e-3)
            # The same words, but for near-ties of a random model's flat predictions.
            for p, q, score in zip(a["predictions"], b["predictions"], scores):
                assert p["token_id"] == q["token_id"] or abs(p["score"] - score) < 1e-3 * score
    elif task == "classifier":
        assert got["label"] == expected["label"]
        for name in got["scores"]:
            assert got["scores"][name] == pytest.approx(expected["scores"][name], abs=1e-4)
    elif task == "token_classifier":
        assert [w["tag"] for w in got["words"]] == [w["tag"] for w in expected["words"]]
        assert [w["score"] for w in got["words"]] == pytest.approx(
            [w["score"] for w in expected["words"]], abs=1e-4
        )
        assert [(e["type"], e["start"], e["end"]) for e in got["entities"]] == [
            (e["type"], e["start"], e["end"]) for e in expected["entities"]
        ]
    elif task == "question_answerer":
        assert (got["text"], got["start"], got["end"]) == (
            expected["text"],
            expected["start"],
            expected["end"],
        )
        assert got["score"] == pytest.approx(expected["score"], abs=1e-3)
    elif task == "encoder":
        np.testing.assert_allclose(got["attention"], expected["attention"], atol=1e-4)


@pytest.mark.slow
def test_bundles_read_long_texts_in_windows_as_keras(bundles, tok):
    text = "A gorgeous, witty film. " * 12 + "The ending is a dull, lifeless mess. " * 6
    got = runtime.load(bundles["dirs"]["classifier"]).classify(text)
    expected = keras_edge_model(bundles["models"], tok, "classifier").classify(text)
    assert got["windows"] == expected["windows"] > 2 and not got["truncated"]
    assert [(w["start"], w["end"]) for w in got["window_results"]] == [
        (w["start"], w["end"]) for w in expected["window_results"]
    ]
    assert_same("classifier", got, expected)


def test_a_loaded_bundle_answers_without_litert_s_info_line(capfd):
    """LiteRT's C++ wrote "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." to the
    stderr of every command and app start that ran a bundle; a real error still shows."""
    shipped = os.path.join(ROOT, "assets", "models", "sst2")
    assert runtime.load(shipped).classify("A fine film.")["label"] == "positive"
    assert runtime.main([shipped, "classify", "A dull film."]) == 0
    out, err = capfd.readouterr()
    assert '"label": "negative"' in out and err == ""
    from model.io.native_logs import quiet_litert

    quiet_litert(lambda: os.write(2, b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n"))
    quiet_litert(lambda: os.write(2, b"ERROR: a real one\n"))
    assert capfd.readouterr().err == "ERROR: a real one\n"


@pytest.mark.slow
def test_command_line(bundles, capsys):
    assert runtime.main([bundles["dirs"]["classifier"], "classify", "A fine film."]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["label"] in ("negative", "positive")
    assert runtime.main([bundles["dirs"]["classifier"], "answer", "Who?", "Me."]) == 1
    assert "needs a question_answerer bundle" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        runtime.main([bundles["dirs"]["encoder"], "nonsense", "x"])
    assert stop.value.code == 2


@pytest.mark.slow
def test_command_line_runs_every_line_of_a_file(bundles, tmp_path, capsys, monkeypatch):
    """--lines: one JSON line out per line in, in order, each as the single call answers; a
    line that fails says so in its place and the exit status is 1."""
    import io

    classifier, qa = bundles["dirs"]["classifier"], bundles["dirs"]["question_answerer"]
    texts = ["A fine film.", "A dull mess, from start to end.", "Good.\tBad."]
    (tmp_path / "texts.txt").write_bytes(("\ufeff" + "\n".join(texts) + "\n").encode())
    assert runtime.main([classifier, "--lines", str(tmp_path / "texts.txt"), "classify"]) == 0
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    model = runtime.load(classifier)
    expected = [model.classify(*t.split("\t")) for t in texts]
    assert len(got) == 3 and [g["scores"] for g in got] == [e["scores"] for e in expected]
    # Standard input; a bad line in its place (its number in the message), the rest answered.
    lines = "Who wrote it?\tShakespeare wrote it.\t2\nOnly a question\n\tno question\n"
    lines += "Who?\tMe.\tmany\n" + "Who?\tMe.\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines.encode())))
    assert runtime.main([qa, "--lines", "-", "answer"]) == 1
    captured = capsys.readouterr()
    got = [json.loads(line) for line in captured.out.splitlines()]
    assert len(got) == 5 and len(got[0]["nbest"]) <= 2 and "text" in got[4]
    assert got[1] == {
        "line": 2,
        "error": "no CONTEXT: the line needs QUESTION<tab>CONTEXT[<tab>N_BEST]",
    }
    assert got[2]["line"] == 3 and "question is empty" in got[2]["error"]
    assert got[3] == {"line": 4, "error": "N_BEST must be int, not 'many'"}
    assert "3 of 5 lines of standard input failed: 2, 3, 4" in captured.err
    # Not UTF-8: that line; a bundle of another task: once, before the file is read.
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 noir\nA fine film.\n".encode("latin-1"))
    assert runtime.main([classifier, "--lines", str(tmp_path / "latin1.txt"), "classify"]) == 1
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "utf-8" in got[0]["error"] and "label" in got[1]
    assert runtime.main([classifier, "--lines", str(tmp_path / "texts.txt"), "answer"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "needs a question_answerer bundle" in captured.err


def test_lines_keep_their_places_whatever_a_line_raises(capsys):
    """Every line gets its output line: an answer, or the error it raised (a ValueError's
    message, anything else with its type); Windows line ends; an empty optional field followed
    by a given one is refused, not read as absent."""
    import io

    def corrupt(text, rate=None, seed=None):
        if text == "boom":
            raise RuntimeError("the interpreter failed")
        return {"text": text, "rate": rate, "seed": seed}

    rows = io.BytesIO(b"a cat\t0.3\t7\r\nboom\r\nb\t\t7\r\nc\t\t\r\n")
    assert (
        runtime_command.run_lines(corrupt, runtime_command.COMMAND_LINE["corrupt"], rows, "F") == 1
    )
    captured = capsys.readouterr()
    got = [json.loads(line) for line in captured.out.splitlines()]
    assert got[0] == {"text": "a cat", "rate": 0.3, "seed": 7}
    assert got[1] == {"line": 2, "error": "RuntimeError: the interpreter failed"}
    assert got[2]["line"] == 3 and "RATE is empty but a field after it is not" in got[2]["error"]
    assert got[3] == {"text": "c", "rate": None, "seed": None}
    assert "2 of 4 lines of F failed: 2, 3" in captured.err
    # UTF-16 (here without a byte-order mark) is refused whole: no line of it would read
    rows = io.BytesIO("a cat\t0.3\nb\n".encode("utf-16-le"))
    assert (
        runtime_command.run_lines(corrupt, runtime_command.COMMAND_LINE["corrupt"], rows, "F") == 1
    )
    captured = capsys.readouterr()
    assert captured.out == "" and "F: UTF-16 text (little-endian" in captured.err
    rows = io.BytesIO("\na cat\n".encode("utf-16-le"))  # a first line too short to tell by
    assert (
        runtime_command.run_lines(corrupt, runtime_command.COMMAND_LINE["corrupt"], rows, "F") == 1
    )
    assert "F: UTF-16 text (little-endian" in capsys.readouterr().err


def test_command_line_arguments_are_checked_before_the_bundle_loads(capsys):
    """Each method's arguments by name, numbers read as numbers; a missing or extra argument
    or a flag is a usage error (a traceback, or a flag read as a second text, before)."""
    assert set(runtime_command.COMMAND_LINE) == set(runtime.TASK_METHODS)
    for argv, message in (
        (["B", "answer", "Who?"], "the following arguments are required: CONTEXT"),
        (["B", "classify", "text", "--long-texts", "truncate"], "unrecognized arguments"),
        (["B", "classify", "a", "b", "c"], "unrecognized arguments: c"),
        (["B", "corrupt", "text", "lots"], "argument RATE: invalid float value: 'lots'"),
        (["B", "fill_mask", "a [MASK]", "2.5"], "argument TOP_K: invalid int value"),
        (["B", "nonsense", "x"], "invalid choice: 'nonsense'"),
        (["B", "--lines", "f.txt", "classify", "x"], "with --lines, classify's arguments are"),
    ):
        with pytest.raises(SystemExit) as stop:
            runtime.main(argv)
        assert stop.value.code == 2 and message in capsys.readouterr().err, argv
    with pytest.raises(SystemExit) as stop:
        runtime.main(["--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0 and "detect_replaced" in out and "[N_BEST]" in out
    with pytest.raises(SystemExit):
        runtime.main(["B", "answer", "--help"])  # the required arguments shown as required
    assert "QUESTION CONTEXT [N_BEST]" in capsys.readouterr().out
    assert "runtime.load(" not in out  # the Python example, printed as the usage before
    # A text after "--" may start with "-"; the bundle is read only then.
    assert runtime.main(["no-such-bundle", "classify", "--", "-great film"]) == 1
    assert "no-such-bundle" in capsys.readouterr().err


# === The edge environment: no TensorFlow, no Keras ===

LONG_REVIEW = "A gorgeous, witty film. " * 20 + "The ending is a dull mess. " * 10

EDGE_SCRIPT = r"""
import json, sys
import numpy as np
from export import runtime, runtime_command

dirs, calls = json.loads(sys.argv[1]), json.loads(sys.argv[2])
results = {}
for task, (method, args) in calls.items():
    result = getattr(runtime.load(dirs[task]), method)(*args)
    if task == "encoder":
        result["attention"] = result["attention"].tolist()
    results[task] = result
features = runtime.load(dirs["encoder"]).features("The cat sat.")
results["features"] = [list(features["sequence_output"].shape), list(features["pooled_output"].shape)]
long = runtime.load(dirs["classifier"]).classify(sys.argv[3])  # read in windows
results["classify_long"] = [long["windows"], long["label"]]
heavy = sorted(m for m in sys.modules if m.split(".")[0] in
               ("tensorflow", "keras", "tensorflow_text", "keras_hub", "tf_keras", "jax", "torch"))
results["heavy_modules"] = heavy
print(json.dumps(results))
"""


def _edge_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = ROOT
    return env


@pytest.fixture(scope="session")
def edge_python(tmp_path_factory):
    """The python of a venv with export/requirements-edge.txt only ($BERT_EDGE_VENV)."""
    return isolated_python(
        "BERT_EDGE_VENV",
        EDGE_REQUIREMENTS,
        tmp_path_factory,
        imports=("numpy", "ai_edge_litert.interpreter"),
        absent=("tensorflow", "keras"),
    )


@pytest.mark.slow
def test_runtime_runs_without_tensorflow(edge_python, bundles, tok):
    dirs = bundles["dirs"]
    result = subprocess.run(
        [edge_python, "-c", EDGE_SCRIPT, json.dumps(dirs), json.dumps(CALLS), LONG_REVIEW],
        capture_output=True,
        text=True,
        timeout=600,
        env=_edge_env(),
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "XNNPACK" not in result.stderr  # LiteRT's INFO line, kept off there too
    results = json.loads(result.stdout)
    assert results.pop("heavy_modules") == []
    assert results.pop("features") == [[6, 32], [32]]
    long = runtime.load(dirs["classifier"]).classify(LONG_REVIEW)
    assert results.pop("classify_long") == [long["windows"], long["label"]]
    assert long["windows"] > 2
    results["encoder"]["attention"] = np.asarray(results["encoder"]["attention"], np.float32)
    check_contract(results)
    for task, (method, args) in CALLS.items():  # the same answers as in this environment
        expected = getattr(runtime.load(dirs[task]), method)(*args)
        assert_same(task, results[task], expected)
