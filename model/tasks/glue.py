"""The GLUE tasks of the paper (section 4.1), read as `download_glue_data.py` lays them out.

    python -m model.train finetune --task mrpc --data ../shared/data/glue/MRPC \\
        --init runs/base --output runs/mrpc
    python -m model.evaluate --task mrpc --model runs/mrpc --data ../shared/data/glue/MRPC/dev.tsv

    python -m model.tasks.glue make-long-reviews --min-wordpieces 200 --max-wordpieces 400 \\
        --seed 0 --input ../shared/data/glue/SST-2/dev.tsv --output runs/sst2-long/dev.tsv
    python -m model.evaluate --task sst2 --model assets/models/sst2 --data runs/sst2-long/dev.tsv \\
        --long-texts truncate      # windows (the default) or truncate

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

Long texts. A single-text task (SST-2, CoLA) trains on short sentences, but a
review runs to paragraphs. `evaluate` (and the edge runtime's `classify`,
which imports this code, numpy only) reads a text longer than `seq_len` the
way SQuAD reads a long context: in overlapping windows (`text_windows`: half a
window apart, cut at sentence ends where one is near), whose predictions
`combine_windows` averages into one. `long_texts = "truncate"` (`model.evaluate
--long-texts truncate`) reads only the beginning, as training does. A text that
fits is one window, read exactly as before; sentence pairs are always cut.

SST-2 has no long texts. `make-long-reviews` above builds a check from its dev
set (`model/tasks/long_reviews.py`).
"""

from __future__ import annotations

import bisect
import csv
import dataclasses
import math
import os
import sys

import numpy as np

from model.io.files import limited_lines, line_end, reading
from model.tasks import dev_units
from model.tasks.base import (
    Encoded,
    Task,
    check_labelled,
    pack_rows,
    predict_in_batches,
    shown_header,
    softmax,
)


@dataclasses.dataclass
class PairExample:
    """One sentence (pair) and its label: a label name, a float for STS-B,
    or None in an unlabelled (test) file."""

    text_a: str
    text_b: str | None
    label: str | float | None
    source: str  # "path:line", for error messages
    index: str | None = None  # the file's "index" (QQP: "id") column, where it has one


def _rows(path: str):
    """(line number, cells) of a GLUE .tsv file."""
    # The GLUE files hold fields over 128 KiB in places (csv's default limit).
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    with reading(path):
        # utf-8-sig: MRPC's files start with a byte-order mark. Rows end at "\n" (as the
        # reference's tf.gfile reads them; a carriage return inside a text is a space), or
        # at "\r" in a file of old Mac line ends (an Excel-for-Mac export).
        with open(path, encoding="utf-8-sig", newline=line_end(path)) as f:
            lines = (line.rstrip("\r\n").replace("\r", " ") for line in limited_lines(f, path))
            reader = csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
            try:
                for row in reader:
                    if any(cell.strip() for cell in row):  # blank and whitespace-only lines
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
    # How `evaluate` reads a single text longer than seq_len: one of LONG_TEXTS
    # (the module docstring); sentence pairs are always cut.
    long_texts: str = "windows"
    # Labelled rows with the wrong number of columns are skipped with a warning, not
    # refused (QQP's official train.tsv has rows a question's newline broke in two).
    skip_broken_rows: bool = False

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
                f"{self.title} (found {shown_header(header)})"
            )
        a = header.index(self.text_a)
        b = header.index(self.text_b) if self.text_b is not None else None
        label = header.index(self.label_column) if self.label_column in header else None
        # The test files' own row ids: "index" (QQP's: "id")
        index = next((header.index(c) for c in ("index", "id") if c in header), None)
        width = len(header)
        if self.skip_broken_rows and label is not None:
            rows = self._whole_rows(path, rows, width)
        return [self._example(path, line, row, a, b, label, width, index) for line, row in rows]

    def _whole_rows(self, path: str, rows, width: int) -> list:
        """`rows` without those of another width than the header's, said in one warning (as
        GLUE's loaders in Hugging Face's `datasets` and TFDS filter QQP's corrupted rows).
        Only for labelled files: a test file's skipped row would be missing from a
        submission, so there it is refused."""
        import warnings

        from model.io.native_logs import ProjectWarning

        kept, broken = [], []
        for line, row in rows:
            (kept if len(row) == width else broken).append((line, row))
        if broken:
            lines = ", ".join(str(line) for line, _ in broken[:5])
            more = f" and {len(broken) - 5} more" if len(broken) > 5 else ""
            warnings.warn(
                f"{path}: skipped {len(broken)} row(s) without {width} tab-separated columns "
                f"(line(s) {lines}{more}): a text broken over two lines, as in "
                f"{self.title}'s official files",
                ProjectWarning,
                stacklevel=3,
            )
        return kept

    def _example(self, path, line, row, a, b, label, width, index=None) -> PairExample:
        source = f"{path}:{line}"
        if len(row) != width:
            raise ValueError(f"{source}: expected {width} tab-separated columns, found {len(row)}")
        return PairExample(
            row[a],
            row[b] if b is not None else None,
            self._label(row[label], source) if label is not None else None,
            source,
            row[index].strip() if index is not None else None,
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
        return Encoded(x=x, y=self._label_ids(examples))

    def _label_ids(self, examples: list[PairExample]) -> np.ndarray | None:
        """Label ids (float scores for a regression); None unless every example has one."""
        if not examples or any(e.label is None for e in examples):
            return None
        if self.label_names is None:
            return np.array([e.label for e in examples], dtype=np.float32)
        index = {name: i for i, name in enumerate(self.label_names)}
        ids = []
        for e in examples:  # examples made in Python may hold 1 for "1"
            label = e.label if isinstance(e.label, str) else str(e.label)
            if label not in index:
                raise ValueError(
                    f"{e.source}: label {e.label!r} is not one of {list(self.label_names)}"
                )
            ids.append(index[label])
        return np.array(ids, dtype=np.int32)

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
        """The task's metrics; a single text longer than `seq_len` is read as
        `long_texts` says (the module docstring). When some are, the metrics also
        count them (`long_examples`) and, read in windows, the model's inputs
        (`windows`)."""
        self.require_labels(examples, output_dir)
        y = self._label_ids(examples)
        scores, reading = self._scores(predict, examples, tokenizer, seq_len, batch_size)
        if output_dir is not None:
            self.write_predictions(output_dir, examples, scores)
        metrics = self.metrics(y, scores) if y is not None else {"labelled": False}
        if output_dir is not None and y is not None and self.label_names is not None:
            dev_units.write(output_dir, self.units(y, scores.argmax(-1)), metrics)
        return {**metrics, "examples": len(examples), **reading}

    def _scores(self, predict, examples, tokenizer, seq_len: int, batch_size: int):
        """((examples, labels) logits or long texts' combined probabilities, what
        `evaluate` adds about long texts)."""
        if self.long_texts not in LONG_TEXTS:
            raise ValueError(f"long_texts must be one of {LONG_TEXTS}, not {self.long_texts!r}")
        if self.text_b is not None:
            x = self.encode(examples, tokenizer, seq_len).x
            return np.asarray(predict_in_batches(predict, x, batch_size), dtype=np.float64), {}
        ids = tokenizer.encode_flat([e.text_a for e in examples])
        long = int((ids.lengths > seq_len - 2).sum())
        reading = {"long_examples": long} if long else {}
        if not long or self.long_texts == "truncate":  # what training reads
            x = pack_rows(tokenizer, ids, None, seq_len)
            scores = np.asarray(predict_in_batches(predict, x, batch_size), dtype=np.float64)
        else:
            windows = encode_windows(tokenizer, ids.rows(), seq_len)
            logits = predict_in_batches(predict, windows.x, batch_size)
            # Probabilities, whose argmax the metrics read as they read logits.
            scores = combine_windows(
                logits, windows.owner, windows.weights, len(examples), self.label_names is None
            )
            reading["windows"] = len(windows.owner)
        return scores, reading

    # === GLUE's submission files ===

    label_field = "label"
    predictions_file = "GLUE's submission file (python -m model.evaluate ... DIR/<TASK>.tsv)"
    # The task's own spelling ("SST-2"): its messages' and its submission file's name
    # (gluebenchmark.com's, for GLUE's test sets); a task without one is named in capitals.
    submission: str | None = None

    @property
    def title(self) -> str:
        return self.submission or self.name.upper()

    def submission_name(self, path: str) -> str:
        return self.title

    def write_predictions(self, directory: str, examples: list[PairExample], scores) -> str:
        """`directory`/<TASK>.tsv as GLUE's submission takes it: an `index` and a
        `prediction` column, the label as the task's files write it (a score with 3
        decimals for STS-B), in the examples' order; the index is the file's own
        column where it has one, else the row's number. A labelled file's predictions
        are named after it too (SST-2.dev.tsv), so that they are never taken for a
        submission. Returns the path."""
        from model.io.files import atomic_open

        path = examples[0].source.rpartition(":")[0] if examples else ""
        name = self.submission_name(path)
        if self._label_ids(examples) is not None:
            name += "." + os.path.splitext(os.path.basename(path))[0]
        target = os.path.join(directory, name + ".tsv")
        if self.label_names is None:
            written = [f"{s:.3f}" for s in np.asarray(scores)[:, 0]]
        else:
            written = [self.label_names[i] for i in np.asarray(scores).argmax(-1)]
        os.makedirs(directory, exist_ok=True)
        if os.path.exists(target):
            print(f"note: replacing {target}", file=sys.stderr)
        with atomic_open(target, "w", encoding="utf-8") as f:
            f.write("index\tprediction\n")
            for i, (e, label) in enumerate(zip(examples, written)):
                f.write(f"{e.index if e.index is not None else i}\t{label}\n")
        return target

    def metrics(self, y: np.ndarray, logits: np.ndarray) -> dict:
        """The task's metrics of (num_examples, num_labels) logits (or anything with
        their argmax: long texts' combined probabilities) against label ids."""
        return {"accuracy": accuracy(y, logits.argmax(-1))}

    def units(self, y: np.ndarray, predictions: np.ndarray) -> dict:
        """The metrics that are sums over the examples, by example
        (`model/tasks/dev_units.py`): each one's accuracy."""
        return {"accuracy": dev_units.mean(np.asarray(y) == predictions)}

    def majority_metrics(self, train: list[PairExample], dev: list[PairExample]) -> dict | None:
        """The metrics of answering the training set's most frequent label for every dev
        example: what a model that learned nothing from the text scores (MRPC's F1 81.22,
        every pair a paraphrase). None for a regression, or a dev set without labels."""
        if self.label_names is None or self._label_ids(dev) is None:
            return None
        labels = [e.label for e in train]
        most = max(self.label_names, key=labels.count)  # ties to the first label
        logits = np.zeros((len(dev), len(self.label_names)))
        logits[:, self.label_names.index(most)] = 1.0
        return self.metrics(self._label_ids(dev), logits)


# === Long texts: windows ===

LONG_TEXTS = ("windows", "truncate")
# WordPieces after which a sentence ends: windows prefer to start and end there.
SENTENCE_ENDS = (".", "!", "?")


@dataclasses.dataclass
class Windows:
    """The windows of many texts, as model inputs.

    x: {"token_ids", "segment_ids", "padding_mask"}, each (num_windows, seq_len) int32:
        `[CLS] window [SEP]`.
    owner: (num_windows,) int: the text each window reads.
    spans: (num_windows, 2) int: its [start, end) in that text's WordPieces.
    weights: (num_windows,) float: its WordPieces (end - start, at least 1), its say in
        the verdict.
    """

    x: dict[str, np.ndarray]
    owner: np.ndarray
    spans: np.ndarray
    weights: np.ndarray


def text_windows(ids, room: int, stride: int | None = None, ends=()) -> list[tuple[int, int]]:
    """[start, end) of the windows that read `ids` (a text's WordPieces), at most `room`
    WordPieces each (a model's length less [CLS] and [SEP]).

    A text that fits is one window, (0, len(ids)): read as it always was. A longer one is
    read as SQuAD reads a long context: windows start `stride` WordPieces apart (by
    default half a window, so every WordPiece but those of the first and last stride is
    read twice, with more context on one side each time) and the last one ends at the
    text's end. Sentence ends (WordPiece ids in `ends`: ".", "!", "?") are preferred: a
    window ends after the last one in its second half (and past the previous window's end),
    and the next starts after the last one within `stride` of its start; so where
    sentences are shorter than half a window, windows mostly hold whole sentences, the unit
    SST-2 trains on. Windows start and end later each time, and each starts at or before
    the previous one's end, so every WordPiece is read.

    Example:
    >>> text_windows(list(range(10)), room=4)
    [(0, 4), (2, 6), (4, 8), (6, 10)]
    """
    n = len(ids)
    if room < 1:
        raise ValueError(f"a window of {room} WordPieces reads nothing")
    if n <= room:
        return [(0, n)]
    stride = max(1, room // 2) if stride is None else stride
    if not 1 <= stride <= room:
        raise ValueError(f"stride must be from 1 to the window's {room} WordPieces, not {stride}")
    ends = set(ends)
    after = [k + 1 for k, i in enumerate(ids) if i in ends]  # where a new sentence starts

    def last_boundary(low: int, high: int) -> int | None:  # the last one in [low, high]
        k = bisect.bisect_right(after, high)
        return after[k - 1] if k and after[k - 1] >= low else None

    out, start, before = [], 0, 0  # before: where the previous window ended
    while True:
        end = min(start + room, n)
        if end < n:  # past the previous end, so that no window lies inside another
            end = last_boundary(max(start + room // 2, before) + 1, end) or end
        out.append((start, end))
        if end == n:
            return out
        step = start + stride
        start, before = min(last_boundary(start + 1, step) or step, end), end


def sentence_end_ids(tokenizer) -> set[int]:
    """The ids of `SENTENCE_ENDS` in the tokenizer's vocabulary."""
    return {tokenizer.token_to_id[t] for t in SENTENCE_ENDS if t in tokenizer.token_to_id}


def encode_windows(tokenizer, rows: list[list[int]], seq_len: int, stride=None) -> Windows:
    """The `text_windows` of every text (`rows`: their WordPiece ids) as `[CLS] window
    [SEP]` inputs of length `seq_len`."""
    ends = sentence_end_ids(tokenizer)
    owner, spans, pieces = [], [], []
    for k, ids in enumerate(rows):
        for start, end in text_windows(ids, seq_len - 2, stride, ends):
            owner.append(k)
            spans.append((start, end))
            pieces.append(ids[start:end])
    spans = np.array(spans, dtype=np.int64).reshape(-1, 2)
    return Windows(
        x=pack_rows(tokenizer, pieces, None, seq_len),
        owner=np.array(owner, dtype=np.int64),
        spans=spans,
        # An empty text's one window still counts (it is read as [CLS] [SEP], as before).
        weights=np.maximum(spans[:, 1] - spans[:, 0], 1).astype(np.float64),
    )


def combine_windows(logits, owner, weights, count: int, regression: bool = False) -> np.ndarray:
    """One prediction per text from its windows' `logits` (num_windows, labels): the mean
    of the windows' probabilities (softmax), each window weighted by `weights` (its
    WordPieces); for a regression (one output) the weighted mean of the values.
    Returns (count, labels): row k combines the windows whose `owner` is k.

    Probabilities rather than logits: a mean of logits lets one window's confidence
    outvote the rest (logits are unbounded), while a probability is at most 1, so each
    window's say is its share of the text. Weighted by WordPieces: the short last window
    of a text would otherwise count as much as a full one for a few words. WordPieces in
    two windows are counted twice; with windows half a window apart, that is nearly all
    of them, so no part of the text counts much more than another.
    """
    logits = np.asarray(logits, dtype=np.float64).reshape(len(owner), -1)
    if regression:
        scores = logits
    else:
        scores = softmax(logits)
    weights = np.asarray(weights, dtype=np.float64)
    total = np.bincount(owner, weights=weights, minlength=count)  # (count,)
    summed = np.stack(
        [np.bincount(owner, weights=weights * s, minlength=count) for s in scores.T], -1
    )  # (count, labels)
    with np.errstate(invalid="ignore", divide="ignore"):  # a text without windows: NaN
        return summed / total[:, None]


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
    submission = "CoLA"
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
    submission = "SST-2"
    display_names = ("negative", "positive")
    text_a, text_b = "sentence", None


class _F1Task(GlueTask):
    main_metric = "f1"

    def metrics(self, y, logits):
        predictions, positive = logits.argmax(-1), self.positive_id
        return {"f1": f1(y, predictions, positive), "accuracy": accuracy(y, predictions)}

    def units(self, y, predictions):
        gold, said = np.asarray(y) == self.positive_id, np.asarray(predictions) == self.positive_id
        f1_units = dev_units.f1(gold & said, said & ~gold, gold & ~said)
        return {**super().units(y, predictions), "f1": f1_units}

    @property
    def positive_id(self) -> int:
        return self.label_names.index(self.positive_label)


class Mrpc(_F1Task):
    name = "mrpc"
    submission = "MRPC"
    display_names = ("not_equivalent", "equivalent")
    text_a, text_b, label_column = "#1 String", "#2 String", "Quality"


class Qqp(_F1Task):
    name = "qqp"
    submission = "QQP"
    display_names = ("not_duplicate", "duplicate")
    text_a, text_b, label_column = "question1", "question2", "is_duplicate"
    skip_broken_rows = True


class Stsb(GlueTask):
    name = "stsb"
    submission = "STS-B"
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

    def submission_name(self, path: str) -> str:
        """MNLI-m, MNLI-mm or AX (the diagnostic set), as the file or its folder is named
        (GLUE's MNLI/test_mismatched.tsv, diagnostic/diagnostic.tsv; the datasets
        library's mnli_mismatched/test.tsv, ax/test.tsv)."""
        names = [os.path.basename(p).lower() for p in (path, os.path.dirname(path))]
        if any(n.startswith(("diagnostic", "ax")) for n in names):
            return "AX"
        return "MNLI-mm" if any("mismatched" in n for n in names) else "MNLI-m"

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
    submission = "QNLI"
    text_a, text_b = "question", "sentence"
    label_names = ("entailment", "not_entailment")


class Rte(GlueTask):
    name = "rte"
    submission = "RTE"
    label_names = ("entailment", "not_entailment")


class Wnli(GlueTask):
    name = "wnli"
    submission = "WNLI"
    display_names = ("not_entailment", "entailment")


TASKS = {task.name: task for task in (Cola, Sst2, Mrpc, Stsb, Qqp, Mnli, Qnli, Rte, Wnli)}


def reads_pairs(task_name) -> bool | None:
    """Whether the GLUE task named `task_name` reads sentence pairs (MNLI, MRPC...) rather than
    one text (SST-2, CoLA); None for a name of no GLUE task."""
    task = TASKS.get(str(task_name))
    return None if task is None else task.text_b is not None


def meanings(task_name) -> dict[str, str]:
    """{a label as the GLUE task `task_name`'s files write it ("0"): what it means
    ("negative")}; {} for a name of no GLUE task or one whose labels are words already."""
    task = TASKS.get(str(task_name))
    if task is None or not task.display_names:
        return {}
    return dict(zip(task.label_names, task.display_names))


def main(argv=None) -> int:
    """`python -m model.tasks.glue make-long-reviews ...`: the command keeps its documented
    spelling; its code is `model/tasks/long_reviews.py`'s."""
    from model.tasks import long_reviews

    return long_reviews.main(argv)


if __name__ == "__main__":
    sys.exit(main())
