"""model.heads.span_boundary: the SBO head's shapes, input width, formula, tied decoder, targets, training."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
from keras import ops

from model.heads.span_boundary import SpanBoundaryHead
from model.networks.encoder import BertEncoder
from model.pretraining.span_masking import SpanMasker, SpanMaskingConfig
from tests.helpers import tiny_vocabulary

VOCAB = tiny_vocabulary(extra=100)
ID = {t: i for i, t in enumerate(VOCAB)}
SEQ_LEN = 24
P = 8  # max_predictions
HIDDEN = 32  # the tiny preset


def tiny_encoder(seed: int = 0) -> BertEncoder:
    keras.utils.set_random_seed(seed)
    return BertEncoder.from_preset("tiny", vocabulary_size=len(VOCAB), dropout=0.0)


def sbo_model(encoder: BertEncoder, head: SpanBoundaryHead) -> keras.Model:
    """Encoder + head: the batch's SBO logits (batch, P, vocabulary_size)."""
    names = ("token_ids", "segment_ids", "padding_mask")
    inputs = {n: keras.Input(shape=(None,), dtype="int32", name=n) for n in names}
    slots = ("left_boundaries", "right_boundaries", "relative_positions")
    inputs |= {n: keras.Input(shape=(P,), dtype="int32", name=n) for n in slots}
    features = encoder({n: inputs[n] for n in names})
    logits = head(features["sequence_output"], *(inputs[n] for n in slots))
    return keras.Model(inputs, logits)


@pytest.fixture(scope="module")
def batch():
    """Four rows of text masked by SpanMasker: the model inputs, targets and SBO weights."""
    rng = np.random.default_rng(0)
    words = [i for i, t in enumerate(VOCAB) if t.isalpha() and len(t) > 1]
    pieces = [ID["##s"], ID["##ed"], ID["##ing"]]
    rows = np.full((4, SEQ_LEN), ID["[PAD]"], dtype=np.int32)
    for r in range(4):
        text = []
        while len(text) < SEQ_LEN - 2 - 2 * r:  # rows of different lengths: some padding
            text.append(int(rng.choice(words)))
            if rng.random() < 0.3:
                text.append(int(rng.choice(pieces)))
        text = text[: SEQ_LEN - 2 - 2 * r]
        rows[r, : len(text) + 2] = [ID["[CLS]"], *text, ID["[SEP]"]]
    masker = SpanMasker(VOCAB, SpanMaskingConfig(mask_rate=0.3, max_predictions=P))
    masks = masker.mask_batch(rows, np.stack([np.full(4, 1), np.arange(4)], 1))
    x = {
        "token_ids": masks.token_ids,
        "segment_ids": np.zeros_like(rows),
        "padding_mask": (rows != ID["[PAD]"]).astype(np.int32),
        "left_boundaries": masks.left_boundaries,
        "right_boundaries": masks.right_boundaries,
        "relative_positions": masks.relative_positions,
    }
    return x, masks.mask_ids, masks.sbo_weights, masks


def test_output_shape_and_input_width():
    encoder = tiny_encoder()
    head = SpanBoundaryHead(encoder.token_embedding)
    sequence = np.random.default_rng(0).normal(size=(2, 12, HIDDEN)).astype("float32")
    index = np.zeros((2, 5), dtype="int32")
    logits = head(sequence, index, index + 3, index)
    assert tuple(logits.shape) == (2, 5, len(VOCAB))
    # [x_(s-1); x_(e+1); p_(i-s+1)]: 2 * hidden + 200 in, hidden out; two layers.
    assert tuple(head.dense_1.kernel.shape) == (2 * HIDDEN + 200, HIDDEN)
    assert tuple(head.dense_2.kernel.shape) == (HIDDEN, HIDDEN)
    assert tuple(head.position_embedding.embeddings.shape) == (15, 200)
    narrow = SpanBoundaryHead(encoder.token_embedding, max_span_tokens=4, position_dim=8)
    narrow(sequence, index, index, index)
    assert tuple(narrow.dense_1.kernel.shape) == (2 * HIDDEN + 8, HIDDEN)
    assert tuple(narrow.position_embedding.embeddings.shape) == (4, 8)


def test_logits_follow_the_formula():
    """LayerNorm(GELU(W2 LayerNorm(GELU(W1 [x_(s-1); x_(e+1); p])))) E^T + b, in numpy."""
    encoder = tiny_encoder()
    head = SpanBoundaryHead(encoder.token_embedding, position_dim=16)
    rng = np.random.default_rng(1)
    sequence = rng.normal(size=(2, 10, HIDDEN)).astype("float32")
    left = np.array([[0, 2, 5], [1, 1, 7]], dtype="int32")
    right = np.array([[3, 6, 9], [4, 4, 9]], dtype="int32")
    relative = np.array([[0, 1, 14], [0, 2, 3]], dtype="int32")
    logits = ops.convert_to_numpy(head(sequence, left, right, relative))
    head.output_bias.assign(rng.normal(size=len(VOCAB)).astype("float32"))
    logits = ops.convert_to_numpy(head(sequence, left, right, relative))

    gelu = np.vectorize(lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))))

    def layer_norm(v, layer):
        mean, var = v.mean(-1, keepdims=True), v.var(-1, keepdims=True)
        gamma, beta = (ops.convert_to_numpy(w) for w in (layer.gamma, layer.beta))
        return (v - mean) / np.sqrt(var + 1e-12) * gamma + beta

    def dense(v, layer):
        return v @ ops.convert_to_numpy(layer.kernel) + ops.convert_to_numpy(layer.bias)

    rows = np.arange(2)[:, None]
    positions = ops.convert_to_numpy(head.position_embedding.embeddings)[relative]
    h = np.concatenate([sequence[rows, left], sequence[rows, right], positions], axis=-1)
    h = layer_norm(gelu(dense(h, head.dense_1)), head.layer_norm_1)
    h = layer_norm(gelu(dense(h, head.dense_2)), head.layer_norm_2)
    embedding = ops.convert_to_numpy(encoder.token_embedding.embeddings)  # (vocab, hidden)
    expected = h @ embedding.T + ops.convert_to_numpy(head.output_bias)
    np.testing.assert_allclose(logits, expected, atol=2e-4, rtol=1e-4)


def test_the_decoder_is_the_token_embedding():
    encoder = tiny_encoder()
    head = SpanBoundaryHead(encoder.token_embedding)
    model = sbo_model(encoder, head)
    embedding = encoder.token_embedding.embeddings
    # The very variable, once in the model; no (hidden, vocab) kernel of the head's own.
    assert sum(w is embedding for w in model.trainable_weights) == 1
    own = [w for w in head.trainable_weights if w is not embedding]
    assert not [w for w in own if len(VOCAB) in tuple(w.shape) and len(w.shape) == 2]
    assert [tuple(w.shape) for w in own if len(VOCAB) in tuple(w.shape)] == [(len(VOCAB),)]
    # Moving one embedding row moves that token's logit.
    sequence = np.ones((1, 4, HIDDEN), dtype="float32")
    index = np.zeros((1, 2), dtype="int32")
    before = ops.convert_to_numpy(head(sequence, index, index + 2, index))
    values = ops.convert_to_numpy(embedding).copy()
    values[7] += np.random.default_rng(3).normal(size=HIDDEN)
    embedding.assign(values)
    after = ops.convert_to_numpy(head(sequence, index, index + 2, index))
    changed = np.flatnonzero(np.abs(after - before).max(axis=(0, 1)) > 1e-6)
    assert changed.tolist() == [7]


def test_targets_only_at_masked_non_edge_positions(batch):
    x, mask_ids, sbo_weights, masks = batch
    # Real slots are masked positions; padding and edge spans weigh nothing.
    assert ((sbo_weights > 0) <= (masks.mask_weights > 0)).all()
    assert sbo_weights.sum() > 0
    edge_slots = 0
    for r in range(len(mask_ids)):
        n = int(masks.mask_weights[r].sum())
        for slot in range(n):
            left, right = masks.left_boundaries[r, slot], masks.right_boundaries[r, slot]
            # Boundaries are never masked, so token_ids there are the originals.
            at_edge = bool(left == 0 or masks.token_ids[r, right] in (ID["[SEP]"], ID["[PAD]"]))
            assert sbo_weights[r, slot] == (0.0 if at_edge else 1.0)
            edge_slots += at_edge
    assert edge_slots > 0  # the batch has edge spans to check

    encoder = tiny_encoder()
    model = sbo_model(encoder, SpanBoundaryHead(encoder.token_embedding))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    logits = model(x)
    base = float(loss(mask_ids, logits, sample_weight=sbo_weights))
    # Another target at a weight-0 slot changes nothing; at a weight-1 slot it does.
    zero, one = np.argwhere(sbo_weights == 0)[0], np.argwhere(sbo_weights == 1)[0]
    for slot, moves in ((zero, False), (one, True)):
        other = mask_ids.copy()
        other[tuple(slot)] = (other[tuple(slot)] + 1) % len(VOCAB)
        changed = float(loss(other, logits, sample_weight=sbo_weights))
        assert (abs(changed - base) > 1e-6) == moves


# The encoder's pooler is not part of the SBO loss.
@pytest.mark.filterwarnings("ignore:Gradients do not exist:UserWarning")
def test_a_gradient_step_reduces_the_loss(batch):
    x, mask_ids, sbo_weights, _ = batch
    encoder = tiny_encoder()
    model = sbo_model(encoder, SpanBoundaryHead(encoder.token_embedding))
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        run_eagerly=True,  # a tiny model: tracing would cost more than the steps
    )
    before = model.test_on_batch(x, mask_ids, sample_weight=sbo_weights)
    for _ in range(3):
        model.train_on_batch(x, mask_ids, sample_weight=sbo_weights)
    after = model.test_on_batch(x, mask_ids, sample_weight=sbo_weights)
    assert after < before, (before, after)


def test_config_round_trip():
    encoder = tiny_encoder()
    head = SpanBoundaryHead(encoder.token_embedding, max_span_tokens=6, position_dim=12)
    sequence = np.random.default_rng(2).normal(size=(1, 5, HIDDEN)).astype("float32")
    index = np.array([[0, 1]], dtype="int32")
    logits = head(sequence, index, index + 3, index)
    config = keras.layers.serialize(head)
    copy = keras.layers.deserialize(config)
    assert isinstance(copy, SpanBoundaryHead)
    assert (copy.max_span_tokens, copy.position_dim) == (6, 12)
    copy(sequence, index, index + 3, index)
    copy.token_embedding.set_weights(encoder.token_embedding.get_weights())
    copy.set_weights(head.get_weights())
    np.testing.assert_allclose(copy(sequence, index, index + 3, index), logits, atol=1e-6)


def test_a_sequence_of_another_width_is_refused():
    head = SpanBoundaryHead(tiny_encoder().token_embedding)
    index = np.zeros((1, 2), dtype="int32")
    with pytest.raises(ValueError, match="width 16"):
        head(np.zeros((1, 4, 16), dtype="float32"), index, index, index)
