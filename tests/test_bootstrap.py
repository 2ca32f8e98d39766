"""The tables' paired bootstrap (`model/experiments/bootstrap.py`) against a plain one written
here with scikit-learn's F1, drawing documents whole, and refusing runs it cannot pair."""

from __future__ import annotations

import numpy as np
import pytest

from model.experiments import bootstrap
from model.tasks import dev_units


def units(metrics: dict, groups=None) -> dev_units.DevUnits:
    return dev_units.DevUnits(
        None if groups is None else np.asarray(groups),
        {name: (m["kind"], dev_units.columns(m)) for name, m in metrics.items()},
    )


def binary_f1_units(y, predicted) -> dev_units.DevUnits:
    y, predicted = np.asarray(y, bool), np.asarray(predicted, bool)
    return units({"f1": dev_units.f1(y & predicted, predicted & ~y, y & ~predicted)})


def test_the_f1_interval_is_a_plain_bootstrap_of_scikit_learns_f1():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(1)
    y = rng.random(400) < 0.6
    good = np.where(rng.random(400) < 0.85, y, ~y)  # two models, mostly agreeing
    bad = np.where(rng.random(400) < 0.9, good, ~good)
    got = bootstrap.paired([binary_f1_units(y, good)], [binary_f1_units(y, bad)], "f1", 100)
    differences = []
    draws = np.random.default_rng(7)  # other draws: the intervals agree within their noise
    for _ in range(2000):
        i = draws.integers(0, 400, 400)
        differences.append(100 * (f1_score(y[i], good[i]) - f1_score(y[i], bad[i])))
    low, high = np.percentile(differences, [2.5, 97.5])
    assert got.how == "paired bootstrap by 400 examples, 95 %"
    assert got.low == pytest.approx(low, abs=0.4) and got.high == pytest.approx(high, abs=0.4)
    gap = 100 * (f1_score(y, good) - f1_score(y, bad))
    assert got.low < gap < got.high


def test_the_rows_median_over_seeds_is_what_is_resampled():
    """Three seeds a row: the interval is of the difference of the medians, so a seed far
    off the other two moves nothing."""
    rng = np.random.default_rng(2)
    seeds = [rng.random(500) < p for p in (0.80, 0.81, 0.82)]
    floor = [rng.random(500) < 0.7 for _ in range(3)]
    row = [units({"accuracy": dev_units.mean(s)}) for s in seeds]
    base = [units({"accuracy": dev_units.mean(s)}) for s in floor]
    got = bootstrap.paired(row, base, "accuracy", 100)
    lowest = int(np.argmin([s.mean() for s in seeds]))  # made 0: the median stays
    outlier = [
        units({"accuracy": dev_units.mean(np.zeros(500))}) if i == lowest else r
        for i, r in enumerate(row)
    ]
    moved = bootstrap.paired(outlier, base, "accuracy", 100)
    medians = np.median([s.mean() for s in seeds]) - np.median([s.mean() for s in floor])
    assert got.low < 100 * medians < got.high
    # The median is the middle seed's either way (a mean would fall by about 27 points).
    assert moved.low == pytest.approx(got.low, abs=1.5)
    assert moved.high == pytest.approx(got.high, abs=1.5)


def test_documents_are_drawn_whole():
    """Sentences of a document that are all right or all wrong together: drawn by document
    the interval is wider than drawn by sentence (they are not independent); under
    MIN_GROUPS documents, drawn by sentence."""
    rng = np.random.default_rng(3)
    documents = np.repeat(np.arange(60), 20)  # 60 documents of 20 sentences
    right = np.repeat(rng.random(60) < 0.7, 20)
    wrong = np.zeros(1200)
    run = {"accuracy": dev_units.mean(right)}
    floor = {"accuracy": dev_units.mean(wrong)}
    grouped = bootstrap.paired([units(run, documents)], [units(floor, documents)], "accuracy", 100)
    loose = bootstrap.paired([units(run)], [units(floor)], "accuracy", 100)
    assert grouped.how == "paired bootstrap by 60 documents, 95 %"
    assert grouped.high - grouped.low > 3 * (loose.high - loose.low)
    few = np.repeat(np.arange(20), 60)
    assert bootstrap.paired([units(run, few)], [units(floor, few)], "accuracy", 100).how == (
        "paired bootstrap by 1200 examples, 95 %"
    )


def test_runs_that_cannot_be_paired_are_refused():
    a = units({"accuracy": dev_units.mean([1, 0, 1, 1])})
    assert (
        bootstrap.paired([a], [units({"accuracy": dev_units.mean([1, 0, 1])})], "accuracy", 100)
        is None
    )
    assert bootstrap.paired([a], [a], "f1", 100) is None  # not written
    assert bootstrap.paired([a], [], "accuracy", 100) is None
    grouped = units({"accuracy": dev_units.mean([1, 0, 1, 1])}, [0, 0, 1, 1])
    assert bootstrap.paired([a], [grouped], "accuracy", 100) is None  # other draws
    same = bootstrap.paired([a], [a], "accuracy", 100)
    assert same.low == same.high == 0.0 and same.holds_zero()


def test_the_binomial_bound_combines_both_rows():
    # 0.93 and 0.88 on 872: 2 x 100 x sqrt(.93 x .07 / 872 + .88 x .12 / 872) = 2.80 points
    bound = bootstrap.binomial([93.0, 93.0], [88.0], 872, f1=False)
    assert (bound.high - bound.low) / 2 == pytest.approx(2.80, abs=0.01)
    assert (bound.high + bound.low) / 2 == pytest.approx(5.0)
    perfect = bootstrap.binomial([100.0], [99.9], 872, f1=True)
    assert perfect.low < 0 < perfect.high and "rough for an F1" in perfect.how
