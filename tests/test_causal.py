"""The left-to-right BERT ("LTR & No NSP", paper section 5.1): no leakage anywhere.

    PYTHONPATH=. python -m pytest tests/test_causal.py

`BertConfig.causal` makes every position read only itself and earlier ones: a
later token never changes an earlier position's output, in the encoder, in
`BertCausalLM` and in every fine-tuning head built on it; the pooled output
reads the last real token. The bidirectional encoder is untouched. The `tiny`
preset with a 64-token vocabulary: seconds in all.
"""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import pytest

from model.config import BertConfig
from model.heads.causal_lm import BertCausalLM
from model.heads.classifier import BertClassifier
from model.heads.multiple_choice import BertMultipleChoice
from model.heads.question_answerer import BertQuestionAnswerer
from model.heads.token_classifier import BertTokenClassifier
from model.networks.encoder import BertEncoder
from model.training.optimizer import create_optimizer_variables
from tests.helpers import random_encoder_inputs

VOCAB = 64
SEQ_LEN = 10
LENGTHS = [10, 6, 3]  # full, padded, mostly padding
CHANGED = (0, 2, 5, 9)  # the position whose token is changed


def tiny_encoder(causal: bool = True, **overrides) -> BertEncoder:
    # A larger initializer range than BERT's 0.02 makes a random model's
    # outputs differ visibly between inputs.
    keras.utils.set_random_seed(0)
    return BertEncoder.from_preset(
        "tiny", vocabulary_size=VOCAB, causal=causal, initializer_range=0.2, **overrides
    )


@pytest.fixture(scope="module")
def encoder():
    return tiny_encoder()


def numpy_outputs(model, inputs) -> dict:
    out = model(inputs)
    if not isinstance(out, dict):
        out = {"logits": out}
    return {k: keras.ops.convert_to_numpy(v) for k, v in out.items()}


def inputs_of(lengths=LENGTHS, seq_len=SEQ_LEN) -> dict:
    return random_encoder_inputs(len(lengths), seq_len, VOCAB, seed=1, lengths=lengths)


def change_token(inputs: dict, position: int) -> dict:
    """A copy of `inputs` with another (real-looking) token at `position` of every row."""
    changed = {k: np.array(v) for k, v in inputs.items()}
    tokens = changed["token_ids"]
    tokens[..., position] = 5 + (tokens[..., position] - 5 + 17) % (VOCAB - 5)
    return changed


def assert_no_leak(before: np.ndarray, after: np.ndarray, j: int, axis: int = 1) -> None:
    """Positions < j are bit-identical; some position >= j moved."""
    earlier = np.take(before, np.arange(j), axis=axis), np.take(after, np.arange(j), axis=axis)
    np.testing.assert_array_equal(earlier[1], earlier[0])
    later = np.arange(j, before.shape[axis])
    assert not np.array_equal(np.take(before, later, axis=axis), np.take(after, later, axis=axis))


# === The encoder ===


@pytest.mark.parametrize("j", CHANGED)
def test_causal_encoder_never_reads_a_later_token(encoder, j):
    x = inputs_of(lengths=[SEQ_LEN] * 3)
    before, after = numpy_outputs(encoder, x), numpy_outputs(encoder, change_token(x, j))
    assert_no_leak(before["sequence_output"], after["sequence_output"], j)


def test_causal_attention_probabilities_are_lower_triangular(encoder):
    x = inputs_of()
    probs = numpy_outputs(encoder.with_attention(), x)["attention_probs"]
    # (batch, layers, heads, query, key): nothing above the diagonal, nothing on padding.
    assert probs.shape == (3, 2, 2, SEQ_LEN, SEQ_LEN)
    assert np.all(np.triu(probs, k=1) == 0.0)
    keys_real = x["padding_mask"][:, None, None, None, :].astype(bool)
    assert np.all(np.where(keys_real, 0.0, probs) == 0.0)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    # The same hidden states as the plain model.
    np.testing.assert_allclose(
        numpy_outputs(encoder.with_attention(), x)["sequence_output"],
        numpy_outputs(encoder, x)["sequence_output"],
        atol=1e-6,
    )


def test_causal_pooler_reads_the_last_real_token(encoder):
    x = inputs_of()
    out = numpy_outputs(encoder, x)
    last = np.asarray(LENGTHS) - 1
    expected = encoder.pooled_dense(out["sequence_output"][np.arange(3), last])
    np.testing.assert_allclose(
        out["pooled_output"], keras.ops.convert_to_numpy(expected), atol=1e-6
    )


def test_block_masks_rebuild_the_causal_forward_pass(encoder):
    """Code that runs the blocks itself (feature-based mode) gets the same mask."""
    x = inputs_of()
    e = encoder
    h = e.embed(x["token_ids"], x["segment_ids"])
    masks = e.block_masks(x["padding_mask"])
    assert set(masks) == {"padding_mask", "attention_mask"}
    for block in e.transformer_layers:
        h = block(h, **masks)
    np.testing.assert_allclose(
        numpy_outputs(encoder, x)["sequence_output"], keras.ops.convert_to_numpy(h), atol=1e-6
    )


def test_bidirectional_encoder_still_reads_both_ways():
    encoder = tiny_encoder(causal=False)
    x = inputs_of(lengths=[SEQ_LEN] * 3)
    before = numpy_outputs(encoder, x)
    after = numpy_outputs(encoder, change_token(x, SEQ_LEN - 1))
    # The last token moves position 0 and [CLS]'s pooled output.
    assert not np.allclose(before["sequence_output"][:, 0], after["sequence_output"][:, 0])
    assert not np.allclose(before["pooled_output"], after["pooled_output"])


def test_bidirectional_encoder_is_the_forward_pass_it_always_was():
    """causal=False runs exactly the pre-causal graph: each block gets only the
    padding mask and the pooler reads [CLS] (the forward pass written out, as
    `model/features/layers.py` does); bit-identical, eager and compiled."""
    encoder = tiny_encoder(causal=False)
    x = inputs_of()
    e = encoder
    h = e.token_embedding(x["token_ids"])
    h = e.embeddings_add([h, e.position_embedding(h), e.segment_embedding(x["segment_ids"])])
    h = e.embeddings_dropout(e.embeddings_layer_norm(h))
    assert set(e.block_masks(x["padding_mask"])) == {"padding_mask"}
    for block in e.transformer_layers:
        h = block(h, padding_mask=x["padding_mask"])
    pooled = e.pooled_dense(h[:, 0, :])
    eager = numpy_outputs(encoder, x)
    np.testing.assert_array_equal(eager["sequence_output"], keras.ops.convert_to_numpy(h))
    np.testing.assert_array_equal(eager["pooled_output"], keras.ops.convert_to_numpy(pooled))
    assert not any("causal" in layer.name or "last_token" in layer.name for layer in e.layers)


def test_causal_encoder_under_mixed_bfloat16_and_xla():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        encoder = tiny_encoder()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert encoder.compute_dtype == "bfloat16"
    encoder.compile(jit_compile=True)
    assert encoder.jit_compile  # XLA on this machine, not a silent fallback
    x, j = inputs_of(), 4
    before, after = encoder.predict_on_batch(x), encoder.predict_on_batch(change_token(x, j))
    assert before["sequence_output"].dtype == before["pooled_output"].dtype
    assert_no_leak(
        np.asarray(before["sequence_output"], np.float32),
        np.asarray(after["sequence_output"], np.float32),
        j,
    )
    eager = numpy_outputs(encoder, x)["pooled_output"].astype(np.float32)
    np.testing.assert_allclose(np.asarray(before["pooled_output"], np.float32), eager, atol=2e-2)


# === The causal LM ===


def all_positions(x: dict) -> dict:
    batch, seq_len = x["token_ids"].shape
    positions = np.tile(np.arange(seq_len, dtype="int32"), (batch, 1))
    return {**x, "predict_positions": positions}


@pytest.mark.parametrize("j", CHANGED)
def test_causal_lm_logits_never_read_a_later_token(encoder, j):
    model = BertCausalLM(encoder)
    x = all_positions(inputs_of(lengths=[SEQ_LEN] * 3))
    before, after = numpy_outputs(model, x), numpy_outputs(model, change_token(x, j))
    assert before["next_token"].shape == (3, SEQ_LEN, VOCAB)
    assert before["next_token"].dtype == np.float32
    assert_no_leak(before["next_token"], after["next_token"], j)


def test_causal_lm_gathers_the_predicted_positions(encoder):
    model = BertCausalLM(encoder)
    x = inputs_of()
    full = numpy_outputs(model, all_positions(x))["next_token"]
    positions = np.array([[0, 8, 3], [1, 4, 0], [2, 0, 1]], dtype="int32")
    some = numpy_outputs(model, {**x, "predict_positions": positions})["next_token"]
    np.testing.assert_allclose(some, full[np.arange(3)[:, None], positions], atol=1e-5)


def test_causal_lm_refuses_a_bidirectional_encoder():
    with pytest.raises(ValueError, match="causal encoder"):
        BertCausalLM(tiny_encoder(causal=False))


def test_causal_lm_logits_are_float32_under_mixed_bfloat16():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = BertCausalLM(tiny_encoder())
    finally:
        keras.mixed_precision.set_global_policy("float32")
    x = all_positions(inputs_of())
    for out in (model(x), model.predict_on_batch(x)):
        assert str(keras.ops.convert_to_numpy(out["next_token"]).dtype) == "float32"
    assert {v.dtype for v in model.trainable_variables} == {"float32"}


@pytest.mark.filterwarnings("ignore:Gradients do not exist")  # the pooler: no NSP
def test_causal_lm_overfits_one_batch():
    """Next-token prediction on 4 fixed sequences (positions 0..L-2 predict tokens
    1..L-1): 30 steps take the loss from a uniform guess to near zero."""
    keras.utils.set_random_seed(0)
    encoder = BertEncoder.from_preset("tiny", vocabulary_size=VOCAB, causal=True, dropout=0.0)
    model = BertCausalLM(encoder)
    x = random_encoder_inputs(4, 12, VOCAB, seed=3)
    x["predict_positions"] = np.tile(np.arange(11, dtype="int32"), (4, 1))
    y = {"next_token": x["token_ids"][:, 1:]}
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss={"next_token": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
    )
    create_optimizer_variables(model)
    start = float(model.evaluate(x, y, verbose=0))
    end = model.fit(x, y, epochs=30, batch_size=4, verbose=0).history["loss"][-1]
    assert start > 3.5  # about ln(64) = 4.16: a uniform guess
    assert end < 0.1 * start, (start, end)  # measured: 4.16 -> 0.05


# === Fine-tuning heads keep the left-only constraint ===


@pytest.mark.parametrize("j", CHANGED)
def test_token_classifier_never_reads_a_later_token(encoder, j):
    model = BertTokenClassifier(encoder, num_labels=5)
    x = inputs_of(lengths=[SEQ_LEN] * 3)
    before, after = numpy_outputs(model, x), numpy_outputs(model, change_token(x, j))
    assert_no_leak(before["logits"], after["logits"], j)


@pytest.mark.parametrize("j", CHANGED)
def test_question_answerer_never_reads_a_later_token(encoder, j):
    model = BertQuestionAnswerer(encoder)
    x = inputs_of(lengths=[SEQ_LEN] * 3)
    before, after = numpy_outputs(model, x), numpy_outputs(model, change_token(x, j))
    for key in ("start_logits", "end_logits"):
        assert_no_leak(before[key], after[key], j)


def test_classifier_reads_the_last_real_token_and_ignores_padding(encoder):
    model = BertClassifier(encoder, num_labels=3)
    x = inputs_of()
    before = numpy_outputs(model, x)["logits"]
    # Padding content (tokens after each row's last real one) changes nothing...
    for j in range(LENGTHS[-1], SEQ_LEN):
        padded = change_token(x, j)
        for row, length in enumerate(LENGTHS):
            if j < length:  # keep real tokens as they were
                padded["token_ids"][row, j] = x["token_ids"][row, j]
        np.testing.assert_array_equal(numpy_outputs(model, padded)["logits"], before)
    # ...while every real token, the first included, reaches the logits.
    for j in (0, LENGTHS[-1] - 1):
        assert not np.allclose(numpy_outputs(model, change_token(x, j))["logits"], before)


def test_multiple_choice_reads_each_choice_to_its_last_real_token(encoder):
    model = BertMultipleChoice(encoder, num_choices=2)
    # (batch=3, choices=2, seq_len): the same rows as the classifier, in two choices.
    flat = inputs_of(lengths=[10, 6, 3, 10, 8, 5])
    x = {k: v.reshape(3, 2, SEQ_LEN) for k, v in flat.items()}
    before = numpy_outputs(model, x)["logits"]
    assert before.shape == (3, 2)
    padding = np.array(x["token_ids"])
    padding[x["padding_mask"] == 0] = 7
    np.testing.assert_array_equal(
        numpy_outputs(model, {**x, "token_ids": padding})["logits"], before
    )
    # Changing a real token of choice 0 moves choice 0's score only.
    changed = np.array(x["token_ids"])
    changed[:, 0, 1] = change_token(x, 1)["token_ids"][:, 0, 1]
    after = numpy_outputs(model, {**x, "token_ids": changed})["logits"]
    assert not np.allclose(after[:, 0], before[:, 0])
    np.testing.assert_array_equal(after[:, 1], before[:, 1])


# === The config carries the flag everywhere ===


def test_config_round_trip_keeps_causal(tmp_path):
    c = BertConfig.preset("tiny", causal=True)
    assert BertConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    path = os.path.join(tmp_path, "config.json")
    c.to_json(path)
    assert BertConfig.from_json(path).causal is True


def test_config_without_the_key_is_bidirectional():
    old = BertConfig.preset("tiny").to_dict()
    del old["causal"]  # a config.json written before the field existed
    assert BertConfig.from_dict(old).causal is False
    assert BertConfig().causal is False


def test_config_refuses_a_non_boolean_causal():
    with pytest.raises(ValueError, match="causal must be true or false"):
        BertConfig.preset("tiny", causal="yes")


def test_google_form_refuses_causal():
    c = BertConfig.preset("tiny", activation="gelu_approximate", causal=True)
    with pytest.raises(ValueError, match="causal"):
        c.to_google_dict()


def test_hugging_face_is_decoder_reads_as_causal():
    hf = {
        **BertConfig.preset("tiny", activation="gelu_approximate").to_google_dict(),
        "model_type": "bert",
    }
    assert BertConfig.from_dict(hf).causal is False
    assert BertConfig.from_dict({**hf, "is_decoder": False}).causal is False
    assert BertConfig.from_dict({**hf, "is_decoder": True}).causal is True


def test_keras_config_round_trip_keeps_causal(encoder):
    clone = BertEncoder.from_config(encoder.get_config())
    assert clone.config.causal is True
    assert clone.get_config() == encoder.get_config()
    model = BertCausalLM(encoder)
    restored = BertCausalLM.from_config(model.get_config())
    assert type(restored) is BertCausalLM
    assert restored.encoder.config == encoder.config
    classifier = BertClassifier.from_config(BertClassifier(encoder, num_labels=2).get_config())
    assert classifier.encoder.config.causal is True


def test_causal_lm_keras_file_reloads(tmp_path, encoder):
    model = BertCausalLM(encoder)
    path = os.path.join(tmp_path, "causal_lm.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert type(restored) is BertCausalLM
    assert restored.encoder.config.causal is True
    assert restored.masked_lm_head.token_embedding is restored.encoder.token_embedding
    x = all_positions(inputs_of())
    np.testing.assert_array_equal(
        numpy_outputs(restored, x)["next_token"], numpy_outputs(model, x)["next_token"]
    )
