"""`SpanBoundaryHead`: SpanBERT's span boundary objective (SBO).

Every token x_i of a masked span x_s..x_e is predicted again, from the
encoder outputs of the span's two boundary tokens and the token's position in
the span only:

    h0 = [x_(s-1); x_(e+1); p_(i-s+1)]             (2 * hidden_dim + position_dim)
    h1 = LayerNorm(GELU(W1 h0))                      (hidden_dim)
    y  = LayerNorm(GELU(W2 h1))                      (hidden_dim)
    logits = y E^T + b                               (vocabulary_size)

E is the encoder's token embedding (the decoder is tied to it, as the
masked-LM head's), b an output bias of the head's own; p is a learned
embedding of 200 dimensions in the reference (`BertPairTargetPredictionHead`
of facebookresearch/SpanBERT's `pair_bert.py`, `--max-pair-targets 15
--pair-positional-embedding-size 200`), one row per position in the span,
row 0 for the span's first token. Its inputs come from
`model.pretraining.span_masking.SpanMasker` (`left_boundaries`,
`right_boundaries`, `relative_positions`, one per prediction slot) and its
targets are that masker's `mask_ids`, weighted by `sbo_weights`; the loss is
masked-LM + SBO.

    inputs  sequence_output     (batch, seq_len, hidden_dim)
            left_boundaries, right_boundaries, relative_positions
                                (batch, max_predictions) int32
    output  (batch, max_predictions, vocabulary_size) logits

    python -c "from model.heads.span_boundary import SpanBoundaryHead; help(SpanBoundaryHead)"
"""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="bert")
class SpanBoundaryHead(keras.layers.Layer):
    """The SBO head over an encoder's sequence output, decoding through its token embedding.

    Args:
        token_embedding: the encoder's `keras_hub.layers.ReversibleEmbedding`;
            its transpose is the output projection (tied, no copy).
        max_span_tokens: rows of the position embedding: positions 0 ..
            max_span_tokens - 1 in a span (the reference's 15).
        position_dim: width of the position embedding (the reference's 200).
        intermediate_activation: the activation after each dense layer
            (GELU; pass `model.networks.encoder.activation_fn(config.activation)`
            to follow the encoder's form).
        layer_norm_epsilon: the LayerNorms' epsilon (1e-12, as BERT).
        initializer_range: stddev of the truncated-normal initializer of the
            dense layers and the position embedding (0.02, as BERT).

    Under a mixed dtype policy give the head `dtype="float32"`, as
    `BertPretrainer` does for its masked-LM head, so the logits and the loss
    are float32.

    Example:
    >>> encoder = BertEncoder.from_preset("tiny")
    >>> head = SpanBoundaryHead(encoder.token_embedding)
    >>> logits = head(features["sequence_output"], left, right, relative)  # (batch, P, vocab)
    """

    def __init__(
        self,
        token_embedding,
        max_span_tokens: int = 15,
        position_dim: int = 200,
        intermediate_activation="gelu",
        layer_norm_epsilon: float = 1e-12,
        initializer_range: float = 0.02,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.token_embedding = token_embedding
        self.max_span_tokens = max_span_tokens
        self.position_dim = position_dim
        self.intermediate_activation = keras.activations.get(intermediate_activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.vocabulary_size = token_embedding.input_dim
        self.hidden_dim = token_embedding.output_dim

    def build(
        self,
        inputs_shape,
        left_boundaries_shape=None,
        right_boundaries_shape=None,
        relative_positions_shape=None,
    ):
        if inputs_shape[-1] is not None and inputs_shape[-1] != self.hidden_dim:
            raise ValueError(
                f"sequence_output has width {inputs_shape[-1]} but the token embedding "
                f"{self.hidden_dim}: the head's decoder is that embedding"
            )
        init = lambda: keras.initializers.TruncatedNormal(stddev=self.initializer_range)

        # === Layers ===
        self.position_embedding = keras.layers.Embedding(
            self.max_span_tokens,
            self.position_dim,
            embeddings_initializer=init(),
            dtype=self.dtype_policy,
            name="position_embedding",
        )
        self.dense_1 = keras.layers.Dense(
            self.hidden_dim,
            activation=self.intermediate_activation,
            kernel_initializer=init(),
            dtype=self.dtype_policy,
            name="dense_1",
        )
        self.layer_norm_1 = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm_1"
        )
        self.dense_2 = keras.layers.Dense(
            self.hidden_dim,
            activation=self.intermediate_activation,
            kernel_initializer=init(),
            dtype=self.dtype_policy,
            name="dense_2",
        )
        self.layer_norm_2 = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm_2"
        )
        self.position_embedding.build((None, None))
        self.dense_1.build((None, None, 2 * self.hidden_dim + self.position_dim))
        self.layer_norm_1.build((None, None, self.hidden_dim))
        self.dense_2.build((None, None, self.hidden_dim))
        self.layer_norm_2.build((None, None, self.hidden_dim))
        self.output_bias = self.add_weight(
            name="output_bias", shape=(self.vocabulary_size,), initializer="zeros"
        )
        self.built = True

    def call(self, inputs, left_boundaries, right_boundaries, relative_positions):
        # x_(s-1) and x_(e+1) for every prediction slot.
        left = ops.take_along_axis(inputs, ops.expand_dims(left_boundaries, -1), axis=1)
        right = ops.take_along_axis(inputs, ops.expand_dims(right_boundaries, -1), axis=1)
        # left, right: (batch, P, hidden_dim)
        position = self.position_embedding(relative_positions)  # (batch, P, position_dim)
        # (batch, P, 2 * hidden_dim + position_dim)
        x = ops.concatenate([left, right, position], axis=-1)
        x = self.layer_norm_1(self.dense_1(x))  # (batch, P, hidden_dim)
        x = self.layer_norm_2(self.dense_2(x))  # (batch, P, hidden_dim)
        logits = self.token_embedding(x, reverse=True)  # (batch, P, vocabulary_size)
        return ops.cast(logits, self.compute_dtype) + self.output_bias

    def compute_output_shape(
        self,
        inputs_shape,
        left_boundaries_shape=None,
        right_boundaries_shape=None,
        relative_positions_shape=None,
    ):
        return tuple(left_boundaries_shape) + (self.vocabulary_size,)

    # === Config ===
    def get_config(self):
        # As keras-hub's MaskedLMHead: the embedding is serialised with the
        # head, so a head loaded on its own gets its own (untied) copy. A model
        # holding an encoder rebuilds the head from the encoder's embedding,
        # which keeps the tie.
        return {
            **super().get_config(),
            "token_embedding": keras.layers.serialize(self.token_embedding),
            "max_span_tokens": self.max_span_tokens,
            "position_dim": self.position_dim,
            "intermediate_activation": keras.activations.serialize(self.intermediate_activation),
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "initializer_range": self.initializer_range,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["token_embedding"] = keras.layers.deserialize(config["token_embedding"])
        return cls(**config)
