"""SQuAD v1.1 and v2.0 (the paper's sections 4.2, 4.3) as google-research/bert's `run_squad.py`.

    python -m model.train finetune --task squad1 --init runs/base --output runs/squad1 \\
        --data ../shared/data/squad/train-v1.1.reconstructed.json   # dev-v1.1.json beside it
    python -m model.evaluate --task squad1 --model runs/squad1 \\
        --data ../shared/data/squad/dev-v1.1.json

    python -m model.tasks.squad make-v2-train --negative-ratio 0.5 --seed 0 \\
        --input ../shared/data/squad/train-v1.1.reconstructed.json \\
        --output runs/squad2-data/train-v2.0.json \\
        --dev ../shared/data/squad/dev-v2.0.reconstructed.json  # copied in as dev-v2.0.json
    python -m model.tasks.squad negatives-report \\
        --input ../shared/data/squad/train-v1.1.reconstructed.json \\
        --dev ../shared/data/squad/dev-v2.0.reconstructed.json   # how each kind of negative looks
    python -m model.train finetune --task squad2 --data runs/squad2-data --init runs/base \\
        --output runs/squad2 --epochs 2 --batch-size 48
    python -m model.evaluate --task squad2 --model runs/squad2 \\
        --data ../shared/data/squad/dev-v2.0.reconstructed.json
    python -m model.tasks.squad_metric DATA.json runs/squad2/predictions.json \\
        --na-prob-file runs/squad2/null_odds.json      # the official v2.0 script's numbers

The model (`model.heads.question_answerer.BertQuestionAnswerer`) is the paper's: a
start vector and an end vector dotted with every token's final hidden state.

Inputs. A context is split at whitespace into words (`Paragraph`, google's
`doc_tokens`), each word is WordPiece-tokenized on its own, and every token
remembers its word (`tok_to_orig_index`). `[CLS] question [SEP] window [SEP]`
features slide over long contexts: the question is cut to `max_query_length`
(64) tokens, windows of `seq_len - len(question) - 3` tokens start every
`doc_stride` (128) tokens, the last one ends at the context's end. A token
seen by several windows belongs to the one where it has the most context on
both sides (`max_context_mask`); only there may an answer start.

Training labels. The first answer's words become a token span, narrowed to
the answer's own tokens when they are part of a longer word
(`improve_answer_span`: "1895" inside "(1895-1943)"). A window that does not
contain the whole span, and every window of an unanswerable question, is
labelled at `[CLS]` (position 0), as google-research does for both versions.

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

SQuAD v2.0 training data. There is no SQuAD v2.0 training set offline, so
`make_v2_train` (in `model.tasks.squad_negatives`) builds one from v1.1: by
default each unanswerable question is a v1.1 question paired with another
paragraph of the same article that does not contain any of its answers.
These negatives are a proxy for the real SQuAD 2.0 ones: those were written
by crowd workers to look answerable from their own paragraph (with a
plausible answer in it), whereas a question moved to another paragraph is
usually off-topic there, so it is easier to reject. Expect a model trained
on them to answer many of the real dev set's unanswerable questions (a low
NoAns score). `--negatives answer-removed,entity-swap` adds harder kinds:
the question's own paragraph without the sentence holding its answer, and
the question with an entity swapped for one the paragraph never mentions;
`negatives-report` measures how each kind looks.

Files are read strictly: a missing field, a wrong type, a duplicate question
id or a first answer whose `answer_start` is past the context (out of range)
or whose text is not the context at `answer_start` (mismatch) stops the reader
with the file and the article/paragraph/question; `skip_invalid=True` (the
commands' --skip-invalid) skips such questions and counts them instead. Only the first answer's place is read
(training's span, as in Google's reader), and only in a training file: the
other answers, and every answer of a file only scored (`read_gold`: evaluate's
file, fine-tuning's dev file), are gold texts, scored by text as the official
scripts score them.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import dataclasses
import functools
import inspect
import json
import math
import os
import re
import shutil
import sys
import typing
import unicodedata

import numpy as np

from model.io.files import load_json
from model.tasks import dev_units, squad_metric
from model.tasks.base import Encoded, Task, encode_texts, predict_in_batches
from model.tasks.squad_negatives import (
    DEFAULT_NEGATIVE_RATIO,
    DEFAULT_NEGATIVES,
    NEGATIVE_KINDS,
    build_v2_train,
    make_v2_train,
    negatives_report,
    parse_negatives,
    question_ids,
    report_table,
)
from model.text.wordpiece import basic_tokenize, normalize_char, normalized_lengths

DOC_STRIDE = 128
MAX_QUERY_LENGTH = 64
N_BEST_SIZE = 20
MAX_ANSWER_LENGTH = 30
# Stands for "no span at all" in null_odds.json (google-research's script
# crashes there): the null answer wins at any sensible threshold.
NO_SPAN_ODDS = 1e6

# google-research's `is_whitespace`: only these split a context into words.
_WORD = re.compile(r"[^ \t\r\n\u202f]+")


# === Examples ===


class Paragraph:
    """A context and its whitespace-separated words (google's `doc_tokens`).

    `starts[i]` is the character offset of `words[i]`; a word is a maximal run
    of non-whitespace characters, so `context[starts[i]:starts[i] + len(words[i])]`
    is `words[i]`.
    """

    __slots__ = ("context", "words", "starts")

    def __init__(self, context: str):
        self.context = context
        matches = list(_WORD.finditer(context))
        self.words = [m.group() for m in matches]
        self.starts = [m.start() for m in matches]

    def char_to_word(self, char: int) -> int:
        """google's `char_to_word_offset`: the word at `char`, or the word
        before it when `char` is whitespace (-1 before the first word)."""
        return bisect.bisect_right(self.starts, char) - 1

    def word_end(self, word: int) -> int:
        return self.starts[word] + len(self.words[word])


@dataclasses.dataclass
class SquadExample:
    """One question on one paragraph (shared by the paragraph's questions).

    answers: the gold answers, `{"text", "answer_start"}` in file order; []
        for an unanswerable (SQuAD v2.0) question.
    """

    qas_id: str
    question: str
    paragraph: Paragraph
    answers: list
    is_impossible: bool = False
    title: str = ""

    @property
    def context(self) -> str:
        return self.paragraph.context


def read_squad(path: str, version_2: bool, skip_invalid: bool = False, spans: bool = True):
    """Examples of an official-format SQuAD file (`data` / `paragraphs` / `qas`).

    `spans`: the first answer's `answer_start` must place its text in the context (the
    span a training question learns); False for a file only scored, whose answers the
    official scripts read by text alone.

    Returns:
        (examples, skipped): `skipped` lists the message of each question left
        out (only with `skip_invalid`; otherwise the first one raises).
    """
    dataset = load_json(path)
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        raise ValueError(f'{path}: not a SQuAD file: the top level needs a "data" list')
    examples, skipped, seen = [], [], {}
    for ai, article in enumerate(dataset["data"]):
        where_article = f"{path}: data[{ai}]"
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise ValueError(f'{where_article}: an article needs a "paragraphs" list')
        title = article.get("title", "")
        if title:
            where_article += f" (title {title!r})"
        for pi, para in enumerate(article["paragraphs"]):
            where_para = f"{where_article}, paragraphs[{pi}]"
            if not isinstance(para, dict) or not isinstance(para.get("context"), str):
                raise ValueError(f'{where_para}: a paragraph needs a "context" string')
            if not isinstance(para.get("qas"), list):
                raise ValueError(f'{where_para}: a paragraph needs a "qas" list')
            paragraph = Paragraph(para["context"])
            if not paragraph.words and para["qas"]:
                if not skip_invalid:
                    raise ValueError(
                        f"{where_para}: the context has no text (--skip-invalid skips its questions)"
                    )
                skipped += [
                    f"{_where_question(where_para, qi, qa)}: the context has no text"
                    for qi, qa in enumerate(para["qas"])
                ]
                continue
            for qi, qa in enumerate(para["qas"]):
                qid = qa.get("id") if isinstance(qa, dict) else None
                where = _where_question(where_para, qi, qa)
                problem = _check_question(qa, paragraph.context, version_2, spans)
                if problem is None and qid in seen:
                    problem = f"duplicate question id (first at {seen[qid]})"
                if problem is not None:
                    if not skip_invalid:
                        raise ValueError(
                            f"{where}: {problem} (--skip-invalid skips such questions)"
                        )
                    skipped.append(f"{where}: {problem}")
                    continue
                seen[qid] = where
                answers = [
                    {"text": a["text"], "answer_start": a["answer_start"]} for a in qa["answers"]
                ]
                examples.append(
                    SquadExample(
                        qid,
                        qa["question"],
                        paragraph,
                        answers,
                        is_impossible=not answers,
                        title=title,
                    )
                )
    return examples, skipped


def _where_question(where_para: str, qi: int, qa) -> str:
    qid = qa.get("id") if isinstance(qa, dict) else None
    return f"{where_para}, qas[{qi}]" + (f" (id {qid!r})" if qid is not None else "")


def _check_question(qa, context: str, version_2: bool, spans: bool = True) -> str | None:
    """What is wrong with one `qas` entry, or None."""
    if not isinstance(qa, dict):
        return "a question must be an object"
    if not isinstance(qa.get("id"), str) or not qa["id"]:
        return '"id" must be a non-empty string'
    if not isinstance(qa.get("question"), str) or not qa["question"].strip():
        return '"question" must be a non-empty string'
    answers = qa.get("answers")
    if not isinstance(answers, list):
        return '"answers" must be a list'
    # A v2.0 question without the field is unanswerable iff it has no
    # answers, as the official v2.0 script decides.
    impossible = qa.get("is_impossible", version_2 and answers == [])
    if not isinstance(impossible, bool):
        return f'"is_impossible" must be true or false, not {impossible!r}'
    if impossible and not version_2:
        return "unanswerable question (is_impossible) in SQuAD v1.1; use the squad2 task"
    if impossible and answers:
        return f"is_impossible is true but the question has {len(answers)} answer(s)"
    if not answers and not impossible:
        return "no answers" if not version_2 else "no answers but is_impossible is false"
    for k, answer in enumerate(answers):
        if not isinstance(answer, dict):
            return f"answers[{k}] must be an object"
        text, start = answer.get("text"), answer.get("answer_start")
        if not isinstance(text, str) or not text.strip():
            return f'answers[{k}]: "text" must be a non-empty string'
        if not isinstance(start, int) or isinstance(start, bool):
            return f'answers[{k}]: "answer_start" must be an integer, not {start!r}'
        if k > 0 or not spans:
            # Only the first answer's place is read (training's span, as Google's reader);
            # the others are gold texts, scored by text as the official scripts score them.
            continue
        if start < 0 or start + len(text) > len(context):
            return (
                f"answers[{k}]: answer_start {start} is out of range: {text!r} "
                f"({len(text)} characters) does not fit in the context "
                f"({len(context)} characters)"
            )
        found = context[start : start + len(text)]
        if found != text:
            return (
                f"answers[{k}]: mismatch: the context at answer_start {start} reads "
                f"{found!r}, not the answer text {text!r}"
            )
    return None


# === Windows ===


def doc_spans(num_tokens: int, max_tokens: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of the windows over `num_tokens` context tokens: at
    most `max_tokens` long, starting every `doc_stride` tokens (google's
    `_DocSpan`s); the last window ends at the last token."""
    if max_tokens < 1:
        raise ValueError(f"no room for the context: {max_tokens} tokens left by seq_len")
    if doc_stride < 1:
        raise ValueError(f"doc_stride must be positive, not {doc_stride}")
    spans, start = [], 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return spans


def max_context_mask(spans: list[tuple[int, int]], num_tokens: int) -> np.ndarray:
    """(num_spans, num_tokens) bool: whether span s is the one where token t
    has the most context (google's `_check_is_max_context`).

    The score of a token in a span is min(left context, right context) plus
    0.01 * span length (a longer span breaks ties); the first best span wins.
    """
    t = np.arange(num_tokens)
    scores = np.full((len(spans), num_tokens), -np.inf)
    for s, (start, length) in enumerate(spans):
        end = start + length - 1
        inside = (t >= start) & (t <= end)
        score = np.minimum(t - start, end - t) + 0.01 * length
        scores[s, inside] = score[inside]
    best = np.argmax(scores, axis=0)  # the first maximum, as google's strict ">"
    return best[None, :] == np.arange(len(spans))[:, None]


def improve_answer_span(doc_ids, start: int, end: int, answer_ids) -> tuple[int, int]:
    """The tokens of `doc_ids[start:end + 1]` that are exactly the answer's
    tokens, if some are (google's `_improve_answer_span`): an answer "1895"
    in the word "(1895-1943)." becomes its one token, not the whole word."""
    answer_ids = list(answer_ids)
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if list(doc_ids[new_start : new_end + 1]) == answer_ids:
                return new_start, new_end
    return start, end


@dataclasses.dataclass
class Windows:
    """`Encoded.meta` of SQuAD features: where each window came from.

    example_index: (num_features,) the example each window belongs to.
    token_to_word: (num_features, seq_len) the paragraph word of each
        context token; -1 for [CLS], the question, [SEP] and padding.
        None when encoded for training.
    max_context: (num_features, seq_len) bool, whether this window is the
        one where the token has most context. None when encoded for training.
    skipped: training examples left out because their answer was not found
        in the context's words (google's "Could not find answer").
    """

    example_index: np.ndarray
    token_to_word: np.ndarray | None = None
    max_context: np.ndarray | None = None
    skipped: int = 0


def tokenize_paragraphs(paragraphs: list[Paragraph], tokenizer):
    """{id(paragraph): (token ids, token -> word, word -> first token)} with
    every word tokenized on its own (`encode_texts`: a few calls for all the
    words, so the TensorFlow tokenizer stays fast and the pure-Python one of
    the edge runtime works too)."""
    words = [w for p in paragraphs for w in p.words]
    pieces = encode_texts(tokenizer, words, chunk=65536)
    lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
    values = np.fromiter((i for p in pieces for i in p), dtype=np.int32, count=int(lengths.sum()))
    splits = np.concatenate([[0], np.cumsum(lengths)])
    out, w = {}, 0
    for p in paragraphs:
        n = len(p.words)
        ids = values[splits[w] : splits[w + n]]
        tok_to_word = np.repeat(np.arange(n, dtype=np.int32), lengths[w : w + n])
        word_to_tok = (splits[w : w + n] - splits[w]).astype(np.int32)
        out[id(p)] = (ids, tok_to_word, word_to_tok)
        w += n
    return out


def answer_token_span(example: SquadExample, doc, answer_ids) -> tuple[int, int] | None:
    """The first answer's (start, end) token positions in the paragraph's
    tokens, or None when its words do not contain it (google skips those)."""
    ids, _, word_to_tok = doc
    paragraph = example.paragraph
    answer = example.answers[0]
    start_char = answer["answer_start"]
    start_word = paragraph.char_to_word(start_char)
    end_word = paragraph.char_to_word(start_char + len(answer["text"]) - 1)
    if start_word < 0 or end_word < start_word:
        return None
    actual = " ".join(paragraph.words[start_word : end_word + 1])
    if actual.find(" ".join(answer["text"].split())) == -1:
        return None
    start = int(word_to_tok[start_word])
    end = (
        int(word_to_tok[end_word + 1]) - 1 if end_word + 1 < len(paragraph.words) else len(ids) - 1
    )
    if end < start:  # the answer's words have no tokens (only dropped characters)
        return None
    return improve_answer_span(ids, start, end, answer_ids)


def encode_squad(
    examples: list[SquadExample],
    tokenizer,
    seq_len: int,
    doc_stride: int = DOC_STRIDE,
    max_query_length: int = MAX_QUERY_LENGTH,
    training: bool = False,
) -> Encoded:
    """`[CLS] question [SEP] window [SEP]` features of `examples`.

    Returns an `Encoded` with x (num_features, seq_len) int32 inputs,
    `meta` a `Windows`, and with `training` the labels
    `y = {"start_logits": (num_features,), "end_logits": (num_features,)}`
    (token positions; 0, the [CLS], when the window holds no answer).
    """
    paragraphs = list({id(e.paragraph): e.paragraph for e in examples}.values())
    docs = tokenize_paragraphs(paragraphs, tokenizer)
    questions = [
        q[:max_query_length] for q in encode_texts(tokenizer, [e.question for e in examples])
    ]
    answerable = [e for e in examples if training and not e.is_impossible]
    answer_ids = dict(
        zip(
            (id(e) for e in answerable),
            encode_texts(tokenizer, [e.answers[0]["text"] for e in answerable]),
        )
    )
    # First the windows of every example, then one array for all of them:
    # the train set makes ~90k windows of 384 tokens.
    plan, skipped = [], 0  # (example index, question ids, spans, answer token span)
    for i, example in enumerate(examples):
        doc = docs[id(example.paragraph)]
        spans = doc_spans(len(doc[0]), seq_len - len(questions[i]) - 3, doc_stride)
        answer = (-1, -1)
        if id(example) in answer_ids:
            answer = answer_token_span(example, doc, answer_ids[id(example)])
            if answer is None:
                skipped += 1
                continue
        plan.append((i, questions[i], spans, answer))
    encoded = _write_windows(
        plan, [docs[id(e.paragraph)] for e in examples], tokenizer, seq_len, training
    )
    encoded.meta.skipped = skipped
    return encoded


def _write_windows(plan: list, docs: list, tokenizer, seq_len: int, training: bool) -> Encoded:
    """The features of `plan`'s windows ((example index, question ids, spans, answer
    token span) each; `docs[i]` example i's paragraph tokens), in one set of arrays."""
    n = sum(len(spans) for _, _, spans, _ in plan)
    token_ids = np.full((n, seq_len), tokenizer.pad_id, dtype=np.int32)
    segment_ids = np.zeros((n, seq_len), dtype=np.int32)
    padding_mask = np.zeros((n, seq_len), dtype=np.int32)
    windows = Windows(np.zeros(n, dtype=np.int32))
    if training:
        starts, ends = np.zeros(n, dtype=np.int32), np.zeros(n, dtype=np.int32)
    else:
        windows.token_to_word = np.full((n, seq_len), -1, dtype=np.int32)
        windows.max_context = np.zeros((n, seq_len), dtype=bool)
    f = 0
    for i, query, spans, answer in plan:
        ids, tok_to_word, _ = docs[i]
        best = None if training else max_context_mask(spans, len(ids))
        offset = len(query) + 2  # [CLS] question [SEP]
        for s, (start, length) in enumerate(spans):
            stop = offset + length  # the final [SEP]
            token_ids[f, 0] = tokenizer.cls_id
            token_ids[f, 1 : offset - 1] = query
            token_ids[f, offset - 1] = tokenizer.sep_id
            token_ids[f, offset:stop] = ids[start : start + length]
            token_ids[f, stop] = tokenizer.sep_id
            segment_ids[f, offset : stop + 1] = 1
            padding_mask[f, : stop + 1] = 1
            windows.example_index[f] = i
            if training:
                if answer[0] >= start and answer[1] <= start + length - 1:
                    starts[f] = answer[0] - start + offset
                    ends[f] = answer[1] - start + offset
                # else: no answer in this window (or none at all): [CLS], 0.
            else:
                windows.token_to_word[f, offset:stop] = tok_to_word[start : start + length]
                windows.max_context[f, offset:stop] = best[s, start : start + length]
            f += 1
    x = {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}
    y = {"start_logits": starts, "end_logits": ends} if training else None
    return Encoded(x=x, y=y, meta=windows)


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


def _softmax(scores: list[float]) -> list[float]:
    if not scores:
        return []
    top = max(scores)
    exp = [math.exp(s - top) for s in scores]
    total = sum(exp)
    return [e / total for e in exp]


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
    probs = _softmax([n["start_logit"] + n["end_logit"] for n in nbest])
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


# === The tasks ===


@functools.cache
def span_loss():
    """Cross-entropy over positions of one logits output, halved, so the
    two outputs' sum is google-research's (start loss + end loss) / 2."""
    import keras

    class HalfSpanLoss(keras.losses.Loss):
        def call(self, y_true, y_pred):
            return 0.5 * keras.losses.sparse_categorical_crossentropy(
                y_true, y_pred, from_logits=True
            )

    return HalfSpanLoss


class SquadTask(Task):
    """SQuAD extractive QA; `Squad1Task` and `Squad2Task` set the version.

    Args:
        doc_stride, max_query_length, n_best_size, max_answer_length: as in
            google-research's run_squad.py (128, 64, 20, 30).
        null_threshold: v2.0: answer "" when null score - best span score
            exceeds this (tune it with `best_f1_thresh` of a dev evaluation).
        skip_invalid: skip (and count in `self.skipped`) malformed questions
            instead of stopping at the first.
    """

    head = "question_answerer"
    main_metric = "f1"
    default_seq_len = 384
    # The paper: 3 epochs at 5e-5, batch 32 (v1.1); 2 epochs at 5e-5, batch 48 (v2.0).
    default_learning_rate = 5e-5
    default_epochs = 3.0
    default_batch_size = 32
    version_2 = False
    train_names: tuple[str, ...] = ()
    dev_names: tuple[str, ...] = ()

    def __init__(
        self,
        doc_stride: int = DOC_STRIDE,
        max_query_length: int = MAX_QUERY_LENGTH,
        n_best_size: int = N_BEST_SIZE,
        max_answer_length: int = MAX_ANSWER_LENGTH,
        null_threshold: float = 0.0,
        skip_invalid: bool = False,
    ):
        self.doc_stride = doc_stride
        self.max_query_length = max_query_length
        self.n_best_size = n_best_size
        self.max_answer_length = max_answer_length
        self.null_threshold = null_threshold
        self.skip_invalid = skip_invalid
        self.skipped: list[str] = []

    # === Data ===

    def read(
        self, path: str, skip_invalid: bool | None = None, spans: bool = True
    ) -> list[SquadExample]:
        skip = self.skip_invalid if skip_invalid is None else skip_invalid
        examples, self.skipped = read_squad(path, self.version_2, skip, spans)
        if self.skipped:
            print(
                f"warning: {path}: skipped {len(self.skipped)} invalid question(s); the first: "
                f"{self.skipped[0]}",
                file=sys.stderr,
            )
        return examples

    def read_gold(self, path: str) -> list[SquadExample]:
        """A dev file, scored by its answers' texts as the official scripts score them: an
        `answer_start` that does not place its text (third-party files' offsets are often
        off by a few characters) keeps its question."""
        return self.read(path, spans=False)

    def files(self, data: str) -> tuple[str, str | None]:
        """`--data` a directory holding one of `train_names` (and perhaps one
        of `dev_names`), or a train file (its dev file looked for beside it)."""
        if os.path.isdir(data):
            folder, train = data, _first(data, self.train_names)
            if train is None:
                hint = (
                    " (make one from v1.1 with `python -m model.tasks.squad make-v2-train`)"
                    if self.version_2
                    else ""
                )
                raise FileNotFoundError(
                    f"{data}: no training file for task {self.name!r}: "
                    f"looked for {list(self.train_names)}{hint}"
                )
        elif os.path.isfile(data):
            train, folder = data, os.path.dirname(os.path.abspath(data))
        else:
            raise FileNotFoundError(f"{data}: no such file or directory")
        dev = _first(folder, self.dev_names)
        if dev is not None and os.path.samefile(dev, train):
            dev = None
        return train, dev

    def encode(
        self, examples: list[SquadExample], tokenizer, seq_len: int, training: bool = False
    ) -> Encoded:
        encoded = encode_squad(
            examples, tokenizer, seq_len, self.doc_stride, self.max_query_length, training
        )
        if encoded.meta.skipped:
            print(
                f"warning: {encoded.meta.skipped} training question(s) left out: the answer "
                f"text is not in the context words at answer_start",
                file=sys.stderr,
            )
        return encoded

    # === Model ===

    def build_model(self, encoder, dropout: float = 0.1):
        from model.heads.question_answerer import BertQuestionAnswerer

        # The paper's head has no dropout of its own; `dropout` is the encoder's.
        return BertQuestionAnswerer(encoder)

    def loss(self):
        loss = span_loss()
        return {"start_logits": loss(name="start_loss"), "end_logits": loss(name="end_loss")}

    # === Metric ===

    def predict(
        self, predict, examples: list[SquadExample], tokenizer, seq_len: int, batch_size: int = 64
    ) -> SquadPredictions:
        """Answers to `examples` by the model behind `predict`."""
        if not examples:
            raise ValueError("no examples to evaluate")
        encoded = self.encode(examples, tokenizer, seq_len)
        start, end = split_logits(
            predict_in_batches(predict, encoded.x, batch_size, sequence_outputs=True)
        )
        return postprocess(
            examples,
            encoded.meta,
            encoded.x["token_ids"],
            start,
            end,
            tokenizer.vocabulary,
            tokenizer.lowercase,
            self.n_best_size,
            self.max_answer_length,
            self.version_2,
            self.null_threshold,
        )

    def evaluate(
        self,
        predict,
        examples: list[SquadExample],
        tokenizer,
        seq_len: int,
        batch_size: int = 64,
        output_dir: str | None = None,
    ) -> dict:
        """The official script's metrics of the model's answers to `examples`;
        with `output_dir`, also predictions.json, nbest_predictions.json (and
        for v2.0 null_odds.json) there, as google-research writes them."""
        predictions = self.predict(predict, examples, tokenizer, seq_len, batch_size)
        metrics = self.score(examples, predictions)
        if output_dir is not None:
            write_predictions(output_dir, predictions, self.version_2)
            if not self.version_2:  # v2.0's F1 is at a threshold tuned on the same questions
                dev_units.write(output_dir, units_v1(examples, predictions.predictions), metrics)
        return metrics

    def score(self, examples: list[SquadExample], predictions: SquadPredictions) -> dict:
        gold = _gold(examples)
        return {**squad_metric.evaluate_v1(gold, predictions.predictions), "total": len(gold)}


def units_v1(examples: list[SquadExample], predictions: dict[str, str]) -> dict:
    """Each question's F1 and exact match in percent, as `squad_metric.evaluate_v1` sums them
    (`model/tasks/dev_units.py`; an unanswered question scores 0)."""
    scores = {"f1": [], "exact_match": []}
    for qid, truths in _gold(examples).items():
        answer = predictions.get(qid)
        for name, metric in (
            ("f1", squad_metric.f1_score),
            ("exact_match", squad_metric.exact_match_score),
        ):
            best = (
                0
                if answer is None
                else squad_metric.metric_max_over_ground_truths(metric, answer, truths)
            )
            scores[name].append(100.0 * best)
    return {name: dev_units.mean(values) for name, values in scores.items()}


def _gold(examples: list[SquadExample]) -> dict[str, list[str]]:
    """`{question id: [answer texts]}`: what the official scripts score against."""
    return {e.qas_id: [a["text"] for a in e.answers] for e in examples}


class Squad1Task(SquadTask):
    """SQuAD v1.1: every question has an answer in its paragraph."""

    name = "squad1"
    train_names = ("train-v1.1.json", "train-v1.1.reconstructed.json")
    dev_names = ("dev-v1.1.json", "dev-v1.1.reconstructed.json")


class Squad2Task(SquadTask):
    """SQuAD v2.0: questions may have no answer; a [CLS] null score decides."""

    name = "squad2"
    version_2 = True
    default_epochs = 2.0
    default_batch_size = 48
    train_names = ("train-v2.0.json", "train-v2.0.from-v1.1.json", "train-v2.0.reconstructed.json")
    dev_names = ("dev-v2.0.json", "dev-v2.0.reconstructed.json")

    def score(self, examples: list[SquadExample], predictions: SquadPredictions) -> dict:
        """The official v2.0 metrics at `null_threshold`, the best threshold
        (found on the best non-null answers, see the module docstring), and
        the always-no-answer baseline."""
        gold = _gold(examples)
        odds = predictions.null_odds
        metrics = squad_metric.evaluate_v2(
            gold, predictions.predictions, odds, na_prob_thresh=self.null_threshold
        )
        exact_raw, f1_raw = squad_metric.get_raw_scores(gold, predictions.best_non_null)
        has_ans = {qid: bool(answers) for qid, answers in gold.items()}
        squad_metric.find_all_best_thresh(
            metrics, predictions.best_non_null, exact_raw, f1_raw, odds, has_ans
        )
        _no_answer_threshold(metrics, odds, has_ans, len(exact_raw))
        baseline = squad_metric.evaluate_v2(gold, {qid: "" for qid in gold})
        metrics["null_threshold"] = self.null_threshold
        metrics["always_no_answer_exact"] = baseline["exact"]
        metrics["always_no_answer_f1"] = baseline["f1"]
        return metrics


TASKS = {"squad1": Squad1Task, "squad2": Squad2Task}


def _no_answer_threshold(metrics: dict, odds: dict, has_ans: dict, scored: int) -> None:
    """Where no threshold beats "no answer everywhere", the official sweep leaves 0.0, which
    says that for probabilities; for null odds (any sign) it is a threshold below them all."""
    everywhere = 100.0 * sum(not has_ans[qid] for qid in has_ans) / scored
    for key in ("exact", "f1"):
        if metrics[f"best_{key}"] == everywhere and odds:
            metrics[f"best_{key}_thresh"] = min(odds.values()) - 1.0


def _first(folder: str, names: tuple[str, ...]) -> str | None:
    for name in names:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    return None


def write_predictions(output_dir: str, predictions: SquadPredictions, version_2: bool) -> None:
    from model.io.files import write_json

    os.makedirs(output_dir, exist_ok=True)
    write_json(os.path.join(output_dir, "predictions.json"), predictions.predictions)
    write_json(os.path.join(output_dir, "nbest_predictions.json"), predictions.nbest)
    if version_2:
        write_json(os.path.join(output_dir, "null_odds.json"), predictions.null_odds)


# === Command line ===


def main(argv=None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "negatives-report":
        return _negatives_report(args)
    if args.command == "split-dev":
        return _split_dev(args)
    return _make_v2_train(args)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m model.tasks.squad", description="SQuAD data tools.")
    sub = p.add_subparsers(dest="command", required=True)
    make = sub.add_parser(
        "make-v2-train",
        help="a SQuAD v2.0-format train set from v1.1 (proxy negatives)",
        description=inspect.cleandoc(make_v2_train.__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    make.add_argument("--input", required=True, help="SQuAD v1.1 train JSON")
    make.add_argument("--output", required=True, help="v2.0-format JSON to write")
    make.add_argument(
        "--negatives",
        default=DEFAULT_NEGATIVES,
        help=f"kinds of unanswerable questions, comma-separated, from {', '.join(NEGATIVE_KINDS)}; "
        f"KIND=RATIO gives a kind its own ratio (default {DEFAULT_NEGATIVES})",
    )
    make.add_argument(
        "--negative-ratio",
        type=float,
        default=None,
        help=f"unanswerable questions per answerable one, split evenly between the kinds "
        f"(default {DEFAULT_NEGATIVE_RATIO}; not with KIND=RATIO)",
    )
    make.add_argument("--seed", type=int, default=0)
    make.add_argument(
        "--real",
        default=None,
        help="a SQuAD v2.0 file whose questions (answerable and not, e.g. written by people) "
        "join the made ones; it must share no paragraph with --dev",
    )
    make.add_argument(
        "--real-repeat",
        type=int,
        default=None,
        help="how many times --real's questions stand in the output (default 1), each copy "
        "with its own id (only with --real)",
    )
    make.add_argument(
        "--dev",
        default=None,
        help="a SQuAD v2.0 dev file to copy beside --output as dev-v2.0.json, "
        "making that folder a complete --data for --task squad2",
    )
    report = sub.add_parser(
        "negatives-report",
        help="how each kind of made negative looks (yield, question/context word overlap)",
        description=inspect.cleandoc(negatives_report.__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("--input", required=True, help="SQuAD v1.1 train JSON")
    report.add_argument("--dev", default=None, help="SQuAD v2.0 dev JSON (its real negatives)")
    report.add_argument("--seed", type=int, default=0)
    report.add_argument(
        "--output",
        "--out",
        dest="out",
        default=None,
        help="also write the numbers to this JSON file",
    )
    report.add_argument(
        "--markdown", action="store_true", help="print a Markdown table instead of JSON"
    )
    split = sub.add_parser(
        "split-dev",
        help="a dev file's articles in two halves: one to tune the null threshold on, "
        "one to report",
        description=inspect.cleandoc(split_articles.__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    split.add_argument("--input", required=True, help="a SQuAD v1.1 or v2.0 JSON")
    split.add_argument("--tune", required=True, help="JSON to write the 1st, 3rd, ... articles to")
    split.add_argument("--report", required=True, help="JSON for the 2nd, 4th, ... articles")
    return p


def _make_v2_train(args) -> int:
    """`make-v2-train`: the v2.0-format train set, its summary printed as JSON."""
    try:
        ratios = parse_negatives(args.negatives, args.negative_ratio)
        # Read through the strict reader first: a malformed input stops here.
        examples, _ = read_squad(args.input, version_2=False)
        if args.dev is not None:
            read_squad(args.dev, version_2=True)
        dataset, made = build_v2_train(load_json(args.input), seed=args.seed, negatives=ratios)
        real = _real_questions(args.real, args.real_repeat, args.dev, question_ids(dataset["data"]))
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    from model.io.files import atomic_path, write_json

    if real is not None:
        dataset["data"] += real["data"]
    write_json(args.output, dataset)
    if args.dev is not None:
        dev = os.path.join(os.path.dirname(os.path.abspath(args.output)), "dev-v2.0.json")
        if not os.path.exists(dev) or not os.path.samefile(dev, args.dev):
            with atomic_path(dev) as tmp:
                shutil.copyfile(args.dev, tmp)
    summary = {
        "output": args.output,
        "answerable": len(examples),
        "unanswerable": sum(made.values()),
        "seed": args.seed,
        "negative_ratio": sum(ratios.values()),
    }
    if args.negatives != DEFAULT_NEGATIVES:  # the default prints what it always printed
        summary["negatives"] = {kind: {"ratio": ratios[kind], "made": made[kind]} for kind in made}
    if real is not None:
        summary["real"] = {"path": args.real, "repeat": real["repeat"], **real["counts"]}
    print(json.dumps(summary))
    return 0


def _real_questions(
    path: str | None, repeat: int | None, dev: str | None, made_ids: set[str]
) -> dict | None:
    """`--real`'s articles `repeat` times (copies after the first with ids `<id>-copy<k>`)
    and how many questions of each kind it holds; refused when it shares a paragraph
    with `dev` (the threshold would be tuned on questions trained on), or a question id
    with the made set (`made_ids`: predictions are keyed by id)."""
    if path is None:
        if repeat is not None:
            raise ValueError("--real-repeat repeats --real's questions: give --real FILE")
        return None
    repeat = 1 if repeat is None else repeat
    if repeat < 1:
        raise ValueError(f"--real-repeat must be at least 1, not {repeat}")
    examples, _ = read_squad(path, version_2=True)  # strict: stops at a bad question
    if dev is not None:
        shared = {e.paragraph.context for e in examples} & {
            e.paragraph.context for e in read_squad(dev, version_2=True)[0]
        }
        if shared:
            raise ValueError(
                f"{path} shares {len(shared)} paragraph(s) with --dev {dev}, e.g. "
                f"{next(iter(shared))[:60]!r}...: tune the threshold on other articles "
                "(python -m model.tasks.squad split-dev)"
            )
    data = load_json(path)["data"]
    clash = sorted(question_ids(data) & made_ids)
    if clash:
        raise ValueError(
            f"{path}: {len(clash)} question id(s) also in --input's set, e.g. {clash[0]!r}: "
            "ids must be unique (predictions are keyed by them)"
        )
    copies = [data] + [_renamed(data, f"-copy{k}") for k in range(2, repeat + 1)]
    unanswerable = sum(e.is_impossible for e in examples)
    counts = {"answerable": len(examples) - unanswerable, "unanswerable": unanswerable}
    data = [article for copy in copies for article in copy]
    return {"data": data, "counts": counts, "repeat": repeat}


def _renamed(articles: list, suffix: str) -> list:
    """`articles` with every question id given `suffix` (the rest shared, unchanged)."""
    return [
        {
            **article,
            "paragraphs": [
                {**para, "qas": [{**qa, "id": qa["id"] + suffix} for qa in para["qas"]]}
                for para in article["paragraphs"]
            ],
        }
        for article in articles
    ]


def split_articles(dataset: dict) -> tuple[dict, dict]:
    """A SQuAD dataset's articles dealt into two halves, alternately (the 1st, 3rd, ...
    article to the first): a threshold tuned on one half is reported on the other, which
    shares no paragraph with it. Both keep the file's other fields."""
    articles = dataset["data"]
    return {**dataset, "data": articles[0::2]}, {**dataset, "data": articles[1::2]}


def _split_dev(args) -> int:
    from model.io.files import write_json

    try:
        examples, _ = read_squad(args.input, version_2=True)  # strict: stops at a bad question
        tune, report = split_articles(load_json(args.input))
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not report["data"]:
        print(
            f"error: {args.input}: {len(tune['data'])} article(s); a split needs two, one to "
            f"tune on and one to report",
            file=sys.stderr,
        )
        return 1
    summary = {"input": args.input, "questions": len(examples)}
    for name, path, part in (("tune", args.tune, tune), ("report", args.report, report)):
        write_json(path, part)
        questions = [q for a in part["data"] for para in a["paragraphs"] for q in para["qas"]]
        summary[name] = {
            "path": path,
            "articles": len(part["data"]),
            "questions": len(questions),
            "unanswerable": sum(bool(q.get("is_impossible")) for q in questions),
        }
    print(json.dumps(summary))
    return 0


def _negatives_report(args) -> int:
    try:
        read_squad(args.input, version_2=False)
        if args.dev is not None:
            read_squad(args.dev, version_2=True)
        train = load_json(args.input)
        dev = load_json(args.dev) if args.dev is not None else None
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    rows = negatives_report(train, dev, args.seed)
    if args.out is not None:
        from model.io.files import write_json

        write_json(args.out, {"input": args.input, "dev": args.dev, "seed": args.seed, **rows})
    print(report_table(rows) if args.markdown else json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
