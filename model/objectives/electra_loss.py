"""ELECTRA's discriminator loss and metrics (Keras), for `model.objectives.electra`: kept apart
so that choosing and checking an objective imports no framework (`python -m model.train
pretrain` refuses records the objective cannot train on before TensorFlow loads).
"""

from __future__ import annotations

import keras
from keras import ops


def replaced_token_targets(original_ids, rtd_output):
    """(labels, logits), each (batch, seq_len) float32, from the original ids
    and the "rtd" output of `ElectraPretrainer` ([..., 0] logits, [..., 1] the
    token the discriminator was shown): 1 exactly where that token differs
    from the original (a sample equal to the original counts as original)."""
    shown = ops.cast(rtd_output[..., 1], "int32")
    labels = ops.cast(ops.not_equal(shown, ops.cast(original_ids, "int32")), "float32")
    return labels, rtd_output[..., 0]


class ReplacedTokenLoss(keras.losses.Loss):
    """The discriminator's sigmoid cross-entropy, per token."""

    def __init__(self, name="replaced_token_loss", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        labels, logits = replaced_token_targets(y_true, y_pred)
        # max(x, 0) - x * z + log(1 + exp(-|x|)): stable for any logit
        return ops.maximum(logits, 0.0) - logits * labels + ops.log1p(ops.exp(-ops.abs(logits)))


class ReplacedTokenMetric(keras.metrics.Metric):
    """A Keras metric of the discriminator's (labels, probabilities), over
    every real token or only the replaced (`only="replaced"`) or original ones."""

    def __init__(self, metric, only=None, name=None, **kwargs):
        super().__init__(name=name or metric.name, **kwargs)
        if only not in (None, "replaced", "original"):
            raise ValueError(f"only must be None, 'replaced' or 'original', got {only!r}")
        self.metric = metric
        self.only = only

    def update_state(self, y_true, y_pred, sample_weight=None):
        labels, logits = replaced_token_targets(y_true, y_pred)
        weights = ops.ones_like(labels) if sample_weight is None else sample_weight
        if self.only == "replaced":
            weights = weights * labels
        elif self.only == "original":
            weights = weights * (1.0 - labels)
        self.metric.update_state(labels, ops.sigmoid(logits), sample_weight=weights)

    def result(self):
        return self.metric.result()

    def reset_state(self):
        self.metric.reset_state()


def replaced_token_metrics() -> list:
    M = keras.metrics
    return [
        ReplacedTokenMetric(M.BinaryAccuracy(), "replaced", name="replaced_accuracy"),
        ReplacedTokenMetric(M.BinaryAccuracy(), "original", name="original_accuracy"),
        ReplacedTokenMetric(M.Precision(thresholds=0.5), name="precision"),
        ReplacedTokenMetric(M.Recall(thresholds=0.5), name="recall"),
        ReplacedTokenMetric(M.AUC(num_thresholds=200), name="auc"),
    ]
