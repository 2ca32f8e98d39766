"""A dev score as a sum over its units, so that a dev set can be resampled and two models
compared on the same examples (`model/experiments/bootstrap.py`, the tables' sampling error).

Each metric written here is one of two kinds, a function of the sums of per-unit columns, so
a resample of the units (with repetition) is scored by weighting them:

    mean  one value per unit (an example's accuracy, 0 or 1; a SQuAD question's F1 in
          percent): sum(value) / units
    f1    counts per unit (a CoNLL-2003 sentence's entities, an MRPC pair): tp, fp, fn;
          2 tp / (2 tp + fp + fn), 0 where nothing is predicted or gold (conlleval's and
          scikit-learn's zero_division=0)

`groups` (or null) says which units are drawn together: CoNLL-2003's documents, whose
sentences share names and topics and so are not independent draws.

    DIR/dev_units.json  {"format": 1, "units": N, "groups": [document of each unit] | null,
                         "metrics": {"f1": {"kind": "f1", "tp": [...], "fp": [...],
                                            "fn": [...]}, ...}}

A task's `evaluate` writes it where it writes its predictions (fine-tuning: OUTPUT, for the
best epoch; `model.evaluate --predictions-dir`), as does the feature-based tagger;
`write` first checks that the sums give the task's own figure, and leaves out, with a
warning, a metric that does not. Spearman and Matthews correlations are not sums: CoLA
writes accuracy only; STS-B, SQuAD v2.0 (its F1 at a threshold tuned on the same questions)
and SWAG write none. MNLI's two dev sets write theirs under matched/ and mismatched/.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys

import numpy as np

FILE = "dev_units.json"
FORMAT = 1
COLUMNS = {"mean": ("value",), "f1": ("tp", "fp", "fn")}


def mean(values) -> dict:
    return {"kind": "mean", "value": [float(v) for v in values]}


def f1(tp, fp, fn) -> dict:
    return {"kind": "f1", **{k: [int(v) for v in c] for k, c in zip(COLUMNS["f1"], (tp, fp, fn))}}


def score(kind: str, sums: np.ndarray, units: np.ndarray | float) -> np.ndarray:
    """The metric of column sums `sums` (..., columns) over `units` units (a resample's
    weights summed)."""
    if kind == "mean":
        return sums[..., 0] / np.maximum(units, 1e-12)
    tp, fp, fn = sums[..., 0], sums[..., 1], sums[..., 2]
    denominator = 2 * tp + fp + fn
    return np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1e-12), 0.0)


@dataclasses.dataclass(frozen=True)
class DevUnits:
    """One run's dev units: `metrics` {name: (kind, (units, columns) array)}."""

    groups: np.ndarray | None
    metrics: dict[str, tuple[str, np.ndarray]]

    @property
    def units(self) -> int:
        return len(next(iter(self.metrics.values()))[1]) if self.metrics else 0


def columns(metric: dict) -> np.ndarray:
    return np.stack([np.asarray(metric[c], dtype=np.float64) for c in COLUMNS[metric["kind"]]], -1)


def write(directory: str, metrics: dict, reported: dict, groups=None) -> str | None:
    """DIR/dev_units.json of `metrics` ({name: `mean(...)` or `f1(...)`}), each kept only if
    its sums give `reported[name]` (the task's own figure, a finite number); the file is
    written even with none kept, so that it never stays from an earlier epoch or run.
    Returns its path, or None when no metric is kept."""
    from model.io.files import write_json

    kept, sizes = {}, set()
    for name, metric in metrics.items():
        stats = columns(metric)
        value = float(score(metric["kind"], stats.sum(0), len(stats)))
        expected = reported.get(name)
        finite = isinstance(expected, (int, float)) and math.isfinite(expected)
        if not finite or abs(value - expected) > 1e-7 * max(1.0, abs(expected)):
            print(
                f"warning: {name}'s dev units sum to {value!r}, not the task's {expected!r}; "
                f"not written to {FILE}",
                file=sys.stderr,
            )
            continue
        kept[name] = metric
        sizes.add(len(stats))
    sizes |= {len(groups)} if groups is not None and kept else set()
    if len(sizes) > 1:
        raise ValueError(f"{FILE}: metrics (and groups) over different numbers of units {sizes}")
    path = os.path.join(directory, FILE)
    if os.path.exists(path):
        print(f"note: replacing {path}", file=sys.stderr)
    os.makedirs(directory, exist_ok=True)
    record = {
        "format": FORMAT,
        "units": sizes.pop() if sizes else 0,
        "groups": None if groups is None or not kept else [int(g) for g in groups],
        "metrics": kept,
    }
    write_json(path, record)
    return path if kept else None


def read(directory: str) -> DevUnits | None:
    """DIR/dev_units.json, or None where there is none or it is not one this code wrote (a
    run from before it, a damaged file): the caller falls back to what it can say without."""
    try:
        with open(os.path.join(directory, FILE), encoding="utf-8") as f:
            record = json.load(f)
        groups = record["groups"]
        metrics = {}
        for name, metric in record["metrics"].items():
            stats = columns(metric)
            if len(stats) != record["units"] or not np.isfinite(stats).all():
                return None
            metrics[name] = (metric["kind"], stats)
        if groups is not None:
            groups = np.asarray(groups, dtype=np.int64)
            if len(groups) != record["units"]:
                return None
        if record["format"] != FORMAT:
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return DevUnits(groups, metrics)
