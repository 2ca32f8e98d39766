"""GLUE (`model/tasks/glue.py`): readers of the download_glue_data.py layout, metrics,
and a few training steps per task on small files in that layout."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

from model import tasks
from model.tasks.glue import TASKS as GLUE
from tests.helpers import SHARED_DATA, finetune_argv, make_init, run_evaluate, run_train, sentence

GLUE_DIR = os.path.join(SHARED_DATA, "glue")

# The columns each task's files have, as download_glue_data.py writes them
# (MNLI and QQP shortened to the columns that matter, plus one to ignore).
LAYOUTS = {
    "cola": None,  # no header: source, label, original label, sentence
    "sst2": ["sentence", "label"],
    "mrpc": ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
    "stsb": [
        "index",
        "genre",
        "filename",
        "year",
        "old_index",
        "source1",
        "source2",
        "sentence1",
        "sentence2",
        "score",
    ],
    "qqp": ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
    "mnli": ["index", "genre", "sentence1", "sentence2", "label1", "gold_label"],
    "qnli": ["index", "question", "sentence", "label"],
    "rte": ["index", "sentence1", "sentence2", "label"],
    "wnli": ["index", "sentence1", "sentence2", "label"],
}
LABELS = {
    "cola": "0 1",
    "sst2": "0 1",
    "mrpc": "0 1",
    "qqp": "0 1",
    "wnli": "0 1",
    "mnli": "contradiction entailment neutral",
    "qnli": "entailment not_entailment",
    "rte": "entailment not_entailment",
}


LABEL_COLUMNS = ("label", "Quality", "score", "is_duplicate", "gold_label", "label1")


def header_of(task: str, labelled: bool) -> list[str] | None:
    """The header row; test files lack the label columns (and MRPC/QQP's first is "index")."""
    if task == "cola":
        return None if labelled else ["index", "sentence"]
    if labelled:
        return LAYOUTS[task]
    return [
        "index" if c in ("Quality", "id") else c for c in LAYOUTS[task] if c not in LABEL_COLUMNS
    ]


def glue_row(task: str, i: int, rng: random.Random, labelled: bool = True) -> list[str]:
    """One row of `task`'s file; sentences carry an unbalanced quote now and then."""
    a, b = sentence(rng), sentence(rng)
    if i % 3 == 0:
        a = '" ' + a  # GLUE has these: a quoting CSV reader would swallow lines
    if task == "stsb":
        label = f"{rng.uniform(0, 5):.3f}"
    else:
        label = rng.choice(LABELS[task].split())
    if task == "cola":
        return ["gj04", label, "" if label == "1" else "*", a]
    values = {
        "sentence": a,
        "sentence1": a,
        "question1": a,
        "question": a,
        "#1 String": a,
        "sentence2": b,
        "question2": b,
        "#2 String": b,
        "label": label,
        "Quality": label,
        "score": label,
        "is_duplicate": label,
        "gold_label": label,
        "label1": label,
        "genre": "fiction",
        "index": str(i),
    }
    return [values.get(c, str(i)) for c in header_of(task, labelled)]


def write_glue(directory, task: str, train: int = 12, dev: int = 8, seed: int = 0) -> str:
    """`task`'s train, dev (MNLI: dev_matched and dev_mismatched) and unlabelled test files."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    devs = ["dev_matched", "dev_mismatched"] if task == "mnli" else ["dev"]
    for name, n in [("train", train), *[(d, dev) for d in devs], ("test", 4)]:
        labelled = name != "test"
        rows = [glue_row(task, i, rng, labelled) for i in range(n)]
        if task == "cola" and not labelled:
            rows = [[str(i), r[3]] for i, r in enumerate(rows)]
        header = header_of(task, labelled)
        # MRPC's files start with a byte-order mark.
        encoding = "utf-8-sig" if task == "mrpc" else "utf-8"
        with open(os.path.join(directory, f"{name}.tsv"), "w", encoding=encoding) as f:
            for row in ([header] if header else []) + rows:
                f.write("\t".join(row) + "\n")
    return str(directory)


# === Readers ===


@pytest.mark.parametrize("name", sorted(GLUE))
def test_reader_reads_the_glue_layout(tmp_path, name):
    data = write_glue(tmp_path / name, name, train=9)
    task = tasks.get(name)
    train, dev = task.files(data)
    assert os.path.basename(dev) == ("dev_matched.tsv" if name == "mnli" else "dev.tsv")
    examples = task.read(train)
    assert len(examples) == 9
    assert examples[0].text_a.startswith('" ')  # the unbalanced quote stayed in its row
    assert examples[0].source == f"{train}:{1 if name == 'cola' else 2}"
    assert all(e.label is not None for e in examples)
    if name in ("cola", "sst2"):
        assert all(e.text_b is None for e in examples)
    else:
        assert all(e.text_b for e in examples)
    if name == "stsb":
        assert all(isinstance(e.label, float) for e in examples)
    else:
        assert {e.label for e in examples} <= set(task.label_names)
        assert len(task.labels()) == len(task.label_names)
    test = task.read(os.path.join(data, "test.tsv"))
    assert len(test) == 4 and all(e.label is None for e in test)
    with pytest.raises(ValueError, match="test.tsv:2: no label"):
        task.encode(test, None, 16, training=True)


def test_mnli_has_matched_and_mismatched_dev_files(tmp_path):
    data = write_glue(tmp_path / "MNLI", "mnli")
    files = tasks.get("mnli").dev_files(data)
    assert {k: os.path.basename(v) for k, v in files.items()} == {
        "matched_": "dev_matched.tsv",
        "mismatched_": "dev_mismatched.tsv",
    }


def test_readers_reject_malformed_rows_with_file_and_line(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text(
        "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\ta\tb\n", encoding="utf-8"
    )
    with pytest.raises(ValueError, match=r"train.tsv:3: expected 4 tab-separated columns, found 3"):
        tasks.get("rte").read(str(path))
    path.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tmaybe\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train.tsv:2: label 'maybe' is not one of"):
        tasks.get("rte").read(str(path))
    path.write_text("gj04\t1\t\tok\ngj04\t2\t\tbad label\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train.tsv:2: label '2'"):
        tasks.get("cola").read(str(path))
    path.write_text("index\tsentence1\tsentence2\tscore\n0\ta\tb\thigh\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train.tsv:2: score 'high' is not a number"):
        tasks.get("stsb").read(str(path))
    path.write_text("index\tquestion\tlabel\n0\ta\tentailment\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train.tsv:1: the header lacks column\(s\) \['sentence"):
        tasks.get("qnli").read(str(path))


def test_encode_packs_pairs_as_the_paper(tmp_path):
    from model.text.tokenizer import WordPieceTokenizer
    from tests.helpers import write_task_vocab

    tokenizer = WordPieceTokenizer(write_task_vocab(tmp_path / "vocab.txt"))
    path = tmp_path / "dev.tsv"
    path.write_text(
        "index\tsentence1\tsentence2\tlabel\n0\tthe cat\ta dog ran\tnot_entailment\n",
        encoding="utf-8",
    )
    task = tasks.get("rte")
    encoded = task.encode(task.read(str(path)), tokenizer, 10)
    tokens = [tokenizer.vocabulary[i] for i in encoded.x["token_ids"][0]]
    assert tokens == ["[CLS]", "the", "cat", "[SEP]", "a", "dog", "ran", "[SEP]", "[PAD]", "[PAD]"]
    assert encoded.x["segment_ids"][0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 0, 0]
    assert encoded.x["padding_mask"][0].tolist() == [1] * 8 + [0, 0]
    assert encoded.y.tolist() == [1]


# === Metrics ===


def test_metrics_match_sklearn_and_scipy():
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import f1_score, matthews_corrcoef

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 50)
    logits = rng.normal(size=(50, 2))
    predictions = logits.argmax(-1)
    cola = tasks.get("cola").metrics(y, logits)
    assert cola["matthews_corr"] == pytest.approx(matthews_corrcoef(y, predictions))
    assert cola["accuracy"] == pytest.approx(np.mean(y == predictions))
    mrpc = tasks.get("mrpc").metrics(y, logits)
    assert mrpc["f1"] == pytest.approx(f1_score(y, predictions))
    scores, gold = rng.normal(size=(50, 1)), rng.uniform(0, 5, 50)
    stsb = tasks.get("stsb").metrics(gold, scores)
    assert stsb["pearson"] == pytest.approx(pearsonr(scores[:, 0], gold)[0])
    assert stsb["spearman"] == pytest.approx(spearmanr(scores[:, 0], gold)[0])
    # Constant predictions: defined as 0, not NaN.
    assert tasks.get("stsb").metrics(gold, np.ones((50, 1))) == {"pearson": 0.0, "spearman": 0.0}
    assert tasks.get("cola").metrics(y, np.tile([1.0, 0.0], (50, 1)))["matthews_corr"] == 0.0


# === A few training steps per task, then model.evaluate on a file ===

MAIN_METRICS = {
    "cola": "matthews_corr",
    "sst2": "accuracy",
    "mrpc": "f1",
    "stsb": "spearman",
    "qqp": "f1",
    "mnli": "matched_accuracy",
    "qnli": "accuracy",
    "rte": "accuracy",
    "wnli": "accuracy",
}


@pytest.mark.parametrize("name", sorted(GLUE))
def test_each_task_trains_and_evaluates(tmp_path, tmp_path_factory, name, capsys):
    data = write_glue(tmp_path / name, name, train=8, dev=6)
    init = make_init(tmp_path_factory.getbasetemp())
    output = tmp_path / "run"
    assert run_train(finetune_argv(name, data, init, output, batch_size=4, seq_len=16)) == 0
    with open(os.path.join(output, "metrics.json")) as f:
        metrics = json.load(f)
    assert tasks.get(name).main_metric == MAIN_METRICS[name]
    assert MAIN_METRICS[name] in metrics["dev"] and metrics["steps"] == 2
    if name == "mnli":
        assert "mismatched_accuracy" in metrics["dev"]
    dev = "dev_mismatched.tsv" if name == "mnli" else "dev.tsv"
    capsys.readouterr()
    assert (
        run_evaluate(["--task", name, "--model", str(output), "--data", os.path.join(data, dev)])
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    key = "accuracy" if name == "mnli" else MAIN_METRICS[name]
    expected = metrics["dev"]["mismatched_accuracy" if name == "mnli" else key]
    assert printed[key] == pytest.approx(expected)
    assert (
        run_evaluate(
            ["--task", name, "--model", str(output), "--data", os.path.join(data, "test.tsv")]
        )
        == 1
    )
    assert "no label" in capsys.readouterr().err


# === The real files (skipped where shared/data is absent) ===

REAL = {
    "cola": ("CoLA", 8551, 1043),
    "sst2": ("SST-2", 67349, 872),
    "mrpc": ("MRPC", 3668, 408),
    "stsb": ("STS-B", 5749, 1500),
    "rte": ("RTE", 2490, 277),
    "wnli": ("WNLI", 635, 71),
    "qnli": ("QNLI", None, 5463),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_glue_files_read_as_is(name):
    folder, n_train, n_dev = REAL[name]
    directory = os.path.join(GLUE_DIR, folder)
    if not os.path.isdir(directory):
        pytest.skip(f"{directory} not present")
    task = tasks.get(name)
    if n_train is not None:
        train = task.read(os.path.join(directory, "train.tsv"))
        assert len(train) == n_train and all(e.label is not None for e in train)
    dev = task.read(os.path.join(directory, "dev.tsv"))
    assert len(dev) == n_dev and all(e.label is not None for e in dev)
    test = task.read(os.path.join(directory, "test.tsv"))
    assert test and all(e.label is None for e in test)
