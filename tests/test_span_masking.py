"""model.pretraining.span_masking: SpanBERT's span lengths, whole words, budget, one decision per span, SBO inputs.

The statistics are measured on ~100k WordPieces of WikiText-2 valid (bert-base-uncased
vocabulary, rows of 128 = [CLS] + 126 + [SEP]), masked with 8 seeds (~32k spans), so the
standard error of the mean length is ~0.015 against the tolerance of 0.05.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from model.pretraining.span_masking import SpanMasker, SpanMaskingConfig, SpanMasks
from model.pretraining.vocabulary_tables import EDGE_TOKENS
from model.text.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer, load_vocabulary
from tests.helpers import BERT_VOCAB, SHARED_DATA, tiny_vocabulary

WIKITEXT = os.path.join(SHARED_DATA, "wikitext-2-raw", "wiki.valid.raw")
SEQ_LEN = 128
PASSES = 8

VOCAB = load_vocabulary(BERT_VOCAB)
ID = {t: i for i, t in enumerate(VOCAB)}
CONFIG = SpanMaskingConfig()
MASKER = SpanMasker(VOCAB, CONFIG)
IS_SPECIAL = np.isin(np.arange(len(VOCAB)), [ID[t] for t in SPECIAL_TOKENS])
IS_EDGE = np.isin(np.arange(len(VOCAB)), [ID[t] for t in EDGE_TOKENS])
IS_CONTINUATION = np.array([t.startswith("##") for t in VOCAB])


def spans_of(masks: SpanMasks) -> list[tuple[int, int]]:
    """The spans of one row as token ranges [s, e): runs of consecutive masked positions
    (spans never touch, so a run is exactly one span)."""
    positions = masks.mask_positions[: int(masks.mask_weights.sum())]
    runs = np.split(positions, np.flatnonzero(np.diff(positions) != 1) + 1)
    return [(int(r[0]), int(r[-1]) + 1) for r in runs if len(r)]


def word_starts(row: np.ndarray) -> np.ndarray:
    """(seq_len,) True where a word starts: not a "##" piece, or right after a special token
    (a row cut mid-word starts with a "##" piece that begins its own word)."""
    after_special = np.concatenate([[True], IS_SPECIAL[row[:-1]]])
    return ~IS_SPECIAL[row] & (~IS_CONTINUATION[row] | after_special)


def words_in(row: np.ndarray, s: int, e: int) -> int:
    return int(word_starts(row)[s:e].sum())


def budget_of(row: np.ndarray, config: SpanMaskingConfig = CONFIG) -> int:
    text = int((~IS_SPECIAL[row]).sum())
    return min(config.max_predictions, math.ceil(text * config.mask_rate))


@pytest.fixture(scope="module")
def wikitext_rows() -> np.ndarray:
    """(793, 128) rows: the first ~100k WordPieces of WikiText-2 valid."""
    if not os.path.exists(WIKITEXT):
        pytest.skip(f"{WIKITEXT} is absent (the shared data folder beside the repository)")
    tokenizer = WordPieceTokenizer(BERT_VOCAB)
    with open(WIKITEXT, encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    ids = []
    for line_ids in tokenizer.encode(lines):
        ids.extend(line_ids)
        if len(ids) >= 100_000:
            break
    text = SEQ_LEN - 2
    segments = np.array(ids[: len(ids) // text * text], dtype=np.int32).reshape(-1, text)
    n = len(segments)
    return np.concatenate(
        [np.full((n, 1), ID["[CLS]"]), segments, np.full((n, 1), ID["[SEP]"])], axis=1
    ).astype(np.int32)


@pytest.fixture(scope="module")
def masked(wikitext_rows) -> list[tuple[np.ndarray, SpanMasks]]:
    """(original row, its masks of one row) for every row, masked PASSES times."""
    out = []
    for seed in range(PASSES):
        keys = np.stack([np.full(len(wikitext_rows), seed), np.arange(len(wikitext_rows))], 1)
        batch = MASKER.mask_batch(wikitext_rows, keys)
        for i, row in enumerate(wikitext_rows):
            out.append((row, SpanMasks(*(field[i] for field in batch))))
    return out


# === the length distribution ===


def test_length_distribution_is_the_truncated_renormalised_geometric():
    probs = CONFIG.length_distribution()
    k = np.arange(1, 11)
    assert len(probs) == 10 and abs(probs.sum() - 1.0) < 1e-12
    assert abs((k * probs).sum() - 3.797) < 1e-3  # the paper's 3.8
    assert abs(probs[0] - 0.2241) < 1e-4
    np.testing.assert_allclose(probs[1:] / probs[:-1], 0.8)


def test_span_lengths_on_real_text(wikitext_rows, masked):
    assert (~IS_SPECIAL[wikitext_rows]).sum() >= 99_000
    lengths = np.array([words_in(row, s, e) for row, m in masked for s, e in spans_of(m)])
    assert len(lengths) > 30_000
    assert abs(lengths.mean() - 3.8) <= 0.05, lengths.mean()
    assert abs((lengths == 1).mean() - 0.224) <= 0.01, (lengths == 1).mean()
    assert lengths.min() >= 1 and lengths.max() <= 10
    # The long tail is there too: every length 1..10 is drawn.
    assert set(lengths.tolist()) == set(range(1, 11))


def test_every_span_covers_whole_words(masked):
    for row, m in masked:
        for s, e in spans_of(m):
            assert not IS_SPECIAL[row[s:e]].any()
            assert word_starts(row)[s]
            # Ends a word: the next token does not continue it.
            assert e == len(row) or not IS_CONTINUATION[row[e]]


def test_spans_never_touch_and_boundaries_stay_unmasked(masked):
    """Each run of masked positions is one span (its relative positions start at 0 once),
    and no span's boundary token is masked."""
    for _, m in masked:
        n = int(m.mask_weights.sum())
        chosen = set(m.mask_positions[:n].tolist())
        assert not chosen & set(m.left_boundaries[:n].tolist())
        assert not chosen & set(m.right_boundaries[:n].tolist())
        starts = int((m.relative_positions[:n] == 0).sum())
        assert starts == len(spans_of(m))


def test_the_budget_is_met_by_the_last_span(masked):
    """Spans are added while fewer than ceil(15 %) of the text tokens are masked and never
    cut, so the count reaches the budget and exceeds it by less than one span."""
    counts, texts = [], []
    for row, m in masked:
        budget, n = budget_of(row), int(m.mask_weights.sum())
        longest = max(e - s for s, e in spans_of(m))
        assert budget <= n <= CONFIG.max_predictions
        assert n - longest < budget
        counts.append(n)
        texts.append(int((~IS_SPECIAL[row]).sum()))
    rate = sum(counts) / sum(texts)
    assert 0.15 <= rate <= 0.18, rate  # 17.1 %: the overshoot of whole spans


def test_one_replacement_decision_per_span(masked):
    kinds = {"mask": 0, "random": 0, "keep": 0}
    mixed_random_keep = 0
    for row, m in masked:
        for s, e in spans_of(m):
            new, old = m.token_ids[s:e], row[s:e]
            is_mask = new == ID["[MASK]"]
            # Never part [MASK] and part not: a per-token decision would mix them
            # in ~40 % of the multi-token spans.
            assert is_mask.all() or not is_mask.any(), (row[s:e], new)
            if is_mask.all():
                kinds["mask"] += 1
            elif (new == old).all():
                kinds["keep"] += 1
            else:
                kinds["random"] += 1
                # a random draw equals the original token 1 time in 30k
                mixed_random_keep += int((new == old).any())
    total = sum(kinds.values())
    assert abs(kinds["mask"] / total - 0.8) < 0.02, kinds
    assert abs(kinds["random"] / total - 0.1) < 0.02, kinds
    assert abs(kinds["keep"] / total - 0.1) < 0.02, kinds
    assert mixed_random_keep <= 0.002 * kinds["random"], mixed_random_keep


def test_special_tokens_are_never_masked_or_drawn(masked):
    for row, m in masked:
        n = int(m.mask_weights.sum())
        assert not IS_SPECIAL[row[m.mask_positions[:n]]].any()
        np.testing.assert_array_equal(m.token_ids[IS_SPECIAL[row]], row[IS_SPECIAL[row]])
        changed = m.token_ids != row
        replaced = m.token_ids[changed]
        assert not IS_SPECIAL[replaced[replaced != ID["[MASK]"]]].any()
        # Only the chosen positions change.
        assert set(np.flatnonzero(changed)) <= set(m.mask_positions[:n].tolist())
        np.testing.assert_array_equal(m.mask_ids[:n], row[m.mask_positions[:n]])


def test_sbo_inputs_name_the_boundaries_and_the_offset(masked):
    limit = CONFIG.max_span_tokens
    edge_spans = inner_spans = 0
    for row, m in masked:
        n = int(m.mask_weights.sum())
        left, right, relative, weights = [], [], [], []
        for s, e in spans_of(m):  # slots hold the spans in order
            offsets = np.arange(e - s)
            edge = bool(IS_EDGE[row[s - 1]] or IS_EDGE[row[e]])
            left += [s - 1] * (e - s)
            right += [e] * (e - s)
            relative += np.minimum(offsets, limit - 1).tolist()  # the last embedding row
            weights += ((offsets < limit) & (not edge)).tolist()
            edge_spans += edge
            inner_spans += not edge
        assert m.left_boundaries[:n].tolist() == left
        assert m.right_boundaries[:n].tolist() == right
        assert m.relative_positions[:n].tolist() == relative
        assert m.sbo_weights[:n].tolist() == weights
        # Padding slots are zero everywhere.
        for field in m[1:]:
            assert not field[n:].any()
    assert edge_spans > 100 and inner_spans > 20 * edge_spans


def test_same_seed_same_masks_other_seed_other_masks(wikitext_rows):
    rows = wikitext_rows[:16]
    keys = np.stack([np.full(16, 3), np.arange(16)], 1)
    a, b = MASKER.mask_batch(rows, keys), MASKER.mask_batch(rows, keys)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    c = MASKER.mask_batch(rows, keys + [[1, 0]])
    assert (a.mask_positions != c.mask_positions).any(axis=1).all()
    # mask_batch is the per-row call with default_rng(key).
    one = MASKER(rows[5], np.random.default_rng([3, 5]))
    for x, y in zip(one, a):
        np.testing.assert_array_equal(x, y[5])


# === hand-made rows (the tiny vocabulary) ===

TINY = tiny_vocabulary()
TID = {t: i for i, t in enumerate(TINY)}


def tiny_row(tokens: str, seq_len: int = 12) -> np.ndarray:
    ids = [TID[t] for t in tokens.split()]
    return np.array(ids + [TID["[PAD]"]] * (seq_len - len(ids)), dtype=np.int32)


def one_word_spans(**overrides) -> SpanMasker:
    """Spans of exactly one word, every one replaced by [MASK], as many as fit."""
    settings = {
        "geometric_p": 1.0,
        "mask_rate": 1.0,
        "mask_token_rate": 1.0,
        "random_token_rate": 0.0,
    }
    return SpanMasker(TINY, SpanMaskingConfig(**(settings | overrides)))


def test_edge_spans_have_no_sbo_target():
    #               0     1   2   3   4  5   6
    row = tiny_row("[CLS] the cat sat on mat [SEP]")
    for seed in range(20):
        m = one_word_spans()(row, np.random.default_rng(seed))
        n = int(m.mask_weights.sum())
        for slot in range(n):
            position = int(m.mask_positions[slot])
            assert m.left_boundaries[slot] == position - 1
            assert m.right_boundaries[slot] == position + 1
            # Next to [CLS] (position 1) or [SEP] (position 5): an edge.
            assert m.sbo_weights[slot] == (0.0 if position in (1, 5) else 1.0)


def test_pad_and_row_end_are_edges_and_unk_is_a_boundary():
    row = tiny_row("[CLS] the cat [UNK] sat on", seq_len=6)  # no [SEP]: text to the row's end
    seen = set()
    for seed in range(40):
        m = one_word_spans()(row, np.random.default_rng(seed))
        for slot in range(int(m.mask_weights.sum())):
            position = int(m.mask_positions[slot])
            seen.add(position)
            assert 0 <= m.right_boundaries[slot] < len(row)  # clipped into the row
            # 5 is the row's last token; 2 and 4 sit beside [UNK], a real token.
            assert m.sbo_weights[slot] == (0.0 if position in (1, 5) else 1.0)
    assert seen == {1, 2, 4, 5}  # [UNK] is never masked
    padded = tiny_row("[CLS] the cat sat on [PAD]", seq_len=6)
    m = one_word_spans(mask_rate=0.2)(padded, np.random.default_rng(1))
    assert m.mask_positions[0] in (1, 2, 3, 4)
    assert m.sbo_weights[0] == (0.0 if m.mask_positions[0] in (1, 4) else 1.0)


def test_a_span_longer_than_max_span_tokens_has_sbo_targets_on_its_first_tokens():
    # One word of 20 WordPieces ("a" then 19 "##s"), alone between two words.
    row = tiny_row("[CLS] the " + "a " + "##s " * 19 + "cat [SEP]", seq_len=26)
    masker = one_word_spans(mask_rate=0.1, max_predictions=32)
    for seed in range(50):
        m = masker(row, np.random.default_rng(seed))
        if m.mask_positions[0] == 2:
            break
    else:
        pytest.fail("the long word was never chosen")
    assert m.mask_weights.sum() == 20
    np.testing.assert_array_equal(m.relative_positions[:20], np.minimum(np.arange(20), 14))
    np.testing.assert_array_equal(m.sbo_weights[:20], (np.arange(20) < 15).astype(np.float32))
    assert (m.left_boundaries[:20] == 1).all() and (m.right_boundaries[:20] == 22).all()


def test_max_predictions_caps_whole_spans(wikitext_rows):
    config = SpanMaskingConfig(max_predictions=6)
    masker = SpanMasker(VOCAB, config)
    keys = np.stack([np.zeros(200, int), np.arange(200)], 1)
    batch = masker.mask_batch(wikitext_rows[:200], keys)
    assert (batch.mask_weights.sum(axis=1) <= 6).all()
    for i, row in enumerate(wikitext_rows[:200]):
        m = SpanMasks(*(field[i] for field in batch))
        for s, e in spans_of(m):
            assert word_starts(row)[s] and not IS_CONTINUATION[row[e]]


def test_a_row_without_text_is_left_alone():
    row = tiny_row("[CLS] [SEP]")
    m = SpanMasker(TINY)(row, np.random.default_rng(0))
    np.testing.assert_array_equal(m.token_ids, row)
    assert all(not field.any() for field in m[1:])
    assert all(field.shape == (32,) for field in m[1:])


@pytest.mark.parametrize(
    "bad",
    [
        {"mask_rate": 0.0},
        {"geometric_p": 0.0},
        {"geometric_p": 1.5},
        {"max_span_words": 0},
        {"max_predictions": 0},
        {"max_span_tokens": 0},
        {"mask_token_rate": 0.8, "random_token_rate": 0.3},
    ],
)
def test_impossible_configs_are_refused(bad):
    with pytest.raises(ValueError):
        SpanMaskingConfig(**bad)


def test_a_vocabulary_without_mask_is_refused():
    with pytest.raises(ValueError, match=r"\[MASK\]"):
        SpanMasker(tiny_vocabulary(mask=False))
