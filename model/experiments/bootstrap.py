"""The sampling error of a difference between two rows of a table, paired on the same dev set.

Two rows are scored on the same dev examples, so the question "would another dev set of the
same size order them the same way?" is answered by resampling that one set, the same draws
for both rows (a paired bootstrap; Efron and Tibshirani 1993, ch. 16; Koehn 2004 for MT):
each of `RESAMPLES` draws takes the units (`model/tasks/dev_units.py`: examples, questions,
or CoNLL-2003's documents, whole) with repetition, scores every seed of both rows on it, and
takes the difference of the rows' medians over their seeds. The 95 % interval of those
differences (percentiles 2.5 and 97.5) is the sampling error the report states; an effect
exceeds it when the interval does not hold 0.

Where a run has no dev units (one from before they were written, a metric that is not a sum)
`binomial` gives the unpaired bound of a proportion instead, the two rows' own standard
errors combined: for an accuracy it is what the bootstrap would give for independent dev
sets, larger than the paired one; for an F1 it is only a rough guide, and the report says so.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics

import numpy as np

from model.tasks import dev_units

RESAMPLES = 2000
LEVEL = 0.95
# Fewer groups than this (a CoNLL file without -DOCSTART- lines is one document) and the
# units are drawn one by one instead.
MIN_GROUPS = 30


@dataclasses.dataclass(frozen=True)
class Interval:
    """The interval of a difference (row a minus row b, in points) that the sampling error
    allows, and how it was found (for the report's words)."""

    low: float
    high: float
    how: str

    def holds_zero(self) -> bool:
        return self.low <= 0.0 <= self.high

    def __str__(self) -> str:
        return f"the difference's interval [{self.low:+.2f}, {self.high:+.2f}] ({self.how})"


def paired(
    a: list[dev_units.DevUnits], b: list[dev_units.DevUnits], metric: str, scale: float
) -> Interval | None:
    """The paired bootstrap's 95 % interval of median(a) - median(b) (each seed's score
    times `scale`, 100 for a fraction), or None when the seeds' units do not allow it (a
    seed without `metric`, or dev sets that differ)."""
    runs = [*a, *b]
    if not a or not b or any(metric not in r.metrics for r in runs):
        return None
    first = runs[0]
    if any(r.units != first.units or not _same_groups(r.groups, first.groups) for r in runs):
        return None
    kind = first.metrics[metric][0]
    if any(r.metrics[metric][0] != kind for r in runs):
        return None
    groups, how = _groups(first.groups, first.units)
    weights = _weights(int(groups.max()) + 1, RESAMPLES)  # (resamples, groups)

    def medians(row):
        scores = []
        for run in row:
            stats = run.metrics[metric][1]
            by_group = np.zeros((weights.shape[1], stats.shape[1] + 1), np.float32)
            np.add.at(by_group, groups, np.concatenate([stats, np.ones((len(stats), 1))], 1))
            sums = (weights @ by_group).astype(np.float64)  # (resamples, columns + units)
            scores.append(scale * dev_units.score(kind, sums[:, :-1], sums[:, -1]))
        return np.median(np.stack(scores), axis=0)

    differences = medians(a) - medians(b)
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(differences, [tail, 100 - tail])
    return Interval(float(low), float(high), f"paired bootstrap by {how}, 95 %")


def binomial(a: list[float], b: list[float], n: int, f1: bool) -> Interval:
    """gap ± 2 standard errors of the difference of two independent proportions, each at its
    row's median (in points, of `n` dev examples): the bound where no dev units are known."""
    gap = statistics.median(a) - statistics.median(b)
    variance = 0.0
    for values in (a, b):
        p = min(max(statistics.median(values) / 100.0, 0.0), 1.0)
        variance += p * (1 - p) / n
    error = 200.0 * variance**0.5
    how = "unpaired binomial bound" + (" (rough for an F1)" if f1 else "")
    return Interval(gap - error, gap + error, how + ", ±2 SE")


def _same_groups(x, y) -> bool:
    return (x is None) == (y is None) and (x is None or np.array_equal(x, y))


def _groups(groups: np.ndarray | None, units: int) -> tuple[np.ndarray, str]:
    """(each unit's group index 0..G-1, what a group is) for drawing."""
    if groups is not None:
        _, index = np.unique(groups, return_inverse=True)
        if index.max() + 1 >= MIN_GROUPS:
            return index, f"{index.max() + 1} documents"
    return np.arange(units), f"{units} examples"


@functools.lru_cache(maxsize=8)
def _weights(groups: int, resamples: int) -> np.ndarray:
    """How often each group is drawn in each resample (a fixed seed: the same report twice
    says the same; every comparison over one dev set shares the draws)."""
    draws = np.random.default_rng(0).integers(0, groups, size=(resamples, groups))
    return np.stack([np.bincount(d, minlength=groups) for d in draws]).astype(np.float32)
