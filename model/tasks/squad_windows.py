"""SQuAD's model inputs: `[CLS] question [SEP] window [SEP]` features sliding over the
contexts of `squad_examples`, as google-research's `run_squad.py` writes them (the answers
come back from their logits in `squad_answers`).

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
"""

from __future__ import annotations

import dataclasses

import numpy as np

from model.tasks.base import Encoded, encode_texts
from model.tasks.squad_examples import Paragraph, SquadExample

DOC_STRIDE = 128
MAX_QUERY_LENGTH = 64


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
