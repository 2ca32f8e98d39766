"""ELECTRA's discriminator scored on held-out text corrupted as its pre-training corrupts it
(`export.examples.replaced_tokens`): the exact AUC of replaced against original tokens and the
accuracy on each, shared by the report card (`python -m export.report`) and
`python -m model.evaluate --task rtd`.

    python -c "from export.detection import auc; print(auc([0.9, 0.1, 0.4], [True, False, False]))"
"""

from __future__ import annotations

import numpy as np


def detection_scores(predict, held_out, batch_size: int = 32) -> dict:
    """The discriminator's scores on `held_out` (`examples.ReplacedTokens`) from
    `predict(inputs) -> (batch, length) logits`: AUC (exact, by ranks), accuracy on
    replaced and on original tokens (replaced when the logit is above 0, the probability
    above 0.5), over every real token."""
    logits, labels = [], []
    for rows, x in held_out.corrupted.batches(batch_size):
        length = x["token_ids"].shape[1]
        real = x["padding_mask"] > 0
        logits.append(np.asarray(predict(x), np.float64)[:, :length][real])
        labels.append(held_out.labels[rows][:, :length][real] > 0)
    z, y = np.concatenate(logits), np.concatenate(labels)
    flagged = z > 0
    return {
        "auc": auc(z, y),
        "replaced_accuracy": float(flagged[y].mean()) if y.any() else None,
        "original_accuracy": float((~flagged[~y]).mean()) if (~y).any() else None,
        "replaced": int(y.sum()),
        "tokens": int(y.size),
    }


def auc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    """The area under the ROC curve of `scores` for the boolean `labels`: the chance that a
    positive scores above a negative (ties count half), by the Mann-Whitney rank sum."""
    labels = np.asarray(labels, bool)
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if not positives or not negatives:
        return None
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]  # 1-based, ties averaged
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))
