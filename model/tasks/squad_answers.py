"""SQuAD's answers: the start and end logits of `squad_windows`' windows back to an answer
of the context's own characters per question, as google-research's `write_predictions`.

Predictions. For each question, the `n_best_size` (20) best start and end
positions of each window are paired, invalid pairs dropped (outside the
context, end before start, longer than `max_answer_length` (30) tokens, start
not in its max-context window), the rest ranked by start + end logit; the
best span is projected from its tokens back onto the original characters of
the context (`final_char_span`: google's `get_final_text`, but where the tokenizer
dropped characters, the answer rather than google's whole words). An answer is
always a piece of the context, with its own whitespace (google's joins the
words with single spaces; the metric's normalisation makes them equal), and
nbest_predictions.json gives its `answer_start` too. SQuAD v2.0 adds
the null answer: its score is the smallest `[CLS]` start + end logit over
the question's windows, and the question is answered "" when that score
minus the best span's score (written to null_odds.json) exceeds
`null_threshold` (0). `evaluate` reports the metrics at that threshold, and
also `best_exact`/`best_f1` at the threshold tuned on the file itself by the
official script's `find_best_thresh`, run on the best non-null answers so
that every threshold is considered (run on the thresholded predictions, as
the official command line does, it can only lower the threshold).
"""

from __future__ import annotations

import collections
import dataclasses
import typing
import unicodedata

import numpy as np

from model.tasks.base import softmax
from model.tasks.squad_examples import Paragraph, SquadExample
from model.tasks.squad_windows import Windows
from model.text.wordpiece import basic_tokenize, normalize_char, normalized_lengths

N_BEST_SIZE = 20
MAX_ANSWER_LENGTH = 30
# Stands for "no span at all" in null_odds.json (google-research's script
# crashes there): the null answer wins at any sensible threshold.
NO_SPAN_ODDS = 1e6


# === Answers back to the text (google's get_final_text) ===


def final_char_span(
    pred_text: str,
    paragraph: Paragraph,
    first_word: int,
    last_word: int,
    lowercase: bool,
    memo: dict | None = None,
) -> tuple[int, int]:
    """[start, end) characters of the context that the tokens `pred_text`
    (WordPieces glued back, e.g. "steve smith") cover, inside the words
    `first_word..last_word` (e.g. "Steve Smith's").

    google's `get_final_text`: the words are basic-tokenized ("steve smith ' s"),
    `pred_text` is looked up there, and its position carried back through the
    characters that are not spaces, which line up one to one unless
    normalisation changed their number; when the lookup or the alignment fails,
    the whole words are the answer. One departure: where normalisation changed the
    number (an accent written apart, a zero-width space or soft hyphen), google's whole
    words ("Schuster\u200b." for "schuster") become the characters each normalised one
    came from ("Schuster"), each character normalised on its own (`_aligned_span`).

    The same answer without google's character maps (an n-best list asks this 20 times a
    question): a word holds no space, so the k-th non-space character is found by counting,
    and each word is basic-tokenized on its own, which gives what the joined words give (no
    word of the tokenizer spans a space), once per `memo` (one postprocess call's).
    """
    words = range(first_word, last_word + 1)
    whole = (paragraph.starts[first_word], paragraph.word_end(last_word))
    memo = {} if memo is None else memo
    pieces = []
    for w in words:
        key = (paragraph, w, lowercase)
        if key not in memo:
            memo[key] = " ".join(basic_tokenize(paragraph.words[w], lowercase))
        if memo[key]:
            pieces.append(memo[key])
    tok_text = " ".join(pieces)
    start = tok_text.find(pred_text)
    if start == -1 or not pred_text:
        return whole
    end = start + len(pred_text) - 1
    if " " in (tok_text[start], tok_text[end]):
        return whole  # google's maps have no entry for a space
    first, last = start - tok_text.count(" ", 0, start), end - tok_text.count(" ", 0, end)
    chars = len(tok_text) - tok_text.count(" ")
    lengths = [len(paragraph.words[w]) for w in words]
    if sum(lengths) != chars:
        # normalisation changed the number of characters, where google's answer is the whole
        # words ("Schuster\u200b." for "schuster", "Mu\u0308nchen," for "munchen")
        return _aligned_span(paragraph, words, lowercase, chars, (first, last)) or whole

    def context_char(k: int) -> int:  # the k-th non-space character of the words
        for w, n in zip(words, lengths):
            if k < n:
                return paragraph.starts[w] + k
            k -= n
        raise AssertionError("counted past the words")

    return context_char(first), context_char(last) + 1


def _aligned_span(
    paragraph: Paragraph, words: range, lowercase: bool, chars: int, span: tuple[int, int]
) -> tuple[int, int] | None:
    """[start, end) characters of the context that the `span` (first, last) of the `chars`
    non-space characters of the words' basic tokenization come from, each character
    normalised on its own as the tokenizer normalises it: an invisible character beside the
    answer is left out, the accent stripped from its last letter kept. None where the
    counts disagree."""
    sources = []  # the context character each normalised character comes from
    for w in words:
        begin = paragraph.starts[w]
        for i, n in enumerate(normalized_lengths(paragraph.words[w], lowercase)):
            sources += [begin + i] * n
    if len(sources) != chars:
        return None
    first, last = span
    end, context = sources[last] + 1, paragraph.context
    while end < len(context) and _stripped_accent(context[end], lowercase):
        end += 1  # the accent, written apart, of the answer's last letter
    return sources[first], end


def _stripped_accent(char: str, lowercase: bool) -> bool:
    """A combining accent that the tokenizer strips (uncased only); marks it keeps, such as
    Devanagari's vowel signs, are characters of their own."""
    return unicodedata.category(char) == "Mn" and not normalize_char(char, lowercase)


def wordpiece_text(tokens: list[str]) -> str:
    """Tokens glued back into words, as google's `write_predictions` does."""
    text = " ".join(tokens).replace(" ##", "").replace("##", "").strip()
    return " ".join(text.split())


def window_char_span(
    example: SquadExample,
    windows: Windows,
    token_ids: np.ndarray,
    feature: int,
    start: int,
    end: int,
    vocabulary: list[str],
    lowercase: bool,
    memo: dict | None = None,
) -> tuple[int, int]:
    """[start, end) characters of the context for tokens `start..end` of window `feature`."""
    first_word = int(windows.token_to_word[feature, start])
    last_word = int(windows.token_to_word[feature, end])
    if first_word < 0 or last_word < 0:
        raise ValueError(f"tokens {start}..{end} of window {feature} are not all context")
    tokens = [vocabulary[int(t)] for t in token_ids[feature, start : end + 1]]
    return final_char_span(
        wordpiece_text(tokens), example.paragraph, first_word, last_word, lowercase, memo
    )


# === Predictions ===


@dataclasses.dataclass
class SquadPredictions:
    """predictions: {id: answer text} ("" for no answer, v2.0).
    nbest: {id: [{"text", "probability", "start_logit", "end_logit"[, "answer_start"]}]}.
    null_odds: {id: null score - best span score} (v2.0; empty for v1.1).
    best_non_null: {id: the best span's text, whatever the null score}.
    windows: {id: [the window (feature) of each n-best entry; None for google's "empty"]}.
    """

    predictions: dict
    nbest: dict
    null_odds: dict
    best_non_null: dict
    windows: dict = dataclasses.field(default_factory=dict)


def best_indexes(logits: np.ndarray, n_best_size: int) -> np.ndarray:
    """The `n_best_size` largest positions, ties to the earlier (a stable sort, as google's)."""
    return np.argsort(-logits, kind="stable")[:n_best_size]


class _Span(typing.NamedTuple):
    """One candidate answer: window `window`'s tokens `start`..`end` and their logits
    (the null answer: start = end = 0, [CLS])."""

    score: float
    window: int
    start: int
    end: int
    start_logit: float
    end_logit: float


def _window_spans(
    f: int, s_logits, e_logits, windows: Windows, n_best_size: int, max_answer_length: int
) -> list[_Span]:
    """The valid spans among window `f`'s n-best starts x n-best ends, in the order of
    google's nested loops: both ends on words, the start in its word's best window,
    the end not before the start, at most `max_answer_length` tokens."""
    starts, ends = np.meshgrid(
        best_indexes(s_logits, n_best_size), best_indexes(e_logits, n_best_size), indexing="ij"
    )
    starts, ends = starts.ravel(), ends.ravel()
    words = windows.token_to_word[f]
    ok = (
        (words[starts] >= 0)
        & (words[ends] >= 0)
        & windows.max_context[f][starts]
        & (ends >= starts)
        & (ends - starts + 1 <= max_answer_length)
    )
    spans = []
    for s, e in zip(starts[ok], ends[ok]):
        sl, el = float(s_logits[s]), float(e_logits[e])
        spans.append(_Span(sl + el, f, int(s), int(e), sl, el))
    return spans


def _candidates(
    features: list[int],
    start_logits,
    end_logits,
    windows: Windows,
    n_best_size: int,
    max_answer_length: int,
    version_2: bool,
) -> tuple[list[_Span], _Span | None]:
    """One question's candidates from all its windows (`features`), best first (a stable
    sort, as google's sorted()), and (v2.0) the null answer among them: that of the
    window whose [CLS] scores lowest, as google's (zero for a question without windows)."""
    spans, null = [], None
    for f in features:
        s_logits = np.asarray(start_logits[f], dtype=np.float64)
        e_logits = np.asarray(end_logits[f], dtype=np.float64)
        cls = s_logits[0] + e_logits[0]
        if version_2 and (null is None or cls < null.score):
            null = _Span(cls, f, 0, 0, float(s_logits[0]), float(e_logits[0]))
        spans += _window_spans(f, s_logits, e_logits, windows, n_best_size, max_answer_length)
    if version_2:
        null = null or _Span(0.0, 0, 0, 0, 0.0, 0.0)
        spans.append(null)
    spans.sort(key=lambda span: span.score, reverse=True)
    return spans, null


def _nbest(spans: list[_Span], null: _Span | None, text_of, n_best_size: int) -> list[dict]:
    """The first `n_best_size` candidates with distinct texts (`text_of(span)` gives a
    span's (text, first character) in the context); v2.0 keeps the null answer even when
    it falls past the n-best; google's "empty" stands in when nothing is valid."""
    seen, nbest = set(), []
    for span in spans:
        if len(nbest) >= n_best_size:
            break
        entry = {"text": "", "start_logit": span.start_logit, "end_logit": span.end_logit}
        if span.start > 0:  # a span, not the null answer
            entry["text"], entry["answer_start"] = text_of(span)
            if entry["text"] in seen:
                continue
        seen.add(entry["text"])
        nbest.append(entry | {"window": span.window})
    if null is not None and "" not in seen:
        nbest.append(
            {"text": "", "start_logit": null.start_logit, "end_logit": null.end_logit}
            | {"window": null.window}
        )
    if not nbest:  # no valid span at all (google's fallback)
        nbest.append({"text": "empty", "start_logit": 0.0, "end_logit": 0.0})
    return nbest


def _record(
    out: SquadPredictions, qid: str, nbest: list[dict], null: _Span | None, null_threshold: float
) -> None:
    """One question's n-best list (each entry's "probability" a softmax over the list)
    and answer, into `out`: v1.1's is the best entry; v2.0's is "" when the null score
    beats the best span's by more than `null_threshold`."""
    probs = softmax([n["start_logit"] + n["end_logit"] for n in nbest]).tolist()
    out.nbest[qid] = [
        {"text": n["text"], "probability": p}
        | {k: n[k] for k in ("start_logit", "end_logit", "answer_start") if k in n}
        for n, p in zip(nbest, probs)
    ]
    out.windows[qid] = [n.get("window") for n in nbest]
    if null is None:  # v1.1
        out.predictions[qid] = out.best_non_null[qid] = nbest[0]["text"]
        return
    best = next((n for n in nbest if n["text"]), None)
    if best is None:
        out.null_odds[qid] = NO_SPAN_ODDS
    else:
        out.null_odds[qid] = float(null.score) - best["start_logit"] - best["end_logit"]
    out.best_non_null[qid] = best["text"] if best else ""
    out.predictions[qid] = "" if out.null_odds[qid] > null_threshold else out.best_non_null[qid]


def postprocess(
    examples: list[SquadExample],
    windows: Windows,
    token_ids: np.ndarray,
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    vocabulary: list[str],
    lowercase: bool = True,
    n_best_size: int = N_BEST_SIZE,
    max_answer_length: int = MAX_ANSWER_LENGTH,
    version_2: bool = False,
    null_threshold: float = 0.0,
) -> SquadPredictions:
    """google's `write_predictions`: window logits -> an answer per question."""
    by_example = collections.defaultdict(list)
    for f, i in enumerate(windows.example_index):
        by_example[int(i)].append(f)
    out = SquadPredictions({}, {}, {}, {})
    memo = {}  # each context word basic-tokenized once (final_char_span)
    for i, example in enumerate(examples):
        spans, null = _candidates(
            by_example.get(i, []),
            start_logits,
            end_logits,
            windows,
            n_best_size,
            max_answer_length,
            version_2,
        )

        def text_of(span: _Span, example=example) -> tuple[str, int]:
            begin, stop = window_char_span(
                example, windows, token_ids, span.window, span.start, span.end,
                vocabulary, lowercase, memo,
            )  # fmt: skip
            return example.context[begin:stop], begin

        _record(
            out, example.qas_id, _nbest(spans, null, text_of, n_best_size), null, null_threshold
        )
    return out


def span_probability(
    entry: dict, window: int | None, start_logits, end_logits, padding_mask
) -> float | None:
    """P(start) x P(end) of an n-best `entry` ({"start_logit", "end_logit"}; the null
    answer's are [CLS]'s) under the model's own softmaxes over the real tokens of its
    `window` (`SquadPredictions.windows`): a probability that does not depend on how many
    answers the n-best list keeps (its "probability" is a softmax over those answers alone).
    None without a window (google's "empty" stand-in for no valid span)."""
    if window is None:
        return None
    real = np.asarray(padding_mask[window]) > 0
    s = np.asarray(start_logits[window], dtype=np.float64)[real]
    e = np.asarray(end_logits[window], dtype=np.float64)[real]
    log_p = entry["start_logit"] + entry["end_logit"]
    return float(np.exp(log_p - np.logaddexp.reduce(s) - np.logaddexp.reduce(e)))


def split_logits(outputs) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) logits from what a model's `predict` returned: a dict with
    start_logits/end_logits (also a key containing "start"/"end", as an
    exported signature may name them), a pair, or one (..., 2) array."""
    if isinstance(outputs, dict):
        if "start_logits" in outputs and "end_logits" in outputs:
            return np.asarray(outputs["start_logits"]), np.asarray(outputs["end_logits"])
        start = [k for k in outputs if "start" in k]
        end = [k for k in outputs if "end" in k]
        if len(start) == 1 and len(end) == 1:
            return np.asarray(outputs[start[0]]), np.asarray(outputs[end[0]])
        raise ValueError(f"cannot find start and end logits in the outputs {sorted(outputs)}")
    if isinstance(outputs, (list, tuple)) and len(outputs) == 2:
        return np.asarray(outputs[0]), np.asarray(outputs[1])
    outputs = np.asarray(outputs)
    if outputs.ndim == 3 and outputs.shape[-1] == 2:
        return outputs[..., 0], outputs[..., 1]
    raise ValueError(f"cannot read start and end logits from outputs of shape {outputs.shape}")
