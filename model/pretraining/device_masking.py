"""Masking inside the compiled training step: the device path's twin of masking.py (JAX).

    KERAS_BACKEND=jax python -m model.train pretrain --device-data ...

`model.pretraining.masking.Masker` masks on the host, one sequence at a time
in numpy; here the same procedure runs on a whole batch as array operations,
so it can live inside the jitted step (model/training/device_loop.py) and the
accelerator never waits for the host. The two are held to the same statistics
(realised rate, the 80/10/10 split, whole words, ELECTRA's 85/15, the
layout of positions, labels and weights) by tests/test_device_data.py; they
draw different random numbers, so they make different masks.

The rates are `MaskingRates`, runtime arrays, not constants of the compiled
program: Table 8's MASK/SAME/RND rows (and any --mask-rate) share one
compiled step, and JAX's persistent compilation cache keeps it across runs.
What changes the program's shapes or procedure (max_predictions, whole-word
masking) is static.

Shapes: B batch, L sequence length, P max_predictions, V vocabulary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from model.pretraining.vocabulary_tables import VocabularyTables


def masking_rates(mask_rate: float, mask_token_rate: float, random_token_rate: float) -> dict:
    """The runtime masking rates, float32 scalars (the compiled step's arguments)."""
    return {
        "mask_rate": np.float32(mask_rate),
        "mask_token_rate": np.float32(mask_token_rate),
        "random_token_rate": np.float32(random_token_rate),
    }


def choose(key, ids, tables: VocabularyTables, mask_rate, max_predictions: int, whole_word: bool):
    """The positions to predict, as Masker chooses them: `round(mask_rate x candidates)`
    tokens (at least 1, at most `max_predictions`), candidates being the non-special
    tokens; with `whole_word`, whole words in random order, a word that would overshoot
    the budget skipped. Returns a (B, L) bool mask. The budget is computed in float32,
    so where `mask_rate x candidates` is within float32's error of a half it can round the
    other way from Masker's float64 (at 15 %: 190, 350 and 390 candidates, one more)."""
    candidate = ~jnp.asarray(tables.special)[ids]  # (B, L)
    count = candidate.sum(axis=1)  # (B,)
    budget = jnp.clip(jnp.round(count * mask_rate), 1, max_predictions).astype(jnp.int32)
    if whole_word:
        return _choose_words(key, ids, candidate, jnp.asarray(tables.continuation), budget)
    # A uniformly random subset of `budget` candidates: the ones of lowest rank
    # in a random order of the candidates.
    scores = jnp.where(candidate, jax.random.uniform(key, ids.shape), 2.0)  # (B, L)
    rank = jnp.argsort(jnp.argsort(scores, axis=1), axis=1)
    return candidate & (rank < budget[:, None])


def _choose_words(key, ids, candidate, continuation, budget):
    """Whole words in a random order, each taken while it fits the budget (Masker's loop,
    one step per word slot, all rows at once)."""
    batch, length = ids.shape
    previous = jnp.pad(candidate[:, :-1], ((0, 0), (1, 0)))
    # A word starts at a non-"##" candidate or at a candidate after a special token.
    starts = candidate & (~continuation[ids] | ~previous)
    word = jnp.cumsum(starts, axis=1) - 1  # (B, L) the word of each candidate
    word = jnp.where(candidate, word, length)  # non-candidates: a slot past the end
    rows = jnp.arange(batch)[:, None]
    sizes = jnp.zeros((batch, length + 1), jnp.int32).at[rows, word].add(1)[:, :length]
    order = jnp.argsort(jnp.where(sizes > 0, jax.random.uniform(key, sizes.shape), 2.0), axis=1)

    def take(count, slot):  # slot: (B,) the next word of each row's random order
        size = jnp.take_along_axis(sizes, slot[:, None], axis=1)[:, 0]
        fits = (size > 0) & (count + size <= budget)
        return count + jnp.where(fits, size, 0), fits

    _, taken = jax.lax.scan(take, jnp.zeros(batch, jnp.int32), order.T)  # taken: (L, B)
    chosen_words = jnp.zeros((batch, length + 1), bool).at[rows, order].set(taken.T)
    return jnp.take_along_axis(chosen_words, word, axis=1) & candidate


def corrupt(key, ids, chosen, tables: VocabularyTables, rates: dict, max_predictions: int):
    """Replaces the chosen tokens: `mask_token_rate` of them by [MASK], `random_token_rate`
    by a random word, the rest kept. Returns masked_ids (B, L), positions, labels (B, P)
    int32 and weights (B, P) float32, laid out as Masker's (ascending positions, then
    zeros)."""
    batch, length = ids.shape
    # Chosen positions first, in ascending order (a stable sort of "not chosen").
    positions = jnp.argsort(~chosen, axis=1, stable=True)[:, :max_predictions]  # (B, P)
    real = jnp.take_along_axis(chosen, positions, axis=1)
    positions = jnp.where(real, positions, 0).astype(jnp.int32)
    labels = jnp.where(real, jnp.take_along_axis(ids, positions, axis=1), 0).astype(jnp.int32)
    draw_key, token_key = jax.random.split(key)
    draws = jax.random.uniform(draw_key, positions.shape)
    to_mask = draws < rates["mask_token_rate"]
    to_random = ~to_mask & (draws < rates["mask_token_rate"] + rates["random_token_rate"])
    pool = jnp.asarray(tables.random_pool)
    random_ids = pool[jax.random.randint(token_key, positions.shape, 0, pool.shape[0])]
    shown = jnp.where(to_mask, tables.mask_id, jnp.where(to_random, random_ids, labels))
    rows = jnp.arange(batch)[:, None]
    # Padding entries point past the end and are dropped.
    target = jnp.where(real, positions, length)
    masked = ids.at[rows, target].set(shown.astype(ids.dtype), mode="drop")
    return masked, positions, labels, real.astype(jnp.float32)


def mask_tokens(key, ids, tables, rates, max_predictions: int, whole_word: bool = False):
    """BERT's (and RoBERTa's, ELECTRA's) masking of a batch: `choose`, then `corrupt`."""
    choose_key, corrupt_key = jax.random.split(key)
    chosen = choose(choose_key, ids, tables, rates["mask_rate"], max_predictions, whole_word)
    return corrupt(corrupt_key, ids, chosen, tables, rates, max_predictions)
