"""What masking needs of a vocabulary, as arrays: one set of tables, built once on the host,
for the maskers of the data pipeline (`masking.Masker`, `span_masking.SpanMasker`) and of the
device (`device_masking`, `device_span_masking`).

    (used by `python -m model.data` and `python -m model.train pretrain`; no command of its own)
"""

from __future__ import annotations

import dataclasses

import numpy as np

from model.text.wordpiece import SPECIAL_TOKENS

# A span next to one of these (or next to the end of the row) touches the segment's edge
# (span_masking.py): its boundary is not a token of the text, so it has no SBO target. The
# reference masks the text without [CLS]/[SEP] and drops the spans at its first and last
# token (`--endpoints external`): the same spans.
EDGE_TOKENS = ("[CLS]", "[SEP]", "[PAD]")


@dataclasses.dataclass(frozen=True)
class VocabularyTables:
    """special: (V,) bool, never chosen ([PAD], [UNK], [CLS], [SEP], [MASK]);
    continuation: (V,) bool, "##" pieces (whole-word masking);
    random_pool: (R,) int32, the ids a random replacement draws from: real words, never
        [CLS]/[SEP]/[PAD]/[MASK];
    mask_id: the [MASK] id;
    edge: (V,) bool, the `EDGE_TOKENS`.
    """

    special: np.ndarray
    continuation: np.ndarray
    random_pool: np.ndarray
    mask_id: int
    edge: np.ndarray

    @classmethod
    def from_vocabulary(
        cls, vocabulary: list[str], needs: str = "masked-LM pre-training"
    ) -> VocabularyTables:
        if "[MASK]" not in vocabulary:
            raise ValueError(f"the vocabulary has no [MASK] token; {needs} needs one")
        tokens = np.array(vocabulary, dtype=object)
        special = np.isin(tokens, SPECIAL_TOKENS)
        return cls(
            special=special,
            continuation=np.array([t.startswith("##") for t in vocabulary], dtype=bool),
            random_pool=np.flatnonzero(~special).astype(np.int32),
            mask_id=vocabulary.index("[MASK]"),
            edge=np.isin(tokens, EDGE_TOKENS),
        )
