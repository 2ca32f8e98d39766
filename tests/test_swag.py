"""SWAG multiple choice (`model/tasks/swag.py`): the CSV reader, the four
`[CLS] context [SEP] ending [SEP]` sequences, and a few training steps."""

from __future__ import annotations

import csv
import json
import os
import random

import pytest

from model import tasks
from tests.helpers import (
    finetune_argv,
    make_init,
    run_evaluate,
    run_train,
    sentence,
    write_task_vocab,
)

HEADER = [
    "video-id",
    "fold-ind",
    "startphrase",
    "sent1",
    "sent2",
    "gold-source",
    "ending0",
    "ending1",
    "ending2",
    "ending3",
    "label",
]


def write_swag(path, n: int, seed: int = 0, labelled: bool = True) -> str:
    """SWAG's CSV: quoted fields with commas; the right ending holds a cue word."""
    rng = random.Random(seed)
    header = HEADER if labelled else HEADER[:-1]
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for i in range(n):
            label = rng.randint(0, 3)
            sent1, sent2 = sentence(rng) + ", then", sentence(rng, n=(1, 2))
            endings = [sentence(rng) + (" sun" if j == label else "") for j in range(4)]
            row = [f"lsmdc{i}", str(i), f"{sent1} {sent2}", sent1, sent2, "gold", *endings]
            writer.writerow(row + [str(label)] if labelled else row)
    return str(path)


def test_reader_reads_swag_csv(tmp_path):
    path = write_swag(tmp_path / "train.csv", 5)
    examples = tasks.get("swag").read(path)
    assert len(examples) == 5
    assert examples[0].context.endswith(", then")  # a quoted comma stayed in its field
    assert len(examples[0].endings) == 4 and examples[0].label in range(4)
    assert examples[2].source == f"{path}:4"
    test = tasks.get("swag").read(write_swag(tmp_path / "test.csv", 3, labelled=False))
    assert [e.label for e in test] == [None] * 3
    with pytest.raises(ValueError, match="test.csv:2: no label"):
        tasks.get("swag").evaluate(None, test, None, 16)


def test_reader_rejects_malformed_rows_with_file_and_line(tmp_path):
    path = tmp_path / "val.csv"
    rows = ["v,0,s,a,b,gold,e0,e1,e2,e3,1", "v,0,s,a,b,gold,e0,e1,e2,1"]
    path.write_text("\n".join([",".join(HEADER), *rows]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"val.csv:3: expected 11 comma-separated columns, found"):
        tasks.get("swag").read(str(path))
    path.write_text(",".join(HEADER) + "\nv,0,s,a,b,gold,e0,e1,e2,e3,4\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"val.csv:2: label '4' is not one of 0..3"):
        tasks.get("swag").read(str(path))
    path.write_text("video-id,sent1,label\nv,a,1\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"val.csv:1: the header lacks SWAG column"):
        tasks.get("swag").read(str(path))
    # A row is named by the line it starts on, whatever quoted newlines it or those before hold.
    for rows, line in (
        (['v,0,s,a,b,gold,"e0\nstill e0",e1,e2,e3,9'], 2),
        (['v,0,s,a,b,gold,"e0\nstill e0",e1,e2,e3,1', "v,0,s,a,b,gold,e0,e1,e2,e3,9"], 4),
    ):
        path.write_text("\n".join([",".join(HEADER), *rows]) + "\n", encoding="utf-8")
        with pytest.raises(ValueError, match=rf"val.csv:{line}: label '9' is not one of 0..3"):
            tasks.get("swag").read(str(path))


def test_each_choice_is_context_then_ending(tmp_path):
    from model.text.tokenizer import WordPieceTokenizer

    tokenizer = WordPieceTokenizer(write_task_vocab(tmp_path / "vocab.txt"))
    path = tmp_path / "val.csv"
    path.write_text(
        ",".join(HEADER) + "\nv,0,s,the cat,a dog,gold,sat,ran,ate fish,sang,2\n", encoding="utf-8"
    )
    task = tasks.get("swag")
    encoded = task.encode(task.read(str(path)), tokenizer, 10)
    assert encoded.x["token_ids"].shape == (1, 4, 10)
    decoded = [[tokenizer.vocabulary[i] for i in row if i] for row in encoded.x["token_ids"][0]]
    assert decoded[2] == ["[CLS]", "the", "cat", "[SEP]", "a", "dog", "ate", "fish", "[SEP]"]
    assert decoded[0][-3:] == ["dog", "sat", "[SEP]"]
    assert encoded.x["segment_ids"][0, 2].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1, 0]
    assert encoded.y.tolist() == [2]


def test_accuracy_is_the_share_of_examples_whose_highest_logit_is_the_right_ending(tmp_path):
    """A "model" that scores each choice by whether it holds the right ending's cue word
    ("sun", in no other text here) is always right; one that scores the other way, never."""
    import numpy as np

    from model.text.wordpiece import WordPieceTokenizer

    tokenizer = WordPieceTokenizer(write_task_vocab(tmp_path / "vocab.txt"))
    sun = list(tokenizer.vocabulary).index("sun")
    labels = [0, 3, 1, 2, 2, 0, 1, 3]
    endings = ["sat", "ran", "ate fish", "sang"]
    rows = [
        f"v,{i},s,the cat,a dog,gold,"
        + ",".join(e + (" sun" if j == label else "") for j, e in enumerate(endings))
        + f",{label}"
        for i, label in enumerate(labels)
    ]
    path = tmp_path / "val.csv"
    path.write_text("\n".join([",".join(HEADER), *rows]) + "\n", encoding="utf-8")
    task = tasks.get("swag")
    examples = task.read(str(path))

    def cue(sign):
        return lambda x: sign * (np.asarray(x["token_ids"]) == sun).any(-1).astype("float32")

    for sign, accuracy in ((1, 1.0), (-1, 0.0)):
        metrics = task.evaluate(cue(sign), examples, tokenizer, 16, batch_size=8)
        assert metrics == {"accuracy": accuracy, "examples": len(labels)}


def test_swag_trains_and_evaluates(tmp_path, tmp_path_factory, capsys):
    data = tmp_path / "swag"
    data.mkdir()
    write_swag(data / "train.csv", 8, seed=1)
    write_swag(data / "val.csv", 6, seed=2)
    init = make_init(tmp_path_factory.getbasetemp())
    output = tmp_path / "run"
    assert run_train(finetune_argv("swag", data, init, output, batch_size=4, seq_len=24)) == 0
    with open(os.path.join(output, "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["task"] == "swag" and 0.0 <= metrics["dev"]["accuracy"] <= 1.0
    with open(os.path.join(output, "config.json")) as f:
        info = json.load(f)
    assert info["task"] == "multiple_choice" and info["num_choices"] == 4
    capsys.readouterr()
    assert (
        run_evaluate(
            ["--task", "swag", "--model", str(output), "--data", os.path.join(data, "val.csv")]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed["accuracy"] == pytest.approx(metrics["dev"]["accuracy"])
    assert printed["examples"] == 6
