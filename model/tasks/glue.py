"""The GLUE tasks of the paper (section 4.1), read as `download_glue_data.py` lays them out.

    python -m model.train finetune --task mrpc --data ../shared/data/glue/MRPC \\
        --init runs/base --output runs/mrpc
    python -m model.evaluate --task mrpc --model runs/mrpc --data ../shared/data/glue/MRPC/dev.tsv

Every task is `[CLS] A [SEP] (B [SEP])` -> pooled output -> dropout -> one
Dense (`model.heads.classifier.BertClassifier`), as in the paper; STS-B is a
regression (one output, mean squared error).

    task  dev file(s) beside train.tsv   columns (by header name)            metrics
    cola  dev.tsv (no header)            3 = sentence, 1 = label             matthews_corr, accuracy
    sst2  dev.tsv                        sentence, label                     accuracy
    mrpc  dev.tsv                        #1 String, #2 String, Quality       f1, accuracy
    stsb  dev.tsv                        sentence1, sentence2, score         spearman, pearson
    qqp   dev.tsv                        question1, question2, is_duplicate  f1, accuracy
    mnli  dev_matched.tsv                sentence1, sentence2, gold_label    matched_accuracy,
          dev_mismatched.tsv                                                 mismatched_accuracy
    qnli  dev.tsv                        question, sentence, label           accuracy
    rte   dev.tsv                        sentence1, sentence2, label         accuracy
    wnli  dev.tsv                        sentence1, sentence2, label         accuracy

Files are tab-separated with no quoting (`csv.QUOTE_NONE`): GLUE sentences
contain unbalanced quotes that a quoting reader would run across lines. A
row with the wrong number of columns or an unknown label stops the reader
with its file and line. Test files (no label column) are read, and refused
by `encode(..., training=True)` and `evaluate` with a clear message.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import sys

import numpy as np

from model.io.files import limited_lines, reading
from model.tasks.base import Encoded, Task, check_labelled, pack_rows, predict_in_batches


@dataclasses.dataclass
class PairExample:
    """One sentence (pair) and its label: a label name, a float for STS-B,
    or None in an unlabelled (test) file."""

    text_a: str
    text_b: str | None
    label: str | float | None
    source: str  # "path:line", for error messages


def _rows(path: str):
    """(line number, cells) of a GLUE .tsv file."""
    # The GLUE files hold fields over 128 KiB in places (csv's default limit).
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    with reading(path):
        # utf-8-sig: MRPC's files start with a byte-order mark.
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(limited_lines(f, path), delimiter="\t", quoting=csv.QUOTE_NONE)
            try:
                for row in reader:
                    if row:
                        yield reader.line_num, row
            except csv.Error as e:
                raise ValueError(f"{path}:{reader.line_num}: {e}") from None


class GlueTask(Task):
    """A GLUE sentence (pair) task; subclasses only fill in the class attributes.

    Args (class attributes):
        text_a, text_b, label_column: header names of the columns read.
        label_names: labels in output order; None makes it a regression.
        positions: (text_a, text_b, label, number of columns) for files
            without a header row (CoLA's train and dev files).
    """

    head = "classifier"
    train_file = "train.tsv"
    dev_file = "dev.tsv"
    default_seq_len = 128
    default_learning_rate = 2e-5
    text_a: str = "sentence1"
    text_b: str | None = "sentence2"
    label_column: str = "label"
    label_names: tuple[str, ...] | None = ("0", "1")
    # What the labels mean, in the same order, for id2label (a model's
    # outputs, the app's bars); the file keeps its own values (label_names).
    display_names: tuple[str, ...] | None = None
    positions: tuple | None = None
    # Which label counts as positive for F1 (MRPC, QQP).
    positive_label: str = "1"

    def labels(self) -> list[str] | None:
        names = self.display_names or self.label_names
        return list(names) if names is not None else None

    # === Data ===

    def read(self, path: str) -> list[PairExample]:
        rows = _rows(path)
        first = next(rows, None)
        if first is None:
            return []
        if self.positions is not None and first[1][0] != "index":
            # Header-less (CoLA): columns by position, the first row is data.
            a, b, label, width = self.positions
            return [
                self._example(path, line, row, a, b, label, width)
                for line, row in _chain(first, rows)
            ]
        line, header = first
        missing = [c for c in (self.text_a, self.text_b) if c is not None and c not in header]
        if missing:
            raise ValueError(
                f"{path}:{line}: the header lacks column(s) {missing} of "
                f"{self.name.upper()} (found {header})"
            )
        a = header.index(self.text_a)
        b = header.index(self.text_b) if self.text_b is not None else None
        label = header.index(self.label_column) if self.label_column in header else None
        return [self._example(path, line, row, a, b, label, len(header)) for line, row in rows]

    def _example(self, path, line, row, a, b, label, width) -> PairExample:
        source = f"{path}:{line}"
        if len(row) != width:
            raise ValueError(f"{source}: expected {width} tab-separated columns, found {len(row)}")
        return PairExample(
            row[a],
            row[b] if b is not None else None,
            self._label(row[label], source) if label is not None else None,
            source,
        )

    def _label(self, value: str, source: str):
        value = value.strip()
        if self.label_names is None:
            try:
                score = float(value)
            except ValueError:
                raise ValueError(
                    f"{source}: {self.label_column} {value!r} is not a number"
                ) from None
            if not math.isfinite(score):
                raise ValueError(f"{source}: {self.label_column} {value!r} is not finite")
            return score
        if value not in self.label_names:
            raise ValueError(f"{source}: label {value!r} is not one of {list(self.label_names)}")
        return value

    def encode(
        self, examples: list[PairExample], tokenizer, seq_len: int, training: bool = False
    ) -> Encoded:
        if training:
            check_labelled(examples)
        ids_a = tokenizer.encode_flat([e.text_a for e in examples])
        ids_b = (
            tokenizer.encode_flat([e.text_b for e in examples]) if self.text_b is not None else None
        )
        x = pack_rows(tokenizer, ids_a, ids_b, seq_len)
        y = None
        if examples and all(e.label is not None for e in examples):
            if self.label_names is None:
                y = np.array([e.label for e in examples], dtype=np.float32)
            else:
                index = {name: i for i, name in enumerate(self.label_names)}
                y = np.array([index[e.label] for e in examples], dtype=np.int32)
        return Encoded(x=x, y=y)

    # === Model ===

    def build_model(self, encoder, dropout: float = 0.1):
        from model.heads.classifier import BertClassifier

        labels = self.labels()
        return BertClassifier(
            encoder,
            num_labels=len(labels) if labels else 1,
            dropout=dropout,
            id2label=dict(enumerate(labels)) if labels else None,
        )

    def loss(self):
        import keras

        if self.label_names is None:
            return keras.losses.MeanSquaredError()
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    # === Metric ===

    def evaluate(
        self,
        predict,
        examples: list[PairExample],
        tokenizer,
        seq_len: int,
        batch_size: int = 64,
        output_dir: str | None = None,
    ) -> dict:
        check_labelled(examples)
        encoded = self.encode(examples, tokenizer, seq_len)
        logits = np.asarray(predict_in_batches(predict, encoded.x, batch_size), dtype=np.float64)
        return {**self.metrics(encoded.y, logits), "examples": len(examples)}

    def metrics(self, y: np.ndarray, logits: np.ndarray) -> dict:
        """The task's metrics of (num_examples, num_labels) logits against label ids."""
        return {"accuracy": accuracy(y, logits.argmax(-1))}


def _chain(first, rest):
    yield first
    yield from rest


def accuracy(y, predictions) -> float:
    return float(np.mean(np.asarray(y) == np.asarray(predictions))) if len(y) else 0.0


def f1(y, predictions, positive: int) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(y, predictions, pos_label=positive, average="binary", zero_division=0))


# === The tasks ===


class Cola(GlueTask):
    name = "cola"
    display_names = ("unacceptable", "acceptable")
    main_metric = "matthews_corr"
    text_a, text_b = "sentence", None
    positions = (3, None, 1, 4)  # source, label, original label, sentence

    def metrics(self, y, logits):
        from sklearn.metrics import matthews_corrcoef

        predictions = logits.argmax(-1)
        # sklearn gives 0.0 (not NaN) when either side is constant.
        return {
            "matthews_corr": float(matthews_corrcoef(y, predictions)),
            "accuracy": accuracy(y, predictions),
        }


class Sst2(GlueTask):
    name = "sst2"
    display_names = ("negative", "positive")
    text_a, text_b = "sentence", None


class _F1Task(GlueTask):
    main_metric = "f1"

    def metrics(self, y, logits):
        predictions = logits.argmax(-1)
        positive = self.label_names.index(self.positive_label)
        return {"f1": f1(y, predictions, positive), "accuracy": accuracy(y, predictions)}


class Mrpc(_F1Task):
    name = "mrpc"
    display_names = ("not_equivalent", "equivalent")
    text_a, text_b, label_column = "#1 String", "#2 String", "Quality"


class Qqp(_F1Task):
    name = "qqp"
    display_names = ("not_duplicate", "duplicate")
    text_a, text_b, label_column = "question1", "question2", "is_duplicate"


class Stsb(GlueTask):
    name = "stsb"
    main_metric = "spearman"
    label_column = "score"
    label_names = None

    def metrics(self, y, logits):
        from scipy.stats import pearsonr, spearmanr

        scores = logits[:, 0]
        if len(y) < 2 or np.ptp(scores) == 0 or np.ptp(y) == 0:
            # Undefined (NaN) for a constant side; 0.0 keeps the JSON valid
            # and ranks such a model as uncorrelated, as MCC does.
            return {"pearson": 0.0, "spearman": 0.0}
        return {
            "pearson": float(pearsonr(scores, y)[0]),
            "spearman": float(spearmanr(scores, y)[0]),
        }


class Mnli(GlueTask):
    name = "mnli"
    main_metric = "matched_accuracy"
    dev_file = "dev_matched.tsv"
    label_column = "gold_label"
    # The order of Google's run_classifier.py and Hugging Face's checkpoints.
    label_names = ("contradiction", "entailment", "neutral")

    def dev_files(self, data: str) -> dict[str, str]:
        _, matched = self.files(data)
        if matched is None:
            return {}
        mismatched = os.path.join(os.path.dirname(matched), "dev_mismatched.tsv")
        files = {"matched_": matched}
        if os.path.isfile(mismatched):
            files["mismatched_"] = mismatched
        return files


class Qnli(GlueTask):
    name = "qnli"
    text_a, text_b = "question", "sentence"
    label_names = ("entailment", "not_entailment")


class Rte(GlueTask):
    name = "rte"
    label_names = ("entailment", "not_entailment")


class Wnli(GlueTask):
    name = "wnli"
    display_names = ("not_entailment", "entailment")


TASKS = {task.name: task for task in (Cola, Sst2, Mrpc, Stsb, Qqp, Mnli, Qnli, Rte, Wnli)}
