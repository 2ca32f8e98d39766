"""`BertEncoder`: the BERT Transformer encoder as a functional Keras 3 model.

Inputs and outputs use keras-hub's names, so code written for keras-hub's
`BertBackbone` works with it:

    inputs  {"token_ids", "segment_ids", "padding_mask"}   each (batch, seq_len) int32
    outputs {"sequence_output": (batch, seq_len, hidden_dim),
             "pooled_output":   (batch, hidden_dim)}

It differs from `keras_hub.models.BertBackbone` in what the paper's users
need: the GELU form is configurable (keras-hub hard-codes the tanh
approximation, which moves Hugging Face checkpoints by ~3e-3), the
attention probabilities of every layer are available (`with_attention()`),
and `causal=True` makes it the paper's left-to-right baseline ("LTR & No
NSP", section 5.1): every block attends only to positions at or before its
own, and the pooled output reads the last real token, not `[CLS]`.
With `embedding_dim` (ELECTRA's factorised embedding) the embeddings are
narrower than the blocks and a dense layer, `embeddings_projection`, widens
them; `shared_embeddings=` builds an encoder over another's embedding layers
(ELECTRA's generator, which shares the discriminator's).

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

    def call(self, x, padding_mask, attention_mask=None):
        masks = {"padding_mask": padding_mask}
        if attention_mask is not None:
            masks["attention_mask"] = attention_mask
        return self.block(x, **masks, return_attention_scores=True)


class _CausalAttentionMask(keras.layers.Layer):
    """(batch, seq_len) padding mask -> (batch, seq_len, seq_len) attention mask:
    query i may read key j only when j <= i and j is a real token. Built from
    the input's own length inside the graph, so one model serves any length
    (and XLA and TFLite see plain RANGE / compare / AND ops)."""

    def call(self, padding_mask):
        positions = ops.arange(ops.shape(padding_mask)[1], dtype="int32")  # (seq_len,)
        # (seq_len, seq_len): row = query, column = key; lower triangle incl. diagonal
        causal = ops.expand_dims(positions, 1) >= ops.expand_dims(positions, 0)
        keys = ops.expand_dims(ops.not_equal(padding_mask, 0), 1)  # (batch, 1, seq_len)
        return ops.cast(ops.logical_and(ops.expand_dims(causal, 0), keys), "int32")

    def compute_output_spec(self, padding_mask):
        # An int32 mask; `compute_output_shape` alone would declare the layer's float dtype.
        batch, seq_len = padding_mask.shape
        return keras.KerasTensor((batch, seq_len, seq_len), dtype="int32")


class _KeysAttentionMask(keras.layers.Layer):
    """(batch, seq_len) padding mask -> (batch, seq_len, seq_len): every query may read
    every real key. The padding mask alone says the same; this shape is what cuDNN's fused
    attention takes (see `full_attention_mask`)."""

    def call(self, padding_mask):
        keys = ops.expand_dims(ops.cast(ops.not_equal(padding_mask, 0), "int32"), 1)
        batch, seq_len = ops.shape(padding_mask)[0], ops.shape(padding_mask)[1]
        return ops.broadcast_to(keys, (batch, seq_len, seq_len))

    def compute_output_spec(self, padding_mask):
        batch, seq_len = padding_mask.shape
        return keras.KerasTensor((batch, seq_len, seq_len), dtype="int32")


def full_attention_mask() -> bool:
    """Whether the bidirectional encoder hands its blocks a (batch, seq, seq) attention mask:
    on a JAX GPU. Keras asks cuDNN's fused attention for a block with attention dropout 0,
    and jax 0.11.2 refuses keras-hub's (batch, 1, 1, seq) padding mask there ("Bias must have
    same seq length as QKV"), so Keras fell back to XLA's attention on an H200
    (bench/results/2026-11-26-nvidia-h200.md). The values are the same either way."""
    if keras.backend.backend() != "jax":
        return False
    import jax

    return jax.default_backend() == "gpu"


class _LastToken(keras.layers.Layer):
    """(batch, seq_len, hidden_dim) -> (batch, hidden_dim): the hidden state of
    each row's last real token (the highest position whose padding mask is 1;
    position 0 for a row with none)."""

    def call(self, x, padding_mask):
        positions = ops.arange(ops.shape(padding_mask)[1], dtype="int32")  # (seq_len,)
        real = ops.cast(ops.not_equal(padding_mask, 0), "int32")  # (batch, seq_len)
        last = ops.max(positions[None, :] * real, axis=1)  # (batch,)
        # A gather, not a one-hot matmul: exact at any precision (TF32 included).
        index = ops.reshape(last, (-1, 1, 1))  # (batch, 1, 1)
        return ops.take_along_axis(x, index, axis=1)[:, 0, :]  # (batch, hidden_dim)

    def compute_output_shape(self, x_shape, padding_mask_shape):
        return (x_shape[0], x_shape[2])


class _Stack(keras.layers.Layer):
    def call(self, tensors):
        return ops.stack(tensors, axis=1)

    def compute_mask(self, inputs, mask=None):
        return None


def _embedding_layers(cfg: BertConfig, dtype, name: str, shared=None) -> tuple:
    """The token, position and segment embeddings and their LayerNorm: new ones, or
    `shared`'s own layer objects (another `BertEncoder`, whose sizes must match)."""
    if shared is not None:
        _check_shareable(cfg, shared.config, name, shared.name)
        return (
            shared.token_embedding,
            shared.position_embedding,
            shared.segment_embedding,
            shared.embeddings_layer_norm,
        )
    init = lambda: keras.initializers.TruncatedNormal(stddev=cfg.initializer_range)
    return (
        ReversibleEmbedding(
            input_dim=cfg.vocabulary_size,
            output_dim=cfg.embedding_size,
            embeddings_initializer=init(),
            dtype=dtype,
            name="token_embedding",
        ),
        PositionEmbedding(
            sequence_length=cfg.max_sequence_length,
            initializer=init(),
            dtype=dtype,
            name="position_embedding",
        ),
        keras.layers.Embedding(
            input_dim=cfg.num_segments,
            output_dim=cfg.embedding_size,
            embeddings_initializer=init(),
            dtype=dtype,
            name="segment_embedding",
        ),
        keras.layers.LayerNormalization(
            epsilon=cfg.layer_norm_epsilon, dtype=dtype, name="embeddings_layer_norm"
        ),
    )


def _check_shareable(cfg: BertConfig, theirs: BertConfig, name: str, their_name: str) -> None:
    fields = ("embedding_size", "vocabulary_size", "max_sequence_length", "num_segments")
    ours, others = (tuple(getattr(c, f) for f in fields) for c in (cfg, theirs))
    if ours != others:
        raise ValueError(
            f"{name}: cannot share the embeddings of {their_name}: "
            f"embedding size, vocabulary, positions or segments differ "
            f"({', '.join(map(str, ours))} against {', '.join(map(str, others))})"
        )


@keras.saving.register_keras_serializable(package="bert")
class BertEncoder(keras.Model):
    """BERT: embeddings, `num_layers` post-LayerNorm Transformer blocks, tanh pooler.

    With `causal=True` (the paper's left-to-right baseline) every block's
    self-attention combines the padding mask with a lower-triangular mask, so
    a position never reads a later one, in `sequence_output` and in
    `attention_probs` alike. The pooler then reads the hidden state of the
    last real (non-padding) token instead of `[CLS]`, through the same
    dense + tanh: under causal attention `[CLS]` at position 0 has seen only
    itself, while the last token has seen the whole input (GPT's
    classification rule). Padding after the last real token changes nothing.

    Args:
        **config: the fields of `model.config.BertConfig`.
        dtype: a Keras dtype policy, e.g. `"mixed_bfloat16"`; None follows the
            global policy.
        shared_embeddings: another `BertEncoder` whose token, position and
            segment embeddings and embedding LayerNorm this one uses (the same
            layer objects, so the same variables); its `embedding_size` must
            equal this config's. Not part of `get_config`: the model that
            shares them (ELECTRA's pre-trainer) rebuilds the sharing itself.

    Example:
    >>> encoder = BertEncoder.from_preset("tiny")
    >>> out = encoder({"token_ids": ops.ones((1, 8), "int32"),
    ...                "segment_ids": ops.zeros((1, 8), "int32"),
    ...                "padding_mask": ops.ones((1, 8), "int32")})
    >>> tuple(out["sequence_output"].shape)
    (1, 8, 32)
    """

    def __init__(
        self, dtype=None, name="bert_encoder", trainable=True, shared_embeddings=None, **config
    ):
        cfg = BertConfig(**config)
        init = lambda: keras.initializers.TruncatedNormal(stddev=cfg.initializer_range)

        # === Layers ===
        # Every sublayer is an attribute whose `name=` equals the attribute
        # name, which keeps checkpoint mapping a table lookup.
        (
            self.token_embedding,
            self.position_embedding,
            self.segment_embedding,
            self.embeddings_layer_norm,
        ) = _embedding_layers(cfg, dtype, name, shared_embeddings)
        self.embeddings_add = keras.layers.Add(dtype=dtype, name="embeddings_add")
        self.embeddings_dropout = keras.layers.Dropout(
            cfg.dropout, dtype=dtype, name="embeddings_dropout"
        )
        # ELECTRA's factorised embedding: embedding_size -> hidden_dim.
        self.embeddings_projection = (
            keras.layers.Dense(
                cfg.hidden_dim,
                kernel_initializer=init(),
                dtype=dtype,
                name="embeddings_projection",
            )
            if cfg.embedding_size != cfg.hidden_dim
            else None
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
        self._causal = cfg.causal
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
        x = self.embed(inputs["token_ids"], inputs["segment_ids"])  # (batch, seq_len, hidden_dim)
        padding_mask = inputs["padding_mask"]
        masks = self.block_masks(padding_mask)
        attention = []
        for block in self.transformer_layers:
            if return_attention:
                # (batch, num_heads, seq_len, seq_len) softmax probabilities
                x, probs = _WithAttention(block)(x, **masks)
                attention.append(probs)
            else:
                x = block(x, **masks)
        if self._causal:
            # [CLS] has seen only itself; the last real token has seen everything.
            pooler_input = _LastToken(dtype=self.pooled_dense.dtype_policy, name="last_token")(
                x, padding_mask
            )  # (batch, hidden_dim)
        else:
            # The pooler reads only [CLS]: the paper's sentence representation.
            pooler_input = x[:, 0, :]  # (batch, hidden_dim)
        pooled = self.pooled_dense(pooler_input)  # (batch, hidden_dim)
        outputs = {"sequence_output": x, "pooled_output": pooled}
        if return_attention:
            # (batch, num_layers, num_heads, seq_len, seq_len)
            outputs["attention_probs"] = _Stack(name="attention_probs")(attention)
        return outputs

    def embed(self, token_ids, segment_ids):
        """(batch, seq_len) ids -> (batch, seq_len, hidden_dim): the embeddings
        summed, normalised, dropped out and (factorised) projected, the input of
        the first block. Code that runs the blocks itself calls this."""
        # (batch, seq_len, embedding_size), which is hidden_dim unless factorised
        tokens = self.token_embedding(token_ids)
        positions = self.position_embedding(tokens)
        segments = self.segment_embedding(segment_ids)
        x = self.embeddings_add([tokens, positions, segments])
        x = self.embeddings_layer_norm(x)
        x = self.embeddings_dropout(x)
        if self.embeddings_projection is not None:
            x = self.embeddings_projection(x)  # (batch, seq_len, hidden_dim)
        return x

    def block_masks(self, padding_mask) -> dict:
        """The mask arguments of every Transformer block's call, for
        `padding_mask` (batch, seq_len): `{"padding_mask"}`, and with `causal`
        also `{"attention_mask"}` (batch, seq_len, seq_len). Code that runs
        the blocks itself (`model/features/layers.py`) calls
        `block(x, **encoder.block_masks(padding_mask))` to keep the same mask."""
        if not self._causal:
            if not full_attention_mask():
                return {"padding_mask": padding_mask}
            attention_mask = _KeysAttentionMask(name="keys_attention_mask")(padding_mask)
            return {"padding_mask": padding_mask, "attention_mask": attention_mask}
        # The causal mask already holds the padding; keras-hub's block takes its
        # minimum with `padding_mask`, which changes nothing.
        attention_mask = _CausalAttentionMask(name="causal_attention_mask")(padding_mask)
        return {"padding_mask": padding_mask, "attention_mask": attention_mask}

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
