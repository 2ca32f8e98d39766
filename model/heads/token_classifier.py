"""`BertTokenClassifier`: per-token labels (NER, POS) over a `BertEncoder`.

    inputs  {"token_ids", "segment_ids", "padding_mask"}  (batch, seq_len) int32
    outputs (batch, seq_len, num_labels) float32 logits

Hugging Face's `BertForTokenClassification`: the sequence output, dropout, one
Dense. That model has no pooler, so converting one leaves our encoder's
`pooled_dense` without weights (the converter says so).

    python -c "from model.heads.token_classifier import *; from model.networks.encoder import BertEncoder; BertTokenClassifier(BertEncoder.from_preset('tiny'), 5).summary()"
"""

from __future__ import annotations

import keras

from model.heads.classifier import INPUTS, normalize_id2label
from model.heads.task_model import BertTaskModel
from model.networks.encoder import BertEncoder


@keras.saving.register_keras_serializable(package="bert")
class BertTokenClassifier(BertTaskModel):
    """Sequence output -> dropout -> Dense(num_labels) logits at every token.

    Args:
        encoder: the `BertEncoder`.
        num_labels: tag classes.
        dropout: dropout on the sequence output.
        id2label: optional tag names, `{index: name}`.

    Example:
    >>> model = BertTokenClassifier(BertEncoder.from_preset("tiny"), num_labels=5)
    """

    def __init__(
        self,
        encoder: BertEncoder,
        num_labels: int,
        dropout: float = 0.1,
        id2label: dict | None = None,
        **kwargs,
    ):
        cfg = encoder.config
        if not isinstance(num_labels, int) or num_labels < 1:
            raise ValueError(f"num_labels must be a positive integer, got {num_labels!r}")

        # === Layers ===
        self.encoder = encoder
        self.output_dropout = keras.layers.Dropout(
            dropout, dtype=encoder.dtype_policy, name="output_dropout"
        )
        self.logits_dense = keras.layers.Dense(
            num_labels,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=cfg.initializer_range),
            dtype=encoder.dtype_policy,
            name="logits",
        )

        # === Functional Model ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in INPUTS}
        sequence = encoder(inputs)["sequence_output"]  # (batch, seq_len, hidden_dim)
        logits = self.logits_dense(self.output_dropout(sequence))  # (batch, seq_len, num_labels)
        outputs = keras.layers.Activation("linear", dtype="float32", name="float32_logits")(logits)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.num_labels = num_labels
        self.dropout = dropout
        self.id2label = normalize_id2label(id2label, num_labels)

    # === Config ===
    def head_config(self):
        return {"num_labels": self.num_labels, "dropout": self.dropout, "id2label": self.id2label}
