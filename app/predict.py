"""What each view of the app computes and shows: plain functions, testable without a server.

Each view function takes the view's `models.Slot`, the user's inputs and the `Limits`, checks the
inputs, calls the model through the runtime API only (`fill_mask`, `attention`, `classify`,
`answer`, `tag`, `detect_replaced`, `corrupt`; see export/README.md) and returns a dict {output name: value} in the forms
the Gradio components take (`OUTPUTS[view]` lists the names in the order `app.ui` wires them):
HighlightedText values, gr.Label confidences, table rows, HTML (bars, heatmaps: `app.render`) and a JSON-able
"raw" dict for API users. A bad input, a missing model or a failing model never raises: the view
gets `status` = a message saying what is wrong, and the other outputs empty.

    python -c "from app import predict; help(predict)"
"""

from __future__ import annotations

import functools
import logging
import re
import unicodedata
from dataclasses import dataclass

import numpy as np

from app.render import bars_html, heads_grid_html, heatmap_html, shade
from model.tasks import glue

log = logging.getLogger("app")


@dataclass(frozen=True)
class Limits:
    """The app's limits: max_chars is `python -m app --max-input-chars`; the others fixed."""

    max_chars: int = 10_000  # per text box; longer input is refused with a message
    max_top_k: int = 10  # predictions per [MASK]
    max_n_best: int = 20  # answers in the n-best list
    # How long the server keeps a run's attention maps for the view's choosers (a visitor's
    # session holds layers x heads x tokens^2 floats; --sessions bounds how many are kept).
    state_minutes: int = 30


class InputError(ValueError):
    """A problem with the user's input, said in words for the view."""


OUTPUTS = {
    "fill_mask": ("status", "filled", "bars", "raw"),
    "attention": ("status", "attends_to", "head_map", "average_map", "grid", "raw"),
    "sentiment": ("status", "label", "raw"),
    "answer": ("status", "context", "nbest", "raw"),
    "entities": ("status", "spans", "entities", "words", "raw"),
    "replaced_tokens": ("status", "spans", "table", "raw"),
    # The Replaced tokens view's generator button: the corrupted text for the text box first.
    "corrupt": ("text", "status", "spans", "table", "raw"),
}
# What an output shows when there is nothing to show (HTML wants a string, the rest None).
_EMPTY = {"bars": "", "head_map": "", "average_map": "", "grid": ""}

WARNING = "⚠️ "


def view_output(view: str, extra: tuple = ()):
    """Decorator: a view function returning {name: value} for `OUTPUTS[view]` (+ `extra`),
    made total: any exception becomes a status message (ValueError's text as it is: the
    runtime's and our input errors are written for users; anything else logged with its
    traceback)."""
    names = OUTPUTS[view] + tuple(extra)

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                result = fn(*args, **kwargs)
            except ValueError as e:
                log.info("%s: %s", view, e)
                return error_result(view, str(e), extra)
            except Exception as e:
                log.exception("%s failed", view)
                return error_result(
                    view,
                    f"The model could not answer this input "
                    f"({type(e).__name__}); the server log has the details.",
                    extra,
                )
            return {name: result.get(name, _EMPTY.get(name)) for name in names}

        return wrapper

    return decorate


def error_result(view: str, message: str, extra: tuple = ()) -> dict:
    message = message[:1].upper() + message[1:]  # the runtime's messages start in lower case
    out = {name: _EMPTY.get(name) for name in OUTPUTS[view] + tuple(extra)}
    out["status"] = WARNING + message
    out["raw"] = {"error": message.replace("**", "")}
    return out


# === Input checks ===

_SURROGATE = re.compile("[\ud800-\udfff]")
_INVISIBLE = ("Cc", "Cf", "Co", "Cs", "Cn", "Zs", "Zl", "Zp")


def check_text(value, name: str, limits: Limits, required: bool = True) -> str:
    """The text of one input box, or InputError saying why it cannot be used.

    Lone surrogates (which JSON can carry) become U+FFFD one for one, so character offsets
    into the returned text stay those of the input.
    """
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise InputError(f"The {name} must be text, not {type(value).__name__}.")
    text = _SURROGATE.sub("\ufffd", value)
    if len(text) > limits.max_chars:
        raise InputError(
            f"The {name} is {len(text):,} characters long; this app takes at most "
            f"{limits.max_chars:,} (see --max-input-chars)."
        )
    if not text.strip():
        if required:
            raise InputError(f"The {name} is empty: type or pick an example first.")
        return ""
    if all(c.isspace() or unicodedata.category(c) in _INVISIBLE for c in text):
        raise InputError(
            f"The {name} has no visible characters (only spaces, control or "
            f"formatting characters), so there is nothing to read."
        )
    return text


def require(slot):
    """The slot's model, or InputError with what is missing and how to get it."""
    if slot is None or slot.model is None:
        raise InputError(slot.describe() if slot is not None else "No model for this view.")
    return slot.model


def call(slot, method: str, *args, **kwargs):
    """`slot.model.method(*args, **kwargs)`, one call at a time per model."""
    model = require(slot)
    with slot.lock:
        return getattr(model, method)(*args, **kwargs)


def truncation_note(model, text: str, text_pair: str | None = None) -> str:
    """What the model's length limit cut off, in words."""
    limit = model.max_seq_length
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        return f"The input is longer than the model's {limit} tokens: only its beginning was read."
    a = tokenizer.encode([text])[0]
    if text_pair is None:
        kept = max(limit - 2, 0)
        if len(a) <= kept:
            return f"The input is longer than the model's {limit} tokens and was cut."
        last = tokenizer.decode(a[max(0, kept - 6) : kept])
        return (
            f"The text is {len(a)} WordPieces; the model reads {kept} (+ [CLS] and [SEP]), "
            f"so the {len(a) - kept} after “…{last}” were not read."
        )
    b = tokenizer.encode([text_pair])[0]
    return (
        f"The two texts are {len(a)} + {len(b)} WordPieces; the model reads {limit - 3} "
        f"(+ [CLS] and two [SEP]), so the longer was cut at its end."
    )


def unknown_note(tokens: list[str]) -> str | None:
    unknown = sum(t == "[UNK]" for t in tokens)
    if not unknown:
        return None
    return (
        f"{unknown} WordPiece{'s are' if unknown > 1 else ' is'} [UNK]: the vocabulary has "
        f"no pieces for some characters (emoji, rare scripts or symbols)."
    )


def unknown_text_note(model, text: str) -> str | None:
    """`unknown_note` for a text (tokenized again only when it has non-ASCII characters)."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None or text.isascii():
        return None
    ids = tokenizer.encode([text])[0]
    return unknown_note(["[UNK]" if i == tokenizer.unk_id else "" for i in ids])


def status_line(headline: str, notes=()) -> str:
    notes = [n for n in notes if n]
    return "\n\n".join([headline] + [WARNING + n for n in notes])


# === Masked words ===

_MASK = re.compile(r"\[\s*mask\s*\]", re.IGNORECASE)
MASK = "[MASK]"


@view_output("fill_mask")
def fill_mask(slot, text, top_k=5, limits: Limits = Limits()) -> dict:
    model = require(slot)
    text = _MASK.sub(MASK, check_text(text, "text", limits))
    wanted = text.count(MASK)
    if not wanted:
        raise InputError(
            "The text has no [MASK]. Write [MASK] where a word is missing, "
            "e.g. “The cat sat on the [MASK].”"
        )
    k = clamp_int(top_k, 1, min(limits.max_top_k, (slot.info or {}).get("top_k") or 10), "top-k")
    result = call(slot, "fill_mask", text, top_k=k)
    masks = result["masks"]
    notes = []
    if result.get("truncated"):
        # The runtime reads a window of the text around the masks.
        tokens = result.get("tokens", [])
        head, tail = " ".join(tokens[1:4]), " ".join(tokens[-4:-1])
        notes.append(
            f"The text is longer than the model's {model.max_seq_length} tokens: it "
            f"read only the window “{head} … {tail}” around the [MASK]s."
        )
    if len(masks) < wanted:
        notes.append(
            f"Only the first {len(masks)} of the {wanted} [MASK]s fit in that window; "
            f"the rest are left unfilled."
        )
    notes.append(unknown_note(result.get("tokens", [])))
    best = [m["predictions"][0] for m in masks if m["predictions"]]
    headline = (
        f"Filled {len(masks)} [MASK]{'s' if len(masks) != 1 else ''} with the most "
        f"likely WordPiece (top {k} below)."
        if best
        else "No predictions."
    )
    return {
        "status": status_line(headline, notes),
        "filled": filled_spans(text, masks),
        "bars": bars_html(masks),
        "raw": jsonable(result),
    }


def filled_spans(text: str, masks: list[dict]) -> list[tuple]:
    """HighlightedText value: the text with each [MASK] replaced by its best guess, labelled
    with its number and probability."""
    pieces = text.split(MASK)
    spans = []
    for i, piece in enumerate(pieces):
        if piece:
            spans.append((piece, None))
        if i == len(pieces) - 1:
            break
        if i < len(masks) and masks[i]["predictions"]:
            p = masks[i]["predictions"][masks[i]["best"]]  # the word the runtime filled in
            spans.append((masks[i]["fill"], f"[MASK] {i + 1}, {p['score']:.0%} sure"))
        else:
            spans.append((MASK, "not read"))
    return spans


# === Attention ===


def attention_state(slot, text, text_pair=None, limits: Limits = Limits()) -> dict:
    """Runs the model: {"tokens", "segment_ids", "attention" (layers, heads, T, T), "notes"}."""
    model = require(slot)
    text = check_text(text, "sentence", limits)
    pair = check_text(text_pair, "second sentence", limits, required=False) or None
    result = call(slot, "attention", text, pair)
    notes = [
        truncation_note(model, text, pair) if result.get("truncated") else None,
        unknown_note(result["tokens"]),
    ]
    return {
        "tokens": list(result["tokens"]),
        "segment_ids": [int(s) for s in result["segment_ids"]],
        "attention": np.asarray(result["attention"], dtype=np.float32),
        "truncated": bool(result.get("truncated")),
        "notes": [n for n in notes if n],
    }


@view_output("attention", extra=("state",))
def attention(
    slot, text, text_pair=None, layer=1, head=1, token=None, limits: Limits = Limits()
) -> dict:
    """The attention endpoint: runs the model, then `render_attention`; also returns the
    model's answer as "state" (None on error), so that choosing another head or token
    re-renders without running the model again. A `token` past the new text's end falls back
    to the default, with a note (the selector keeps the old text's choice)."""
    state = attention_state(slot, text, text_pair, limits)
    tokens = state["tokens"]
    token = token_index(token, tokens)
    note = None
    if token is not None and not 0 <= token < len(tokens):
        note = (
            f"WordPiece {token} is not in this text (0 to {len(tokens) - 1}): "
            f"showing WordPiece {default_token(tokens)}, “{tokens[default_token(tokens)]}”."
        )
        token = None
    out = render_attention(state, layer, head, token)
    if note:
        out["status"] = status_line(out["status"], [note])
    return {**out, "state": state}


def token_index(token, tokens: list[str]) -> int | None:
    """The attending token as a 0-based index: a number ("6" too), a choice of the token
    list ("6: where"), or a WordPiece of the text ("where": its first place); None for
    none. Anything else is an InputError naming the text's tokens."""
    if token is None or (isinstance(token, str) and not token.strip()):
        return None
    text = str(token).strip()
    number = text.split(":", 1)[0].strip()
    try:
        return int(float(number))
    except (ValueError, OverflowError):  # not a number; "inf"
        pass
    lowered = [t.lower() for t in tokens]
    if text.lower() in lowered:
        return lowered.index(text.lower())
    listed = ", ".join(tokens[:40]) + (" ..." if len(tokens) > 40 else "")
    raise InputError(f"The token {token!r} is not in the text; its tokens: {listed}.")


def default_token(tokens: list[str]) -> int:
    """The first word after [CLS] (more telling than [CLS] itself)."""
    return 1 if len(tokens) > 2 else 0


def render_attention(state: dict | None, layer=1, head=1, token=None) -> dict:
    """The views of one head (1-based `layer`, `head`) and one attending token (0-based)."""
    if not state:
        raise InputError(
            "Run the model on a sentence first (the maps of a run are kept for "
            f"{Limits.state_minutes} minutes after it)."
        )
    attention, tokens = state["attention"], state["tokens"]
    num_layers, num_heads, length = attention.shape[0], attention.shape[1], attention.shape[2]
    layer = clamp_int(layer, 1, num_layers, "layer")
    head = clamp_int(head, 1, num_heads, "head")
    token = (
        default_token(tokens) if token in (None, "") else clamp_int(token, 0, length - 1, "token")
    )
    matrix = attention[layer - 1, head - 1]  # (T, T): row = attending token, column = attended
    average = attention[layer - 1].mean(axis=0)  # (T, T)
    row = matrix[token]
    top = np.argsort(-row, kind="stable")[:3]
    targets = ", ".join(f"“{tokens[j]}” ({row[j]:.2f})" for j in top)
    headline = (
        f"Layer {layer}, head {head}: “{tokens[token]}” (WordPiece {token} of the input) "
        f"attends most to {targets} (attention weights, each row summing to 1)."
    )
    raw = {
        "tokens": tokens,
        "segment_ids": state["segment_ids"],
        "truncated": state["truncated"],
        "num_layers": num_layers,
        "num_heads": num_heads,
        "layer": layer,
        "head": head,
        "token": token,
        "attention": np.round(matrix.astype(float), 4).tolist(),
    }
    return {
        "status": status_line(headline, state.get("notes", ())),
        "attends_to": attends_to_spans(tokens, row),
        "head_map": heatmap_html(
            matrix, tokens, state["segment_ids"], token, f"Layer {layer}, head {head}"
        ),
        "average_map": heatmap_html(
            average,
            tokens,
            state["segment_ids"],
            token,
            f"Layer {layer}, average of {num_heads} heads",
        ),
        "grid": heads_grid_html(attention[layer - 1], head, layer),
        "raw": raw,
    }


# The re-render event of the attention view (another layer, head or token; no model call).
rerender_attention = view_output("attention")(render_attention)


def token_choices(tokens: list[str]) -> list[tuple[str, int]]:
    """(label, token index) pairs for the token selector."""
    return [(f"{i}: {t}", i) for i, t in enumerate(tokens)]


def attends_to_spans(tokens: list[str], row: np.ndarray) -> list[tuple]:
    """HighlightedText value: every WordPiece, shaded by how much the chosen token attends to
    it (`shade` of its weight)."""
    return [(t, round(float(v), 3)) for t, v in zip(tokens, shade(row))]


# === Sentiment ===


@view_output("sentiment")
def sentiment(slot, text, limits: Limits = Limits()) -> dict:
    model = require(slot)
    text = check_text(text, "text", limits)
    result = call(slot, "classify", text)
    notes = [
        truncation_note(model, text) if result.get("truncated") else None,
        unknown_text_note(model, text),
    ]
    # GLUE stores SST-2's labels as "0"/"1": shown as what they mean.
    names = glue.meanings((slot.info or {}).get("finetuned_task"))
    if result.get("value") is not None and not result.get("scores"):
        headline = f"Score: **{result['value']:.3f}**"
        return {
            "status": status_line(_with_reading(headline, result, names), notes),
            "raw": jsonable(result),
        }
    scores = {names.get(str(k), str(k)): round(float(v), 6) for k, v in result["scores"].items()}
    label = names.get(str(result["label"]), str(result["label"]))
    headline = f"**{label}** ({scores.get(label, max(scores.values())):.1%})"
    return {
        "status": status_line(_with_reading(headline, result, names), notes),
        "label": scores,
        "raw": jsonable(result),
    }


def reading_note(result: dict, names: dict | None = None) -> str | None:
    """How `classify` read a text longer than the model (its windows), in words; None
    for a text read in one go."""
    windows = result.get("window_results") or []
    if (result.get("windows") or 1) < 2 or len(windows) < 2:
        return None
    names = names or {}
    note = (
        f"Read as {len(windows)} overlapping windows of up to "
        f"{result.get('window_wordpieces', '?')} WordPieces ({result.get('wordpieces', '?')} "
        f"in all: more than the model reads at once), their scores averaged, weighted by "
        f"length."
    )
    if result.get("scores"):
        label = result["label"]
        values = [w["scores"].get(label, 0.0) for w in windows]
        shown = [f"{v:.0%}" for v in values]
        what = f", {names.get(str(label), str(label))}"
    elif result.get("value") is not None:
        values = [w["value"] for w in windows]
        shown, what = [f"{v:.3f}" for v in values], ""
    else:
        return note
    if len(windows) <= MAX_LISTED_WINDOWS:
        each = ", ".join(f"{v} ({_characters(w)})" for v, w in zip(shown, windows))
        return note + f" Window by window{what}: {each}."
    low, high = int(np.argmin(values)), int(np.argmax(values))
    return note + (
        f" Window by window{what}: from {shown[low]} ({_characters(windows[low])}) to "
        f"{shown[high]} ({_characters(windows[high])})."
    )


# A longer text's windows are summed up by their lowest and highest, not listed.
MAX_LISTED_WINDOWS = 6


def _characters(window: dict) -> str:
    return f"characters {window['char_start']:,}-{window['char_end']:,}"


def _with_reading(headline: str, result: dict, names: dict) -> str:
    note = reading_note(result, names)
    return headline if note is None else f"{headline}\n\n{note}"


# === Question answering ===

NO_ANSWER = "(no answer)"


@view_output("answer")
def answer(slot, question, context, n_best=5, limits: Limits = Limits()) -> dict:
    model = require(slot)
    question = check_text(question, "question", limits)
    context = check_text(context, "context", limits)
    n = clamp_int(n_best, 1, limits.max_n_best, "n-best")
    result = call(slot, "answer", question, context, n_best=n)
    nbest = result.get("nbest") or []
    rows = [
        [
            i + 1,
            a["text"] if a["start"] >= 0 else NO_ANSWER,
            round(float(a["score"]), 3),
            _probability(a["span_probability"]),
        ]
        for i, a in enumerate(nbest[:n])
    ]
    windows = result.get("windows", 1)
    notes = [
        f"The context is longer than the model's {model.max_seq_length} tokens: it was read "
        f"in {windows} overlapping windows."
        if windows and windows > 1
        else None,
        "The question is long: only its first WordPieces were read (SQuAD's limit)."
        if result.get("truncated")
        else None,
        unknown_text_note(model, question + " " + context),
    ]
    if result.get("no_answer") or result.get("start", -1) < 0:
        spans = {"text": context, "entities": []}
        return {
            "status": status_line(_no_answer_headline(slot, result, nbest) + ".", notes),
            "context": spans,
            "nbest": rows,
            "raw": jsonable(result),
        }
    score = f"{_percent(result.get('span_probability'))} likely"
    if result.get("null_score") is not None:
        score += f"; no answer {_percent(result.get('null_probability'))}"
    headline = f"**{result['text']}** ({score})"
    spans = {
        "text": context,
        "entities": [
            {"entity": "answer", "start": int(result["start"]), "end": int(result["end"])}
        ],
    }
    return {
        "status": status_line(headline, notes),
        "context": spans,
        "nbest": rows,
        "raw": jsonable(result),
    }


def _no_answer_headline(slot, result: dict, nbest: list) -> str:
    """ "No answer", with (a v2.0 model's) the no-answer probability beside the best
    span's, and the raw scores against the tuned threshold, the decision's own terms."""
    best = next((a for a in nbest if a["start"] >= 0), None)
    null = result.get("null_score")
    if null is None:  # a v1.1 model, which cannot decline: no start and end made a span
        return (
            "**No span found**: none of the model's likeliest starts and ends make a valid "
            "answer in this context (a SQuAD v1.1 model answers whenever one does)"
        )
    headline = "**No answer** in the context"
    headline += f": no answer {_percent(result.get('null_probability'))}"
    if best is not None:
        headline += f", the best span “{best['text']}” {_percent(best.get('span_probability'))}"
    threshold = (slot.info or {}).get("null_threshold")
    if threshold is not None:
        headline += (
            f" (the no-answer logit {null:.3f} beat the best span's"
            + (f" {best['score']:.3f}" if best is not None else "")
            + f" by more than the tuned threshold {threshold:.3f})"
        )
    return headline


def _probability(p) -> float | None:
    return None if p is None else round(float(p), 4)


def _percent(p) -> str:
    """A probability for the status line ("62.1 %"; "-" for none)."""
    return "-" if p is None else f"{100 * float(p):.1f} %"


# === Named entities ===

# Span colours (Tailwind's 700 shades): the type's white label on them has a contrast of at
# least 4.5:1 (WCAG AA); the type is written beside each span, never shown by colour alone.
ENTITY_COLORS = {"PER": "#b45309", "ORG": "#1d4ed8", "LOC": "#047857", "MISC": "#7e22ce"}
ANSWER_COLOR = "#15803d"


@view_output("entities")
def entities(slot, text, limits: Limits = Limits()) -> dict:
    model = require(slot)
    text = check_text(text, "text", limits)
    result = call(slot, "tag", text)
    found = result["entities"]
    words = result["words"]
    notes = [unknown_text_note(model, text)]
    if result.get("truncated"):
        end = max((w["end"] for w in words), default=0)
        notes.append(
            f"The text is longer than the model's {model.max_seq_length} tokens: "
            f"only its first {len(words)} words were tagged; the text after character "
            f"{end} (“{text[end : end + 30].strip()}…”) was not."
        )
    kinds = sorted({e["type"] for e in found})
    headline = (
        f"{len(found)} entit{'y' if len(found) == 1 else 'ies'}"
        + (f" ({', '.join(kinds)})" if kinds else "")
        + f" in {len(words)} words."
    )
    spans = {
        "text": text,
        "entities": [
            {"entity": e["type"], "start": int(e["start"]), "end": int(e["end"])} for e in found
        ],
    }
    entity_rows = [
        [e["text"], e["type"], round(float(e["score"]), 4), int(e["start"]), int(e["end"])]
        for e in found
    ]
    word_rows = [[w["word"], w["tag"], round(float(w["score"]), 4)] for w in words]
    return {
        "status": status_line(headline, notes),
        "spans": spans,
        "entities": entity_rows,
        "words": word_rows,
        "raw": jsonable(result),
    }


# === Replaced tokens (ELECTRA) ===

# Labels of the highlighted tokens: "replaced" is the discriminator's call; after the generator
# corrupted the text, each call is checked against what it really did.
REPLACED_COLORS = {
    "replaced": "#b91c1c",
    "caught": "#15803d",
    "missed": "#b45309",
    "false alarm": "#7e22ce",
}
# The generator's share of WordPieces: pre-training's 15 %, and the range the view offers.
CORRUPT_RATE, MIN_RATE, MAX_RATE = 0.15, 0.05, 0.5
MAX_SEED = 2**31 - 1


@view_output("replaced_tokens")
def replaced_tokens(slot, text, limits: Limits = Limits()) -> dict:
    """The discriminator's call on every WordPiece of the text, with its probability."""
    model = require(slot)
    text = check_text(text, "text", limits)
    return detection_outputs(model, text, call(slot, "detect_replaced", text))


@view_output("corrupt")
def corrupt(slot, text, rate=CORRUPT_RATE, seed=None, limits: Limits = Limits()) -> dict:
    """The generator corrupts the text as in pre-training; then the discriminator's call on the
    result, each one checked against what the generator did. "text" is the corrupted text."""
    model = require(slot)
    text = check_text(text, "text", limits)
    rate = clamp_float(rate, MIN_RATE, MAX_RATE, "share of WordPieces to replace")
    seed = None if seed in (None, "") else clamp_int(seed, 0, MAX_SEED, "seed")
    corrupted = call(slot, "corrupt", text, rate=rate, seed=seed)
    detected = call(slot, "detect_replaced", corrupted["text"])
    # The truth is per WordPiece of the generator's input; it applies to the discriminator's
    # reading when the corrupted text reads as the same WordPieces, but for a "##" lost where a
    # drawn continuation starts a word (it does unless a draw merges or splits words).
    same = len(detected["tokens"]) == len(corrupted["tokens"]) and all(
        a["token"].removeprefix("##") == b["token"].removeprefix("##")
        for a, b in zip(detected["tokens"], corrupted["tokens"])
    )
    truth = [t["replaced"] for t in corrupted["tokens"]] if same else None
    out = detection_outputs(model, corrupted["text"], detected, truth, corrupted)
    if len(corrupted["text"]) > limits.max_chars:  # drawn words longer than those they replaced
        out["status"] = status_line(
            out["status"],
            [
                f"The corrupted text is {len(corrupted['text']):,} characters, over this app's "
                f"{limits.max_chars:,} (--max-input-chars): shorten it before asking again."
            ],
        )
    out["text"] = corrupted["text"]
    out["raw"] = {"corrupt": jsonable(corrupted), "detect_replaced": out["raw"]}
    return out


def detection_outputs(model, text: str, result: dict, truth=None, corrupted=None) -> dict:
    """The view's outputs for `detect_replaced`'s `result` on `text`; `truth` (a bool per
    WordPiece: replaced by the generator) labels each call caught, missed or false alarm."""
    tokens = result["tokens"]
    flagged = [t["replaced"] for t in tokens]
    labels = []
    for k, call_replaced in enumerate(flagged):
        if truth is None:
            labels.append("replaced" if call_replaced else None)
        elif call_replaced:
            labels.append("caught" if truth[k] else "false alarm")
        else:
            labels.append("missed" if truth[k] else None)
    entities, seen = [], set()
    for t, label in zip(tokens, labels):
        # Pieces of a word whose characters cannot be split share its span: highlight it once.
        if label is not None and (t["start"], t["end"]) not in seen:
            seen.add((t["start"], t["end"]))
            entities.append({"entity": label, "start": int(t["start"]), "end": int(t["end"])})
    rows = [
        [
            k,
            t["token"],
            round(float(t["probability_replaced"]), 4),
            "yes" if t["replaced"] else "",
            "" if truth is None else ("yes" if truth[k] else "no"),
        ]
        for k, t in enumerate(tokens)
    ]
    notes = [
        truncation_note(model, text) if result.get("truncated") else None,
        unknown_note([t["token"] for t in tokens]),
    ]
    if corrupted is not None and truth is None:
        notes.append(
            "The corrupted text reads as other WordPieces than the generator wrote (a draw "
            "joined or split a word), so the calls are not checked against it; the raw output "
            "has what the generator replaced."
        )
    return {
        "status": status_line(detection_headline(tokens, truth, corrupted), notes),
        "spans": {"text": text, "entities": entities},
        "table": rows,
        "raw": jsonable(result),
    }


def detection_headline(tokens: list[dict], truth=None, corrupted=None) -> str:
    n = len(tokens)
    flagged = sorted((t for t in tokens if t["replaced"]), key=lambda t: -t["probability_replaced"])
    listed = ", ".join(f"“{t['token']}” ({t['probability_replaced']:.0%})" for t in flagged[:5])
    more = f" and {len(flagged) - 5} more" if len(flagged) > 5 else ""
    if flagged:
        called = f"{len(flagged)} of {n} WordPieces look replaced: {listed}{more}."
    else:
        top = max(tokens, key=lambda t: t["probability_replaced"])
        called = (
            f"No WordPiece looks replaced (every probability is at most 50%; the highest: "
            f"“{top['token']}”, {top['probability_replaced']:.0%})."
        )
    if corrupted is None:
        return called
    replaced = len(corrupted["replaced"])
    done = (
        f"The generator replaced {replaced} of {len(corrupted['tokens'])} WordPieces "
        f"(it drew at {len(corrupted['masked'])}, seed {corrupted['seed']})."
    )
    if truth is None:
        return f"{done} {called}"
    caught = sum(t["replaced"] and r for t, r in zip(tokens, truth))
    missed = sum(r and not t["replaced"] for t, r in zip(tokens, truth))
    false = sum(t["replaced"] and not r for t, r in zip(tokens, truth))
    return (
        f"{done} {called} Caught {caught}, missed {missed}, "
        f"{false} false alarm{'s' if false != 1 else ''}."
    )


# === Helpers ===


def clamp_float(value, low: float, high: float, name: str) -> float:
    """`value` as a float in [low, high], or InputError."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"The {name} must be a number, not {value!r}.") from None
    if not low <= number <= high:
        raise InputError(f"The {name} must be between {low:g} and {high:g}, not {number:g}.")
    return number


def clamp_int(value, low: int, high: int, name: str) -> int:
    """`value` as an int in [low, high], or InputError."""
    try:
        number = int(float(value))
    except (TypeError, ValueError):
        raise InputError(f"The {name} must be a whole number, not {value!r}.") from None
    if not low <= number <= high:
        raise InputError(f"The {name} must be between {low} and {high}, not {number}.")
    return number


def jsonable(value):
    """`value` with numpy scalars and arrays as plain Python (floats to 6 digits)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (np.floating, float)):
        return round(float(value), 6)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value
