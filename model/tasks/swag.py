"""SWAG multiple choice (paper section 4.4): which of four endings follows the context.

    python -m model.train finetune --task swag --data path/to/swagaf/data \\
        --init runs/base --output runs/swag
    python -m model.evaluate --task swag --model runs/swag --data path/to/swagaf/data/val.csv

The file format is SWAG's CSV (train.csv, val.csv; test.csv has no label):

    video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label

As in the paper (and Google's / Hugging Face's SWAG code), each choice is the
pair `[CLS] sent1 [SEP] sent2 ending_i [SEP]`: the context, then the
continuation's start (`sent2`) with one ending. `BertMultipleChoice` scores
each pair with a vector on its pooled output, and a softmax over the four
scores gives the answer.
"""

from __future__ import annotations

import csv
import dataclasses

import numpy as np

from model.io.files import reading
from model.tasks.base import (
    Encoded,
    Task,
    check_labelled,
    encode_texts,
    pack_rows,
    predict_in_batches,
    shown_header,
)

NUM_CHOICES = 4
COLUMNS = ("sent1", "sent2", *(f"ending{i}" for i in range(NUM_CHOICES)))


@dataclasses.dataclass
class ChoiceExample:
    context: str
    start: str  # the continuation's first words (SWAG's sent2)
    endings: list[str]
    label: int | None  # None in an unlabelled (test) file
    source: str  # "path:line"


class Swag(Task):
    name = "swag"
    head = "multiple_choice"
    main_metric = "accuracy"
    default_seq_len = 128
    # The paper (section 4.4): 3 epochs, learning rate 2e-5, batch 16 (GLUE's is 32).
    default_learning_rate = 2e-5
    default_batch_size = 16
    train_file = "train.csv"
    dev_file = "val.csv"

    def labels(self) -> list[str]:
        return [f"ending{i}" for i in range(NUM_CHOICES)]

    # === Data ===

    def read(self, path: str) -> list[ChoiceExample]:
        examples = []
        with reading(path):
            with open(path, encoding="utf-8-sig", newline="") as f:
                reader = csv.reader(f)
                try:
                    header = next(reader, None)
                    if header is None:
                        return []
                    missing = [c for c in COLUMNS if c not in header]
                    if missing:
                        raise ValueError(
                            f"{path}:1: the header lacks SWAG column(s) {missing} "
                            f"(found {shown_header(header)})"
                        )
                    at = {c: header.index(c) for c in COLUMNS}
                    label_at = header.index("label") if "label" in header else None
                    while True:
                        start = reader.line_num + 1  # a quoted field may hold newlines
                        row = next(reader, None)
                        if row is None:
                            break
                        if not row:
                            continue
                        source = f"{path}:{start}"
                        if len(row) != len(header):
                            raise ValueError(
                                f"{source}: expected {len(header)} comma-separated "
                                f"columns, found {len(row)}"
                            )
                        label = None
                        if label_at is not None:
                            value = row[label_at].strip()
                            if value not in [str(i) for i in range(NUM_CHOICES)]:
                                raise ValueError(
                                    f"{source}: label {value!r} is not one of 0..{NUM_CHOICES - 1}"
                                )
                            label = int(value)
                        examples.append(
                            ChoiceExample(
                                row[at["sent1"]],
                                row[at["sent2"]],
                                [row[at[f"ending{i}"]] for i in range(NUM_CHOICES)],
                                label,
                                source,
                            )
                        )
                except csv.Error as e:
                    raise ValueError(f"{path}:{reader.line_num}: {e}") from None
        return examples

    def encode(
        self, examples: list[ChoiceExample], tokenizer, seq_len: int, training: bool = False
    ) -> Encoded:
        if training:
            check_labelled(examples)
        contexts = encode_texts(tokenizer, [e.context for e in examples])
        endings = encode_texts(
            tokenizer, [f"{e.start} {ending}".strip() for e in examples for ending in e.endings]
        )
        flat = pack_rows(
            tokenizer, [contexts[i // NUM_CHOICES] for i in range(len(endings))], endings, seq_len
        )  # (num_examples * 4, seq_len)
        x = {k: v.reshape(len(examples), NUM_CHOICES, seq_len) for k, v in flat.items()}
        y = None
        if examples and all(e.label is not None for e in examples):
            y = np.array([e.label for e in examples], np.int32)
        return Encoded(x=x, y=y)

    # === Model ===

    def build_model(self, encoder, dropout: float = 0.1):
        from model.heads.multiple_choice import BertMultipleChoice

        return BertMultipleChoice(encoder, num_choices=NUM_CHOICES, dropout=dropout)

    def loss(self):
        import keras

        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    # === Metric ===

    def evaluate(
        self,
        predict,
        examples: list[ChoiceExample],
        tokenizer,
        seq_len: int,
        batch_size: int = 64,
        output_dir: str | None = None,
    ) -> dict:
        check_labelled(examples)
        encoded = self.encode(examples, tokenizer, seq_len)
        # Each example is 4 sequences: a quarter of the usual batch.
        logits = predict_in_batches(predict, encoded.x, max(1, batch_size // NUM_CHOICES))
        predictions = np.asarray(logits).argmax(-1)
        return {"accuracy": float(np.mean(predictions == encoded.y)), "examples": len(examples)}


TASKS = {"swag": Swag}
