"""`Task`: what one fine-tuning task of the paper needs, behind one interface.

A task reads its standard file format, turns examples into model inputs,
builds its thin head over the shared encoder, and scores predictions with
its official metric. `model.training.finetune` (training) and `model.evaluate`
(scoring a model directory or, later, an exported bundle) only talk to this
interface, so a new task is one new file in `model/tasks/`.

    predict(x: dict[str, np.ndarray]) -> dict[str, np.ndarray] | np.ndarray

is how a task sees a model: any callable, so a Keras model and a LiteRT
bundle are evaluated by the same code.
"""

from __future__ import annotations

import abc
import dataclasses
import os
from collections.abc import Callable
from typing import Any

import numpy as np

Predict = Callable[[dict], Any]


@dataclasses.dataclass
class Encoded:
    """Model-ready arrays for a list of examples.

    x: inputs by name, each (num_features, ...) int32.
    y: labels (or a dict of labels by output name); None when unlabelled.
    meta: whatever `evaluate` needs to map feature predictions back to
        examples (e.g. QA windows, word offsets).
    """

    x: dict[str, np.ndarray]
    y: Any = None
    meta: Any = None
    sample_weight: Any = None

    def __len__(self) -> int:
        return len(next(iter(self.x.values())))


class Task(abc.ABC):
    """One fine-tuning task. Subclasses set the class attributes and the methods."""

    name: str = ""
    head: str = "classifier"  # model_dir task: classifier | token_classifier | ...
    main_metric: str = "accuracy"  # the dev metric that picks the best checkpoint
    default_seq_len: int = 128
    default_learning_rate: float = 2e-5
    # File names inside a `--data` directory; the default `files()` reads them.
    train_file: str = ""
    dev_file: str = ""
    other_train_names: tuple[str, ...] = ()  # names a subclass's `files()` also finds

    # === Data ===

    @abc.abstractmethod
    def read(self, path: str) -> list:
        """Examples of one file in the task's standard format. Malformed input
        raises ValueError naming the file and line."""

    def read_gold(self, path: str) -> list:
        """Examples of a file that is only scored (a dev or test file), which may be read
        more leniently than a training file where the official scorer is (SQuAD's scripts
        never read `answer_start`); by default `read`."""
        return self.read(path)

    def files(self, data: str) -> tuple[str, str | None]:
        """(train file, dev file) for `--data` (a directory or a train file).

        The default looks for `train_file` and `dev_file` in the directory
        (or beside the given train file); the dev file is optional.
        """
        if not self.train_file:
            raise NotImplementedError(f"task {self.name!r} does not say where its files are")
        if os.path.isdir(data):
            train = os.path.join(data, self.train_file)
            folder = data
        elif os.path.isfile(data):
            train, folder = data, os.path.dirname(os.path.abspath(data))
        else:
            raise FileNotFoundError(f"{data}: no such file or directory")
        if not os.path.isfile(train):
            names = [self.train_file, *self.other_train_names]
            raise FileNotFoundError(
                f"{data}: no training file for task {self.name!r}: looked for {names} (or pass "
                f"the training file itself as --data)"
            )
        dev = os.path.join(folder, self.dev_file) if self.dev_file else None
        if dev is None or not os.path.isfile(dev) or os.path.samefile(dev, train):
            dev = None
        return train, dev

    def dev_files(self, data: str) -> dict[str, str]:
        """Dev files by metric-name prefix. Most tasks have one (prefix "");
        MNLI has two ("matched_", "mismatched_"), and `main_metric` names the
        prefixed metric that picks the best checkpoint."""
        _, dev = self.files(data)
        return {"": dev} if dev else {}

    def labels(self) -> list[str] | None:
        """Label names in output order; None for regression or span tasks."""
        return None

    def read_as(self, info: dict) -> None:
        """Reads files as the model of `info` (its config.json or bundle.json fields) was
        fine-tuned to; most tasks have one way of reading (CoNLL-2003's has two)."""
        return None

    # What `evaluate` writes for an unlabelled file under --predictions-dir (GLUE's and
    # CoNLL-2003's test files); None: such a file is refused.
    predictions_file: str | None = None
    # The examples' attribute that holds the label; None: the task's reader refuses an
    # unlabelled file itself (SQuAD's) or its evaluate checks (SWAG's).
    label_field: str | None = None

    def unlabelled(self, examples: list) -> bool:
        """Whether any of `examples` lacks its label (a test file's)."""
        return self.label_field is not None and any(
            getattr(e, self.label_field) is None for e in examples
        )

    def require_labels(self, examples: list, output_dir: str | None) -> None:
        """Refuses unlabelled examples unless the task writes predictions for them to
        `output_dir` (the user is told how when it can)."""
        if self.label_field is None or (output_dir is not None and self.predictions_file):
            return
        hint = (
            f"; --predictions-dir DIR writes its predictions as {self.predictions_file} instead"
            if self.predictions_file
            else ""
        )
        check_labelled(examples, self.label_field, hint=hint)

    @abc.abstractmethod
    def encode(self, examples: list, tokenizer, seq_len: int, training: bool = False) -> Encoded:
        """Model inputs (and labels) for `examples`."""

    # === Model ===

    @abc.abstractmethod
    def build_model(self, encoder, dropout: float = 0.1):
        """The head over `encoder`, a `model.checkpoints.model_dir`-known task model.

        `encoder` is a `BertEncoder`, or anything with its inputs, outputs, `config` and
        `dtype_policy`: fine-tuning's `--bilstm` passes a `BertBiLstmEncoder` over one
        (model/heads/bilstm_encoder.py), so the task builds its usual head over a BiLSTM.
        """

    @abc.abstractmethod
    def loss(self):
        """The Keras loss (or dict of losses by output name)."""

    # === Metric ===

    @abc.abstractmethod
    def evaluate(
        self,
        predict: Predict,
        examples: list,
        tokenizer,
        seq_len: int,
        batch_size: int = 64,
        output_dir: str | None = None,
    ) -> dict:
        """Runs `predict` over `examples` and returns the task's metrics
        (floats, computed as the official script does)."""


def ordered_labels(id2label: dict) -> list[str]:
    """A config's `id2label` ({"0": name, ...}, keys as JSON writes them) as a list by id."""
    return [str(id2label[k]) for k in sorted(id2label, key=int)]


def shown_header(header: list[str], limit: int = 200) -> str:
    """A header row as an error shows it: cut at `limit` characters (a file of another
    task, e.g. a one-line JSON, would print whole)."""
    text = repr(header)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def check_labelled(examples: list, what: str = "label", hint: str = "") -> None:
    """Refuses examples without labels (GLUE test files, for one), naming the
    first; each example has `.label` (or `.tags`) and `.source` ("path:line").
    `hint` ends the message (what to do instead)."""
    if not examples:
        raise ValueError("no examples to evaluate")
    for e in examples:
        if getattr(e, what) is None:
            raise ValueError(
                f"{e.source}: no {what}: this file is unlabelled (a test set's file, as "
                f"GLUE's test.tsv or CoNLL-2003's unlabelled test), so it cannot be trained on "
                f"or evaluated{hint}"
            )


def encode_texts(tokenizer, texts: list[str], chunk: int = 4096) -> list[list[int]]:
    """`tokenizer.encode` over a long list, `chunk` texts per TensorFlow call."""
    out = []
    for i in range(0, len(texts), chunk):
        out.extend(tokenizer.encode(list(texts[i : i + chunk])))
    return out


def pack_rows(tokenizer, firsts: list, seconds: list | None, seq_len: int) -> dict[str, np.ndarray]:
    """`tokenizer.pack_batch` as model inputs: {"token_ids", "segment_ids", "padding_mask"},
    each (len(firsts), seq_len) int32 (`seconds` may be None, or hold None for single rows)."""
    return dict(
        zip(
            ("token_ids", "segment_ids", "padding_mask"),
            tokenizer.pack_batch(firsts, seconds, seq_len),
        )
    )


# Batches are cut to their longest row rounded up to this many tokens: few
# distinct shapes (so few traces of a compiled predict), little padding.
LENGTH_MULTIPLE = 16
# What a sequence output holds at the positions a trimmed batch did not compute.
PADDED_LOGIT = -1e4


def trimmed_length(padding_mask: np.ndarray, multiple: int = LENGTH_MULTIPLE) -> int:
    """The longest row of `padding_mask` (..., seq_len), rounded up to
    `multiple` and capped at seq_len."""
    seq_len = padding_mask.shape[-1]
    longest = int(np.asarray(padding_mask).reshape(-1, seq_len).sum(-1).max(initial=1))
    return min(seq_len, -(-max(longest, 1) // multiple) * multiple)


def softmax(x) -> np.ndarray:
    """Softmax over the last axis, in float64 (logits of a task head, a list of scores)."""
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def predict_in_batches(
    predict: Predict, x: dict[str, np.ndarray], batch_size: int, sequence_outputs: bool = False
):
    """Concatenated outputs of `predict` over `x`, `batch_size` rows at a time.

    Rows are batched in order of length and each batch is cut to its longest
    row (`trimmed_length`): in float32 the padding a batch leaves out changes no
    output at the real tokens (a dynamic or int8 LiteRT file quantizes activations
    over the whole input, so there it moves them slightly), and short texts then
    cost what they are, not what `seq_len` is. The outputs come back in the order of `x`. With
    `sequence_outputs` (token-level heads: every output is (batch, length,
    ...)), every padding position holds `PADDED_LOGIT`, those the batch computed
    too, so that no output depends on the batch a row fell in (a QA head's
    logits at padding once took places in SQuAD's n-best starts and ends).
    """
    n = len(next(iter(x.values())))
    if n == 0:
        return {}
    seq_len = x["padding_mask"].shape[-1]
    lengths = np.asarray(x["padding_mask"]).reshape(n, -1, seq_len).sum(-1).max(-1)
    order = np.argsort(lengths, kind="stable")

    def run(rows):
        length = trimmed_length(x["padding_mask"][rows])
        out = predict({k: v[rows][..., :length] for k, v in x.items()})
        if not sequence_outputs:
            return out
        padding = ~np.asarray(x["padding_mask"][rows][..., :length], bool)

        def pad(a):
            a = np.array(a)  # a copy: the model's own array stays as it was
            a[padding] = PADDED_LOGIT
            widths = [(0, 0), (0, seq_len - length)] + [(0, 0)] * (a.ndim - 2)
            return np.pad(a, widths, constant_values=PADDED_LOGIT)

        if isinstance(out, dict):
            return {k: pad(v) for k, v in out.items()}
        return [pad(v) for v in out] if isinstance(out, (list, tuple)) else pad(out)

    chunks = [run(order[i : i + batch_size]) for i in range(0, n, batch_size)]
    inverse = np.argsort(order, kind="stable")
    join = lambda parts: np.concatenate([np.asarray(p) for p in parts])[inverse]  # noqa: E731
    if isinstance(chunks[0], dict):
        return {k: join([c[k] for c in chunks]) for k in chunks[0]}
    if isinstance(chunks[0], (list, tuple)):
        return tuple(join([c[i] for c in chunks]) for i in range(len(chunks[0])))
    return join(chunks)
