"""`BertEncoder`: the BERT Transformer encoder as a functional Keras 3 model.

Inputs and outputs use keras-hub's names, so code written for keras-hub's
`BertBackbone` works with it:

    inputs  {"token_ids", "segment_ids", "padding_mask"}   each (batch, seq_len) int32
    outputs {"sequence_output": (batch, seq_len, hidden_dim),
             "pooled_output":   (batch, hidden_dim)}

It differs from `keras_hub.models.BertBackbone` in what the paper's users
need: the GELU form is configurable (keras-hub hard-codes the tanh
approximation, which moves Hugging Face checkpoints by ~3e-3), and the
attention probabilities of every layer are available (`with_attention()`).

    python -c "from model.networks.encoder import BertEncoder; BertEncoder.from_preset('tiny').summary()"
"""

from __future__ import annotations

import keras
from keras import ops
from keras_hub.layers import PositionEmbedding, ReversibleEmbedding, TransformerEncoder

from model.config import GELU_APPROXIMATE, BertConfig


@keras.saving.register_keras_serializable(package="bert")
def gelu_approximate(x):
    """The tanh GELU of Google's `modeling.py`."""
    return keras.activations.gelu(x, approximate=True)


def activation_fn(name: str):
    if name == GELU_APPROXIMATE:
        return gelu_approximate
    return keras.activations.get(name)  # "gelu" is the exact erf form in Keras 3


class _WithAttention(keras.layers.Layer):
    """Calls a TransformerEncoder block for its output *and* its attention
    probabilities; keras-hub's block declares only one output shape, so the
    functional API cannot unpack the pair without this thin wrapper."""

    def __init__(self, block, **kwargs):
        super().__init__(name=f"{block.name}_with_attention", dtype=block.dtype_policy, **kwargs)
        self.block = block

    def call(self, x, padding_mask):
        return self.block(x, padding_mask=padding_mask, return_attention_scores=True)


class _Stack(keras.layers.Layer):
    def call(self, tensors):
        return ops.stack(tensors, axis=1)

    def compute_mask(self, inputs, mask=None):
        return None


@keras.saving.register_keras_serializable(package="bert")
class BertEncoder(keras.Model):
    """BERT: embeddings, `num_layers` post-LayerNorm Transformer blocks, tanh pooler.

    Args:
        **config: the fields of `model.config.BertConfig`.
        dtype: a Keras dtype policy, e.g. `"mixed_bfloat16"`; None follows the
            global policy.

    Example:
    >>> encoder = BertEncoder.from_preset("tiny")
    >>> out = encoder({"token_ids": ops.ones((1, 8), "int32"),
    ...                "segment_ids": ops.zeros((1, 8), "int32"),
    ...                "padding_mask": ops.ones((1, 8), "int32")})
    >>> tuple(out["sequence_output"].shape)
    (1, 8, 32)
    """

    def __init__(self, dtype=None, name="bert_encoder", trainable=True, **config):
        cfg = BertConfig(**config)
        init = lambda: keras.initializers.TruncatedNormal(stddev=cfg.initializer_range)

        # === Layers ===
        # Every sublayer is an attribute whose `name=` equals the attribute
        # name, which keeps checkpoint mapping a table lookup.
        self.token_embedding = ReversibleEmbedding(
            input_dim=cfg.vocabulary_size,
            output_dim=cfg.hidden_dim,
            embeddings_initializer=init(),
            dtype=dtype,
            name="token_embedding",
        )
        self.position_embedding = PositionEmbedding(
            sequence_length=cfg.max_sequence_length,
            initializer=init(),
            dtype=dtype,
            name="position_embedding",
        )
        self.segment_embedding = keras.layers.Embedding(
            input_dim=cfg.num_segments,
            output_dim=cfg.hidden_dim,
            embeddings_initializer=init(),
            dtype=dtype,
            name="segment_embedding",
        )
        self.embeddings_add = keras.layers.Add(dtype=dtype, name="embeddings_add")
        self.embeddings_layer_norm = keras.layers.LayerNormalization(
            epsilon=cfg.layer_norm_epsilon, dtype=dtype, name="embeddings_layer_norm"
        )
        self.embeddings_dropout = keras.layers.Dropout(
            cfg.dropout, dtype=dtype, name="embeddings_dropout"
        )
        self.transformer_layers = [
            TransformerEncoder(
                intermediate_dim=cfg.intermediate_dim,
                num_heads=cfg.num_heads,
                dropout=cfg.dropout,
                activation=activation_fn(cfg.activation),
                layer_norm_epsilon=cfg.layer_norm_epsilon,
                kernel_initializer=init(),
                dtype=dtype,
                name=f"transformer_layer_{i}",
            )
            for i in range(cfg.num_layers)
        ]
        self.pooled_dense = keras.layers.Dense(
            cfg.hidden_dim,
            activation="tanh",
            kernel_initializer=init(),
            dtype=dtype,
            name="pooled_dense",
        )

        # === Functional Model ===
        inputs = {
            "token_ids": keras.Input(shape=(None,), dtype="int32", name="token_ids"),
            "segment_ids": keras.Input(shape=(None,), dtype="int32", name="segment_ids"),
            "padding_mask": keras.Input(shape=(None,), dtype="int32", name="padding_mask"),
        }
        outputs = self._forward(inputs, return_attention=False)
        super().__init__(
            inputs=inputs, outputs=outputs, dtype=dtype, name=name, trainable=trainable
        )
        self.config = cfg

    def _forward(self, inputs, return_attention):
        tokens = self.token_embedding(inputs["token_ids"])  # (batch, seq_len, hidden_dim)
        positions = self.position_embedding(tokens)  # (batch, seq_len, hidden_dim)
        segments = self.segment_embedding(inputs["segment_ids"])  # (batch, seq_len, hidden_dim)
        x = self.embeddings_add([tokens, positions, segments])
        x = self.embeddings_layer_norm(x)
        x = self.embeddings_dropout(x)
        attention = []
        for block in self.transformer_layers:
            if return_attention:
                # (batch, num_heads, seq_len, seq_len) softmax probabilities
                x, probs = _WithAttention(block)(x, inputs["padding_mask"])
                attention.append(probs)
            else:
                x = block(x, padding_mask=inputs["padding_mask"])
        # The pooler reads only [CLS]: the paper's sentence representation.
        pooled = self.pooled_dense(x[:, 0, :])  # (batch, hidden_dim)
        outputs = {"sequence_output": x, "pooled_output": pooled}
        if return_attention:
            # (batch, num_layers, num_heads, seq_len, seq_len)
            outputs["attention_probs"] = _Stack(name="attention_probs")(attention)
        return outputs

    def with_attention(self) -> keras.Model:
        """A model sharing these weights that also returns `attention_probs`,
        (batch, num_layers, num_heads, seq_len, seq_len)."""
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in ("token_ids", "segment_ids", "padding_mask")
        }
        return keras.Model(
            inputs, self._forward(inputs, return_attention=True), name=f"{self.name}_with_attention"
        )

    @classmethod
    def from_config_object(cls, config: BertConfig, **kwargs) -> BertEncoder:
        return cls(**config.to_dict(), **kwargs)

    @classmethod
    def from_preset(cls, preset: str, **overrides) -> BertEncoder:
        return cls.from_config_object(BertConfig.preset(preset, **overrides))

    # === Config ===
    def get_config(self):
        # Only constructor arguments: `from_config` rebuilds with `cls(**config)`
        # and a reloaded `.keras` file is a BertEncoder again, not a Functional.
        return {
            **self.config.to_dict(),
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if "dtype" in config and isinstance(config["dtype"], dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)
