"""model.pretraining.masking: the masked-LM corruption (15 %, then 80/10/10), specials, whole words, limits."""

from __future__ import annotations

import numpy as np
import pytest

from model.pretraining.masking import Masker, MaskingConfig
from tests.helpers import tiny_vocabulary

SEQ_LEN = 128
# Enough filler tokens that a "random" replacement rarely equals the original.
VOCAB = tiny_vocabulary(extra=2000)
ID = {t: i for i, t in enumerate(VOCAB)}
SPECIAL_IDS = [ID[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")]
WORD_IDS = np.array([i for i, t in enumerate(VOCAB) if not t.startswith(("[", "##"))])
CONTINUATION_IDS = np.array([i for i, t in enumerate(VOCAB) if t.startswith("##")])


def packed_sequences(n: int, rng: np.random.Generator, pieces: bool = False) -> np.ndarray:
    """(n, SEQ_LEN) `[CLS] A [SEP] B [SEP] [PAD]...` rows, with a few [UNK]/[MASK] in the text.

    With `pieces`, words are 1-3 WordPieces (a word id, then "##" ids).
    """
    rows = np.full((n, SEQ_LEN), ID["[PAD]"], dtype=np.int32)
    for r in range(n):
        length = int(rng.integers(SEQ_LEN // 2, SEQ_LEN + 1))
        text = []
        while len(text) < length - 3:
            text.append(int(rng.choice(WORD_IDS)))
            if pieces:
                text.extend(rng.choice(CONTINUATION_IDS, size=int(rng.integers(0, 3))).tolist())
        text = np.array(text[: length - 3])
        text[rng.random(len(text)) < 0.02] = ID["[UNK]"]
        text[rng.random(len(text)) < 0.02] = ID["[MASK]"]
        a = len(text) // 2
        row = [ID["[CLS]"], *text[:a], ID["[SEP]"], *text[a:], ID["[SEP]"]]
        rows[r, : len(row)] = row
    return rows


@pytest.fixture(scope="module")
def statistics():
    """Masks 1,200 sequences (> 100k maskable tokens) with the paper's rates."""
    masker = Masker(VOCAB, MaskingConfig(max_predictions=SEQ_LEN))
    rows = packed_sequences(1200, np.random.default_rng(0))
    keys = np.stack([np.full(len(rows), 7), np.arange(len(rows))], axis=1)
    masked, positions, labels, weights = masker.mask_batch(rows, keys)
    return rows, masked, positions, labels, weights


def test_fifteen_percent_of_maskable_tokens_are_chosen(statistics):
    rows, masked, positions, labels, weights = statistics
    maskable = int((~np.isin(rows, SPECIAL_IDS)).sum())
    assert maskable >= 100_000
    chosen = int(weights.sum())
    assert abs(chosen / maskable - 0.15) <= 0.005, chosen / maskable


def test_eighty_ten_ten_of_the_chosen(statistics):
    rows, masked, positions, labels, weights = statistics
    real = weights > 0
    new = np.take_along_axis(masked, positions, axis=1)[real]
    old = labels[real]
    assert np.array_equal(old, np.take_along_axis(rows, positions, axis=1)[real])
    to_mask = np.mean(new == ID["[MASK]"])
    to_random = np.mean((new != ID["[MASK]"]) & (new != old))
    unchanged = np.mean(new == old)
    assert abs(to_mask - 0.8) <= 0.01, to_mask
    assert abs(to_random - 0.1) <= 0.01, to_random
    assert abs(unchanged - 0.1) <= 0.01, unchanged
    # Nothing but the chosen positions changed.
    changed = masked != rows
    rows_idx = np.nonzero(real)[0]
    chosen = np.zeros_like(changed)
    chosen[rows_idx, positions[real]] = True
    assert not (changed & ~chosen).any()


def test_special_tokens_are_never_chosen_nor_used_as_replacements(statistics):
    rows, masked, positions, labels, weights = statistics
    real = weights > 0
    assert not np.isin(labels[real], SPECIAL_IDS).any()
    assert np.array_equal(masked[np.isin(rows, SPECIAL_IDS)], rows[np.isin(rows, SPECIAL_IDS)])
    new = np.take_along_axis(masked, positions, axis=1)[real]
    assert not np.isin(new[new != ID["[MASK]"]], SPECIAL_IDS).any()


def test_every_maskable_token_chosen_at_rate_one_but_never_a_special_one():
    masker = Masker(VOCAB, MaskingConfig(mask_rate=1.0, max_predictions=SEQ_LEN))
    rows = packed_sequences(20, np.random.default_rng(1))
    for row in rows:
        masked, positions, labels, weights = masker(row, np.random.default_rng(0))
        maskable = np.flatnonzero(~np.isin(row, SPECIAL_IDS))
        assert np.array_equal(positions[weights > 0], maskable)


def test_padding_of_the_prediction_slots_and_max_predictions():
    masker = Masker(VOCAB, MaskingConfig(max_predictions=5))
    rows = packed_sequences(50, np.random.default_rng(2))
    for row in rows:
        masked, positions, labels, weights = masker(row, np.random.default_rng(3))
        n = int(weights.sum())
        assert n == 5  # 15 % of >= 60 tokens is more than 5
        assert positions.dtype == labels.dtype == masked.dtype == np.int32
        assert weights.dtype == np.float32
        assert np.all(np.diff(positions[:n]) > 0)
    short = np.array([ID["[CLS]"], ID["cat"], ID["sat"], ID["[SEP]"], 0, 0], dtype=np.int32)
    masked, positions, labels, weights = masker(short, np.random.default_rng(0))
    # At least one prediction, even when 15 % rounds to zero; unused slots are zero.
    assert weights.tolist() == [1, 0, 0, 0, 0]
    assert positions[0] in (1, 2) and labels[0] == short[positions[0]]
    assert positions[1:].tolist() == labels[1:].tolist() == [0, 0, 0, 0]


def test_whole_word_masking_chooses_all_pieces_of_a_word():
    rows = packed_sequences(200, np.random.default_rng(4), pieces=True)
    # A word = a non-"##" token and the "##" tokens right after it; a special
    # token ends a word too.
    starts = ~np.isin(rows, CONTINUATION_IDS)
    starts[:, 1:] |= np.isin(rows[:, :-1], SPECIAL_IDS)
    split_words = {False: 0, True: 0}
    for whole_word in (True, False):
        masker = Masker(VOCAB, MaskingConfig(max_predictions=20, whole_word=whole_word))
        for row, start in zip(rows, starts):
            masked, positions, labels, weights = masker(row, np.random.default_rng(5))
            chosen = np.zeros(SEQ_LEN, dtype=bool)
            chosen[positions[weights > 0]] = True
            word = np.cumsum(start)
            for w in np.unique(word[chosen]):
                if not chosen[word == w].all():
                    split_words[whole_word] += 1
    assert split_words[True] == 0
    assert split_words[False] > 0  # the check above can fail


def test_rate_ablations_are_exact():
    row = packed_sequences(1, np.random.default_rng(6))[0]
    all_mask = Masker(VOCAB, MaskingConfig(mask_token_rate=1.0, random_token_rate=0.0))
    masked, positions, _, weights = all_mask(row, np.random.default_rng(0))
    assert (masked[positions[weights > 0]] == ID["[MASK]"]).all()
    keep = Masker(VOCAB, MaskingConfig(mask_token_rate=0.0, random_token_rate=0.0))
    masked, positions, labels, weights = keep(row, np.random.default_rng(0))
    assert np.array_equal(masked, row) and weights.sum() > 0


def test_same_key_same_mask_and_batch_equals_rows():
    masker = Masker(VOCAB, MaskingConfig())
    rows = packed_sequences(8, np.random.default_rng(7))
    keys = np.stack([np.full(8, 3), np.arange(100, 108)], axis=1)
    batch = masker.mask_batch(rows, keys)
    again = masker.mask_batch(rows, keys)
    for a, b in zip(batch, again):
        assert np.array_equal(a, b)
    for i in range(8):
        single = masker(rows[i], np.random.default_rng([3, 100 + i]))
        for a, b in zip(batch, single):
            assert np.array_equal(a[i], b)
    other = masker.mask_batch(rows, keys + [1, 0])
    assert not np.array_equal(batch[1], other[1])


def test_config_and_vocabulary_checks():
    for bad in (
        dict(mask_rate=0.0),
        dict(mask_rate=1.5),
        dict(mask_token_rate=0.95),
        dict(random_token_rate=-0.1),
        dict(max_predictions=0),
    ):
        with pytest.raises(ValueError):
            MaskingConfig(**bad)
    with pytest.raises(ValueError, match=r"no \[MASK\]"):
        Masker(tiny_vocabulary(mask=False))
