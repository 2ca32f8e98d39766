"""`model.tasks.squad_metric`: the official SQuAD v1.1 / v2.0 scores on edge
cases computed by hand, the command line, and the real dev file.

    PYTHONPATH=. python -m pytest tests/test_squad_metric.py
"""

from __future__ import annotations

import json
import os

import pytest

from model.tasks import squad_metric as m
from tests.helpers import SHARED_DATA

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SQUAD_DIRS = (os.path.join(SHARED_DATA, "squad"),)


def squad_file(name: str) -> str:
    for folder in SQUAD_DIRS:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    pytest.skip(f"{name} not found in {SQUAD_DIRS}")


# === Normalisation ===


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The Cat", "cat"),  # lower, article
        ("an apple and a pear", "apple and pear"),  # all three articles
        ("theater anthem", "theater anthem"),  # articles only as whole words
        ("U.S. (1990s)!", "us 1990s"),  # ASCII punctuation removed, not split
        ("rock'n'roll", "rocknroll"),
        ("  many\n\tspaces  ", "many spaces"),
        ("The", ""),
        ("1–2 “quoted”", "1–2 “quoted”"),  # non-ASCII punctuation is kept
        ("a-the", "athe"),  # punctuation goes before articles
    ],
)
def test_normalize_answer(text, expected):
    assert m.normalize_answer(text) == expected


# === v1.1 ===


def test_v1_exact_and_f1_by_hand():
    # Tokens: pred [cat, sat], gold [cat, sat, on, mat]: P = 1, R = 1/2, F1 = 2/3.
    assert m.exact_match_score("The cat sat.", "cat sat") is True
    assert m.f1_score("the cat sat", "cat sat on the mat") == pytest.approx(2 / 3)
    # Counter overlap counts repeats once each: [cat, cat, dog] vs [cat, dog, dog]: 2 common.
    assert m.f1_score("cat cat dog", "cat dog dog") == pytest.approx(2 / 3)
    assert m.f1_score("dog", "cat") == 0
    # v1.1: when both normalise to nothing, EM is 1 but F1 is 0 (no common token).
    assert m.exact_match_score("the", "a") is True
    assert m.f1_score("the", "a") == 0


def test_v1_max_over_gold_answers_and_missing_predictions():
    gold = {
        "q1": ["Denver Broncos", "the Broncos"],  # pred matches the 2nd exactly
        "q2": ["in the 10th century", "10th"],  # F1 max: vs "10th century" 1 common
        "q3": ["Paris"],
    }  # no prediction: 0, stays in total
    preds = {"q1": "Broncos", "q2": "10th century"}
    warnings = []
    scores = m.evaluate_v1(gold, preds, warn=warnings.append)
    # q2: gold 1 [in, 10th, century] vs [10th, century]: P 1, R 2/3, F1 0.8;
    # gold 2 [10th]: P 1/2, R 1, F1 2/3; the max is 0.8.
    assert scores["exact_match"] == pytest.approx(100 * 1 / 3)
    assert scores["f1"] == pytest.approx(100 * (1 + 0.8 + 0) / 3)
    assert warnings == ["Unanswered question q3 will receive score 0."]


# === v2.0 ===


def test_v2_exact_and_f1_by_hand():
    assert m.compute_exact("The Cat", "cat") == 1
    assert m.compute_f1("cat sat on the mat", "the cat sat") == pytest.approx(2 / 3)
    # v2.0: two empty answers agree (F1 1), one empty one not (F1 0).
    assert m.compute_f1("", "") == 1
    assert m.compute_f1("the", "a") == 1
    assert m.compute_f1("", "cat") == 0
    assert m.compute_f1("cat", "") == 0


def test_v2_no_answer_and_breakdown():
    gold = {
        "h1": ["Paris", "in Paris"],
        "h2": ["blue whale"],
        "n1": [],
        "n2": [],
        "n3": ["  the  "],
    }  # a gold answer that normalises to "" counts as no answer
    preds = {"h1": "in Paris", "h2": "whale", "n1": "", "n2": "a whale", "n3": ""}
    out = m.evaluate_v2(gold, preds)
    # exact: h1 1, h2 0, n1 1, n2 0, n3 1; F1: h2 [whale] vs [blue, whale] = 2/3.
    assert out["exact"] == pytest.approx(100 * 3 / 5)
    assert out["f1"] == pytest.approx(100 * (1 + 2 / 3 + 1 + 0 + 1) / 5)
    assert out["total"] == 5
    assert out["HasAns_total"] == 3 and out["NoAns_total"] == 2  # n3 has a (blank) answer
    assert out["HasAns_exact"] == pytest.approx(100 * 2 / 3)
    assert out["HasAns_f1"] == pytest.approx(100 * (1 + 2 / 3 + 1) / 3)
    assert out["NoAns_exact"] == pytest.approx(50.0)
    assert "best_f1" not in out  # only with na_probs


def test_v2_missing_prediction_leaves_the_total():
    warnings = []
    out = m.evaluate_v2({"a": ["x"], "b": []}, {"b": ""}, warn=warnings.append)
    assert out["total"] == 1 and out["exact"] == 100.0
    assert warnings == ["Missing prediction for a"]


def _threshold_case():
    # q1 answered right, q2 answered wrong, q3 unanswerable but answered,
    # q4 unanswerable and left blank.
    gold = {"q1": ["cat"], "q2": ["dog"], "q3": [], "q4": []}
    preds = {"q1": "cat", "q2": "bird", "q3": "fish", "q4": ""}
    na_probs = {"q1": 0.1, "q2": 0.6, "q3": 0.3, "q4": 0.9}
    return gold, preds, na_probs


def test_find_best_thresh_by_hand():
    gold, preds, na_probs = _threshold_case()
    exact_raw, _ = m.get_raw_scores(gold, preds)
    has_ans = {k: bool(v) for k, v in gold.items()}
    # From "no answer everywhere" (2 of 4 right), switching on in na_prob order:
    # q1 +1 -> 3 (best, thresh 0.1), q3 -1 -> 2, q2 +0 -> 2, q4 +0 -> 2.
    assert m.find_best_thresh(preds, exact_raw, na_probs, has_ans) == (75.0, 0.1)


@pytest.mark.parametrize(
    "thresh, exact",
    [
        (1.0, 50.0),  # nothing above: raw scores (q1, q4 right)
        (0.5, 50.0),  # q2 (wrong) and q4 become "no answer": q2 still wrong, q4 right
        (0.2, 75.0),  # q3 becomes "no answer" too, which is right
        (0.0, 50.0),  # everything "no answer": the two unanswerable ones right
    ],
)
def test_v2_no_answer_threshold(thresh, exact):
    gold, preds, na_probs = _threshold_case()
    out = m.evaluate_v2(gold, preds, na_probs, na_prob_thresh=thresh)
    assert out["exact"] == pytest.approx(exact)
    assert out["best_exact"] == pytest.approx(75.0) and out["best_exact_thresh"] == 0.1
    assert out["best_f1"] == pytest.approx(75.0) and out["best_f1_thresh"] == 0.1


# === Command line ===


def _write(path, data) -> str:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)
    return str(path)


def _dataset(qas, version="1.1"):
    return {
        "version": version,
        "data": [
            {"title": "T", "paragraphs": [{"context": "The cat sat on the mat.", "qas": qas}]}
        ],
    }


def test_command_line_v1(tmp_path, capsys):
    data = _write(
        tmp_path / "d.json",
        _dataset(
            [
                {
                    "id": "a",
                    "question": "Who?",
                    "answers": [{"text": "The cat", "answer_start": 0}],
                },
                {
                    "id": "b",
                    "question": "Where?",
                    "answers": [{"text": "the mat", "answer_start": 15}],
                },
            ]
        ),
    )
    preds = _write(tmp_path / "p.json", {"a": "cat", "b": "on the mat"})
    assert m.main([data, preds]) == 0
    out = json.loads(capsys.readouterr().out)
    # b: [on, mat] vs [mat]: P 1/2, R 1, F1 2/3.
    assert out == {"exact_match": pytest.approx(50.0), "f1": pytest.approx(100 * (1 + 2 / 3) / 2)}
    # The same files behind a byte-order mark score the same.
    for path in (data, preds):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        with open(path, "w", encoding="utf-8") as f:
            f.write("\ufeff" + text)
    assert m.main([data, preds]) == 0
    assert json.loads(capsys.readouterr().out) == out


def test_command_line_v2_with_na_probs(tmp_path, capsys):
    data = _write(
        tmp_path / "d.json",
        _dataset(
            [
                {
                    "id": "a",
                    "question": "Who?",
                    "answers": [{"text": "The cat", "answer_start": 0}],
                    "is_impossible": False,
                },
                {"id": "b", "question": "Why?", "answers": [], "is_impossible": True},
            ],
            "v2.0",
        ),
    )
    preds = _write(tmp_path / "p.json", {"a": "cat", "b": "mat"})
    odds = _write(tmp_path / "n.json", {"a": -2.0, "b": 3.0})
    assert m.main([data, preds, "--na-prob-file", odds]) == 0
    out = json.loads(capsys.readouterr().out)
    # b's odds 3.0 > 1.0 (default thresh): no answer, right.
    assert out["exact"] == 100.0 and out["HasAns_total"] == 1 and out["NoAns_total"] == 1
    assert out["best_f1"] == 100.0 and out["best_f1_thresh"] == -2.0


def test_command_line_refuses_files_it_cannot_score_in_one_line(tmp_path, capsys):
    """The arguments swapped (KeyError: 'data'), predictions of another dataset (one
    "Missing prediction" line per question, then ZeroDivisionError), or no question at all:
    one error line each, exit 1."""
    one = [{"id": "a", "question": "Who?", "answers": [{"text": "cat", "answer_start": 4}]}]
    data = _write(tmp_path / "d.json", _dataset(one, "v2.0"))
    preds = _write(tmp_path / "p.json", {"a": "cat"})
    other = _write(tmp_path / "o.json", {"zz": "cat", "yy": "dog"})
    empty = _write(tmp_path / "e.json", {"version": "v2.0", "data": []})
    cases = [
        ([preds, data], 'p.json: not a SQuAD dataset (no "data" list; the arguments are DATA'),
        ([data, data], "d.json: not a predictions file ({question id: answer text}; the argu"),
        ([data, other], "o.json: none of its 2 predictions answers a question of"),
        ([empty, preds], "e.json: no question to score"),
    ]
    for argv, said in cases:
        assert m.main(argv) == 1
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1, captured
        assert said in captured.err
    assert m.main([data, preds]) == 0


# === The real dev set ===


def test_real_dev_v1_gold_scores_100():
    with open(squad_file("dev-v1.1.json"), encoding="utf-8") as f:
        dataset = json.load(f)
    gold = m.gold_answers(dataset["data"])
    assert len(gold) == 10570
    first = {qid: answers[0] for qid, answers in gold.items()}
    assert m.evaluate_v1(gold, first) == {"exact_match": 100.0, "f1": 100.0}


def test_real_dev_v2_gold_scores_100():
    with open(squad_file("dev-v2.0.reconstructed.json"), encoding="utf-8") as f:
        dataset = json.load(f)
    assert m.is_v2(dataset)
    gold = m.gold_answers(dataset["data"])
    first = {qid: answers[0] if answers else "" for qid, answers in gold.items()}
    out = m.evaluate_v2(gold, first)
    assert out["exact"] == out["f1"] == 100.0
    assert out["HasAns_total"] + out["NoAns_total"] == len(gold)
