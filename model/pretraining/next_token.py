"""The left-to-right language model's work in the input pipeline: every
position predicts the token after it.

Nothing is masked or drawn at random: the inputs are the record's tokens, and
position i (0 .. seq_len - 2) is labelled with token i + 1, weighted by
whether that token is real (not padding). The attention that keeps a
position from seeing the token it predicts is the encoder's own (a causal
`BertEncoder`, `BertConfig.causal`), not the data's.

The interface is the batch transform of `model.pretraining.masking.MaskedLMBatches`.
"""

from __future__ import annotations

import numpy as np


class NextTokenBatches:
    """Next-token labels for a batch of token ids."""

    def outputs(self, seq_len: int) -> dict:
        n = seq_len - 1
        return {
            "x": {"predict_positions": ("int32", [n])},
            "y": {"next_token": ("int32", [n])},
            "sw": {"next_token": ("float32", [n])},
        }

    def __call__(self, token_ids: np.ndarray, padding_mask: np.ndarray, keys: np.ndarray) -> dict:
        token_ids = np.asarray(token_ids, np.int32)  # (batch, seq_len)
        batch, seq_len = token_ids.shape
        positions = np.broadcast_to(np.arange(seq_len - 1, dtype=np.int32), (batch, seq_len - 1))
        return {
            "x": {"predict_positions": np.ascontiguousarray(positions)},
            "y": {"next_token": token_ids[:, 1:]},
            "sw": {"next_token": np.asarray(padding_mask, np.float32)[:, 1:]},
        }
