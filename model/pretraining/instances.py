"""Pre-training instances: document-aware sentence pairs, as the paper builds them.

A port of google-research/bert `create_pretraining_data.py`'s
`create_instances_from_document`, with an injected `rng` so it is
deterministic and testable. Segments are built from whole sentences of one
document; half of the time segment B is the actual continuation (IsNext),
otherwise it starts at a random sentence of another document (NotNext).

One deviation from the original: a chunk is closed at its target length only
once it holds two sentences, so short targets do not tip the labels towards
NotNext (google-research's rule gives 57 % NotNext on Wikipedia).
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np

IS_NEXT, NOT_NEXT = 0, 1  # google-research's labels: 1 means "B is random"


@dataclasses.dataclass(frozen=True)
class InstanceConfig:
    """Args:
    max_seq_length: tokens per instance, `[CLS]`/`[SEP]` included.
    short_seq_prob: share of instances made shorter on purpose, so the
        model also sees short inputs (paper: 10 %).
    next_sentence: build A/B pairs with IsNext/NotNext labels; without it
        each instance is one segment of consecutive sentences.
    """

    max_seq_length: int = 128
    short_seq_prob: float = 0.1
    next_sentence: bool = True

    def __post_init__(self):
        if self.max_seq_length < 8:
            raise ValueError(f"max_seq_length must be at least 8, got {self.max_seq_length}")


@dataclasses.dataclass
class Instance:
    first: list[int]
    second: list[int]
    is_random_next: bool


def _truncate_pair(a: list[int], b: list[int], max_tokens: int, rng: random.Random) -> None:
    # Trim the longer segment, from the front or the back at random, so the
    # model does not learn that text always ends at a segment boundary.
    while len(a) + len(b) > max_tokens:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def create_instances_from_document(
    documents: list[list[np.ndarray]], index: int, config: InstanceConfig, rng: random.Random
) -> list[Instance]:
    """Instances from `documents[index]` (a list of tokenised sentences)."""
    document = documents[index]
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
                if is_random_next and len(documents) > 1:
                    target_b = target - len(first)
                    other = index
                    for _ in range(10):  # a corpus of one document has no "other"
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
