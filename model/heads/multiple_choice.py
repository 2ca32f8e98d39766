"""`BertMultipleChoice`: pick one of several candidate continuations (SWAG, RACE).

    inputs  {"token_ids", "segment_ids", "padding_mask"}  (batch, num_choices, seq_len) int32
    outputs (batch, num_choices) float32 logits; softmax over the choices

Hugging Face's `BertForMultipleChoice`: every (context, choice) pair is encoded
on its own, its pooled output scored by one Dense(1), and the scores compared.

    python -c "from model.heads.multiple_choice import *; from model.networks.encoder import BertEncoder; BertMultipleChoice(BertEncoder.from_preset('tiny'), 4).summary()"
"""

from __future__ import annotations

import keras
from keras import ops

from model.heads.classifier import INPUTS
from model.heads.task_model import BertTaskModel
from model.networks.encoder import BertEncoder


class _FlattenChoices(keras.layers.Layer):
    """(batch, num_choices, seq_len) -> (batch * num_choices, seq_len)."""

    def call(self, x):
        return ops.reshape(x, (-1, ops.shape(x)[-1]))


class _UnflattenChoices(keras.layers.Layer):
    """(batch * num_choices, 1) scores -> (batch, num_choices), shaped like `like`."""

    def call(self, scores, like):
        return ops.reshape(scores, ops.shape(like)[:2])

    def compute_output_shape(self, scores_shape, like_shape):
        # JAX builds the functional graph by shape inference, not by tracing `call`.
        return tuple(like_shape[:2])


@keras.saving.register_keras_serializable(package="bert")
class BertMultipleChoice(BertTaskModel):
    """Per-choice pooled output -> dropout -> Dense(1) -> (batch, num_choices) logits.

    Args:
        encoder: the `BertEncoder`.
        num_choices: choices per example; None accepts any number (the
            weights do not depend on it, and Hugging Face configs do not say).
        dropout: dropout on the pooled output.

    Example:
    >>> model = BertMultipleChoice(BertEncoder.from_preset("tiny"), num_choices=4)
    """

    def __init__(
        self, encoder: BertEncoder, num_choices: int | None = None, dropout: float = 0.1, **kwargs
    ):
        if num_choices is not None and (not isinstance(num_choices, int) or num_choices < 1):
            raise ValueError(f"num_choices must be a positive integer, got {num_choices!r}")
        cfg = encoder.config

        # === Layers ===
        self.encoder = encoder
        self.output_dropout = keras.layers.Dropout(
            dropout, dtype=encoder.dtype_policy, name="output_dropout"
        )
        self.logits_dense = keras.layers.Dense(
            1,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=cfg.initializer_range),
            dtype=encoder.dtype_policy,
            name="logits",
        )

        # === Functional Model ===
        inputs = {
            name: keras.Input(shape=(num_choices, None), dtype="int32", name=name)
            for name in INPUTS
        }
        flatten = _FlattenChoices(name="flatten_choices")
        flat = {name: flatten(inputs[name]) for name in INPUTS}  # (batch * num_choices, seq_len)
        pooled = encoder(flat)["pooled_output"]  # (batch * num_choices, hidden_dim)
        scores = self.logits_dense(self.output_dropout(pooled))  # (batch * num_choices, 1)
        logits = _UnflattenChoices(name="unflatten_choices")(scores, inputs["token_ids"])
        outputs = keras.layers.Activation("linear", dtype="float32", name="float32_logits")(logits)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.num_choices = num_choices
        self.dropout = dropout

    # === Config ===
    def head_config(self):
        return {"num_choices": self.num_choices, "dropout": self.dropout}
