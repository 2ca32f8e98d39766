"""`BertQuestionAnswerer`: extractive (SQuAD-style) span prediction over a `BertEncoder`.

    inputs  {"token_ids", "segment_ids", "padding_mask"}  (batch, seq_len) int32
    outputs {"start_logits": (batch, seq_len), "end_logits": (batch, seq_len)} float32

The paper's SQuAD head and Hugging Face's `BertForQuestionAnswering`: one
Dense(2) on the sequence output (a start and an end vector), no dropout. That
model has no pooler, so converting one leaves `pooled_dense` without weights.

    python -c "from model.heads.question_answerer import *; from model.networks.encoder import BertEncoder; BertQuestionAnswerer(BertEncoder.from_preset('tiny')).summary()"
"""

from __future__ import annotations

import keras

from model.heads.classifier import INPUTS
from model.heads.task_model import BertTaskModel
from model.networks.encoder import BertEncoder


@keras.saving.register_keras_serializable(package="bert")
class BertQuestionAnswerer(BertTaskModel):
    """Sequence output -> Dense(2) -> start and end logits.

    Args:
        encoder: the `BertEncoder`.

    Example:
    >>> model = BertQuestionAnswerer(BertEncoder.from_preset("tiny"))
    """

    def __init__(self, encoder: BertEncoder, **kwargs):
        cfg = encoder.config

        # === Layers ===
        self.encoder = encoder
        self.logits_dense = keras.layers.Dense(
            2,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=cfg.initializer_range),
            dtype=encoder.dtype_policy,
            name="logits",
        )

        # === Functional Model ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in INPUTS}
        sequence = encoder(inputs)["sequence_output"]  # (batch, seq_len, hidden_dim)
        logits = self.logits_dense(sequence)  # (batch, seq_len, 2)
        outputs = {
            "start_logits": keras.layers.Activation("linear", dtype="float32", name="start_logits")(
                logits[..., 0]
            ),
            "end_logits": keras.layers.Activation("linear", dtype="float32", name="end_logits")(
                logits[..., 1]
            ),
        }
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
