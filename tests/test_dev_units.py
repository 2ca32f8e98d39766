"""Dev units (`model/tasks/dev_units.py`): every task's file sums to the figure the task itself
reports (on the real dev sets, with predictions partly right), and a file that does not is
not written; `read` refuses what it cannot trust."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

from model import tasks
from model.tasks import dev_units, ner, squad, squad_metric
from tests.helpers import SHARED_DATA, write_task_vocab


def shared(*parts) -> str:
    path = os.path.join(SHARED_DATA, *parts)
    if not os.path.exists(path):
        pytest.skip(f"{path} not found (../shared/data)")
    return path


def total(units: dev_units.DevUnits, name: str) -> float:
    kind, stats = units.metrics[name]
    return float(dev_units.score(kind, stats.sum(0), len(stats)))


@pytest.mark.parametrize("name", ["sst2", "mrpc"])
def test_glue_units_sum_to_the_tasks_metrics(name, tmp_path):
    task = tasks.get(name)
    folder = shared("glue", {"sst2": "SST-2", "mrpc": "MRPC"}[name])
    examples = task.read(task.dev_files(folder)[""])
    y = task._label_ids(examples)
    # Logits right on about 70 % of the examples.
    rng = np.random.default_rng(0)
    right = rng.random(len(y)) < 0.7
    predicted = np.where(right, y, 1 - y)
    logits = np.eye(2)[predicted] + 0.01 * rng.random((len(y), 2))
    metrics = task.metrics(y, logits)
    assert dev_units.write(str(tmp_path), task.units(y, logits.argmax(-1)), metrics)
    units = dev_units.read(str(tmp_path))
    assert units.units == len(examples) and units.groups is None
    for metric in metrics:  # accuracy, and MRPC's F1 of its "equivalent" class
        assert total(units, metric) == pytest.approx(metrics[metric], abs=1e-12)
    assert set(units.metrics) == set(metrics)


def test_glue_evaluate_writes_units_with_an_output_dir(tmp_path):
    from model.text.wordpiece import WordPieceTokenizer

    tokenizer = WordPieceTokenizer(write_task_vocab(tmp_path / "vocab.txt"))
    sun, moon = tokenizer.token_to_id["sun"], tokenizer.token_to_id["moon"]

    def predict(x):
        ids = x["token_ids"]
        score = (ids == sun).sum(-1) - (ids == moon).sum(-1)
        return np.stack([np.zeros(len(ids)), score], -1).astype(np.float32)

    path = tmp_path / "dev.tsv"
    rows = [("sun sun .", 1), ("moon .", 0), ("sun moon moon .", 1), ("the cat .", 0)]
    path.write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows), encoding="utf-8")
    task = tasks.get("sst2")
    out = tmp_path / "out"
    metrics = task.evaluate(predict, task.read(str(path)), tokenizer, 16, output_dir=str(out))
    units = dev_units.read(str(out))
    assert metrics["accuracy"] == 0.75
    np.testing.assert_array_equal(units.metrics["accuracy"][1][:, 0], [1, 1, 0, 1])


def perturbed(tags: list[str], rng: random.Random) -> list[str]:
    """Gold tags with some entities' types changed, some dropped and a few invented."""
    out = list(tags)
    for i, tag in enumerate(tags):
        r = rng.random()
        if tag.startswith("B-") and r < 0.15:
            out[i] = "B-" + rng.choice(["PER", "ORG", "LOC", "MISC"])
        elif tag != "O" and r < 0.25:
            out[i] = "O"
        elif tag == "O" and r < 0.02:
            out[i] = "B-MISC"
    return out


def test_conll_units_sum_to_conlleval_by_document(tmp_path):
    task = tasks.get("conll2003")
    examples = task.read(task.dev_files(shared("conll2003"))[""])
    rng = random.Random(0)
    predicted = [perturbed(e.tags, rng) for e in examples]
    metrics = ner.conll_metrics([e.tags for e in examples], predicted)
    assert 0.5 < metrics["f1"] < 0.95
    ner.write_units(str(tmp_path), examples, predicted, metrics)
    units = dev_units.read(str(tmp_path))
    assert total(units, "f1") == pytest.approx(metrics["f1"], abs=1e-12)
    assert units.units == len(examples) == 3250
    assert len(set(units.groups.tolist())) == 216  # the dev file's -DOCSTART- documents


def test_squad_v1_units_sum_to_the_official_script(tmp_path):
    task = tasks.get("squad1")
    examples = task.read(shared("squad", "dev-v1.1.json"))
    rng = random.Random(0)
    predictions = {}
    for e in examples:
        r, words = rng.random(), e.answers[0]["text"].split()
        if r < 0.5:
            predictions[e.qas_id] = e.answers[-1]["text"]
        elif r < 0.8:  # part of an answer, and a word more
            predictions[e.qas_id] = " ".join(words[: max(1, len(words) // 2)] + ["the"])
        elif r < 0.95:
            predictions[e.qas_id] = e.question[:12]
        # else unanswered: 0
    gold = {e.qas_id: [a["text"] for a in e.answers] for e in examples}
    metrics = squad_metric.evaluate_v1(gold, predictions)
    dev_units.write(str(tmp_path), squad.units_v1(examples, predictions), metrics)
    units = dev_units.read(str(tmp_path))
    assert units.units == len(gold) == 10570
    for name in ("f1", "exact_match"):
        assert total(units, name) == pytest.approx(metrics[name], abs=1e-9)
    assert 40 < metrics["exact_match"] < metrics["f1"] < 90


def test_a_metric_its_units_do_not_sum_to_is_not_written(tmp_path, capsys):
    units = {"accuracy": dev_units.mean([1, 0, 1, 1]), "f1": dev_units.f1([1, 1], [0, 1], [1, 0])}
    path = dev_units.write(str(tmp_path), units, {"accuracy": 0.75, "f1": 0.9})
    assert "f1's dev units sum to 0.666" in capsys.readouterr().err
    assert set(dev_units.read(str(tmp_path)).metrics) == {"accuracy"} and path
    # None kept (a NaN figure is none): the file says so, replacing an earlier epoch's.
    assert dev_units.write(str(tmp_path), units, {"accuracy": float("nan")}) is None
    assert "note: replacing" in capsys.readouterr().err
    assert dev_units.read(str(tmp_path)).metrics == {}
    with pytest.raises(ValueError, match="different numbers of units"):
        dev_units.write(str(tmp_path), units, {"accuracy": 0.75}, groups=[0, 0, 1])


@pytest.mark.parametrize(
    "damage",
    [
        lambda r: r.update(format=2),
        lambda r: r.update(units=5),
        lambda r: r["metrics"]["accuracy"].update(kind="median"),
        lambda r: r["metrics"]["accuracy"]["value"].__setitem__(0, float("nan")),
        lambda r: r.update(groups=[0, 1]),
        lambda r: r.pop("metrics"),
    ],
)
def test_read_refuses_what_it_cannot_trust(damage, tmp_path):
    dev_units.write(str(tmp_path), {"accuracy": dev_units.mean([1, 0, 1])}, {"accuracy": 2 / 3})
    assert dev_units.read(str(tmp_path)) is not None
    path = tmp_path / dev_units.FILE
    record = json.loads(path.read_text())
    damage(record)
    path.write_text(json.dumps(record))
    assert dev_units.read(str(tmp_path)) is None
    assert dev_units.read(str(tmp_path / "missing")) is None
