"""ELECTRA's models (Clark et al. 2020): the discriminator, and the generator + discriminator pre-trainer.

`ElectraDiscriminator`, the model that fine-tunes and exports (Hugging Face's
`ElectraForPreTraining`):

    inputs  {"token_ids", "segment_ids", "padding_mask"}  (batch, seq_len) int32
    outputs {"rtd": (batch, seq_len) float32 logits, > 0: "this token was replaced"}

`ElectraPretrainer`, what `--objective electra` trains:

    inputs  {"token_ids", "segment_ids", "padding_mask"}  (batch, seq_len) int32, masked
            {"mask_positions"}                            (batch, max_predictions) int32
    outputs {"mlm": (batch, max_predictions, vocabulary_size) float32 generator logits,
             "rtd": (batch, seq_len, 2) float32: [..., 0] the discriminator's logits,
                    [..., 1] the token id it was shown (the corrupted input)}

The generator is a small masked LM (the discriminator's depth, `generator_size`
of its width, one head per 64 dimensions, `generator_config`) over the
discriminator's own token, position and segment embeddings and embedding
LayerNorm (the same layer objects), with its own projection when the
embedding size differs from its width, and the masked-LM head of
`BertPretrainer` (dense -> GeLU -> LayerNorm -> the shared token embedding +
a bias). At every masked position a token is sampled from its softmax
(Gumbel-max at temperature 1) under stop-gradient and written into the
input; the discriminator reads the result and scores every token (dense ->
GeLU -> dense(1)). Sampling depends on the generator's output, so it is the
one random step inside the graph; choosing and masking the positions stays in
the input pipeline (`model.objectives.electra`).

The "rtd" output carries the corrupted input beside the logits because the
labels (replaced = differs from the original) depend on the sample drawn
here: the loss compares it with the original ids the pipeline passes as the
output's label (`model.objectives.electra_loss.replaced_token_targets`).
"""

from __future__ import annotations

import keras
from keras import ops

from model.config import BertConfig
from model.heads.pretrainer import head_dtype, masked_lm_head
from model.heads.task_model import BertTaskModel
from model.networks.encoder import BertEncoder, activation_fn

ENCODER_INPUTS = ("token_ids", "segment_ids", "padding_mask")


def generator_config(config: BertConfig, generator_size: float = 0.25) -> BertConfig:
    """The generator's config for a discriminator's: as google-research/electra's
    `get_generator_config`, `generator_size` of the width (rounded), 4x that in
    the feed-forward layer, one attention head per 64 dimensions, the same depth;
    its embeddings are the discriminator's (so as wide as the discriminator's)."""
    if not 0.0 < generator_size <= 1.0:
        raise ValueError(f"generator_size must be in (0, 1], got {generator_size}")
    hidden = max(1, int(round(config.hidden_dim * generator_size)))
    return config.replace(
        hidden_dim=hidden,
        intermediate_dim=4 * hidden,
        num_heads=max(1, hidden // 64),
        embedding_dim=config.embedding_size,
        causal=False,
    )


class ReplacedTokenHead(keras.layers.Layer):
    """ELECTRA's discriminator head: dense(hidden) -> activation -> dense(1), per token.

    (batch, seq_len, hidden_dim) -> (batch, seq_len) logits.
    """

    def __init__(self, hidden_dim, activation, initializer_range, **kwargs):
        super().__init__(**kwargs)
        init = lambda: keras.initializers.TruncatedNormal(stddev=initializer_range)
        self.hidden_dim = hidden_dim
        self.dense = keras.layers.Dense(
            hidden_dim,
            activation=activation,
            kernel_initializer=init(),
            dtype=self.dtype_policy,
            name="dense",
        )
        self.prediction = keras.layers.Dense(
            1, kernel_initializer=init(), dtype=self.dtype_policy, name="prediction"
        )

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.prediction.build((*input_shape[:-1], self.hidden_dim))

    def call(self, x):
        return ops.squeeze(self.prediction(self.dense(x)), axis=-1)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1])


def replaced_token_head(encoder: BertEncoder) -> ReplacedTokenHead:
    """The discriminator head over `encoder`, named `replaced_token_head` in every
    model that has one, so its weights transfer by name."""
    cfg = encoder.config
    return ReplacedTokenHead(
        cfg.hidden_dim,
        activation_fn(cfg.activation),
        cfg.initializer_range,
        dtype=head_dtype(encoder),  # float32 logits under a mixed policy
        name="replaced_token_head",
    )


@keras.saving.register_keras_serializable(package="bert")
class ElectraDiscriminator(BertTaskModel):
    """A `BertEncoder` with ELECTRA's replaced-token-detection head.

    Example:
    >>> model = ElectraDiscriminator(BertEncoder.from_preset("tiny"))
    """

    def __init__(self, encoder: BertEncoder, **kwargs):
        # === Layers ===
        self.encoder = encoder
        self.replaced_token_head = replaced_token_head(encoder)

        # === Functional Model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name) for name in ENCODER_INPUTS
        }
        sequence = encoder(inputs)["sequence_output"]
        logits = self.replaced_token_head(sequence)  # (batch, seq_len)
        outputs = {"rtd": keras.layers.Activation("linear", dtype="float32", name="rtd")(logits)}
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)


class _GumbelSample(keras.layers.Layer):
    """(batch, P, vocab) logits -> (batch, P) int32: one draw from each softmax
    (Gumbel-max at temperature 1: argmax(logits - log(-log U))), no gradient, among the
    tokens that are not `excluded` (the special tokens: [CLS], [MASK]... are never a
    word of a text, and the runtime's `corrupt` draws by the same law).

    Training draws from the seed generator, whose state a checkpoint keeps. Anything else
    (held-out scoring, prediction) draws the same noise every call from a fixed seed, and
    leaves that state alone: scoring between a checkpoint and the next step would move it,
    and a run resumed from that checkpoint would then train on other samples."""

    def __init__(self, seed=None, excluded=(), **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.fixed_seed = int(seed or 0)
        self.excluded = tuple(int(i) for i in excluded)

    def call(self, logits, training=None):
        logits = ops.stop_gradient(ops.cast(logits, "float32"))
        if self.excluded:
            vocab = ops.shape(logits)[-1]
            hit = ops.any(
                ops.equal(ops.arange(vocab, dtype="int32")[:, None], list(self.excluded)), axis=1
            )
            logits = ops.where(hit, -1e9, logits)
        seed = self.seed_generator if training else self.fixed_seed
        uniform = keras.random.uniform(ops.shape(logits), minval=1e-9, maxval=1.0, seed=seed)
        return ops.cast(ops.argmax(logits - ops.log(-ops.log(uniform)), axis=-1), "int32")

    def compute_output_spec(self, logits):
        return keras.KerasTensor(logits.shape[:-1], dtype="int32")


class _Replace(keras.layers.Layer):
    """Writes `sampled` (batch, P) into `token_ids` (batch, seq_len) at
    `mask_positions` (batch, P). Prediction slots past a sequence's real ones
    are padded with position 0, always `[CLS]`, which masking never picks, so
    a slot at position 0 writes nothing."""

    def call(self, token_ids, mask_positions, sampled):
        seq_len = ops.shape(token_ids)[1]
        # (batch, P, seq_len): slot p writes position mask_positions[p]
        hits = ops.logical_and(
            ops.equal(ops.expand_dims(mask_positions, -1), ops.arange(seq_len, dtype="int32")),
            ops.expand_dims(mask_positions > 0, -1),
        )
        hits = ops.cast(hits, "int32")
        written = ops.max(hits, axis=1)  # (batch, seq_len)
        values = ops.sum(hits * ops.expand_dims(sampled, -1), axis=1)  # (batch, seq_len)
        return ops.where(written > 0, values, token_ids)

    def compute_output_spec(self, token_ids, mask_positions, sampled):
        return keras.KerasTensor(token_ids.shape, dtype="int32")


class _WithInput(keras.layers.Layer):
    """(batch, seq_len) logits and token ids -> (batch, seq_len, 2) float32."""

    def call(self, logits, token_ids):
        return ops.stack([ops.cast(logits, "float32"), ops.cast(token_ids, "float32")], axis=-1)

    def compute_output_shape(self, logits_shape, token_ids_shape):
        return (*logits_shape, 2)


@keras.saving.register_keras_serializable(package="bert")
class ElectraPretrainer(BertTaskModel):
    """ELECTRA's generator and discriminator, trained together.

    Args:
        encoder: the discriminator's `BertEncoder` (`self.encoder`, what
            fine-tunes); the generator is built over its embeddings.
        generator_size: the generator's width as a share of the discriminator's.
        seed: seeds the sampling (the run's `--seed`); its state is checkpointed
            with the dropout's.
        excluded_ids: tokens the generator's samples never are (the objective passes the
            vocabulary's special tokens).

    Attributes:
        generator: the generator's `BertEncoder`.
        masked_lm_head: the generator's masked-LM head (tied to the shared embedding).
        replaced_token_head: the discriminator's head.

    Example:
    >>> model = ElectraPretrainer(BertEncoder.from_preset("tiny"))
    >>> model.generator.token_embedding is model.encoder.token_embedding
    True
    """

    def __init__(
        self,
        encoder: BertEncoder,
        generator_size: float = 0.25,
        seed=None,
        excluded_ids=(),
        **kwargs,
    ):
        # === Layers ===
        self.encoder = encoder
        self.generator = BertEncoder.from_config_object(
            generator_config(encoder.config, generator_size),
            shared_embeddings=encoder,
            dtype=encoder.dtype_policy,
            name="generator",
        )
        # The generator's pooler reads nothing: frozen, saved as initialised.
        self.generator.pooled_dense.trainable = False
        self.masked_lm_head = masked_lm_head(self.generator)
        self.sample = _GumbelSample(seed, excluded_ids, name="generator_sample")
        self.replace_tokens = _Replace(name="replace_tokens")
        self.replaced_token_head = replaced_token_head(encoder)

        # === Functional Model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in (*ENCODER_INPUTS, "mask_positions")
        }
        positions = inputs["mask_positions"]
        generated = self.generator({k: inputs[k] for k in ENCODER_INPUTS})["sequence_output"]
        mlm = self.masked_lm_head(generated, mask_positions=positions)  # (batch, P, vocab)
        corrupted = self.replace_tokens(inputs["token_ids"], positions, self.sample(mlm))
        sequence = encoder(
            {
                "token_ids": corrupted,
                "segment_ids": inputs["segment_ids"],
                "padding_mask": inputs["padding_mask"],
            }
        )["sequence_output"]
        logits = self.replaced_token_head(sequence)  # (batch, seq_len)
        rtd = _WithInput(dtype="float32", name="rtd")(logits, corrupted)  # (batch, seq_len, 2)
        outputs = {
            "mlm": keras.layers.Activation("linear", dtype="float32", name="mlm")(mlm),
            "rtd": rtd,
        }
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.generator_size = generator_size
        self.seed = seed
        self.excluded_ids = [int(i) for i in excluded_ids]

    def discriminator(self) -> ElectraDiscriminator:
        """The discriminator alone (this model's encoder and head, the same weights)."""
        model = ElectraDiscriminator(self.encoder)
        model.replaced_token_head.set_weights(self.replaced_token_head.get_weights())
        return model

    # === Config ===
    def head_config(self):
        return {
            "generator_size": self.generator_size,
            "seed": self.seed,
            "excluded_ids": self.excluded_ids,
        }
