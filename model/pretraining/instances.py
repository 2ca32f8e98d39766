"""Pre-training instances in the input formats that RoBERTa's section 4.2 compares.

`python -m model.data --inputs FORMAT` picks one (`INPUT_FORMATS`):

- `sentence-pairs` (BERT, the default): `create_instances_from_document`, a
  port of google-research/bert `create_pretraining_data.py`'s function of that
  name, with an injected `rng` so it is deterministic and testable. Segments
  are built from whole sentences of one document; half of the time segment B
  is the actual continuation (IsNext), otherwise it starts at a random
  sentence of another document (NotNext; of the same document where the pool
  holds one alone, as the original does). One deviation from the original: a
  chunk is closed at its target length only once it holds two sentences, so
  short targets do not tip the labels towards NotNext (google-research's rule
  gives 57 % NotNext on Wikipedia).
- `segments` (`--no-nsp`; SpanBERT, the left-to-right LM): the same function
  without NSP, one segment of consecutive sentences of one document.
- `segment-pairs` (ELECTRA): `[CLS] A [SEP] B [SEP]`, A and B consecutive text of one
  document, no NSP: google-research/electra `build_pretraining_dataset.py`'s
  `ExampleBuilder` (`_segment_pairs`). Sentences are gathered until they reach the
  target length (the whole input; `short_seq_prob` of the time a random one from 5
  up), or the document ends; A takes sentences up to half the target (a sentence
  that crosses the half goes to A half the time), B the rest, and one instance in
  ten is A alone, as classification inputs are. As in the reference, a short
  sentence after one that went to B still joins A while A stays under the half
  (19 % of the pairs of a Wikipedia shard at 128 tokens).
- `full-sentences` and `doc-sentences` (RoBERTa): `SentencePacker`, full
  sentences packed in order up to the whole length, across documents (with a
  `[SEP]` between two) or never across one.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np

IS_NEXT, NOT_NEXT = 0, 1  # google-research's labels: 1 means "B is random"

INPUT_FORMATS = ("sentence-pairs", "segments", "segment-pairs", "full-sentences", "doc-sentences")
# The formats built by `SentencePacker`: no NSP, no short_seq_prob (RoBERTa has neither).
PACKED_FORMATS = ("full-sentences", "doc-sentences")


MIN_SEQ_LEN = 8  # [CLS] A [SEP] B [SEP] and a few tokens of each segment


@dataclasses.dataclass(frozen=True)
class InstanceConfig:
    """Args:
    max_seq_length: tokens per instance, `[CLS]`/`[SEP]` included.
    short_seq_prob: share of instances made shorter on purpose, so the
        model also sees short inputs (paper: 10 %; `model.data` gives
        `segment-pairs` ELECTRA's 5 %); `sentence-pairs`, `segments` and
        `segment-pairs` only (the packed formats ignore it).
    next_sentence: the older switch: True is `sentence-pairs`, False
        `segments`. Left out, it follows `inputs`; given with `inputs`, the
        two must agree.
    inputs: one of `INPUT_FORMATS` (the module docstring); left out, it
        follows `next_sentence` (`sentence-pairs` when neither is given).

    Example:
        InstanceConfig(128, inputs="full-sentences")  # next_sentence False
    """

    max_seq_length: int = 128
    short_seq_prob: float = 0.1
    next_sentence: bool | None = None
    inputs: str | None = None

    def __post_init__(self):
        if self.max_seq_length < MIN_SEQ_LEN:
            raise ValueError(
                f"max_seq_length must be at least {MIN_SEQ_LEN}, got {self.max_seq_length}"
            )
        inputs, next_sentence = self.inputs, self.next_sentence
        if inputs is None:
            inputs = "segments" if next_sentence is False else "sentence-pairs"
        if inputs not in INPUT_FORMATS:
            raise ValueError(f"inputs must be one of {', '.join(INPUT_FORMATS)}; got {inputs!r}")
        if next_sentence is not None and next_sentence != (inputs == "sentence-pairs"):
            raise ValueError(
                f"next_sentence={next_sentence} contradicts inputs={inputs!r} "
                "(only sentence-pairs has next-sentence labels)"
            )
        # Frozen: set the resolved values once, here.
        object.__setattr__(self, "inputs", inputs)
        object.__setattr__(self, "next_sentence", inputs == "sentence-pairs")

    @property
    def packed(self) -> bool:
        """Built by `SentencePacker` (full-sentences, doc-sentences)."""
        return self.inputs in PACKED_FORMATS


@dataclasses.dataclass
class Instance:
    first: list[int]
    second: list[int]
    is_random_next: bool


def _truncate_pair(a: list[int], b: list[int], max_tokens: int, rng: random.Random) -> None:
    """Trims `a` and `b` in place to `max_tokens` together, as google-research's
    `truncate_seq_pair` does: one token at a time from the longer segment, from the front or
    the back at random (so the model does not learn that text always ends at a segment
    boundary). The same draws and result, counted first and cut once: deleting a list's first
    token one at a time was quadratic in a long line's length."""
    length, front, back = [len(a), len(b)], [0, 0], [0, 0]
    while length[0] + length[1] > max_tokens:
        k = 0 if length[0] > length[1] else 1
        length[k] -= 1
        if rng.random() < 0.5:
            front[k] += 1
        else:
            back[k] += 1
    for k, segment in enumerate((a, b)):
        segment[:] = segment[front[k] : len(segment) - back[k]]


def create_instances_from_document(
    documents: list[list[np.ndarray]], index: int, config: InstanceConfig, rng: random.Random
) -> list[Instance]:
    """Instances from `documents[index]` (a list of tokenised sentences):
    `sentence-pairs`, `segments` or `segment-pairs`; the packed formats are `SentencePacker`'s."""
    if config.packed:
        raise ValueError(f"inputs={config.inputs!r} are made by SentencePacker, not per document")
    document = documents[index]
    if config.inputs == "segment-pairs":
        return _segment_pairs(document, config, rng)
    # [CLS], [SEP], [SEP]; without NSP only [CLS] and [SEP].
    max_tokens = config.max_seq_length - (3 if config.next_sentence else 2)
    # We *usually* fill the whole sequence, since short ones waste compute,
    # but sometimes (short_seq_prob) target a shorter length, to lessen the
    # mismatch between pre-training and fine-tuning inputs.
    target = max_tokens
    if rng.random() < config.short_seq_prob:
        target = rng.randint(2, max_tokens)

    instances = []
    chunk, chunk_len, i = [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        chunk_len += len(document[i])
        # A pair needs two sentences for IsNext: a one-sentence chunk is always
        # NotNext, and with a short target every chunk would be one sentence
        # (57 % NotNext on Wikipedia at short_seq_prob=0.1). So a chunk ends at
        # the target only once it holds two; the pair is truncated below.
        full = chunk_len >= target and (len(chunk) >= 2 or not config.next_sentence)
        if i == len(document) - 1 or full:
            if chunk and not config.next_sentence:
                tokens = [t for s in chunk for t in s.tolist()][:max_tokens]
                instances.append(Instance(tokens, [], False))
            elif chunk:
                # We DON'T just split the token stream at a random point: NSP
                # would then be too easy. Segments end at sentence boundaries.
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                first = [t for s in chunk[:a_end] for t in s.tolist()]
                second = []
                is_random_next = len(chunk) == 1 or rng.random() < 0.5
                if is_random_next:
                    target_b = target - len(first)
                    other = index
                    for _ in range(10):  # one document alone: B comes from it (google's too)
                        other = rng.randint(0, len(documents) - 1)
                        if other != index:
                            break
                    random_doc = documents[other]
                    start = rng.randint(0, len(random_doc) - 1)
                    for sentence in random_doc[start:]:
                        second.extend(sentence.tolist())
                        if len(second) >= target_b:
                            break
                    # The unused sentences of this chunk are not wasted: go back.
                    i -= len(chunk) - a_end
                else:
                    is_random_next = False
                    second = [t for s in chunk[a_end:] for t in s.tolist()]
                _truncate_pair(first, second, max_tokens, rng)
                if first and second:
                    instances.append(Instance(first, second, is_random_next))
            chunk, chunk_len = [], 0
        i += 1
    return instances


ONE_SEGMENT_PROB = 0.1  # ELECTRA's share of instances left as one segment


def _segment_pairs(document: list[np.ndarray], config, rng: random.Random) -> list[Instance]:
    """ELECTRA's instances of one document (`ExampleBuilder.add_line` and `_create_example`):
    sentences gathered while under the target length (`max_seq_length`, counted without
    [CLS] and [SEP] as the reference counts; `short_seq_prob` of the time a random length
    from 5 up), then split in two. The reference draws each target after an example and
    carries it into the next document (its first example takes the whole length); here each
    document draws its first: the same distribution, another sequence of draws. As the
    reference's, the instances of a Wikipedia shard at 128 tokens hold 86 % of its tokens
    (what overflows the length is cut), and 13-15 % of them are A alone (the one in ten,
    and documents' short ends)."""
    max_len = config.max_seq_length
    instances, chunk, length = [], [], 0

    def draw_target() -> int:
        return rng.randint(5, max_len) if rng.random() < config.short_seq_prob else max_len

    target = draw_target()
    for i, sentence in enumerate(document):
        chunk.append(sentence.tolist())
        length += len(chunk[-1])
        if length >= target or i == len(document) - 1:
            first, second = _split_segments(chunk, target, rng)
            first = first[: max_len - 2]  # room for [CLS] A [SEP], then B [SEP]
            second = second[: max(0, max_len - len(first) - 3)]
            if first:
                instances.append(Instance(first, second, False))
            chunk, length, target = [], 0, draw_target()
    return instances


def _split_segments(chunk: list[list[int]], target: int, rng: random.Random):
    """A takes sentences while they keep it under half the target (3 tokens left for [CLS]
    and the two [SEP]), a sentence crossing the half half the time, B the rest; one time in
    ten A takes them all."""
    half = 100_000 if rng.random() < ONE_SEGMENT_PROB else (target - 3) // 2
    first, second = [], []
    for sentence in chunk:
        if (
            not first
            or len(first) + len(sentence) < half
            or (not second and len(first) < half and rng.random() < 0.5)
        ):
            first += sentence
        else:
            second += sentence
    return first, second


class SentencePacker:
    """RoBERTa's FULL-SENTENCES and DOC-SENTENCES inputs, packed as documents stream past.

    Sentences are appended in order to the current input while it stays
    within `max_seq_length - 2` tokens (room for `[CLS]` and the final
    `[SEP]`, added by the tokenizer's `pack`); the first sentence that does
    not fit starts the next input, so every input but the last is as full as
    whole sentences allow. A sentence longer than a whole input keeps its
    first `max_seq_length - 2` tokens and loses the rest (the input it starts
    is then full on its own).

    `full-sentences` lets an input run on into the next document, with a
    `separator_id` (`[SEP]`) between the last sentence of one and the first of
    the next (that token counts towards the length); `doc-sentences` ends the
    input at the document's end, however short. There is no NSP label
    (`Instance.is_random_next` is False, `second` empty) and no randomness:
    the inputs depend on the documents and their order only.

    Args:
        config: an `InstanceConfig` with `inputs` full-sentences or doc-sentences.
        separator_id: the id of `[SEP]`.

    Example:
        packer = SentencePacker(InstanceConfig(128, inputs="full-sentences"), tokenizer.sep_id)
        instances = [i for doc in documents for i in packer.add(doc)] + packer.finish()
    """

    def __init__(self, config: InstanceConfig, separator_id: int):
        if not config.packed:
            raise ValueError(
                f"SentencePacker makes {' and '.join(PACKED_FORMATS)}, not {config.inputs!r}"
            )
        self.max_tokens = config.max_seq_length - 2  # [CLS] ... [SEP]
        self.cross_documents = config.inputs == "full-sentences"
        self.separator_id = separator_id
        self._tokens: list[int] = []  # the input being filled

    def add(self, document: list[np.ndarray]) -> list[Instance]:
        """The inputs that `document` (tokenised sentences) completes, in order."""
        done = []
        new_document = True
        for sentence in document:
            tokens = sentence.tolist()[: self.max_tokens]
            if not tokens:
                continue
            # RoBERTa marks a document boundary inside an input with an extra separator.
            boundary = [self.separator_id] if new_document and self._tokens else []
            if len(self._tokens) + len(boundary) + len(tokens) > self.max_tokens:
                done.append(self._close())
                boundary = []  # an input never starts with a separator
            self._tokens += boundary + tokens
            new_document = False
        if not self.cross_documents:
            done += self.finish()
        return done

    def finish(self) -> list[Instance]:
        """The last input, not full, if one is being filled (the end of the stream)."""
        return [self._close()] if self._tokens else []

    def _close(self) -> Instance:
        instance, self._tokens = Instance(self._tokens, [], False), []
        return instance
