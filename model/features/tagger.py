"""The paper's feature-based NER (section 5.3, Table 7): a BiLSTM tagger on frozen BERT features.

    python -m model.feature_tagger --model runs/base --data ../shared/data/conll2003 \\
        --output runs/ner-features

`train(args)` takes that command's flags (model/feature_tagger.py, whose docstring describes
the features, the tagger and the OUTPUT directory); `evaluate(directory, path)` scores such a
directory on a CoNLL-2003 file for `python -m model.evaluate`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time

import numpy as np

from model.tasks import dev_units

TAGGER_WEIGHTS = "tagger.weights.h5"


def word_features(
    features,
    tokenizer,
    sentences: list[list[str]],
    seq_len: int,
    batch_size: int = 32,
    dtype=np.float16,
) -> list[np.ndarray]:
    """Per sentence, (num_words, features.width): the layers at each word's first
    WordPiece, concatenated or summed (stored as float16 to halve memory)."""
    from model.tasks.ner import encode_sentences

    x, _, fmap = encode_sentences(sentences, None, tokenizer, seq_len)
    width = features.width
    out = [np.zeros((len(words), width), dtype) for words in sentences]
    for start, values in features.batches(x, batch_size):
        values = values.reshape(*values.shape[:2], width)  # (batch, seq_len, slots * hidden)
        for row in range(len(values)):
            f = start + row
            positions = fmap.positions[f]
            s, w = fmap.sentence[f], fmap.start[f]
            out[s][w : w + len(positions)] = values[row, positions]
    return out


def build_tagger(
    input_dim: int, num_labels: int, units: int = 768, num_layers: int = 2, dropout: float = 0.0
):
    """Masked (padding = all-zero rows) stacked BiLSTM -> Dense(num_labels) logits."""
    import keras

    inputs = keras.Input(shape=(None, input_dim), name="features")
    x = keras.layers.Masking(mask_value=0.0, name="padding")(inputs)
    for i in range(num_layers):
        x = keras.layers.Bidirectional(
            keras.layers.LSTM(units, return_sequences=True, dropout=dropout), name=f"bilstm_{i}"
        )(x)  # (batch, words, 2 * units)
    logits = keras.layers.Dense(num_labels, name="logits")(x)  # (batch, words, num_labels)
    return keras.Model(inputs, logits, name="feature_tagger")


# Batches are padded to a multiple of this many words: a few shapes, so a
# few traces of the train step, not one per sentence length.
PAD_WORDS_TO = 32


def _padded(feats: list[np.ndarray], tags: list[list[int]] | None, rows, ignore: int):
    n = max((len(feats[i]) for i in rows), default=0)
    n = max(1, math.ceil(n / PAD_WORDS_TO)) * PAD_WORDS_TO
    x = np.zeros((len(rows), n, feats[0].shape[1]), np.float32)
    y = np.full((len(rows), n), ignore, np.int32)
    for j, i in enumerate(rows):
        x[j, : len(feats[i])] = feats[i]
        if tags is not None:
            y[j, : len(tags[i])] = tags[i]
    return x, y


def _batches(feats, tags, batch_size: int, ignore: int, seed: int | None = None):
    """Padded (x, y) batches; shuffled when `seed` is given."""
    order = np.arange(len(feats))
    if seed is not None:
        np.random.default_rng(seed).shuffle(order)
    for i in range(0, len(order), batch_size):
        yield _padded(feats, tags, order[i : i + batch_size], ignore)


def predict_tags(tagger, feats: list[np.ndarray], labels, batch_size: int = 64):
    out = []
    for i in range(0, len(feats), batch_size):
        rows = list(range(i, min(i + batch_size, len(feats))))
        x, _ = _padded(feats, None, rows, 0)
        ids = np.asarray(tagger.predict_on_batch(x)).argmax(-1)
        out.extend([[labels[k] for k in ids[j, : len(feats[r])]] for j, r in enumerate(rows)])
    return out


def is_tagger_dir(directory: str) -> bool:
    """Whether `directory` is an OUTPUT of this module (config.json task "feature_tagger")."""
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        return False
    from model.io.files import read_json_object

    return read_json_object(path).get("task") == "feature_tagger"


def evaluate(directory: str, path: str) -> dict:
    """conlleval's metrics of the tagger in `directory` on the CoNLL-2003 file `path`."""
    from model.features.layers import LayerFeatures, load_encoder
    from model.io.files import read_json_object
    from model.tasks import get
    from model.tasks.base import check_labelled
    from model.tasks.ner import conll_metrics
    from model.text import tokenizer_class

    info = read_json_object(os.path.join(directory, "config.json"))
    missing = [
        k
        for k in ("encoder", "layers", "lstm_units", "lstm_layers", "max_seq_length", "id2label")
        if k not in info
    ]
    if missing:
        raise ValueError(f"{os.path.join(directory, 'config.json')}: lacks {missing}")
    weights = os.path.join(directory, TAGGER_WEIGHTS)
    if not os.path.isfile(weights):
        raise FileNotFoundError(f"{weights}: missing (the tagger's weights)")
    sentences = get("conll2003").read(path)  # a malformed file fails before anything loads
    if not sentences:
        raise ValueError(f"{path}: no examples to evaluate")
    check_labelled(sentences, "tags")
    encoder, vocab_path = load_encoder(info["encoder"])
    tokenizer = tokenizer_class()(vocab_path, lowercase=encoder.config.lowercase)
    # Directories written before --combine existed concatenated their layers.
    features = LayerFeatures(encoder, tuple(info["layers"]), info.get("combine", "concat"))
    feats = word_features(
        features, tokenizer, [s.words for s in sentences], int(info["max_seq_length"])
    )
    from model.tasks.base import ordered_labels

    labels = ordered_labels(info["id2label"])
    tagger = build_tagger(
        feats[0].shape[1], len(labels), int(info["lstm_units"]), int(info["lstm_layers"])
    )
    tagger.load_weights(weights)
    return conll_metrics([s.tags for s in sentences], predict_tags(tagger, feats, labels))


def train(args) -> int:
    from model.features.layers import LayerFeatures, load_encoder, parse_layers
    from model.io.files import check_writable_dir, write_json
    from model.tasks import get
    from model.text import tokenizer_class

    task = get("conll2003")
    train_file, dev_file, train_set, dev_set = _read(task, args)
    check_writable_dir(args.output)
    with contextlib.suppress(FileNotFoundError):  # an earlier run's, if this one has no dev set
        os.remove(os.path.join(args.output, dev_units.FILE))
    encoder, vocab_path = load_encoder(args.model)
    layers = parse_layers(args.layers, encoder.config.num_layers)
    tokenizer = tokenizer_class()(vocab_path, lowercase=encoder.config.lowercase)
    features = LayerFeatures(encoder, layers, args.combine)
    labels = task.labels()
    index = {t: i for i, t in enumerate(labels)}

    start = time.time()
    train_x = word_features(features, tokenizer, [s.words for s in train_set], args.max_seq_length)
    train_y = [[index[t] for t in s.tags] for s in train_set]
    dev_x = word_features(features, tokenizer, [s.words for s in dev_set], args.max_seq_length)
    print(
        f"features of layers {list(layers)} ({args.combine}) for {len(train_set)} training "
        f"and {len(dev_set)} "
        f"dev sentences in {time.time() - start:.0f} s"
    )
    tagger = _compiled_tagger(args, train_x[0].shape[1], len(labels))
    info = _info(args, layers, labels)
    history, best = _fit(tagger, args, (train_x, train_y), (dev_x, dev_set), labels, info)
    summary = {
        "dev": {k: v for k, v in best.items() if k != "epoch"} if dev_set else {},
        "best_epoch": best["epoch"],
        "history": history,
        "train_file": train_file,
        "dev_file": dev_file,
        "train_sentences": len(train_set),
        "wall_seconds": round(time.time() - start, 1),
        "args": vars(args),  # what the run was given (in-process, sys.argv is its caller's)
    }
    write_json(os.path.join(args.output, "metrics.json"), summary)
    print(json.dumps({"dev": summary["dev"], "wall_seconds": summary["wall_seconds"]}, indent=2))
    return 0


def _info(args, layers, labels: list[str]) -> dict:
    """The tagger folder's config.json."""
    return {
        "task": "feature_tagger",
        "encoder": os.path.abspath(args.model),
        "layers": list(layers),
        "combine": args.combine,
        "lstm_units": args.lstm_units,
        "lstm_layers": args.lstm_layers,
        "dropout": args.dropout,
        "max_seq_length": args.max_seq_length,
        "id2label": dict(enumerate(labels)),
    }


def _fit(tagger, args, train, dev, labels: list[str], info: dict) -> tuple[list, dict]:
    """(history, best epoch's record): `args.epochs` epochs, the best on dev (by F1; the
    last without a dev set) saved to `args.output` with `info` as its config.json."""
    from model.io.files import atomic_path, write_json
    from model.tasks.ner import conll_metrics, write_units

    (train_x, train_y), (dev_x, dev_set) = train, dev
    history, best = [], None
    for epoch in range(args.epochs):
        loss = _train_epoch(tagger, train_x, train_y, args.batch_size, args.seed + epoch)
        record = {"epoch": epoch + 1, "train_loss": loss}
        if dev_set:
            predicted = predict_tags(tagger, dev_x, labels)
            record.update(conll_metrics([s.tags for s in dev_set], predicted))
            print(f"epoch {epoch + 1}: dev f1 {record['f1']:.4f}")
        history.append(record)
        if best is None or not dev_set or record["f1"] > best["f1"]:
            best = record
            with atomic_path(os.path.join(args.output, TAGGER_WEIGHTS)) as tmp:
                tagger.save_weights(tmp)
            if dev_set:  # the best epoch's dev units (the tables' sampling error)
                write_units(args.output, dev_set, predicted, record)
            write_json(os.path.join(args.output, "config.json"), info)
    return history, best


def _read(task, args) -> tuple:
    """(train file, dev file or None, training sentences, dev sentences) of --data,
    every sentence tagged; at most --max-train-examples training sentences."""
    from model.tasks.base import check_labelled

    for flag in ("epochs", "batch_size", "max_train_examples"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be positive, got {value}")
    train_file, dev_file = task.files(args.data)
    train_set = task.read(train_file)[: args.max_train_examples]
    if not train_set:
        raise ValueError(f"{train_file}: no sentences to train on")
    check_labelled(train_set, "tags")
    dev_set = task.read(dev_file) if dev_file else []
    if dev_set:
        check_labelled(dev_set, "tags")
    return train_file, dev_file, train_set, dev_set


def _compiled_tagger(args, width: int, num_labels: int):
    """The BiLSTM tagger over `width` features a word, compiled, its optimizer built."""
    import keras

    from model.tasks.ner import IGNORE
    from model.training.optimizer import create_optimizer_variables

    keras.utils.set_random_seed(args.seed)
    tagger = build_tagger(width, num_labels, args.lstm_units, args.lstm_layers, args.dropout)
    tagger.compile(
        optimizer=keras.optimizers.Adam(args.learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORE),
    )
    create_optimizer_variables(tagger)  # the first step traced once, not twice
    return tagger


def _train_epoch(tagger, train_x, train_y, batch_size: int, seed: int) -> float:
    """One epoch over the training sentences in `seed`'s order; its mean loss."""
    import keras

    from model.tasks.ner import IGNORE

    steps = math.ceil(len(train_x) / batch_size)
    progress = keras.utils.Progbar(
        steps, stateful_metrics=["loss"], verbose=1 if sys.stdout.isatty() else 2
    )
    losses = []
    for step, (x, y) in enumerate(_batches(train_x, train_y, batch_size, IGNORE, seed=seed), 1):
        logs = tagger.train_on_batch(x, y, return_dict=True)
        losses.append(logs["loss"])
        progress.update(step, [("loss", float(np.mean(losses)))])
    return float(np.mean(losses))
