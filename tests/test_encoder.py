"""`BertEncoder` and `BertPretrainer`: shapes, padding, attention, GELU forms, saving, precision.

    PYTHONPATH=. python -m pytest tests/test_encoder.py

Modelled on keras-hub's `run_backbone_test` / `run_model_saving_test`: the
`tiny` preset with a 64-token vocabulary, random weights, seconds in all.
"""

from __future__ import annotations

import math
import os

import keras
import numpy as np
import pytest

from model.config import GELU, GELU_APPROXIMATE
from model.heads.pretrainer import BertPretrainer
from model.networks.encoder import BertEncoder, activation_fn
from tests.helpers import random_encoder_inputs

VOCAB = 64
HIDDEN = 32  # the tiny preset's
LAYERS, HEADS = 2, 2


def tiny_encoder(**overrides) -> BertEncoder:
    keras.utils.set_random_seed(0)
    return BertEncoder.from_preset("tiny", vocabulary_size=VOCAB, **overrides)


@pytest.fixture(scope="module")
def encoder():
    return tiny_encoder()


def numpy_outputs(model, inputs) -> dict:
    return {k: keras.ops.convert_to_numpy(v) for k, v in model(inputs).items()}


def with_mask_positions(inputs, positions) -> dict:
    return {**inputs, "mask_positions": np.asarray(positions, dtype="int32")}


# === Shapes ===


def test_output_shapes_and_dtypes(encoder):
    out = numpy_outputs(encoder, random_encoder_inputs(3, 10, VOCAB))
    assert set(out) == {"sequence_output", "pooled_output"}
    assert out["sequence_output"].shape == (3, 10, HIDDEN)
    assert out["pooled_output"].shape == (3, HIDDEN)
    assert out["sequence_output"].dtype == np.float32
    # The pooler is tanh(dense([CLS])).
    assert np.all(np.abs(out["pooled_output"]) <= 1.0)


def test_attention_output_shape(encoder):
    out = numpy_outputs(encoder.with_attention(), random_encoder_inputs(2, 7, VOCAB))
    assert out["attention_probs"].shape == (2, LAYERS, HEADS, 7, 7)
    # Same weights, same hidden states as the plain model.
    plain = numpy_outputs(encoder, random_encoder_inputs(2, 7, VOCAB))
    np.testing.assert_allclose(out["sequence_output"], plain["sequence_output"], atol=1e-6)


@pytest.mark.parametrize("seq_len", [1, 5, 16, 128])
@pytest.mark.filterwarnings("ignore:You are using a softmax over axis")  # seq_len 1
def test_variable_sequence_lengths(encoder, seq_len):
    # One model, any length up to max_sequence_length, eager and compiled.
    inputs = random_encoder_inputs(2, seq_len, VOCAB, seed=seq_len)
    eager = numpy_outputs(encoder, inputs)
    compiled = encoder.predict_on_batch(inputs)
    assert eager["sequence_output"].shape == (2, seq_len, HIDDEN)
    np.testing.assert_allclose(compiled["sequence_output"], eager["sequence_output"], atol=1e-5)


def test_pretrainer_output_shapes():
    model = BertPretrainer(tiny_encoder())
    inputs = with_mask_positions(random_encoder_inputs(2, 12, VOCAB), [[1, 2, 3], [4, 5, 0]])
    out = numpy_outputs(model, inputs)
    assert out["mlm"].shape == (2, 3, VOCAB)
    assert out["nsp"].shape == (2, 2)
    mlm_only = BertPretrainer(tiny_encoder(), next_sentence=False)
    assert set(numpy_outputs(mlm_only, inputs)) == {"mlm"}


# === Padding and attention ===


def test_appended_padding_does_not_change_real_positions(encoder):
    lengths = [9, 5, 1]
    inputs = random_encoder_inputs(3, 9, VOCAB, lengths=lengths)
    padded = {k: np.pad(v, ((0, 0), (0, 7))) for k, v in inputs.items()}  # 7 more [PAD]s
    short, long = numpy_outputs(encoder, inputs), numpy_outputs(encoder, padded)
    for row, n in enumerate(lengths):
        np.testing.assert_allclose(
            long["sequence_output"][row, :n], short["sequence_output"][row, :n], atol=1e-5
        )
    np.testing.assert_allclose(long["pooled_output"], short["pooled_output"], atol=1e-5)


def test_attention_rows_sum_to_one_and_ignore_padded_keys(encoder):
    inputs = random_encoder_inputs(3, 8, VOCAB, lengths=[8, 5, 2])
    probs = numpy_outputs(encoder.with_attention(), inputs)["attention_probs"]
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    assert np.all(probs >= 0.0)
    padded_key = inputs["padding_mask"][:, None, None, None, :] == 0  # (batch, 1, 1, 1, keys)
    assert np.all(np.where(padded_key, probs, 0.0) == 0.0)
    # Real keys of a real query do get weight.
    assert probs[1, :, :, 0, :5].min() > 0.0


def test_the_full_attention_mask_of_a_jax_gpu_changes_no_output(encoder, monkeypatch):
    """On a JAX GPU the blocks get a (batch, seq, seq) mask, the shape cuDNN's fused
    attention takes; here, forced on, it gives the padding mask's outputs."""
    from model.networks import encoder as encoder_module

    inputs = random_encoder_inputs(3, 8, VOCAB, lengths=[8, 5, 2])
    monkeypatch.setattr(encoder_module, "full_attention_mask", lambda: True)
    full = tiny_encoder()
    assert any(layer.name == "keys_attention_mask" for layer in full.layers)
    full.set_weights(encoder.get_weights())
    want, got = numpy_outputs(encoder, inputs), numpy_outputs(full, inputs)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-6, err_msg=name)


# === Activation ===


def test_gelu_forms_are_erf_and_tanh():
    x = np.linspace(-4, 4, 81).astype("float32")
    erf = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    exact = keras.ops.convert_to_numpy(activation_fn(GELU)(x))
    approximate = keras.ops.convert_to_numpy(activation_fn(GELU_APPROXIMATE)(x))
    np.testing.assert_allclose(exact, erf, atol=1e-6)
    np.testing.assert_allclose(approximate, tanh, atol=1e-6)
    assert np.abs(exact - approximate).max() > 1e-4


def test_exact_and_tanh_gelu_give_different_outputs():
    # Weights of stddev 0.5, not 0.02: pre-activations of order 1, where the
    # two forms differ by ~1e-3 (near 0 they agree to ~1e-7).
    exact = tiny_encoder(activation=GELU, initializer_range=0.5)
    approximate = tiny_encoder(activation=GELU_APPROXIMATE, initializer_range=0.5)
    approximate.set_weights(exact.get_weights())  # same weights, only the GELU differs
    inputs = random_encoder_inputs(2, 10, VOCAB)
    a = numpy_outputs(exact, inputs)["sequence_output"]
    b = numpy_outputs(approximate, inputs)["sequence_output"]
    assert np.abs(a - b).max() > 1e-4
    np.testing.assert_allclose(a, b, atol=0.1)  # ... but only slightly


# === Serialization ===


def test_config_round_trip(encoder):
    clone = BertEncoder.from_config(encoder.get_config())
    assert isinstance(clone, BertEncoder)
    assert clone.config == encoder.config
    assert clone.get_config() == encoder.get_config()


def test_encoder_keras_file_reloads_as_bert_encoder(tmp_path, encoder):
    path = os.path.join(tmp_path, "encoder.keras")
    encoder.save(path)
    restored = keras.saving.load_model(path)
    assert type(restored) is BertEncoder
    assert restored.config == encoder.config
    inputs = random_encoder_inputs(2, 9, VOCAB, lengths=[9, 4])
    before, after = numpy_outputs(encoder, inputs), numpy_outputs(restored, inputs)
    for key in before:
        np.testing.assert_array_equal(after[key], before[key])
    # The reloaded encoder still offers its attention probabilities.
    assert numpy_outputs(restored.with_attention(), inputs)["attention_probs"].shape == (
        2,
        LAYERS,
        HEADS,
        9,
        9,
    )


@pytest.mark.parametrize("next_sentence", [True, False])
def test_pretrainer_keras_file_reloads_as_bert_pretrainer(tmp_path, next_sentence):
    model = BertPretrainer(tiny_encoder(activation=GELU_APPROXIMATE), next_sentence=next_sentence)
    path = os.path.join(tmp_path, "pretrainer.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert type(restored) is BertPretrainer
    assert type(restored.encoder) is BertEncoder
    assert restored.next_sentence == next_sentence
    assert restored.encoder.config == model.encoder.config
    # The decoder is still tied to the token embedding.
    assert restored.masked_lm_head.token_embedding is restored.encoder.token_embedding
    inputs = with_mask_positions(random_encoder_inputs(2, 8, VOCAB), [[1, 2], [3, 0]])
    before, after = numpy_outputs(model, inputs), numpy_outputs(restored, inputs)
    assert set(after) == set(before) == ({"mlm", "nsp"} if next_sentence else {"mlm"})
    for key in before:
        np.testing.assert_array_equal(after[key], before[key])


# === Mixed precision ===


@pytest.fixture
def mixed_bfloat16():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_pretrainer_logits_are_float32_under_mixed_bfloat16(mixed_bfloat16):
    model = BertPretrainer(BertEncoder.from_preset("tiny", vocabulary_size=VOCAB))
    inputs = with_mask_positions(random_encoder_inputs(2, 8, VOCAB), [[1, 2], [3, 0]])
    assert model.encoder.compute_dtype == "bfloat16"
    features = {k: inputs[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    assert model.encoder(features)["sequence_output"].dtype == "bfloat16"
    eager = model(inputs)  # eager calls used to fail: bfloat16 logits + float32 bias
    compiled = model.predict_on_batch(inputs)
    for out in (eager, compiled):
        assert {k: str(keras.ops.convert_to_numpy(v).dtype) for k, v in out.items()} == {
            "mlm": "float32",
            "nsp": "float32",
        }
    assert eager["mlm"].shape == (2, 2, VOCAB)
    # Variables stay float32: the optimizer updates full-precision weights.
    assert {v.dtype for v in model.trainable_variables} == {"float32"}


def test_global_policy_was_reset():
    assert keras.mixed_precision.global_policy().name == "float32"
