"""CoNLL-2003 named-entity recognition (paper section 5.3), fine-tuned and scored as conlleval.

    python -m model.train finetune --task conll2003 --data ../shared/data/conll2003 \\
        --init runs/base --output runs/ner
    python -m model.evaluate --task ner --model runs/ner --data ../shared/data/conll2003/valid.txt

The file format: one token a line, `token POS chunk NER` (space-separated; the
last column is the tag: IOB1 in the original CoNLL-2003 release, IOB2 in most
copies since, both read and scored alike),
`-DOCSTART-` lines between documents and a blank line between sentences.
A file of tokens only (one column) is read as unlabelled. `--data DIR` finds
train.txt and valid.txt, or the original release's eng.train and eng.testa.

Labels live on words, the model on WordPieces: as in the paper, each word's
*first* piece carries its tag and the other pieces are ignored by the loss
(label -100, Keras' `ignore_class`). Predictions are read back at the first
pieces, one tag a word. A sentence longer than `seq_len - 2` pieces becomes
several consecutive features, so every word gets a prediction. The metric is
conlleval's: entity-level precision, recall and F1 over exact (start, end,
type) matches, chunks read by conlleval's own start/end rules (so IOB1 and
stray `I-` tags are scored as conlleval scores them).

`document_context` (finetune's `--document-context`, kept in config.json) reads
each sentence as the paper's section 5.3 does, "with the maximal document
context provided by the data": the feature's room beyond the sentence is filled
with the WordPieces before and after it in its document (between `-DOCSTART-`
lines), half on each side where both have enough. Only the sentence's own words
are labelled and predicted, so every word is still scored once.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import sys

import numpy as np

from model.io.files import limited_lines, reading
from model.tasks import dev_units
from model.tasks.base import Encoded, Task, check_labelled, encode_texts, predict_in_batches

IGNORE = -100  # the label of padding and non-first WordPieces; the loss skips it
CONLL2003_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
_COLUMNS = re.compile(r"[ \t]+")  # a CoNLL line's separators (str.split() also splits at U+00A0)


@dataclasses.dataclass
class Sentence:
    """Words and their tags (None in an unlabelled file)."""

    words: list[str]
    tags: list[str] | None
    source: str  # "path:line" of the first word
    document: int = 0  # how many -DOCSTART- lines come before it in its file


# === conlleval ===


def _split(tag: str) -> tuple[str, str]:
    """("B", "PER") for "B-PER"; ("O", "") for "O"."""
    if tag == "O" or "-" not in tag:
        return tag[:1] or "O", ""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def _end_of_chunk(prev_tag, tag, prev_type, kind) -> bool:
    # conlleval's endOfChunk, for IOB1/IOB2/IOE/IOBES tags.
    return (
        prev_tag in ("E", "S")
        or (prev_tag in ("B", "I") and tag in ("B", "S", "O"))
        or (prev_tag != "O" and prev_type != kind)
    )


def _start_of_chunk(prev_tag, tag, prev_type, kind) -> bool:
    # conlleval's startOfChunk.
    return (
        tag in ("B", "S")
        or (prev_tag in ("E", "S", "O") and tag in ("E", "I"))
        or (tag != "O" and prev_type != kind)
    )


def chunks(tags: list[str]) -> set[tuple[int, int, str]]:
    """The entities of one sentence, (first word, last word, type), as conlleval reads them."""
    found, start = set(), None
    prev_tag, prev_type = "O", ""
    for i, tag in enumerate([*tags, "O"]):  # the sentence end closes any chunk
        t, kind = _split(tag)
        if start is not None and _end_of_chunk(prev_tag, t, prev_type, kind):
            found.add((start, i - 1, prev_type))
            start = None
        if _start_of_chunk(prev_tag, t, prev_type, kind):
            start = i
        prev_tag, prev_type = t, kind
    return found


def conll_metrics(gold: list[list[str]], predicted: list[list[str]]) -> dict:
    """conlleval's scores of predicted tag sentences against gold ones.

    Returns precision, recall and f1 (entity level, micro-averaged; 0.0 when
    undefined, as conlleval prints), token accuracy, and per entity type
    precision/recall/f1 under "per_type".
    """
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    found_gold, found_pred, correct = {}, {}, {}
    tokens = right = 0
    for i, (g, p) in enumerate(zip(gold, predicted)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted")
        tokens += len(g)
        right += sum(a == b for a, b in zip(g, p))
        cg, cp = chunks(g), chunks(p)
        for table, items in ((found_gold, cg), (found_pred, cp), (correct, cg & cp)):
            for _, _, kind in items:
                table[kind] = table.get(kind, 0) + 1

    def scores(c, fp, fg):
        precision = c / fp if fp else 0.0
        recall = c / fg if fg else 0.0
        f = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"precision": precision, "recall": recall, "f1": f}

    total = scores(sum(correct.values()), sum(found_pred.values()), sum(found_gold.values()))
    per_type = {
        kind: scores(correct.get(kind, 0), found_pred.get(kind, 0), found_gold.get(kind, 0))
        for kind in sorted(set(found_gold) | set(found_pred))
    }
    return {**total, "accuracy": right / tokens if tokens else 0.0, "per_type": per_type}


# === WordPiece alignment ===


def word_pieces(tokenizer, sentences: list[list[str]], unk_id: int) -> list[list[list[int]]]:
    """The WordPieces of every word; a word the tokenizer drops entirely
    (only control characters) becomes one [UNK], so it still has a first piece."""
    flat = encode_texts(tokenizer, [w for words in sentences for w in words])
    out, i = [], 0
    for words in sentences:
        out.append([pieces or [unk_id] for pieces in flat[i : i + len(words)]])
        i += len(words)
    return out


def split_features(pieces: list[list[int]], budget: int) -> list[tuple[int, int]]:
    """Word ranges [start, end) whose pieces fit in `budget` tokens each; a
    single word longer than `budget` is cut (only its first piece matters)."""
    spans, start, used = [], 0, 0
    for i, p in enumerate(pieces):
        n = min(len(p), budget)
        if used + n > budget and i > start:
            spans.append((start, i))
            start, used = i, 0
        used += n
    if start < len(pieces) or not spans:
        spans.append((start, len(pieces)))
    return spans


def align(pieces: list[list[int]], label_ids: list[int] | None, budget: int):
    """One feature's piece ids, the positions of the words' first pieces (after
    [CLS]), and per-piece labels (IGNORE except at first pieces)."""
    ids, firsts, labels = [], [], []
    for w, p in enumerate(pieces):
        p = p[: max(0, budget - len(ids))]
        if not p:
            # split_features gives every word of a feature room for a piece.
            raise ValueError("a feature's words do not fit its budget")
        firsts.append(1 + len(ids))
        labels += [label_ids[w] if label_ids is not None else IGNORE] + [IGNORE] * (len(p) - 1)
        ids += p
    return ids, firsts, labels


@dataclasses.dataclass
class FeatureMap:
    """Where feature f's words are: sentence `sentence[f]`, words from
    `start[f]`, their first pieces at `positions[f]`."""

    sentence: list[int]
    start: list[int]
    positions: list[list[int]]

    def to_words(self, piece_values: np.ndarray, lengths: list[int]) -> list[np.ndarray]:
        """Per-sentence word values, read at each word's first piece from
        (num_features, seq_len, ...) feature values."""
        out = [np.zeros((n, *piece_values.shape[2:]), piece_values.dtype) for n in lengths]
        for f, (s, start, pos) in enumerate(zip(self.sentence, self.start, self.positions)):
            out[s][start : start + len(pos)] = piece_values[f, pos]
        return out


def in_context(features: list[tuple], documents: list[int], budget: int) -> list[tuple]:
    """Each feature `(ids, firsts, labels)` with the pieces around it in its document (the
    ids of the document's other features, in order) up to `budget` pieces: half before and
    half after where both sides have enough. The context is unlabelled (IGNORE) and the
    first pieces' positions move past the context before."""
    out = []
    for _, group in itertools.groupby(zip(features, documents), key=lambda pair: pair[1]):
        group = [feature for feature, _ in group]
        stream = [i for ids, _, _ in group for i in ids]
        at = 0
        for ids, firsts, labels in group:
            end = at + len(ids)
            room = budget - len(ids)
            before = min(at, max(room // 2, room - (len(stream) - end)))
            after = min(len(stream) - end, room - before)
            out.append(
                (
                    stream[at - before : at] + ids + stream[end : end + after],
                    [p + before for p in firsts],
                    [IGNORE] * before + labels + [IGNORE] * after,
                )
            )
            at = end
    return out


def encode_sentences(
    sentences: list[list[str]],
    tags: list[list[int]] | None,
    tokenizer,
    seq_len: int,
    documents: list[int] | None = None,
):
    """(x, y, FeatureMap): features of `[CLS] pieces [SEP]`, y (num_features,
    seq_len) int32 with IGNORE off the first pieces (None without tags).
    `documents` (each sentence's): the features read their document around them
    (`in_context`)."""
    budget = seq_len - 2
    if budget < 1:
        raise ValueError(f"seq_len={seq_len} leaves no room for words")
    all_pieces = word_pieces(tokenizer, sentences, tokenizer.unk_id)
    features, fmap = [], FeatureMap([], [], [])
    for s, pieces in enumerate(all_pieces):
        for start, end in split_features(pieces, budget):
            features.append(
                align(pieces[start:end], tags[s][start:end] if tags is not None else None, budget)
            )
            fmap.sentence.append(s)
            fmap.start.append(start)
    if documents is not None:
        features = in_context(features, [documents[s] for s in fmap.sentence], budget)
    n = len(features)
    x = {
        "token_ids": np.full((n, seq_len), tokenizer.pad_id, np.int32),
        "segment_ids": np.zeros((n, seq_len), np.int32),
        "padding_mask": np.zeros((n, seq_len), np.int32),
    }
    y = np.full((n, seq_len), IGNORE, np.int32)
    for f, (ids, firsts, labels) in enumerate(features):
        x["token_ids"][f, : len(ids) + 2] = [tokenizer.cls_id, *ids, tokenizer.sep_id]
        x["padding_mask"][f, : len(ids) + 2] = 1
        y[f, 1 : len(ids) + 1] = labels
        fmap.positions.append(firsts)
    return x, (y if tags is not None else None), fmap


# === The task ===


class Conll2003(Task):
    """CoNLL-2003 NER with a token-classification head (`BertTokenClassifier`)."""

    name = "conll2003"
    head = "token_classifier"
    main_metric = "f1"
    default_seq_len = 128
    default_learning_rate = 3e-5
    train_file = "train.txt"
    dev_file = "valid.txt"
    label_names = CONLL2003_LABELS
    document_context = False  # see the module's docstring
    predictions_file = "conlleval's input (python -m model.evaluate ... DIR/predictions.txt)"
    label_field = "tags"

    # The original release's names (eng.testb is its test set, never a dev file).
    original_files = ("eng.train", "eng.testa")
    other_train_names = original_files[:1]

    def labels(self) -> list[str]:
        return list(self.label_names)

    def files(self, data: str) -> tuple[str, str | None]:
        """train.txt and valid.txt, or the original release's eng.train and eng.testa (a
        folder holding them, or eng.train itself)."""
        train_name, dev_name = self.original_files
        if os.path.isdir(data) and not os.path.exists(os.path.join(data, self.train_file)):
            if os.path.isfile(os.path.join(data, train_name)):
                data = os.path.join(data, train_name)
        if os.path.isfile(data) and os.path.basename(data) == train_name:
            dev = os.path.join(os.path.dirname(os.path.abspath(data)), dev_name)
            return data, dev if os.path.isfile(dev) else None
        return super().files(data)

    def read_as(self, info: dict) -> None:
        self.document_context = bool(info.get("document_context"))

    # === Data ===

    def read(self, path: str) -> list[Sentence]:
        sentences, words, tags, first_line = [], [], [], None
        columns, columns_line, document = None, None, 0
        allowed = set(self.label_names)

        def flush():
            nonlocal words, tags, first_line
            if words:
                sentences.append(
                    Sentence(words, tags if columns > 1 else None, f"{path}:{first_line}", document)
                )
            words, tags, first_line = [], [], None

        with reading(path):
            # utf-8-sig: a byte-order mark is not part of the first word.
            with open(path, encoding="utf-8-sig") as f:
                for line_no, line in enumerate(limited_lines(f, path), 1):
                    # Columns at spaces and tabs only: a non-breaking space can be part of a
                    # word (a line of nothing but whitespace still ends a sentence).
                    parts = _COLUMNS.split(line.strip(" \t\r\n"))
                    if not line.strip():
                        flush()
                        continue
                    if parts[0] == "-DOCSTART-":
                        flush()
                        document += 1
                        continue
                    if columns is None:
                        columns, columns_line = len(parts), line_no
                    elif len(parts) != columns:
                        raise ValueError(
                            f"{path}:{line_no}: {len(parts)} columns (separated by spaces or tabs), but "
                            f"line {columns_line}, the first word's, has {columns}"
                        )
                    if columns > 1 and parts[-1] not in allowed:
                        raise ValueError(
                            f"{path}:{line_no}: tag {parts[-1]!r} is not one of "
                            f"{list(self.label_names)}"
                        )
                    if first_line is None:
                        first_line = line_no
                    words.append(parts[0])
                    tags.append(parts[-1])
                flush()
        return sentences

    def encode(
        self, examples: list[Sentence], tokenizer, seq_len: int, training: bool = False
    ) -> Encoded:
        if training:
            check_labelled(examples, "tags")
        labelled = bool(examples) and all(e.tags is not None for e in examples)
        index = {t: i for i, t in enumerate(self.label_names)}
        tags = [[index[t] for t in e.tags] for e in examples] if labelled else None
        documents = [e.document for e in examples] if self.document_context else None
        x, y, fmap = encode_sentences(
            [e.words for e in examples], tags, tokenizer, seq_len, documents
        )
        return Encoded(x=x, y=y, meta=fmap)

    # === Model ===

    def build_model(self, encoder, dropout: float = 0.1):
        from model.heads.token_classifier import BertTokenClassifier

        return BertTokenClassifier(
            encoder,
            num_labels=len(self.label_names),
            dropout=dropout,
            id2label=dict(enumerate(self.label_names)),
        )

    def loss(self):
        import keras

        # Averaged over the first pieces only (Keras divides by the unmasked count).
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORE)

    # === Metric ===

    def predict_tags(
        self, predict, examples: list[Sentence], tokenizer, seq_len: int, batch_size: int = 64
    ) -> list[list[str]]:
        """One predicted tag per word of each sentence."""
        encoded = self.encode(examples, tokenizer, seq_len)
        logits = predict_in_batches(predict, encoded.x, batch_size, sequence_outputs=True)
        ids = np.asarray(logits).argmax(-1)  # (num_features, seq_len)
        words = encoded.meta.to_words(ids, [len(e.words) for e in examples])
        return [[self.label_names[i] for i in w] for w in words]

    def evaluate(
        self,
        predict,
        examples: list[Sentence],
        tokenizer,
        seq_len: int,
        batch_size: int = 64,
        output_dir: str | None = None,
    ) -> dict:
        self.require_labels(examples, output_dir)
        predicted = self.predict_tags(predict, examples, tokenizer, seq_len, batch_size)
        if output_dir is not None:
            write_predictions(os.path.join(output_dir, PREDICTIONS), examples, predicted)
        if self.unlabelled(examples):
            return {"labelled": False, "sentences": len(examples)}
        metrics = conll_metrics([e.tags for e in examples], predicted)
        if output_dir is not None:
            write_units(output_dir, examples, predicted, metrics)
        return {**metrics, "sentences": len(examples)}


PREDICTIONS = "predictions.txt"


def write_units(directory: str, examples: list[Sentence], predicted, metrics: dict) -> None:
    """DIR/dev_units.json (`model/tasks/dev_units.py`): each sentence's entities right,
    predicted only and missed, so that the entity F1 is their sums'; drawn by document."""
    tp, fp, fn = [], [], []
    for e, tags in zip(examples, predicted):
        gold, said = chunks(e.tags), chunks(tags)
        tp.append(len(gold & said))
        fp.append(len(said) - tp[-1])
        fn.append(len(gold) - tp[-1])
    documents = [e.document for e in examples]
    dev_units.write(directory, {"f1": dev_units.f1(tp, fp, fn)}, metrics, documents)


def write_predictions(path: str, examples: list[Sentence], predicted: list[list[str]]) -> None:
    """conlleval's input: `word gold predicted` a line (`word predicted` for an unlabelled
    file), a blank line after each sentence, `-DOCSTART- O O` where a document starts."""
    from model.io.files import atomic_open

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    if os.path.exists(path):
        print(f"note: replacing {path}", file=sys.stderr)
    document = 0  # a file's first -DOCSTART- is written too
    with atomic_open(path, "w", encoding="utf-8") as f:
        for e, tags in zip(examples, predicted):
            if e.document != document:
                f.write("-DOCSTART- O O\n\n" if e.tags is not None else "-DOCSTART- O\n\n")
                document = e.document
            gold = e.tags if e.tags is not None else [None] * len(e.words)
            for word, g, p in zip(e.words, gold, tags):
                f.write(f"{word} {p}\n" if g is None else f"{word} {g} {p}\n")
            f.write("\n")


TASKS = {"conll2003": Conll2003}
