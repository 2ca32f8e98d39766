"""SpanBERT's span masking inside the compiled training step: the twin of span_masking.py (JAX).

`model.pretraining.span_masking.SpanMasker` draws spans on the host, one sequence at a
time; here the same procedure runs on a whole batch (`jax.vmap` over rows, a
`lax.while_loop` adding one span per iteration), so `pretrain --device-data --objective
spanbert` never waits for the host. The procedure, as SpanMasker's docstring gives it:
whole-word spans of geometric length (p = 0.2, 1..10 words, renormalised), a start word
drawn in proportion to its WordPieces, spans never touching each other nor leaving a run
of text, added until the budget `min(max_predictions, ceil(mask_rate x text tokens))` is
reached, a length that fits nowhere redrawn from those that fit; one 80/10/10 decision per
span; SBO targets are the first `max_span_tokens` tokens of spans that do not touch the
segment's edge. tests/test_device_data.py holds the two to the same statistics.

Shapes: B batch, L sequence length (also the most words a row can hold), P
max_predictions, S max_span_words.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from model.pretraining.span_masking import SpanMaskingConfig


def span_masks(key, ids, tables, rates: dict, config: SpanMaskingConfig) -> dict:
    """SpanMasker's outputs for a batch, as a dict of its `SpanMasks` field names. `tables`:
    the vocabulary's `vocabulary_tables.VocabularyTables`; `rates`: its `masking_rates`."""
    keys = jax.random.split(key, ids.shape[0])
    return jax.vmap(lambda k, row: _row(k, row, tables, rates, config))(keys, ids)


def _words(ids, special, continuation):
    """Words of one row in word space (slot k = word k; L slots, `count` of them real):
    their first token, one past their last, and whether word k continues word k-1's run."""
    length = ids.shape[0]
    text = ~special[ids]  # (L,)
    previous = jnp.concatenate([jnp.zeros(1, bool), text[:-1]])
    first = text & (~continuation[ids] | ~previous)
    word = jnp.where(text, jnp.cumsum(first) - 1, length)  # (L,) each token's word
    positions = jnp.arange(length)
    start = jnp.zeros(length + 1, jnp.int32).at[jnp.where(first, word, length)].set(positions)
    end = jnp.zeros(length + 1, jnp.int32).at[word].max(positions + 1)
    count = first.sum()
    start, end = start[:length], end[:length]
    joined = jnp.concatenate([jnp.zeros(1, bool), start[1:] == end[:-1]])
    return start, end, joined, count, text.sum()


def _next_at_or_after(flags, values, default):
    """out[k] = values[j] for the first j >= k with flags[j], else `default`."""
    return jax.lax.cummin(jnp.where(flags, values, default), reverse=True)


def _choose_spans(key, ids, tables, rates, config):
    """Spans as (first word, words - 1) pairs, P slots, `n` real; and the words' layout."""
    start, end, joined, count, text = _words(
        ids, jnp.asarray(tables.special), jnp.asarray(tables.continuation)
    )
    length, p = ids.shape[0], config.max_predictions
    word = jnp.arange(length)
    real = word < count
    budget = jnp.minimum(p, jnp.ceil(text * rates["mask_rate"]).astype(jnp.int32))
    run_end = _next_at_or_after(jnp.append(~joined[1:], True) & real, word + 1, count)
    lengths = jnp.arange(1, config.max_span_words + 1)  # (S,) words
    last = jnp.minimum(word[None, :] + lengths[:, None] - 1, jnp.maximum(count - 1, 0))
    span_tokens = end[last] - start[None, :]  # (S, L)
    log_probs = jnp.log(jnp.asarray(config.length_distribution(), jnp.float32))
    pieces = (end - start).astype(jnp.float32)

    def fits_of(masked, num_masked):
        blocked = masked | ~real
        blocked = blocked.at[1:].set(blocked[1:] | (masked[:-1] & joined[1:]))
        blocked = blocked.at[:-1].set(blocked[:-1] | (masked[1:] & joined[1:]))
        room = jnp.minimum(_next_at_or_after(blocked, word, count), run_end) - word
        return (room[None, :] >= lengths[:, None]) & (span_tokens <= p - num_masked)

    def more(state):
        _, masked, num_masked, n, _, _ = state
        return (num_masked < budget) & fits_of(masked, num_masked).any() & (n < p)

    def add(state):
        key, masked, num_masked, n, first_words, extra_words = state
        key, length_key, word_key = jax.random.split(key, 3)
        fits = fits_of(masked, num_masked)
        size = jax.random.categorical(length_key, jnp.where(fits.any(axis=1), log_probs, -jnp.inf))
        k = jax.random.categorical(word_key, jnp.where(fits[size], jnp.log(pieces), -jnp.inf))
        masked = masked | ((word >= k) & (word <= k + size))
        return (
            key,
            masked,
            num_masked + span_tokens[size, k],
            n + 1,
            first_words.at[n].set(k),
            extra_words.at[n].set(size),
        )

    zeros = jnp.zeros(p, jnp.int32)
    state = (key, jnp.zeros(length, bool), jnp.int32(0), jnp.int32(0), zeros, zeros)
    state = jax.lax.while_loop(more, add, state)
    _, _, _, n, first_words, extra_words = state
    return start[first_words], end[first_words + extra_words], jnp.arange(p) < n


def _row(key, ids, tables, rates, config):
    choose_key, decide_key, token_key = jax.random.split(key, 3)
    span_start, span_stop, span_real = _choose_spans(choose_key, ids, tables, rates, config)
    length, p = ids.shape[0], config.max_predictions
    positions = jnp.arange(length)
    covered = (
        (positions[:, None] >= span_start[None, :])
        & (positions[:, None] < span_stop[None, :])
        & span_real[None, :]
    )  # (L, P) token t in span i
    in_span, span_of = covered.any(axis=1), jnp.argmax(covered, axis=1)
    # One decision per span.
    draws = jax.random.uniform(decide_key, (p,))
    to_mask = draws < rates["mask_token_rate"]
    to_random = ~to_mask & (draws < rates["mask_token_rate"] + rates["random_token_rate"])
    pool = jnp.asarray(tables.random_pool)
    random_ids = pool[jax.random.randint(token_key, (length,), 0, pool.shape[0])]
    shown = jnp.where(
        to_mask[span_of], tables.mask_id, jnp.where(to_random[span_of], random_ids, ids)
    )
    token_ids = jnp.where(in_span, shown, ids).astype(ids.dtype)
    # Slots: the masked positions ascending (spans never overlap), then zeros.
    slot = jnp.argsort(~in_span, stable=True)[:p]
    real = in_span[slot]
    slot = jnp.where(real, slot, 0)
    s, stop = span_start[span_of[slot]], span_stop[span_of[slot]]
    edge = jnp.asarray(tables.edge)
    touches_edge = (
        (s == 0)
        | (stop >= length)
        | edge[ids[jnp.maximum(s - 1, 0)]]
        | edge[ids[jnp.minimum(stop, length - 1)]]
    )
    offset = slot - s
    zero = jnp.zeros_like(slot)
    return {
        "token_ids": token_ids,
        "mask_positions": slot.astype(jnp.int32),
        "mask_ids": jnp.where(real, ids[slot], 0).astype(jnp.int32),
        "mask_weights": real.astype(jnp.float32),
        "left_boundaries": jnp.where(real, jnp.maximum(s - 1, 0), zero).astype(jnp.int32),
        "right_boundaries": jnp.where(real, jnp.minimum(stop, length - 1), zero).astype(jnp.int32),
        "relative_positions": jnp.where(
            real, jnp.minimum(offset, config.max_span_tokens - 1), zero
        ).astype(jnp.int32),
        "sbo_weights": (real & (offset < config.max_span_tokens) & ~touches_edge).astype(
            jnp.float32
        ),
    }
