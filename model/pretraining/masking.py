"""Masked-LM masking, as in the paper and google-research/bert.

15 % of the (non-special) tokens of a sequence are chosen as predictions; of
those, 80 % become `[MASK]`, 10 % a random token and 10 % stay unchanged
(every rate is configurable, to reproduce the paper's ablation in appendix
C.2). With whole-word masking all WordPieces of a word are chosen together.
Small differences from google-research's `create_masked_lm_predictions`: the
15 % is of the text tokens, where it counts [CLS] and the [SEP]s too (19
predictions at 128 tokens either way; 76 against 77 for a pair at 512), [UNK]
is never chosen, and the random token is never a special one ([PAD], [UNK],
[CLS], [SEP], [MASK]), where it draws from the whole vocabulary.

The same `Masker` serves static masking (drawn once at data creation, as
google-research's `dupe_factor`) and dynamic masking (drawn afresh for every
epoch in the input pipeline, as RoBERTa). It is plain numpy with an injected
`rng`, so it is deterministic and needs no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from model.pretraining.vocabulary_tables import VocabularyTables


def prediction_slots(mask_rate: float, seq_len: int, room: float = 0.0) -> int:
    """The prediction slots a sequence of `seq_len` needs at `mask_rate`: never fewer than
    15 % of the length (BERT's 20 at 128 tokens), plus `room` of the length (SpanBERT's last
    span may overshoot its budget), rounded up; sized from the rate, so a higher rate is not
    capped at 15 % for want of slots."""
    return math.ceil((max(0.15, mask_rate) + room) * seq_len)


def check_flags(parser, args) -> None:
    """The masking flags' ranges, named as flags (`parser.error`), before any framework
    starts: `model.data`'s and `model.train pretrain`'s. A rate left None takes the
    objective's default later, which `MaskingConfig` checks with the rest."""
    if not 0.0 < args.mask_rate <= 1.0:
        parser.error(f"--mask-rate must be in (0, 1], not {args.mask_rate}")
    rates = {
        "--mask-token-rate": args.mask_token_rate,
        "--random-token-rate": args.random_token_rate,
    }
    for flag, rate in rates.items():
        if rate is not None and not 0.0 <= rate <= 1.0:
            parser.error(f"{flag} must be in [0, 1], not {rate}")
    if None not in rates.values() and sum(rates.values()) > 1.0 + 1e-9:
        mask, random = rates.values()
        parser.error(
            f"--mask-token-rate {mask} and --random-token-rate {random} sum to more than 1 "
            "(the rest of the chosen positions keep their word): lower one of them"
        )


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
    """Args:
    mask_rate: share of tokens chosen for prediction (paper: 0.15).
    mask_token_rate: of the chosen, share replaced by `[MASK]` (0.8).
    random_token_rate: of the chosen, share replaced by a random token
        (0.1); the rest stay unchanged.
    max_predictions: predictions per sequence; the paper uses 20 at 128
        tokens and 80 at 512.
    whole_word: choose whole words rather than single WordPieces.
    """

    mask_rate: float = 0.15
    mask_token_rate: float = 0.8
    random_token_rate: float = 0.1
    max_predictions: int = 20
    whole_word: bool = False

    def __post_init__(self):
        if not 0.0 < self.mask_rate <= 1.0:
            raise ValueError(f"mask_rate must be in (0, 1], got {self.mask_rate}")
        if (
            self.mask_token_rate < 0
            or self.random_token_rate < 0
            or self.mask_token_rate + self.random_token_rate > 1.0 + 1e-9
        ):
            raise ValueError("mask_token_rate and random_token_rate must be >= 0 and sum to <= 1")
        if self.max_predictions < 1:
            raise ValueError(f"max_predictions must be >= 1, got {self.max_predictions}")


class Masker:
    """Chooses and corrupts masked-LM positions for one vocabulary.

    Args:
        vocabulary: the tokens, id = index; needs `[MASK]`.
        config: a `MaskingConfig`.
    """

    def __init__(self, vocabulary: list[str], config: MaskingConfig = MaskingConfig()):
        tables = VocabularyTables.from_vocabulary(vocabulary)
        self.config = config
        self.mask_id = tables.mask_id
        self.special, self.continuation = tables.special, tables.continuation
        self.random_pool = tables.random_pool

    def __call__(self, token_ids: np.ndarray, rng: np.random.Generator):
        """Masks one sequence.

        Args:
            token_ids: (seq_len,) ints, padding included.
            rng: the source of randomness (e.g. `np.random.default_rng([seed, index])`).

        Returns:
            masked_ids (seq_len,) int32, positions, labels (max_predictions,)
            int32 and weights (max_predictions,) float32 (1.0 real, 0.0 pad).
        """
        cfg = self.config
        ids = np.asarray(token_ids, dtype=np.int32)
        candidates = np.flatnonzero(~self.special[ids])
        if cfg.whole_word and len(candidates):
            # A word starts at a non-"##" token or after a gap (a special token).
            starts = ~self.continuation[ids[candidates]]
            starts[1:] |= np.diff(candidates) != 1
            starts[0] = True
            groups = np.split(candidates, np.flatnonzero(starts)[1:])
        else:
            groups = [candidates[i : i + 1] for i in range(len(candidates))]
        budget = min(cfg.max_predictions, max(1, int(round(len(candidates) * cfg.mask_rate))))
        chosen = []
        for g in rng.permutation(len(groups)):
            if len(chosen) >= budget:
                break
            # As google-research: skip a word that would overshoot the budget.
            if len(chosen) + len(groups[g]) > budget:
                continue
            chosen.extend(groups[g].tolist())
        positions = np.array(sorted(chosen), dtype=np.int32)
        masked = ids.copy()
        draws = rng.random(len(positions))
        to_mask = draws < cfg.mask_token_rate
        to_random = (~to_mask) & (draws < cfg.mask_token_rate + cfg.random_token_rate)
        masked[positions[to_mask]] = self.mask_id
        masked[positions[to_random]] = rng.choice(self.random_pool, size=int(to_random.sum()))
        n, p = len(positions), cfg.max_predictions
        out_positions = np.zeros(p, dtype=np.int32)
        out_labels = np.zeros(p, dtype=np.int32)
        weights = np.zeros(p, dtype=np.float32)
        out_positions[:n] = positions
        out_labels[:n] = ids[positions]
        weights[:n] = 1.0
        return masked, out_positions, out_labels, weights

    def mask_batch(self, token_ids: np.ndarray, seeds: np.ndarray):
        """Masks a (batch, seq_len) array; example i draws from `default_rng(seeds[i])`.

        Seeding each example from its own key (run seed, position in the
        stream) makes the masks independent of batching and of restarts.
        """
        out = [
            self(row, np.random.default_rng([int(s) for s in key]))
            for row, key in zip(np.asarray(token_ids), np.asarray(seeds))
        ]
        return tuple(np.stack(x) for x in zip(*out))


class MaskedLMBatches:
    """The masked-LM objective's work in the input pipeline: a batch of
    token ids in, the masked ids, the positions to predict, their labels and
    weights out (BERT and RoBERTa).

    Every objective's batch transform has this interface, so that the
    tf.data pipeline (`model.pretraining.dataset`) and the JAX PyDataset
    (`model.pretraining.pydataset`) run any of them unchanged:

    - `outputs(seq_len)`: `{"x": {name: (dtype, shape)}, "y": ..., "sw": ...}`,
      the arrays one example gets (shapes without the batch axis); "x" holds
      model inputs (a `token_ids` entry replaces the record's), "y" labels and
      "sw" their weights, keyed by the model's output names;
    - `__call__(token_ids, padding_mask, keys)`: numpy arrays of that
      structure with a batch axis; example `i` draws its randomness from
      `default_rng(keys[i])` alone (keys = (run seed, stream position)), so a
      batch is the same after a restart and different in the next epoch.

    Weights are raw (1.0 real, 0.0 padding): the pipeline scales each output's
    weights to the mean over the global batch.
    """

    def __init__(self, masker: Masker):
        self.masker = masker

    def outputs(self, seq_len: int) -> dict:
        p = self.masker.config.max_predictions
        return {
            "x": {"token_ids": ("int32", [seq_len]), "mask_positions": ("int32", [p])},
            "y": {"mlm": ("int32", [p])},
            "sw": {"mlm": ("float32", [p])},
        }

    def __call__(self, token_ids: np.ndarray, padding_mask: np.ndarray, keys: np.ndarray) -> dict:
        masked, positions, labels, weights = self.masker.mask_batch(token_ids, keys)
        return {
            "x": {"token_ids": masked, "mask_positions": positions},
            "y": {"mlm": labels},
            "sw": {"mlm": weights},
        }
