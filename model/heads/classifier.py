"""`BertClassifier`: a sentence (pair) classifier over a `BertEncoder`.

    inputs  {"token_ids", "segment_ids", "padding_mask"}  (batch, seq_len) int32
    outputs (batch, num_labels) float32 logits; num_labels=1 is a regression score

Hugging Face's `BertForSequenceClassification` and keras-hub's
`BertTextClassifier`: the pooled `[CLS]` output, dropout, one Dense. Logits
are float32 even under mixed precision, so the loss is too.

    python -c "from model.heads.classifier import *; from model.networks.encoder import BertEncoder; BertClassifier(BertEncoder.from_preset('tiny'), 3).summary()"
"""

from __future__ import annotations

import keras

from model.heads.task_model import BertTaskModel
from model.networks.encoder import BertEncoder

INPUTS = ("token_ids", "segment_ids", "padding_mask")


@keras.saving.register_keras_serializable(package="bert")
class BertClassifier(BertTaskModel):
    """Pooled output -> dropout -> Dense(num_labels) logits.

    Args:
        encoder: the `BertEncoder`.
        num_labels: output classes; 1 makes it a regressor (e.g. STS-B).
        dropout: dropout on the pooled output; 0.1 in the paper.
        id2label: optional label names, `{index: name}`; kept so a checkpoint
            says what its outputs mean (Hugging Face's `id2label`).

    Example:
    >>> model = BertClassifier(BertEncoder.from_preset("tiny"), num_labels=3)
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
        pooled = encoder(inputs)["pooled_output"]  # (batch, hidden_dim)
        logits = self.logits_dense(self.output_dropout(pooled))  # (batch, num_labels)
        outputs = keras.layers.Activation("linear", dtype="float32", name="float32_logits")(logits)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.num_labels = num_labels
        self.dropout = dropout
        self.id2label = normalize_id2label(id2label, num_labels)

    # === Config ===
    def head_config(self):
        return {"num_labels": self.num_labels, "dropout": self.dropout, "id2label": self.id2label}


def normalize_id2label(id2label: dict | None, num_labels: int) -> dict[str, str] | None:
    """`{"0": name, ...}` (JSON keys are strings) covering every label, or None."""
    if id2label is None:
        return None
    result = {str(int(k)): str(v) for k, v in id2label.items()}
    if sorted(result, key=int) != [str(i) for i in range(num_labels)]:
        raise ValueError(f"id2label must name labels 0..{num_labels - 1}, got {sorted(result)}")
    return dict(sorted(result.items(), key=lambda kv: int(kv[0])))
