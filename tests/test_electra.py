"""ELECTRA (`--objective electra`): the masking rule, the generator and discriminator, their
shared embeddings, the stop-gradient, the loss weight, and the model directory round trip.
Training, overfitting, the PyDataset and kill -9 are in test_objectives and test_faults."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from model.checkpoints import model_dir
from model.config import BertConfig
from model.heads.electra import ElectraDiscriminator, ElectraPretrainer, generator_config
from model.networks.encoder import BertEncoder
from model.objectives import ObjectiveOptions
from model.objectives.electra import Electra
from model.objectives.electra_loss import ReplacedTokenLoss, replaced_token_targets
from model.text.wordpiece import SPECIAL_TOKENS

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(95)]
MASK = VOCAB.index("[MASK]")
SEQ_LEN = 32


def tiny(**overrides) -> BertConfig:
    return BertConfig.preset("tiny", vocabulary_size=len(VOCAB), dropout=0.0, **overrides)


def batch(rows=4, seed=0):
    """A masked batch from ELECTRA's own transform: real tokens, a [CLS] and a
    [SEP], some padding."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(SEQ_LEN // 2, SEQ_LEN + 1, size=rows)
    ids = np.zeros((rows, SEQ_LEN), np.int32)
    mask = np.zeros((rows, SEQ_LEN), np.int32)
    for i, n in enumerate(lengths):
        ids[i, :n] = rng.integers(len(SPECIAL_TOKENS), len(VOCAB), size=n)
        ids[i, 0], ids[i, n - 1] = VOCAB.index("[CLS]"), VOCAB.index("[SEP]")
        mask[i, :n] = 1
    objective = Electra(VOCAB, ObjectiveOptions(seq_len=SEQ_LEN))
    keys = np.stack([np.full(rows, seed), np.arange(rows)], axis=1)
    out = objective.batches(ids, mask, keys)
    x = {**out["x"], "segment_ids": np.zeros_like(ids), "padding_mask": mask}
    return x, out["y"], out["sw"], ids


# === The input pipeline ===


def test_masking_is_85_percent_mask_15_percent_kept_and_never_random():
    """Over 10^5 chosen positions: [MASK] 0.85 +- 0.01, the rest keep their token."""
    rows, seq_len = 6000, 128
    rng = np.random.default_rng(1)
    ids = rng.integers(len(SPECIAL_TOKENS), len(VOCAB), size=(rows, seq_len)).astype(np.int32)
    ids[:, 0], ids[:, -1] = VOCAB.index("[CLS]"), VOCAB.index("[SEP]")
    mask = np.ones_like(ids)
    transform = Electra(VOCAB, ObjectiveOptions(seq_len=seq_len)).batches
    keys = np.stack([np.full(rows, 3), np.arange(rows)], axis=1)
    out = transform(ids, mask, keys)
    positions, weights = out["x"]["mask_positions"], out["sw"]["mlm"] > 0
    masked = np.take_along_axis(out["x"]["token_ids"], positions, axis=1)[weights]
    original = np.take_along_axis(ids, positions, axis=1)[weights]
    assert masked.size > 100_000
    assert abs((masked == MASK).mean() - 0.85) < 0.01
    assert np.array_equal(masked[masked != MASK], original[masked != MASK])  # no random token
    # never [CLS] or [SEP]; every unchosen position keeps its token
    assert not np.isin(positions[weights], [0, seq_len - 1]).any()
    chosen = np.zeros_like(ids, bool)
    np.put_along_axis(chosen, positions, weights, axis=1)
    assert np.array_equal(out["x"]["token_ids"][~chosen], ids[~chosen])
    # about 15 % of the (non-special) tokens, as BERT's rule rounds it
    assert weights.sum(axis=1).mean() == pytest.approx(0.15 * (seq_len - 2), abs=0.5)


def test_flags_override_electras_rates():
    options = ObjectiveOptions(seq_len=SEQ_LEN, mask_token_rate=0.8, random_token_rate=0.1)
    config = Electra(VOCAB, options).batches.masker.config
    assert (config.mask_token_rate, config.random_token_rate) == (0.8, 0.1)


def test_the_discriminator_label_is_the_original_sequence_over_real_tokens():
    x, y, sw, ids = batch()
    np.testing.assert_array_equal(y["rtd"], ids)
    np.testing.assert_array_equal(sw["rtd"], x["padding_mask"].astype(np.float32))


# === The models ===


def test_generator_config_follows_the_reference():
    """google-research/electra's get_generator_config at generator_hidden_size 0.25."""
    gen = generator_config(BertConfig.preset("mini"))
    assert (gen.num_layers, gen.hidden_dim, gen.intermediate_dim, gen.num_heads) == (4, 64, 256, 1)
    assert gen.embedding_size == 256  # the discriminator's embeddings
    small = generator_config(BertConfig.preset("electra-small"))
    assert (small.hidden_dim, small.num_heads, small.embedding_size) == (64, 1, 128)
    with pytest.raises(ValueError, match="generator_size"):
        generator_config(BertConfig.preset("mini"), 0.0)


def test_embeddings_are_the_same_objects_and_each_network_projects_its_own():
    model = ElectraPretrainer(BertEncoder.from_config_object(tiny(embedding_dim=16)))
    gen, disc = model.generator, model.encoder
    for name in ("token_embedding", "position_embedding", "segment_embedding"):
        assert getattr(gen, name) is getattr(disc, name)
    assert gen.embeddings_layer_norm is disc.embeddings_layer_norm
    assert gen.token_embedding.embeddings is disc.token_embedding.embeddings
    assert disc.embeddings_projection.kernel.shape == (16, 32)
    assert gen.embeddings_projection.kernel.shape == (16, 8)
    # the generator's head decodes through the shared table
    assert model.masked_lm_head.token_embedding is disc.token_embedding
    # every variable counted once, the shared ones included
    assert len({id(v) for v in model.weights}) == len(model.weights)


def test_electra_small_has_the_released_parameter_count():
    """google/electra-small-discriminator's ElectraModel: 13,483,008 parameters
    (embeddings 128 wide, their projection to 256, 12 blocks; no pooler)."""
    encoder = BertEncoder.from_preset("electra-small")
    count = sum(int(np.prod(w.shape)) for w in encoder.weights)
    pooler = sum(int(np.prod(w.shape)) for w in encoder.pooled_dense.weights)
    assert count - pooler == 13_483_008


def test_an_unmatched_embedding_cannot_be_shared():
    disc = BertEncoder.from_config_object(tiny(embedding_dim=16))
    with pytest.raises(ValueError, match="cannot share the embeddings"):
        BertEncoder.from_config_object(tiny(hidden_dim=8, num_heads=1), shared_embeddings=disc)


def test_labels_are_one_exactly_where_the_shown_token_differs():
    original = np.array([[2, 10, 11, 12, 3, 0]], np.int32)
    shown = np.array([[2, 10, 50, 12, 3, 0]], np.float32)  # 11 replaced; 12 sampled as itself
    logits = np.zeros_like(shown)
    labels, out_logits = replaced_token_targets(original, np.stack([logits, shown], axis=-1))
    np.testing.assert_array_equal(ops.convert_to_numpy(labels), [[0, 0, 1, 0, 0, 0]])
    np.testing.assert_array_equal(ops.convert_to_numpy(out_logits), logits)


SPECIALS = [VOCAB.index(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")]


@pytest.mark.parametrize("seed", range(20))
def test_the_discriminator_sees_the_generators_samples_at_the_masked_positions_only(seed):
    keras.utils.set_random_seed(seed)
    encoder = BertEncoder.from_config_object(tiny())
    model = ElectraPretrainer(encoder, seed=seed, excluded_ids=SPECIALS)
    x, y, sw, ids = batch()
    out = model(x, training=False)
    shown = ops.convert_to_numpy(out["rtd"][..., 1]).astype(np.int32)
    positions, real = x["mask_positions"], sw["mlm"] > 0
    written = np.zeros_like(ids, bool)
    np.put_along_axis(written, positions, real, axis=1)
    # elsewhere (padding slots at position 0, [CLS], unmasked tokens) the input is unchanged
    np.testing.assert_array_equal(shown[~written], x["token_ids"][~written])
    # at the masked positions: a word of the vocabulary, never a special token ([MASK]...),
    # the law of the runtime's `corrupt` too (excluded_ids, from the objective)
    assert not np.isin(shown[written], SPECIALS).any()
    labels, _ = replaced_token_targets(y["rtd"], out["rtd"])
    np.testing.assert_array_equal(ops.convert_to_numpy(labels), (shown != ids).astype(np.float32))
    assert ops.convert_to_numpy(labels)[~written].sum() == 0


def test_the_objective_excludes_its_vocabularys_special_tokens_and_the_model_dir_keeps_them(
    tmp_path,
):
    from model.objectives import ObjectiveOptions, get

    objective = get("electra")(VOCAB, ObjectiveOptions(seq_len=16))
    model = objective.build_model(BertEncoder.from_config_object(tiny()), seed=1)
    assert sorted(model.excluded_ids) == sorted(SPECIALS)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    model_dir.save(model, str(tmp_path / "run"), str(vocab))
    again = model_dir.load(str(tmp_path / "run"))
    assert sorted(again.excluded_ids) == sorted(SPECIALS)


def test_samples_follow_the_generators_softmax():
    """With the generator's logits made one-hot by a huge output bias, every sample is that token."""
    model = ElectraPretrainer(BertEncoder.from_config_object(tiny()), seed=3)
    bias = np.full(len(VOCAB), -1e4, np.float32)
    bias[42] = 1e4
    model.masked_lm_head._bias.assign(bias)
    x, _, sw, _ = batch()
    shown = ops.convert_to_numpy(model(x)["rtd"][..., 1]).astype(np.int32)
    picked = np.take_along_axis(shown, x["mask_positions"], axis=1)[sw["mlm"] > 0]
    assert (picked == 42).all()


def test_the_discriminator_loss_never_reaches_a_generator_only_weight():
    keras.utils.set_random_seed(0)
    model = ElectraPretrainer(BertEncoder.from_config_object(tiny(embedding_dim=16)), seed=1)
    x, y, sw, _ = batch()
    shared = {id(v) for v in model.generator.weights} & {id(v) for v in model.encoder.weights}
    generator_only = [
        v
        for v in [*model.generator.trainable_weights, *model.masked_lm_head.trainable_weights]
        if id(v) not in shared
    ]
    assert generator_only and shared
    variables = model.trainable_weights
    with tf.GradientTape() as tape:
        out = model(x, training=True)
        loss = ReplacedTokenLoss()(y["rtd"], out["rtd"], sample_weight=sw["rtd"])
    grads = dict(zip([id(v) for v in variables], tape.gradient(loss, variables)))
    for v in generator_only:
        g = grads[id(v)]
        assert g is None or not np.any(ops.convert_to_numpy(g)), v.path
    # ... while it trains the discriminator and the shared embeddings
    assert np.any(ops.convert_to_numpy(grads[id(model.encoder.token_embedding.embeddings)]))
    head = model.replaced_token_head.trainable_weights[0]
    assert np.any(ops.convert_to_numpy(grads[id(head)]))


def test_the_loss_is_generator_plus_lambda_times_discriminator():
    x, y, sw, _ = batch()
    for weight in (1.0, 50.0):
        keras.utils.set_random_seed(0)
        objective = Electra(VOCAB, ObjectiveOptions(seq_len=SEQ_LEN, discriminator_weight=weight))
        model = objective.build_model(BertEncoder.from_config_object(tiny()), seed=0)
        model.compile(loss=objective.losses(), loss_weights=objective.loss_weights())
        logs = model.evaluate(x, y, sample_weight=sw, verbose=0, return_dict=True)
        assert logs["loss"] == pytest.approx(logs["mlm_loss"] + weight * logs["rtd_loss"], rel=1e-5)


def test_the_discriminator_metrics_split_replaced_and_original_tokens():
    objective = Electra(VOCAB, ObjectiveOptions(seq_len=SEQ_LEN))
    metrics = {m.name: m for m in objective.metrics()["rtd"]}
    original = np.array([[5, 6, 7, 8]], np.int32)
    shown = np.array([[5, 9, 9, 8]], np.float32)  # positions 1 and 2 replaced
    logits = np.array([[-3.0, 2.0, -1.0, 4.0]], np.float32)  # right, right, wrong, wrong
    y_pred = np.stack([logits, shown], axis=-1)
    for metric in metrics.values():
        metric.update_state(original, y_pred, sample_weight=np.ones((1, 4), np.float32))
    result = {name: float(m.result()) for name, m in metrics.items()}
    assert result["replaced_accuracy"] == pytest.approx(0.5)
    assert result["original_accuracy"] == pytest.approx(0.5)
    assert result["precision"] == pytest.approx(0.5)
    assert result["recall"] == pytest.approx(0.5)
    assert result["auc"] == pytest.approx(0.5, abs=0.01)  # 2 of the 4 pairs ranked right
    # AUC ranks: every token called replaced, ranked right (1) or wrong (0), accuracy 1/2 both
    for logits, auc in (([0.5, 3.0, 2.0, 1.0], 1.0), ([3.0, 0.5, 1.0, 2.0], 0.0)):
        metrics["auc"].reset_state()
        y_pred = np.stack([np.array([logits], np.float32), shown], axis=-1)
        metrics["auc"].update_state(original, y_pred, sample_weight=np.ones((1, 4), np.float32))
        assert float(metrics["auc"].result()) == pytest.approx(auc, abs=0.01), logits


# === The model directory ===


def test_the_pretrainer_round_trips_through_a_model_directory(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    model = ElectraPretrainer(BertEncoder.from_config_object(tiny(embedding_dim=16)), 0.5, seed=4)
    model_dir.save(model, str(tmp_path / "run"), str(vocab))
    reloaded = model_dir.load(str(tmp_path / "run"))
    assert isinstance(reloaded, ElectraPretrainer)
    assert reloaded.generator_size == 0.5 and reloaded.generator.config.hidden_dim == 16
    assert reloaded.generator.token_embedding is reloaded.encoder.token_embedding
    for a, b in zip(model.get_weights(), reloaded.get_weights()):
        np.testing.assert_array_equal(a, b)
    # the discriminator alone: same encoder and head, saved and loaded as its own task
    disc = reloaded.discriminator()
    model_dir.save(disc, str(tmp_path / "disc"), str(vocab))
    again = model_dir.load(str(tmp_path / "disc"))
    assert isinstance(again, ElectraDiscriminator)
    x, _, _, _ = batch()
    inputs = {k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    np.testing.assert_allclose(
        ops.convert_to_numpy(again(inputs)["rtd"]),
        ops.convert_to_numpy(disc(inputs)["rtd"]),
        atol=1e-6,
    )


def test_an_electra_run_initialises_another_whole_and_a_bert_run_only_what_fits(tmp_path):
    """`pretrain --init-checkpoint` from an ELECTRA run copies the generator and both heads
    too (nothing left fresh in silence); from a BERT pre-training run, whose masked-LM head is
    as wide as its encoder, ELECTRA's narrower generator head is left fresh, saying why."""
    from model.heads.pretrainer import BertPretrainer
    from model.training.pretrain import init_from_checkpoint

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    keras.utils.set_random_seed(1)
    source = ElectraPretrainer(BertEncoder.from_config_object(tiny()), 0.5, seed=4)
    model_dir.save(source, str(tmp_path / "electra"), str(vocab))
    keras.utils.set_random_seed(2)
    target = ElectraPretrainer(BertEncoder.from_config_object(tiny()), 0.5, seed=4)
    assert init_from_checkpoint(target, str(tmp_path / "electra")) == []
    for a, b in zip(source.get_weights(), target.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)

    bert = BertPretrainer(BertEncoder.from_config_object(tiny()))
    model_dir.save(bert, str(tmp_path / "bert"), str(vocab))
    keras.utils.set_random_seed(3)
    target = ElectraPretrainer(BertEncoder.from_config_object(tiny()), 0.5, seed=4)
    fresh = init_from_checkpoint(target, str(tmp_path / "bert"))
    assert fresh == [
        f"masked_lm_head (its shapes in {tmp_path / 'bert'} differ from this run's)",
        "generator",
        "replaced_token_head",
    ]
    for a, b in zip(bert.encoder.get_weights(), target.encoder.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_google_form_refuses_a_factorised_embedding():
    with pytest.raises(ValueError, match="factorised embedding"):
        tiny(embedding_dim=16, activation="gelu_approximate").to_google_dict()


def test_config_embedding_dim_is_checked_and_old_configs_read_as_bert():
    with pytest.raises(ValueError, match="embedding_dim"):
        tiny(embedding_dim=0)
    data = tiny().to_dict()
    del data["embedding_dim"]
    assert BertConfig.from_dict(data).embedding_size == data["hidden_dim"]


def test_only_training_moves_the_sampling_state():
    """Held-out scoring and prediction draw the same samples every call and leave the
    checkpointed sampling state alone; a training call draws anew and moves it."""
    keras.utils.set_random_seed(0)
    model = ElectraPretrainer(BertEncoder.from_config_object(tiny()), seed=3, excluded_ids=SPECIALS)
    x, _, _, _ = batch()
    state = model.sample.seed_generator.state

    def shown(training):
        return ops.convert_to_numpy(model(x, training=training)["rtd"][..., 1])

    before = ops.convert_to_numpy(state).copy()
    first = shown(False)
    np.testing.assert_array_equal(shown(False), first)
    np.testing.assert_array_equal(ops.convert_to_numpy(state), before)
    shown(True)
    assert not np.array_equal(ops.convert_to_numpy(state), before)
