"""SpanBERT's span masking, with the inputs of its span boundary objective (SBO).

As the SpanBERT paper's own run (facebookresearch/SpanBERT, `pretraining/README.md`:
`--schemes pair_span --span-lower 1 --span-upper 10 --geometric-p 0.2
--replacement-method span --max-pair-targets 15 --endpoints external`, with the
`PairWithSpanMaskingScheme` of `pretraining/fairseq/data/masking.py`):

- a span's length is counted in whole words and drawn from a geometric
  distribution with p = 0.2 truncated to 1..10 words and renormalised
  (mean 3.80 words, P(1) = 0.224; clipping instead, with the tail piled on
  10, would give a mean of 4.46);
- a span starts at the beginning of a word, the start word drawn in
  proportion to its WordPieces, as the reference's anchor (a uniform token
  moved back to the start of its word);
- spans are added until 15 % of the text's WordPieces are masked;
- the 80/10/10 replacement ([MASK] / random tokens / unchanged) is decided
  once per span, not per token;
- every masked token is a masked-LM target and, unless its span touches the
  segment's edge, also an SBO target predicted from the span's two boundary
  tokens and its position in the span.

Where the reference and the issue's tests part, this module keeps whole
words and the length distribution, and says how it differs:

- the reference cuts the last span mid-word to stop at exactly
  ceil(15 %) tokens; here spans are never cut, so the budget is met by the
  span that reaches it and overshot by at most that span's length minus one
  (on WikiText-2 valid at 128 tokens: 17.1 % of the text on average
  instead of 19 / 126 = 15.1 %);
- the reference lets a span overlap or touch an earlier one and merges them
  (so a merged span can exceed 10 words and carry one decision); here spans
  never touch: at least one unmasked token lies between two spans, so every
  span keeps its drawn length and its boundary tokens are never masked;
- a drawn length that fits nowhere any more (no room between earlier spans,
  or more tokens than `max_predictions` leaves) is redrawn from the lengths
  that still fit; with the defaults this happens in short sequences and,
  through the cap, in 0.3 % of WikiText-2's 128-token rows;
- random replacements are uniform over the vocabulary's non-special tokens,
  as `Masker`, not drawn from the corpus' unigram distribution.

Like `Masker` it is plain numpy with an injected `rng`: deterministic, no
TensorFlow, usable in tf.data (`tf.numpy_function`) and in a PyDataset.

    python -c "from model.pretraining.span_masking import SpanMasker; help(SpanMasker)"
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from model.pretraining.vocabulary_tables import VocabularyTables


@dataclasses.dataclass(frozen=True)
class SpanMaskingConfig:
    """Args:
    mask_rate: share of the text's WordPieces to mask (SpanBERT: 0.15).
    geometric_p: p of the geometric span length, in words (0.2).
    max_span_words: longest span, in words; the distribution is truncated
        here and renormalised (10).
    mask_token_rate: share of spans replaced by `[MASK]` (0.8).
    random_token_rate: share of spans replaced by random tokens (0.1); the
        rest stay unchanged.
    max_predictions: masked positions per sequence. The budget is capped
        here, and the last span may overshoot the budget, so leave room:
        32 at 128 tokens (budget 19 plus the last span; on WikiText-2 the
        cap changed 0.3 % of the sequences); about 100 at 512 tokens.
    max_span_tokens: SBO targets per span, the reference's
        `--max-pair-targets 15`: the span's first 15 WordPieces are SBO
        targets; any further ones are masked-LM targets only.
    """

    mask_rate: float = 0.15
    geometric_p: float = 0.2
    max_span_words: int = 10
    mask_token_rate: float = 0.8
    random_token_rate: float = 0.1
    max_predictions: int = 32
    max_span_tokens: int = 15

    def __post_init__(self):
        if not 0.0 < self.mask_rate <= 1.0:
            raise ValueError(f"mask_rate must be in (0, 1], got {self.mask_rate}")
        if not 0.0 < self.geometric_p <= 1.0:
            raise ValueError(f"geometric_p must be in (0, 1], got {self.geometric_p}")
        if (
            self.mask_token_rate < 0
            or self.random_token_rate < 0
            or self.mask_token_rate + self.random_token_rate > 1.0 + 1e-9
        ):
            raise ValueError("mask_token_rate and random_token_rate must be >= 0 and sum to <= 1")
        for name in ("max_span_words", "max_predictions", "max_span_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def length_distribution(self) -> np.ndarray:
        """P(span of k words) for k = 1..max_span_words: p (1-p)^(k-1), renormalised."""
        k = np.arange(1, self.max_span_words + 1)
        probs = self.geometric_p * (1.0 - self.geometric_p) ** (k - 1)
        return probs / probs.sum()


class SpanMasks(NamedTuple):
    """What `SpanMasker` returns: one row, or a batch (a leading batch axis).

    The first four fields are `Masker`'s outputs, in its order; the last four
    are the SBO head's inputs, one per prediction slot (P = max_predictions),
    aligned with `mask_positions`. `masks._asdict()` is a dict for tf.data.
    Slots beyond the masked positions hold 0 with weight 0.

    token_ids: (seq_len,) int32, the corrupted sequence.
    mask_positions: (P,) int32, the masked positions, ascending.
    mask_ids: (P,) int32, the original tokens there (the targets of both
        objectives).
    mask_weights: (P,) float32, 1.0 at a real masked position.
    left_boundaries: (P,) int32, s - 1 for a token of the span s..e.
    right_boundaries: (P,) int32, e + 1.
    relative_positions: (P,) int32, i - s: 0 at the span's first token. It
        indexes the SBO position embedding; the paper's p_(i-s+1) counts from
        1, the reference's embedding rows from 0, as here.
    sbo_weights: (P,) float32, 1.0 where the token is an SBO target: 0.0 for
        padding slots, for spans touching the edge and beyond
        `max_span_tokens`. Where it is 0 the three index fields are still
        clipped into range, so a gather never reads outside the tensors.
    """

    token_ids: np.ndarray
    mask_positions: np.ndarray
    mask_ids: np.ndarray
    mask_weights: np.ndarray
    left_boundaries: np.ndarray
    right_boundaries: np.ndarray
    relative_positions: np.ndarray
    sbo_weights: np.ndarray


class SpanMasker:
    """Chooses and corrupts SpanBERT's masked spans for one vocabulary.

    Words are read as `Masker`'s whole-word masking reads them: a word starts
    at a token that is not a "##" continuation, or after a special token.
    Special tokens (`SPECIAL_TOKENS`: [PAD], [UNK], [CLS], [SEP], [MASK]) are
    never masked and never inside a span. The budget is
    `min(max_predictions, ceil(mask_rate * text_tokens))`, text tokens being
    the non-special ones (the reference: `ceil(len(block) * mask_ratio)` of
    the block without [CLS]/[SEP]); spans are added while fewer tokens than
    the budget are masked, and are never cut.

    A span touches the edge when its left neighbour s - 1 or its right
    neighbour e + 1 is outside the row or one of `vocabulary_tables.EDGE_TOKENS` ([CLS],
    [SEP], [PAD]): its tokens are masked-LM targets only (sbo_weights 0), as
    the reference's `--endpoints external`. An [UNK] neighbour is a token of
    the text, as in the reference, and serves as a boundary.

    Args:
        vocabulary: the tokens, id = index; needs `[MASK]`.
        config: a `SpanMaskingConfig`.

    Example:
    >>> masker = SpanMasker(vocabulary)
    >>> masks = masker(token_ids, np.random.default_rng([seed, index]))
    >>> masks.mask_positions, masks.left_boundaries  # (32,), (32,)
    """

    def __init__(self, vocabulary: list[str], config: SpanMaskingConfig = SpanMaskingConfig()):
        tables = VocabularyTables.from_vocabulary(vocabulary, "span masking")
        self.config = config
        self.mask_id = tables.mask_id
        self.special, self.edge, self.continuation = (
            tables.special,
            tables.edge,
            tables.continuation,
        )
        self.random_pool = tables.random_pool
        self.lengths = np.arange(1, config.max_span_words + 1)  # (L,) words
        self.length_probs = config.length_distribution()  # (L,)

    def __call__(self, token_ids: np.ndarray, rng: np.random.Generator) -> SpanMasks:
        """Masks one sequence.

        Args:
            token_ids: (seq_len,) ints, padding included.
            rng: the source of randomness (e.g. `np.random.default_rng([seed, index])`).

        Returns:
            a `SpanMasks` of one row.
        """
        ids = np.asarray(token_ids, dtype=np.int32)
        # The paper's span s..e (inclusive) is the half-open range (s, e + 1) here.
        spans = sorted(self._choose_spans(ids, rng))
        return self._corrupt(ids, spans, rng)

    def mask_batch(self, token_ids: np.ndarray, seeds: np.ndarray) -> SpanMasks:
        """Masks a (batch, seq_len) array; example i draws from `default_rng(seeds[i])`.

        Seeding each example from its own key (run seed, position in the
        stream) makes the masks independent of batching and of restarts.
        """
        out = [
            self(row, np.random.default_rng([int(s) for s in key]))
            for row, key in zip(np.asarray(token_ids), np.asarray(seeds))
        ]
        return SpanMasks(*(np.stack(field) for field in zip(*out)))

    def _choose_spans(self, ids: np.ndarray, rng: np.random.Generator) -> list[tuple[int, int]]:
        cfg = self.config
        text = np.flatnonzero(~self.special[ids])  # (T,) positions of text tokens
        if not len(text):
            return []
        budget = min(cfg.max_predictions, math.ceil(len(text) * cfg.mask_rate))
        # Words, as Masker's whole_word: a start at a non-"##" token or after a gap.
        first = ~self.continuation[ids[text]]
        first[1:] |= np.diff(text) != 1
        first[0] = True
        starts = np.flatnonzero(first)
        word_start = text[starts]  # (W,) first token of each word
        word_end = text[np.append(starts[1:], len(text)) - 1] + 1  # (W,) one past its last
        num_words = len(word_start)
        word = np.arange(num_words)
        # A run is a stretch of words with no special token between them;
        # a span never leaves its run. joined[k]: word k continues word k-1's run.
        joined = np.zeros(num_words, dtype=bool)
        joined[1:] = word_start[1:] == word_end[:-1]
        run_ends_here = np.append(~joined[1:], True)
        run_end = _next_at_or_after(run_ends_here, word + 1, num_words)  # (W,) one past the run
        # span_tokens[l, k]: WordPieces of the span of l + 1 words from word k.
        last = np.minimum(word[None, :] + self.lengths[:, None] - 1, num_words - 1)  # (L, W)
        span_tokens = word_end[last] - word_start[None, :]  # (L, W)

        masked = np.zeros(num_words, dtype=bool)
        spans, num_masked = [], 0
        while num_masked < budget:
            # A word may join a new span if neither it nor a neighbour in its
            # run is masked: spans never touch, so boundaries stay unmasked.
            blocked = masked.copy()
            blocked[1:] |= masked[:-1] & joined[1:]
            blocked[:-1] |= masked[1:] & joined[1:]
            next_blocked = _next_at_or_after(blocked, word, num_words)
            room = np.minimum(next_blocked, run_end) - word  # (W,) free words from k on
            fits = (room[None, :] >= self.lengths[:, None]) & (
                span_tokens <= cfg.max_predictions - num_masked
            )  # (L, W)
            probs = self.length_probs * fits.any(axis=1)
            if not probs.any():
                break  # nothing fits any more: a short or crowded sequence
            length = rng.choice(len(probs), p=probs / probs.sum())  # words - 1
            # The reference's anchor: a uniform token, moved to its word's
            # start; so a start word counts as many times as its pieces.
            candidates = np.flatnonzero(fits[length])
            pieces = (word_end - word_start)[candidates]
            k = candidates[rng.choice(len(candidates), p=pieces / pieces.sum())]
            masked[k : k + length + 1] = True
            spans.append((int(word_start[k]), int(word_end[k + length])))
            num_masked += int(span_tokens[length, k])
        return spans

    def _corrupt(self, ids: np.ndarray, spans: list[tuple[int, int]], rng) -> SpanMasks:
        cfg = self.config
        seq_len, p = len(ids), cfg.max_predictions
        masked = ids.copy()
        positions, left, right, relative, sbo = [], [], [], [], []
        for s, stop in spans:  # stop = e + 1: the right boundary
            # One decision per span (the reference's --replacement-method span).
            draw = rng.random()
            if draw < cfg.mask_token_rate:
                masked[s:stop] = self.mask_id
            elif draw < cfg.mask_token_rate + cfg.random_token_rate:
                masked[s:stop] = rng.choice(self.random_pool, size=stop - s)
            touches_edge = (
                s == 0 or stop == seq_len or self.edge[ids[s - 1]] or self.edge[ids[stop]]
            )
            offsets = np.arange(stop - s)  # i - s
            positions.append(np.arange(s, stop))
            # Clipped into the row for edge spans (whose weight is 0), so a
            # gather stays in range.
            left.append(np.full(stop - s, max(s - 1, 0)))
            right.append(np.full(stop - s, min(stop, seq_len - 1)))
            relative.append(np.minimum(offsets, cfg.max_span_tokens - 1))
            sbo.append((offsets < cfg.max_span_tokens) & (not touches_edge))

        def padded(parts, dtype):
            out = np.zeros(p, dtype=dtype)
            if parts:
                values = np.concatenate(parts)
                out[: len(values)] = values
            return out

        mask_positions = padded(positions, np.int32)
        num = sum(stop - s for s, stop in spans)
        mask_ids = np.zeros(p, dtype=np.int32)
        mask_ids[:num] = ids[mask_positions[:num]]
        mask_weights = np.zeros(p, dtype=np.float32)
        mask_weights[:num] = 1.0
        return SpanMasks(
            token_ids=masked,
            mask_positions=mask_positions,
            mask_ids=mask_ids,
            mask_weights=mask_weights,
            left_boundaries=padded(left, np.int32),
            right_boundaries=padded(right, np.int32),
            relative_positions=padded(relative, np.int32),
            sbo_weights=padded(sbo, np.float32),
        )


def _next_at_or_after(flags: np.ndarray, values: np.ndarray, default: int) -> np.ndarray:
    """out[k] = values[j] for the first j >= k with flags[j], else `default`."""
    return np.minimum.accumulate(np.where(flags, values, default)[::-1])[::-1]


class SpanMaskedBatches:
    """SpanBERT's work in the input pipeline: `SpanMasker` over a batch, in the
    batch-transform interface of `model.pretraining.masking.MaskedLMBatches`.
    The masked-LM and SBO outputs share the labels (the original tokens) and
    differ in their weights (edge spans have no SBO target)."""

    def __init__(self, masker: SpanMasker):
        self.masker = masker

    def outputs(self, seq_len: int) -> dict:
        p = self.masker.config.max_predictions
        slots = {
            name: ("int32", [p])
            for name in (
                "mask_positions",
                "left_boundaries",
                "right_boundaries",
                "relative_positions",
            )
        }
        return {
            "x": {"token_ids": ("int32", [seq_len]), **slots},
            "y": {"mlm": ("int32", [p]), "sbo": ("int32", [p])},
            "sw": {"mlm": ("float32", [p]), "sbo": ("float32", [p])},
        }

    def __call__(self, token_ids: np.ndarray, padding_mask: np.ndarray, keys: np.ndarray) -> dict:
        m = self.masker.mask_batch(token_ids, keys)
        return {
            "x": {
                "token_ids": m.token_ids,
                "mask_positions": m.mask_positions,
                "left_boundaries": m.left_boundaries,
                "right_boundaries": m.right_boundaries,
                "relative_positions": m.relative_positions,
            },
            "y": {"mlm": m.mask_ids, "sbo": m.mask_ids},
            "sw": {"mlm": m.mask_weights, "sbo": m.sbo_weights},
        }
