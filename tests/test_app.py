"""Tests of the Gradio app (`python -m app`): input checks and views without a server, then the
app served on a free loopback port and every named endpoint called through gradio_client.

    PYTHONPATH=. python -m pytest tests/test_app.py -q

`StandIn` is a model with the runtime API's methods (export/README.md) and made-up answers,
so the views' display logic is tested apart from any model. `tiny_models` makes real ones: the
five tasks on the `tiny` preset (random weights) as Keras model directories and as LiteRT
bundles (`python -m export`'s own function), which `python -m app` serves with either backend.
`tests/test_app_browser.py` drives the app in Chromium.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from app import models, predict
from app.__main__ import offline_environment, parse_args
from tests.helpers import REPO_ROOT, build_once, free_ports, session_root, write_task_vocab

offline_environment()  # before anything imports gradio

SENTENCE = "George Washington went to Washington ."


class StandIn:
    """A model with the runtime API (fill_mask, attention, classify, answer, tag) whose answers
    are made up from the words: enough to exercise every view."""

    def __init__(self, task: str, max_seq_length: int = 32, layers: int = 2, heads: int = 3):
        self.task, self.max_seq_length = task, max_seq_length
        self.layers, self.heads = layers, heads
        self.labels = ["0", "1"] if task == "classifier" else None
        self.info = {
            "task": task,
            "max_seq_length": max_seq_length,
            "quantization": "float32",
            "top_k": 5,
            "finetuned_task": "sst2" if task == "classifier" else None,
        }
        self.calls = 0

    @staticmethod
    def words(text: str) -> list[str]:
        return re.findall(r"\[MASK\]|\w+|[^\w\s]", text.lower().replace("[mask]", "[MASK]"))

    def fill_mask(self, text, top_k=5):
        self.calls += 1
        if "[MASK]" not in text:
            raise ValueError("the text has no [MASK]")
        words = self.words(text)
        tokens = ["[CLS]"] + words[: self.max_seq_length - 2] + ["[SEP]"]
        guesses = ["mat", "dog", "##s", "sun", "tree", "bird", "fish", "red", "old", "man"]
        masks = [
            {
                "position": i,
                "predictions": [
                    {"token": w, "token_id": 10 + j, "score": round(0.5 / (j + 1), 4)}
                    for j, w in enumerate(guesses[:top_k])
                ],
                "best": 0,  # the runtime's index of the word it fills in, and how it is written
                "fill": guesses[0],
            }
            for i, t in enumerate(tokens)
            if t == "[MASK]"
        ]
        return {
            "tokens": tokens,
            "masks": masks,
            "filled": text.replace("[MASK]", "mat"),
            "truncated": len(words) > self.max_seq_length - 2,
        }

    def attention(self, text, text_pair=None):
        self.calls += 1
        a, b = self.words(text), self.words(text_pair) if text_pair else []
        tokens = ["[CLS]"] + a + ["[SEP]"] + (b + ["[SEP]"] if b else [])
        segments = [0] * (len(a) + 2) + [1] * (len(b) + 1 if b else 0)
        truncated = len(tokens) > self.max_seq_length
        tokens, segments = tokens[: self.max_seq_length], segments[: self.max_seq_length]
        n = len(tokens)
        x = np.random.default_rng(n).random((self.layers, self.heads, n, n)).astype(np.float32)
        x[..., -1] += 3.0  # every token looks at the last [SEP] most
        return {
            "tokens": tokens,
            "segment_ids": segments,
            "attention": x / x.sum(-1, keepdims=True),
            "truncated": truncated,
        }

    def classify(self, text, text_pair=None):
        self.calls += 1
        p = 0.9 if "good" in text.lower() else 0.2
        return {
            "label": "1" if p > 0.5 else "0",
            "scores": {"0": 1 - p, "1": p},
            "value": None,
            "truncated": len(self.words(text)) > self.max_seq_length - 2,
        }

    def answer(self, question, context, n_best=20):
        self.calls += 1
        spans = list(re.finditer(r"\w+", context))
        nbest = [
            {
                "text": m.group(),
                "start": m.start(),
                "end": m.end(),
                "score": 5.0 - i,
                "probability": 0.5 / (i + 1),
                "span_probability": 0.4 / (i + 1),
            }
            for i, m in enumerate(reversed(spans))
        ][:n_best]
        windows = 1 + len(context) // 400
        if not nbest:  # SQuAD 1.1 without a valid span: google's "empty", as the runtime has it
            empty = {"text": "", "start": -1, "end": -1, "score": 0.0, "probability": 1.0}
            return {
                **{key: empty[key] for key in ("text", "start", "end", "score")},
                **dict(null_score=None, span_probability=None, null_probability=None),
                "no_answer": True,
                "nbest": [{**empty, "span_probability": None}],
                "windows": windows,
            }
        if "nobody" in question.lower():  # SQuAD 2.0: the null score wins
            return {
                "text": "",
                "start": -1,
                "end": -1,
                "score": 2.0,
                "null_score": 6.5,
                "span_probability": None,
                "null_probability": 0.55,
                "no_answer": True,
                "nbest": nbest,
                "windows": windows,
            }
        best = nbest[0]
        return {
            **{k: best[k] for k in ("text", "start", "end", "score", "span_probability")},
            "null_score": None,
            "null_probability": None,
            "no_answer": False,
            "nbest": nbest,
            "windows": windows,
        }

    def tag(self, text):
        self.calls += 1
        words = [
            {
                "word": m.group(),
                "start": m.start(),
                "end": m.end(),
                "tag": "B-PER" if m.group()[:1].isupper() else "O",
                "score": 0.875,
            }
            for m in re.finditer(r"\w+", text)
        ]
        entities = [
            {
                "type": "PER",
                "text": w["word"],
                "start": w["start"],
                "end": w["end"],
                "score": w["score"],
            }
            for w in words
            if w["tag"] != "O"
        ]
        return {"words": words, "entities": entities, "truncated": False}


class Broken(StandIn):
    def classify(self, text, text_pair=None):
        raise RuntimeError("interpreter exploded at /secret/path.py line 3")


def stand_in_slots(max_seq_length: int = 32) -> dict:
    slots = {}
    for view in models.VIEWS:
        model = StandIn(view.task, max_seq_length)
        slot = models.Slot(view, model=model, path=f"stand-in/{view.folder}", info=model.info)
        slot.layers_heads = models.warm(view, model)
        slots[view.key] = slot
    return slots


# === Input checks and views, no server ===

LIMITS = predict.Limits(max_chars=200)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("", "is empty"),
        ("   \n\t", "is empty"),
        (None, "is empty"),
        ("\u200b\u200d\ufeff", "no visible characters"),
        ("\x00\x01", "no visible characters"),
        ("x" * 201, "at most 200"),
        (42, "must be text"),
    ],
)
def test_check_text_refuses_with_a_message(value, expected):
    with pytest.raises(predict.InputError, match=expected):
        predict.check_text(value, "text", LIMITS)


def test_check_text_keeps_odd_unicode_and_offsets():
    text = "caf\u00e9 \ud83d\ude00 \u0645\u0631\u062d\u0628\u0627 e\u0301 \ud800 x"
    out = predict.check_text(text, "text", LIMITS)
    assert len(out) == len(text) and "\ufffd" in out and "\ud800" not in out
    out.encode("utf-8")  # a lone surrogate would raise here


def test_every_view_turns_bad_input_into_a_status_message():
    slots = stand_in_slots()
    cases = [
        (predict.fill_mask, (slots["fill_mask"], "no mask here", 5, LIMITS), "has no [MASK]"),
        (predict.fill_mask, (slots["fill_mask"], "a [MASK]", 99, LIMITS), "between 1 and"),
        (predict.attention, (slots["attention"], "", "", 1, 1, None, LIMITS), "empty"),
        (predict.attention, (slots["attention"], "a b", "", 7, 1, None, LIMITS), "layer"),
        (predict.sentiment, (slots["sentiment"], "\u200b", LIMITS), "no visible"),
        (predict.answer, (slots["answer"], "who?", "", 5, LIMITS), "context is empty"),
        (predict.entities, (slots["entities"], "y" * 500, LIMITS), "at most 200"),
    ]
    for fn, args, expected in cases:
        out = fn(*args)
        assert out["status"].startswith(predict.WARNING) and expected in out["status"], out
        assert out["raw"] == {"error": out["status"][len(predict.WARNING) :]}


def test_fill_mask_fills_every_mask_and_draws_bars():
    out = predict.fill_mask(
        stand_in_slots()["fill_mask"], "The [mask] sat on the [ MASK ].", 3, LIMITS
    )
    assert "Filled 2 [MASK]s" in out["status"]
    assert out["filled"] == [
        ("The ", None),
        ("mat", "[MASK] 1, 50% sure"),
        (" sat on the ", None),
        ("mat", "[MASK] 2, 50% sure"),
        (".", None),
    ]
    assert out["bars"].count('class="mask-card"') == 2 and out["bars"].count("bar-row") == 6
    assert out["raw"]["masks"][1]["predictions"][2]["token"] == "##s"


def test_fill_mask_says_which_masks_were_cut():
    slot = stand_in_slots(max_seq_length=8)["fill_mask"]
    out = predict.fill_mask(slot, "[MASK] a b c d e f g h [MASK]", 3, LIMITS)
    assert "it read only the window “[MASK] a b … c d e”" in out["status"]
    assert "Only the first 1 of the 2 [MASK]s fit" in out["status"]
    assert out["filled"][-1] == ("[MASK]", "not read")


def test_truncation_note_names_what_was_cut():
    class Tokenizer:  # the WordPieceTokenizer interface, one WordPiece a word
        def encode(self, texts):
            return [list(range(len(t.split()))) for t in texts]

        def decode(self, ids):
            return " ".join(f"w{i}" for i in ids)

    model = StandIn("classifier", max_seq_length=6)
    model.tokenizer = Tokenizer()
    note = predict.truncation_note(model, "a b c d e f g h i j")
    assert "10 WordPieces" in note and "reads 4" in note
    assert "the 6 after “…w0 w1 w2 w3”" in note
    slot = models.Slot(models.VIEW["sentiment"], model=model, path="x", info=model.info)
    out = predict.sentiment(slot, "good " * 12, LIMITS)
    assert "positive" in out["status"] and "the 8 after" in out["status"]


def test_sentiment_says_how_a_long_text_was_read():
    from export.runtime import EdgeModel
    from model.text.wordpiece import WordPieceTokenizer
    from tests.helpers import BERT_VOCAB

    tokenizer = WordPieceTokenizer(BERT_VOCAB)
    good = tokenizer.token_to_id["good"]

    def logits(x):  # "1" (positive) by as many "good"s as a window reads
        return {
            "logits": np.stack([np.ones(len(x["token_ids"])), (x["token_ids"] == good).sum(-1)], -1)
        }

    info = {"task": "classifier", "max_seq_length": 16, "finetuned_task": "sst2"}
    model = EdgeModel(logits, tokenizer, info)
    slot = models.Slot(models.VIEW["sentiment"], model=model, path="x", info=info)
    text = "The film is good. " * 3 + "The rest is long. " * 3
    out = predict.sentiment(slot, text, LIMITS)
    n = len(out["raw"]["window_results"])
    assert n == out["raw"]["windows"] > 2
    assert out["status"].startswith("**negative** (")
    assert f"Read as {n} overlapping windows of up to 14 WordPieces (30 in all" in out["status"]
    each = ", ".join(
        f"{w['scores']['0']:.0%} (characters {w['char_start']}-{w['char_end']})"
        for w in out["raw"]["window_results"]
    )
    assert f"Window by window, negative: {each}." in out["status"]
    # A long text: its lowest and highest windows, not one figure per window.
    out = predict.sentiment(slot, "The film is good. " * 6 + "It is long. " * 7, LIMITS)
    windows = out["raw"]["window_results"]
    assert len(windows) > predict.MAX_LISTED_WINDOWS
    assert out["status"].count("%") < 6 and "Window by window, negative: from " in out["status"]
    low = min(windows, key=lambda w: w["scores"]["0"])
    assert f"from {low['scores']['0']:.0%} (characters {low['char_start']:,}-" in out["status"]
    assert predict.WARNING not in out["status"]  # reading in windows is no warning
    short = predict.sentiment(slot, "The film is good.", LIMITS)
    assert "Read as" not in short["status"] and short["raw"]["windows"] == 1
    # A bundle (or a stand-in) that cuts instead still says what it cut.
    assert "Read as" not in predict.sentiment(stand_in_slots()["sentiment"], text, LIMITS)["status"]


def test_attention_views_and_token_choice():
    slot = stand_in_slots()["attention"]
    out = predict.attention(slot, "The cat sat.", "Where?", 2, 3, None, LIMITS)
    tokens = out["state"]["tokens"]
    assert tokens == ["[CLS]", "the", "cat", "sat", ".", "[SEP]", "where", "?", "[SEP]"]
    assert out["status"].startswith(
        "Layer 2, head 3: “the” (WordPiece 1 of the input) attends most to “[SEP]”"
    )
    assert out["head_map"].count('<td class="q') == len(tokens) ** 2
    assert out["head_map"].count('class="col seg1"') == 2  # "where", "?" after [SEP]
    assert out["grid"].count("<figure") == 3 and 'data-head="3"' in out["grid"]
    shades = [w for _, w in out["attends_to"]]
    assert len(shades) == len(tokens) and 0 < min(shades) and max(shades) == shades[-1] < 1
    assert np.asarray(out["raw"]["attention"]).shape == (len(tokens), len(tokens))
    again = predict.rerender_attention(out["state"], 1, 1, 6)
    assert again["status"].startswith("Layer 1, head 1: “where” (WordPiece 6 of the input)")
    assert 'class="r sel"><th class="row seg1" data-token="6">where' in again["head_map"]
    assert predict.token_choices(tokens)[6] == ("6: where", 6)
    # A token index past the new sentence's end falls back to the first word, and says so.
    out = predict.attention(slot, "a b", "", 1, 1, 30, LIMITS)
    assert out["raw"]["token"] == 1
    assert "WordPiece 30 is not in this text (0 to 3): showing WordPiece 1, “a”" in out["status"]
    # "inf" is no number: the app's own message, not the model's failure.
    status = predict.attention(slot, "a b", "", 1, 1, "inf", LIMITS)["status"]
    assert "is not in the text; its tokens:" in status, status
    # The attending token by number, by its choice label or by its word; not an unknown word.
    for token in (6, "6", "6: where", "Where"):
        out = predict.attention(slot, "The cat sat.", "Where?", 1, 1, token, LIMITS)
        assert out["raw"]["token"] == 6, token
    out = predict.attention(slot, "The cat sat.", "Where?", 1, 1, "dog", LIMITS)
    assert "The token 'dog' is not in the text; its tokens: [CLS], the, cat" in out["status"]
    assert out["raw"] is None or "token" not in out["raw"]
    assert "Run the model" in predict.rerender_attention(None, 1, 1, 0)["status"]


def test_each_view_says_what_its_model_is_and_its_card_line():
    slot = stand_in_slots()["answer"]
    slot.info = {**slot.info, "quantization": "dynamic"}
    line = slot.describe()
    assert "int8 weights (dynamic-range quantised)" in line and "reads 32 WordPieces" in line
    assert "LiteRT dynamic" not in line and "32 tokens" not in line  # the old jargon
    slot.info = {**slot.info, "card": "Copies the answer span; never says “no answer”."}
    assert slot.describe().endswith("\nCopies the answer span; never says “no answer”.")


def test_every_shipped_bundle_has_a_card_line():
    import json

    for view in models.VIEWS:
        path = os.path.join(REPO_ROOT, "assets", "models", view.folder, "bundle.json")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                assert len(json.load(f).get("card", "")) > 40, path


def test_replaced_token_labels_have_distinct_colours():
    """Each label of the Replaced tokens view its own colour ("replaced" and "false alarm"
    were both red)."""
    colours = predict.REPLACED_COLORS
    assert len(set(colours.values())) == len(colours)


def test_answer_highlights_the_span_or_says_no_answer():
    slot = stand_in_slots()["answer"]
    out = predict.answer(slot, "Where?", "The cat sat on the mat", 3, LIMITS)
    assert out["status"].startswith("**mat** (40.0 % likely)")  # no raw score: jargon
    assert out["context"]["entities"] == [{"entity": "answer", "start": 19, "end": 22}]
    assert [r[1] for r in out["nbest"]] == ["mat", "the", "on"]
    assert [r[3] for r in out["nbest"]] == [0.4, 0.2, 0.1333]  # P(start) x P(end), rounded
    slot.info = {**slot.info, "null_threshold": 1.5}
    out = predict.answer(slot, "Nobody?", "The cat sat on the mat", 3, LIMITS)
    assert out["status"].startswith("**No answer** in the context: no answer 55.0 %")
    assert (
        "the best span “mat” 40.0 % (the no-answer logit 6.500 beat the best span's 5.000 by "
        "more than the tuned threshold 1.500)" in out["status"]
    )
    assert out["context"]["entities"] == []
    out = predict.answer(stand_in_slots()["answer"], "Where?", "?!", 3, LIMITS)
    assert out["status"].startswith("**No span found**: none of the model's likeliest")
    assert "**No answer**" not in out["status"] and out["nbest"][0][1] == predict.NO_ANSWER
    long = predict.answer(slot, "Where?", "the cat sat . " * 60, 3, predict.Limits())
    assert "read in 3 overlapping windows" in long["status"]


def test_entities_and_sentiment():
    slots = stand_in_slots()
    out = predict.entities(slots["entities"], SENTENCE, LIMITS)
    assert out["status"] == "3 entities (PER) in 5 words."
    assert out["spans"]["entities"][0] == {"entity": "PER", "start": 0, "end": 6}
    assert out["entities"][1] == ["Washington", "PER", 0.875, 7, 17]
    out = predict.sentiment(slots["sentiment"], "A good film", LIMITS)
    assert out["status"] == "**positive** (90.0%)" and out["label"]["negative"] == 0.1


def test_a_failing_model_gives_a_message_not_a_traceback(caplog):
    slot = models.Slot(models.VIEW["sentiment"], model=Broken("classifier"), path="x")
    out = predict.sentiment(slot, "fine", LIMITS)
    assert "could not answer this input (RuntimeError)" in out["status"]
    assert "Traceback" not in out["status"] and "/secret" not in out["status"]
    assert "Traceback" in caplog.text  # the details go to the server log


# === Discovering models ===


def write_bundle(directory, task, finetuned=None, marker="bundle.json"):
    os.makedirs(directory)
    with open(os.path.join(directory, marker), "w") as f:
        json.dump({"format": 1, "task": task, "finetuned_task": finetuned, "encoder": {}}, f)


def test_discover_prefers_the_planned_folder_then_the_finetuned_task(tmp_path):
    write_bundle(tmp_path / "a-classifier", "classifier", "mrpc")
    write_bundle(tmp_path / "b-classifier", "classifier", "sst2")
    write_bundle(tmp_path / "ner", "token_classifier", "conll2003")
    write_bundle(tmp_path / "conll2003", "token_classifier", "other")
    write_bundle(tmp_path / "keras-only", "pretraining", marker="config.json")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "bundle.json").write_text("{not json")
    found, problems = models.discover(str(tmp_path), "litert")
    assert sorted(found) == ["classifier", "token_classifier"]
    assert len(problems) == 1 and "broken" in problems[0]
    best = lambda key: os.path.basename(
        models.choose(models.VIEW[key], found[models.VIEW[key].task])[0][0]
    )
    assert best("sentiment") == "b-classifier" and best("entities") == "conll2003"
    # A pair task's classifier (MNLI) refuses the one text the view sends: last, even in
    # the view's own folder.
    write_bundle(tmp_path / "sst2", "classifier", "mnli")
    found, _ = models.discover(str(tmp_path), "litert")
    assert best("sentiment") == "b-classifier"
    message = models.missing_message(models.VIEW["fill_mask"], str(tmp_path), "litert")
    assert "python -m export" in message and "--backend keras" in message
    assert "keras-only" in message
    # and the other way: a folder of bundles under --backend keras names the default backend
    message = models.missing_message(models.VIEW["sentiment"], str(tmp_path), "keras")
    assert "The default `--backend litert` would load the bundle" in message
    assert "b-classifier" in message


def test_missing_models_leave_every_view_with_a_message(tmp_path):
    slots = models.load_all(str(tmp_path / "nowhere"))
    for slot in slots.values():
        assert not slot.ready and "does not exist" in slot.describe()
        assert f"nowhere/{slot.view.folder}" in slot.describe()
    out = predict.entities(slots["entities"], SENTENCE, LIMITS)
    assert "No model for this view" in out["status"] and "python -m export" in out["status"]


def test_visitors_from_elsewhere_see_no_server_paths_or_errors(tmp_path):
    from app.__main__ import loopback

    assert loopback("127.0.0.1") and loopback("localhost") and loopback("::1")
    assert not loopback("0.0.0.0") and not loopback("192.168.1.5") and not loopback("myhost")
    broken = tmp_path / "models" / "sst2"
    write_bundle(broken, "classifier", "sst2")  # a bundle.json without its model.tflite
    slots = models.load_all(str(tmp_path / "models"))
    assert str(tmp_path) in slots["sentiment"].describe()  # the local page says where and why
    with served(slots, "--host", "0.0.0.0") as demo:
        import httpx

        url = f"http://127.0.0.1:{demo.server_port}"
        page = httpx.get(f"{url}/config").text  # what a browser builds the page from
        assert "No model for this view" in page and str(tmp_path) not in page
        assert "python -m export" not in page
        client = client_for(url)
        for endpoint, args in [("/sentiment", ("good",)), ("/entities", ("x",))]:
            status = client.predict(*args, api_name=endpoint)[0]
            assert status == "⚠️ **No model for this view.** The server's log says why."
    # A ready model is named by its folder only.
    slot = stand_in_slots()["sentiment"]
    slot.path = str(tmp_path / "deep" / "sst2")
    assert "`sst2`" in slot.describe(public=True) and str(tmp_path) not in slot.describe(True)


# === The app served on a loopback port ===


@contextlib.contextmanager
def served(slots: dict, *flags: str):
    """The app over `slots` on a free 127.0.0.1 port (in this process); yields the launched
    Blocks (`.local_url` answers)."""
    from app.__main__ import start

    port = free_ports(1)[0]
    demo = start(slots, parse_args(["--port", str(port), *flags]))
    try:
        yield demo
    finally:
        demo.close()


VIEW_NAMES = tuple(view.key for view in models.VIEWS)
ENDPOINTS = tuple(f"/{name}" for name in VIEW_NAMES)


def client_for(url: str):
    from gradio_client import Client

    return Client(url, verbose=False, download_files=False)


def test_the_server_keeps_few_sessions_and_each_for_a_while():
    """Each visitor's session keeps the attention view's maps (4.7 MB for the default model):
    a soak test through the API grew the server by 6.3 MB per new session, never freed
    (Gradio keeps 10,000 sessions and a State without time_to_live for ever). --sessions
    bounds how many; each State expires after `Limits.state_minutes`."""
    import gradio as gr

    with served(stand_in_slots(), "--sessions", "2") as demo:
        kept = demo.state_holder.session_data
        for visitor in range(4):
            client = client_for(demo.local_url)
            client.predict("The cat sat.", "", "1", "1", None, api_name="/attention")
            held = [s.state_data for s in kept.values() if s.state_data]
            assert len(held) == min(visitor + 1, 2)  # this visitor's maps, and at most 2
        assert all(v["attention"].ndim == 4 for d in held for v in d.values())
        ttl = [b.time_to_live for b in demo.blocks.values() if isinstance(b, gr.State)]
        assert ttl == [60 * predict.Limits.state_minutes]


def test_every_view_is_a_named_endpoint():
    slots = stand_in_slots()
    with served(
        slots, "--max-input-chars", "300", "--concurrency", "3", "--max-queue", "9"
    ) as demo:
        url = demo.local_url
        assert url.startswith("http://127.0.0.1:")
        # One queue for all the views' events, bounded by the flags.
        ids = {fn.concurrency_id for fn in demo.fns.values() if fn.api_name in VIEW_NAMES}
        assert ids == {"models"} and demo._queue.default_concurrency_limit == 3
        assert demo._queue.max_size == 9
        client = client_for(url)
        named = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
        assert sorted(named) == sorted(ENDPOINTS)
        # No view takes a file: Gradio's upload route refuses anything but a token one.
        import httpx

        upload = f"{url.rstrip('/')}/gradio_api/upload"
        refused = httpx.post(upload, files={"files": ("big.bin", b"x" * 50_000)})
        assert refused.status_code == 413, (refused.status_code, refused.text[:200])

        status, filled, bars, raw = client.predict(
            "The cat sat on the [MASK].", 3, api_name="/fill_mask"
        )
        assert status.startswith("Filled 1 [MASK]") and "mask-card" in bars
        assert [s["token"] for s in filled] == ["The cat sat on the ", "mat", "."]
        assert raw["filled"] == "The cat sat on the mat."

        out = client.predict("The cat sat.", "Where?", "2", "3", 2, api_name="/attention")
        status, attends, head_map, average_map, grid, raw = out
        assert status.startswith("Layer 2, head 3: “cat” (WordPiece 2 of the input)")
        assert "<table" in head_map and "average of 3 heads" in average_map
        assert grid.count("<figure") == 3 and raw["token"] == 2
        assert raw["tokens"][5] == "[SEP]" and len(attends) == len(raw["tokens"])

        status, label, raw = client.predict("A good film.", api_name="/sentiment")
        assert status == "**positive** (90.0%)" and label["label"] == "positive"

        status, context, nbest, raw = client.predict(
            "Where?", "The cat sat on the mat", 2, api_name="/answer"
        )
        assert status.startswith("**mat**") and len(nbest["data"]) == 2
        assert [s for s in context if s["class_or_confidence"] == "answer"][0]["token"] == "mat"

        status, spans, table, words, raw = client.predict(SENTENCE, api_name="/entities")
        assert status.startswith("3 entities") and len(table["data"]) == 3
        assert [s["token"] for s in spans if s["class_or_confidence"] == "PER"] == [
            "George",
            "Washington",
            "Washington",
        ]

        # Bad input: a message in the view, never a stack trace.
        for endpoint, args in [
            ("/fill_mask", ("no mask", 5)),
            ("/sentiment", ("   ",)),
            ("/answer", ("", "context", 5)),
            ("/entities", ("é" * 301,)),
            ("/attention", ("\u200b", "", "1", "1", None)),
        ]:
            status = client.predict(*args, api_name=endpoint)[0]
            assert status.startswith(predict.WARNING), (endpoint, status)
            assert "Traceback" not in status


def test_a_typed_file_path_is_only_text(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    slots = stand_in_slots()
    with served(slots) as demo:
        client = client_for(demo.local_url)
        for endpoint, args in [
            ("/sentiment", (str(secret),)),
            ("/entities", (str(secret),)),
            ("/answer", (str(secret), str(secret), 3)),
            ("/fill_mask", (f"{secret} [MASK]", 3)),
            ("/attention", (str(secret), "/etc/passwd", "1", "1", None)),
        ]:
            out = json.dumps(client.predict(*args, api_name=endpoint), default=str)
            assert "TOP-SECRET" not in out and "root:" not in out


# === `python -m app` as a user starts it ===


class SentinelProxy:
    """An HTTP(S) proxy on a loopback port that refuses everything and records what was asked:
    handed to the app as HTTP(S)_PROXY, it shows any attempt to reach the network."""

    def __init__(self):
        self.requests: list[str] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stopped.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    self.requests.append(conn.recv(4096).split(b"\r\n")[0].decode("latin-1"))
                    conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    def env(self) -> dict:
        url = f"http://127.0.0.1:{self.port}"
        names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
        env = {n: url for n in names} | {n.lower(): url for n in names}
        return env | {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}

    def close(self):
        self.stopped.set()
        self.thread.join(5)
        self.server.close()


@contextlib.contextmanager
def app_process(*flags: str, env: dict | None = None, timeout: float = 180):
    """`python -m app FLAGS` in a fresh process; yields (url, output lines so far) once it
    prints "Running on", and stops it afterwards."""
    port = free_ports(1)[0]
    environment = dict(
        os.environ,
        PYTHONPATH=REPO_ROOT,
        PYTHONUNBUFFERED="1",
        TF_CPP_MIN_LOG_LEVEL="3",
        **(env or {}),
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "--port", str(port), *flags],
        cwd=REPO_ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def read():
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if "Running on" in line:
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + timeout
        while not ready.wait(0.2):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("python -m app did not start:\n" + "\n".join(lines))
        yield f"http://127.0.0.1:{port}/", lines
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(5)


def test_cli_starts_offline_without_models_and_explains_share(tmp_path):
    proxy = SentinelProxy()
    (tmp_path / "none").mkdir()  # a folder with no models (a missing one stops the app)
    try:
        with app_process("--models", str(tmp_path / "none"), "--share", env=proxy.env()) as (
            url,
            lines,
        ):
            log = "\n".join(lines)
            assert "--share: no public link: https://api.gradio.app cannot be reached" in log
            assert "Serving locally only" in log
            assert f"Running on {url}" in log and "tensorflow imported: no" in log
            client = client_for(url)
            for endpoint, args in [
                ("/fill_mask", ("a [MASK]", 5)),
                ("/sentiment", ("good",)),
                ("/attention", ("a b", "", "1", "1", None)),
                ("/answer", ("q", "c", 5)),
                ("/entities", ("x",)),
            ]:
                status = client.predict(*args, api_name=endpoint)[0]
                assert "No model for this view" in status and "python -m export" in status
    finally:
        proxy.close()
    # The only request for the outside world is the --share probe (refused by the proxy; that
    # it arrived shows the proxy sees what the app sends out).
    assert proxy.requests and all("api.gradio.app" in r for r in proxy.requests), proxy.requests


def test_cli_flags_and_defaults():
    args = parse_args([])
    assert (args.models, args.backend, args.host, args.port, args.share) == (
        "assets/models",
        "litert",
        "127.0.0.1",
        7860,
        False,
    )
    assert (args.max_input_chars, args.concurrency, args.max_queue) == (10_000, 2, 64)
    with pytest.raises(SystemExit):
        parse_args(["--concurrency", "0"])
    with pytest.raises(SystemExit):
        parse_args(["--backend", "onnx"])


# === Real (tiny, random) models: LiteRT bundles and Keras model directories ===

TINY_SEQ_LEN = 32
TINY = {
    "mlm": {"task": "pretraining", "next_sentence": True},
    "encoder": {"task": "encoder"},
    "sst2": {"task": "classifier", "num_labels": 2, "id2label": {"0": "negative", "1": "positive"}},
    "squad": {"task": "question_answerer"},
    "conll2003": {"task": "token_classifier", "num_labels": 9},
}


def build_tiny_models(tmp_path_factory) -> tuple[str, str]:
    """(Keras model directories, LiteRT bundles) of the five tasks in the session's folder, one
    folder per view as assets/models has them; built once per test session (`build_once`)."""
    root = os.path.join(session_root(tmp_path_factory), "app-tiny-models")
    keras_dir, bundles = os.path.join(root, "keras"), os.path.join(root, "bundles")
    build_once(root, lambda: _build_tiny_models(root, keras_dir, bundles))
    return keras_dir, bundles


def _build_tiny_models(root: str, keras_dir: str, bundles: str) -> None:
    import keras

    from export.__main__ import export_bundle
    from model.checkpoints import model_dir
    from model.networks.encoder import BertEncoder
    from model.tasks.ner import CONLL2003_LABELS
    from model.text.tokenizer import load_vocabulary

    vocab = write_task_vocab(os.path.join(root, "vocab.txt"))
    size = len(load_vocabulary(vocab))
    for folder, spec in TINY.items():
        if folder == "conll2003":
            spec = {**spec, "id2label": dict(enumerate(CONLL2003_LABELS))}
        keras.utils.set_random_seed(0)
        encoder = BertEncoder.from_preset("tiny", vocabulary_size=size)
        model = model_dir.build_model({**spec, "encoder": encoder.config.to_dict()}, encoder)
        directory = os.path.join(keras_dir, folder)
        model_dir.save(model, directory, vocab, extra={"max_seq_length": TINY_SEQ_LEN})
        export_bundle(
            directory,
            os.path.join(bundles, folder),
            "float32",
            verify_examples=4,
            log=lambda message: None,
        )


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    return build_tiny_models(tmp_path_factory)


LONG = "the cat sat on the mat . " * 30  # 210 WordPieces: over the tiny models' 32
CALLS = [
    ("/fill_mask", ("The cat sat on the [MASK].", 5)),
    ("/fill_mask", (LONG + "a [MASK] " + LONG + "[MASK] .", 3)),
    ("/attention", ("The cat sat on the mat.", "Where is it?", "2", "2", 3)),
    ("/attention", (LONG, "", "1", "1", None)),
    ("/sentiment", ("A good film.",)),
    ("/sentiment", ("\U0001f600 caf\u00e9 \u202e\u0645\u0631\u062d\u0628\u0627 x\u0301",)),
    ("/sentiment", (LONG,)),
    ("/answer", ("Where did the cat sit?", "The cat sat on the mat.", 3)),
    ("/answer", ("Where did the cat sit?", LONG, 3)),
    ("/entities", ("George met Anna in Paris.",)),
    ("/entities", (LONG,)),
]


def check_real_answers(client) -> dict:
    """Calls every endpoint on ordinary, long and odd-Unicode input; checks each answers with
    the notes the input asks for; returns {endpoint: [outputs]}."""
    answers = {}
    for endpoint, args in CALLS:
        out = client.predict(*args, api_name=endpoint)
        answers.setdefault(endpoint, []).append(out)
        status = out[0]
        assert status and "Traceback" not in status, (endpoint, status)
        long = any(LONG in str(a) for a in args)
        if not long and "\U0001f600" not in args[0]:
            assert predict.WARNING not in status, (endpoint, args, status)
    fill, fill_long = answers["/fill_mask"]
    assert len(fill[3]["masks"]) == 1 and len(fill[3]["masks"][0]["predictions"]) == 5
    assert "read only the window" in fill_long[0] and "Only the first 1 of the 2" in fill_long[0]
    attention, attention_long = answers["/attention"]
    assert attention[5]["tokens"][-1] == "[SEP]" and attention[5]["token"] == 3
    assert len(attention_long[5]["tokens"]) == TINY_SEQ_LEN
    assert "were not read" in attention_long[0]
    sentiment, odd, sentiment_long = answers["/sentiment"]
    assert set(sentiment[1]) == {"label", "confidences"}
    assert "Read as" not in sentiment[0] and sentiment[2]["windows"] == 1
    windows = sentiment_long[2]["windows"]
    assert windows > 2 and f"Read as {windows} overlapping windows" in sentiment_long[0]
    assert "[UNK]" in odd[0] or predict.WARNING not in odd[0]
    qa, qa_long = answers["/answer"]
    assert qa[3]["nbest"] and "overlapping windows" in qa_long[0]
    ner, ner_long = answers["/entities"]
    assert len(ner[4]["words"]) == 6 and len(ner_long[4]["words"]) == 210
    return answers


@pytest.mark.slow
def test_cli_serves_litert_bundles_without_tensorflow(tiny_models):
    _, bundles = tiny_models
    with app_process("--models", bundles, "--threads", "1") as (url, lines):
        log = "\n".join(lines)
        assert "tensorflow imported: no" in log
        for folder in TINY:
            assert f"Model: `{os.path.join(bundles, folder)}`" in log
        check_real_answers(client_for(url))


@pytest.mark.slow
def test_cli_keras_backend_answers_as_the_bundles(tiny_models):
    from export import runtime

    keras_dir, bundles = tiny_models
    with app_process("--backend", "keras", "--models", keras_dir) as (url, lines):
        assert "tensorflow imported: yes" in "\n".join(lines)
        answers = check_real_answers(client_for(url))
    # float32 bundles answer as the Keras models they came from.
    lite = runtime.load(os.path.join(bundles, "sst2"))
    scores = lite.classify("A good film.")["scores"]
    confidences = {c["label"]: c["confidence"] for c in answers["/sentiment"][0][1]["confidences"]}
    assert confidences == pytest.approx(scores, abs=1e-4)
    mlm = runtime.load(os.path.join(bundles, "mlm")).fill_mask("The cat sat on the [MASK].")
    keras_top = answers["/fill_mask"][0][3]["masks"][0]["predictions"]
    assert [p["token"] for p in keras_top][:2] == [
        p["token"] for p in mlm["masks"][0]["predictions"]
    ][:2]


@pytest.mark.slow
def test_no_answer_view_with_a_real_squad2_runtime(tiny_models):
    from export import runtime

    _, bundles = tiny_models
    lite = runtime.load(os.path.join(bundles, "squad"))
    # A threshold this low makes the null answer win, as a SQuAD 2.0 model's would.
    model = runtime.EdgeModel(lite.predict, lite.tokenizer, {**lite.info, "null_threshold": -1e6})
    slot = models.Slot(models.VIEW["answer"], model=model, path="squad2", info=model.info)
    out = predict.answer(slot, "Where did the cat sit?", "The cat sat on the mat.", 5, LIMITS)
    assert out["status"].startswith("**No answer** in the context: no answer ")
    assert ", the best span “" in out["status"] and out["context"]["entities"] == []
    raw = out["raw"]
    assert 0 < raw["null_probability"] < 1 and raw["span_probability"] is None
    assert f"no answer {100 * raw['null_probability']:.1f} %" in out["status"]
    assert predict.NO_ANSWER in [row[1] for row in out["nbest"]]


# === ELECTRA: the Replaced tokens view, shown only when its bundle is there ===

ELECTRA_TEXT = "The cat sat on the mat, and the dog ran fast."
ELECTRA_ENDPOINTS = ("/replaced_tokens", "/corrupt")


@pytest.fixture(scope="session")
def electra_models(tmp_path_factory, tiny_models):
    """{"models": the five tiny bundles and the tiny ELECTRA run's bundle in "electra" (the
    folder the app looks for), "electra": tests/helpers.py `build_electra`'s paths}."""
    import shutil

    from tests.helpers import build_electra

    electra = build_electra(tmp_path_factory)
    root = tmp_path_factory.getbasetemp() / "app-electra-models"
    if not root.exists():
        shutil.copytree(tiny_models[1], root)
        shutil.copytree(electra["float32"], root / "electra")
    return {"models": str(root), "electra": electra}


@pytest.mark.slow
def test_replaced_tokens_view_is_hidden_without_an_electra_bundle(tiny_models):
    """No ELECTRA bundle: no slot, no tab, no endpoint; the five views as before."""
    from app import ui

    _, bundles = tiny_models
    slots = models.load_all(bundles, warm_up=False)
    assert sorted(slots) == sorted(VIEW_NAMES) and all(s.ready for s in slots.values())
    demo = ui.build(slots)
    names = {fn.api_name for fn in demo.fns.values() if fn.api_name}
    assert set(VIEW_NAMES) <= names and not names & {"replaced_tokens", "corrupt"}
    assert models.hidden_views(slots, bundles) == [
        f"replaced_tokens view hidden: no replaced_token_detection model in {bundles} (it shows "
        f"{models.VIEW['replaced_tokens'].what}; planned folder {bundles}/electra)"
    ]


@pytest.mark.slow
def test_replaced_tokens_views_on_a_real_bundle(electra_models):
    from export import runtime

    slots = models.load_all(electra_models["models"])
    slot = slots["replaced_tokens"]
    assert slot.ready and os.path.basename(slot.path) == "electra"
    assert "with its generator" in slot.describe() and all(s.ready for s in slots.values())
    lite = runtime.load(slot.path)

    out = predict.replaced_tokens(slot, ELECTRA_TEXT, LIMITS)
    expected = lite.detect_replaced(ELECTRA_TEXT)
    assert out["raw"] == predict.jsonable(expected)
    flagged = sum(t["replaced"] for t in expected["tokens"])
    said = f"{flagged} of {len(expected['tokens'])} WordPieces look replaced"
    assert (said if flagged else "No WordPiece looks replaced") in out["status"]
    assert [row[1] for row in out["table"]] == [t["token"] for t in expected["tokens"]]
    assert [row[3] == "yes" for row in out["table"]] == [t["replaced"] for t in expected["tokens"]]
    assert {e["entity"] for e in out["spans"]["entities"]} <= {"replaced"}
    assert len(out["spans"]["entities"]) == len(expected["replaced"])

    checked = 0
    for seed in range(1, 6):
        out = predict.corrupt(slot, ELECTRA_TEXT, 0.3, seed, LIMITS)
        corrupted = lite.corrupt(ELECTRA_TEXT, 0.3, seed)
        assert out["text"] == corrupted["text"] != ELECTRA_TEXT
        assert out["raw"]["corrupt"] == predict.jsonable(corrupted)
        assert out["status"].startswith(f"The generator replaced {len(corrupted['replaced'])} of")
        assert f"seed {seed})" in out["status"]
        if "not checked" in out["status"]:  # a draw joined or split a word: no truth
            assert {row[4] for row in out["table"]} == {""}
            continue
        checked += 1
        truth = [t["replaced"] for t in corrupted["tokens"]]
        assert [row[4] for row in out["table"]] == ["yes" if r else "no" for r in truth]
        called = [t["replaced"] for t in out["raw"]["detect_replaced"]["tokens"]]
        expected = [
            "caught" if c and r else "false alarm" if c else "missed"
            for c, r in zip(called, truth)
            if c or r
        ]
        assert [e["entity"] for e in out["spans"]["entities"]] == expected
        assert f"Caught {sum(c and r for c, r in zip(called, truth))}, missed" in out["status"]
    assert checked  # most corrupted texts read as the generator's pieces
    # Drawn words longer than theirs can take the text past the app's limit: the status says so.
    tight = predict.Limits(max_chars=len(ELECTRA_TEXT))
    longer = 0
    for seed in range(1, 11):
        out = predict.corrupt(slot, ELECTRA_TEXT, 0.5, seed, tight)
        longer += len(out["text"]) > tight.max_chars
        assert ("over this app's" in out["status"]) == (len(out["text"]) > tight.max_chars)
    assert longer
    # A new draw without a seed; the seed used is in the raw output.
    assert predict.corrupt(slot, ELECTRA_TEXT, 0.15, None, LIMITS)["raw"]["corrupt"]["seed"] >= 0

    for args, message in (
        ((ELECTRA_TEXT, 0.9, 1), "between 0.05 and 0.5"),
        ((ELECTRA_TEXT, 0.15, "x"), "The seed must be a whole number"),
        (("  ", 0.15, 1), "is empty"),
    ):
        bad = predict.corrupt(slot, *args, LIMITS)
        assert bad["status"].startswith(predict.WARNING) and message in bad["status"], bad
        assert bad["text"] is None  # the view keeps the user's text
    # A discriminator alone: detection works, the generator's button says what is missing.
    alone = models.Slot(
        models.VIEW["replaced_tokens"],
        model=runtime.load(electra_models["electra"]["discriminator-float32"]),
        path="discriminator",
    )
    assert "with its generator" not in alone.describe()
    assert predict.replaced_tokens(alone, ELECTRA_TEXT, LIMITS)["raw"]["tokens"]
    assert 'with a "generator" signature' in predict.corrupt(alone, ELECTRA_TEXT)["status"]


@pytest.mark.slow
def test_keras_backend_serves_an_electra_run_as_its_bundle(electra_models, tmp_path):
    """A Keras ELECTRA run directory (task electra_pretraining) serves the view, generator
    included, with the float32 bundle's answers."""
    import shutil

    from export import runtime

    electra = electra_models["electra"]
    shutil.copytree(electra["run"], tmp_path / "electra")
    slot = models.load_all(str(tmp_path), backend="keras")["replaced_tokens"]
    assert slot.ready and slot.info["task"] == "replaced_token_detection"
    assert slot.model.methods == ["detect_replaced", "attention", "features", "corrupt"]
    assert "Keras" in slot.describe() and "with its generator" in slot.describe()
    # The only model there: the Attention view draws the discriminator's encoder's maps.
    attention = models.load_all(str(tmp_path), backend="keras")["attention"]
    assert attention.ready and attention.model.attention(ELECTRA_TEXT)["attention"].ndim == 4
    lite = runtime.load(electra["float32"])
    for seed in (1, 2):
        keras, bundle = (
            slot.model.corrupt(ELECTRA_TEXT, 0.3, seed),
            lite.corrupt(ELECTRA_TEXT, 0.3, seed),
        )
        for key in ("text", "masked", "replaced", "read"):
            assert keras[key] == bundle[key], (seed, key)
    got = slot.model.detect_replaced(ELECTRA_TEXT)["tokens"]
    expected = lite.detect_replaced(ELECTRA_TEXT)["tokens"]
    assert [t["probability_replaced"] for t in got] == pytest.approx(
        [t["probability_replaced"] for t in expected], abs=1e-5
    )


@pytest.mark.slow
def test_cli_serves_the_replaced_tokens_view(electra_models):
    """`python -m app` over a folder with an ELECTRA bundle: the sixth view's two named
    endpoints beside the five pinned ones, answering as the runtime does, without TensorFlow."""
    from export import runtime

    root = electra_models["models"]
    lite = runtime.load(os.path.join(root, "electra"))
    with app_process("--models", root, "--threads", "1") as (url, lines):
        log = "\n".join(lines)
        assert "tensorflow imported: no" in log and "view hidden" not in log
        assert f"Model: `{os.path.join(root, 'electra')}` (replaced_token_detection" in log
        client = client_for(url)
        named = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
        assert sorted(named) == sorted(ENDPOINTS + ELECTRA_ENDPOINTS)

        status, spans, table, raw = client.predict(ELECTRA_TEXT, api_name="/replaced_tokens")
        expected = lite.detect_replaced(ELECTRA_TEXT)
        assert raw == predict.jsonable(expected) and len(table["data"]) == len(expected["tokens"])
        assert "Traceback" not in status and predict.WARNING not in status
        assert "".join(s["token"] for s in spans) == ELECTRA_TEXT

        text, status, spans, table, raw = client.predict(ELECTRA_TEXT, 0.3, 4, api_name="/corrupt")
        corrupted = lite.corrupt(ELECTRA_TEXT, 0.3, 4)
        assert text == corrupted["text"] and raw["corrupt"]["replaced"] == corrupted["replaced"]
        assert status.startswith("The generator replaced") and "seed 4" in status
        assert "".join(s["token"] for s in spans) == text

        for endpoint, args in (("/replaced_tokens", ("\u200b",)), ("/corrupt", (" ", 0.2, 1))):
            status = client.predict(*args, api_name=endpoint)[-4]
            assert status.startswith(predict.WARNING) and "Traceback" not in status
        # A failed corruption gives the caller its own text back (the box keeps it).
        assert client.predict(" ", 0.2, 1, api_name="/corrupt")[0] == " "
        # The other views answer as before.
        assert client.predict("A good film.", api_name="/sentiment")[0].startswith("**")


def test_a_missing_models_folder_or_a_busy_port_stops_the_app_at_once(tmp_path, capsys):
    """One clear line and a non-zero exit, before any model loads (the load would take
    seconds; here nothing is loaded: the folder is empty or missing)."""
    import socket
    import time

    from app.__main__ import main

    began = time.perf_counter()
    assert main(["--models", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--models" in err and "no such folder" in err
    bundle = tmp_path / "sst2"  # one model's folder (app.md's own path, one level too deep)
    bundle.mkdir()
    (bundle / "bundle.json").write_text("{}")
    assert main(["--models", str(bundle)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is one model (a bundle), not a folder of them" in err
    assert f"(--models {tmp_path})" in err
    (bundle / "bundle.json").unlink()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["--models", str(tmp_path), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and "--port" in err
    assert time.perf_counter() - began < 5


def test_the_api_schema_is_what_the_endpoints_accept():
    """Every output has a name, the schema's example inputs are valid inputs, and the
    attention endpoint takes the layer and head as the schema gives them (strings)."""
    slots = stand_in_slots()
    with served(slots) as demo:
        client = client_for(demo.local_url)
        api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
        for name, endpoint in api.items():
            labels = [r.get("label") or "" for r in endpoint["returns"]]
            assert not [x for x in labels if x.startswith("value_") or not x], (name, labels)
        layer = api["/attention"]["parameters"][2]
        assert layer["python_type"]["type"] == "Literal['1', '2']"
        status, *_ = client.predict("The cat sat.", "", "2", "1", None, api_name="/attention")
        assert status.startswith("Layer 2, head 1")
        example = [p["example_input"] for p in api["/fill_mask"]["parameters"]]
        status, *_ = client.predict(*example, api_name="/fill_mask")
        assert status.startswith("Filled 1 [MASK]"), status


def test_the_keras_backend_passes_over_folders_it_cannot_load_and_says_why(tmp_path):
    """A keras-hub preset or a Hugging Face folder beside model directories: its config.json
    made it an 'encoder' the Attention view picked and failed on; now it is left out, with
    the command that converts it, and the view takes the model directory that serves it."""
    write_bundle(tmp_path / "mlm", "pretraining", marker="config.json")
    hub = {"registered_name": "keras_hub>BertBackbone", "config": {}}
    hf = {"architectures": ["BertForTokenClassification"], "model_type": "bert"}
    # checked as the commands check a model directory: a task no command trains is named
    odd = {"task": "summariser", "encoder": {}}
    for name, config in (("hubclf", hub), ("nerhf", hf), ("odd", odd)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    found, problems = models.discover(str(tmp_path), "keras")
    assert [os.path.basename(p) for p, _ in found["pretraining"]] == ["mlm"]
    assert "encoder" not in found and "summariser" not in found and len(problems) == 3
    assert "hubclf: a keras-hub preset" in problems[0] and "--from keras-hub" in problems[0]
    assert "nerhf: a Hugging Face folder" in problems[1] and "--from hf" in problems[1]
    assert "odd/config.json: unknown task 'summariser'" in problems[2]
    attention = models.candidates_for(models.VIEW["attention"], found, "keras")
    assert [os.path.basename(p) for p, _ in attention] == ["mlm"]
    # A config.json without "task" is an encoder's, as the commands read it.
    (tmp_path / "untasked").mkdir()
    (tmp_path / "untasked" / "config.json").write_text(json.dumps({"encoder": {}}))
    found, _ = models.discover(str(tmp_path), "keras")
    assert [os.path.basename(p) for p, _ in found["encoder"]] == ["untasked"]
    assert sorted(found) == ["encoder", "pretraining"]
