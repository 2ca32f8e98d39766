"""Pre-training data that lives on the accelerator: the records as arrays, batches cut inside
the compiled step (JAX). The device path of `python -m model.train pretrain --device-data`.

The records of `--data` are read once (model/pretraining/records.py, checksums verified)
into a `DeviceCorpus` of (N, L) arrays: the Wikipedia and Gutenberg samples' 48 M
WordPieces are under 200 MB as int32, small beside an accelerator's memory. Each
training step then picks its rows and masks them on the device (`make_batch`), so the
host only launches compiled calls of several steps each.

Order: step s takes examples s*B .. s*B + B - 1 of an endless stream in which every
epoch is a fresh random permutation of the N rows (keyed by the run's seed and the
epoch), so a restart at step s continues exactly where the run was. Masks are keyed
by (seed, step). This is not the host pipeline's order (tf.data's shuffle buffer over
interleaved files): the device path changes which example comes when, not what is
learned from the examples (bench/device_path_learning.py compares the held-out accuracy
of both paths; tests/test_device_data.py holds their batches to the same statistics).

Each objective says what its batch is (`Objective.device_batches`): the functions
below, with the same inputs, labels and weights as its host transform.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from model.io.cpus import usable_cpus
from model.pretraining.device_masking import mask_tokens
from model.pretraining.device_span_masking import span_masks
from model.pretraining.pydataset import feature_lengths
from model.pretraining.records import find_records, read_columns


@dataclasses.dataclass(frozen=True)
class DeviceCorpus:
    """The rows of a record set as arrays: `features` maps each record feature
    (input_ids, segment_ids, input_mask, next_sentence_labels, and a static
    record's masked_lm_*) to an (N, width) array."""

    features: dict
    seq_len: int
    static: bool

    @property
    def num_rows(self) -> int:
        return int(self.features["input_ids"].shape[0])

    @classmethod
    def read(cls, pattern: str, next_sentence: bool) -> DeviceCorpus:
        """Reads every record of `pattern` (find_records' patterns); a malformed one is
        named by file and byte offset, as the host pipeline names it."""
        files, info = find_records(pattern)
        seq_len = info["max_seq_length"]
        static = info.get("masking") == "static"
        max_predictions = info["masking_config"]["max_predictions"] if static else None
        want = feature_lengths(seq_len, next_sentence, max_predictions)
        parts = _read_files(files, want)
        if not sum(len(p["input_ids"]) for p in parts):
            raise ValueError(f"{pattern}: no records")
        features = {name: np.concatenate([p[name] for p in parts]) for name in want}
        return cls(features=features, seq_len=seq_len, static=static)

    def on_device(self) -> DeviceCorpus:
        return dataclasses.replace(
            self, features={k: jnp.asarray(v) for k, v in self.features.items()}
        )


def _read_files(files: list[str], want: dict) -> list[dict]:
    """`read_columns` of each file, in order: side by side in spawned processes (one per
    core at most; not forked: JAX's threads are running) when there are several files."""
    workers = min(len(files), usable_cpus())
    if workers <= 1:
        return [read_columns(path, want) for path in files]
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as executor:
        return list(executor.map(read_columns, files, [want] * len(files)))


# A corpus is an argument of the compiled call: its arrays are traced, its shape facts static.
jax.tree_util.register_pytree_node(
    DeviceCorpus,
    lambda c: ((c.features,), (c.seq_len, c.static)),
    lambda aux, children: DeviceCorpus(children[0], *aux),
)


def stream_rows(key, step, batch_size: int, num_rows: int):
    """The rows of step `step`: examples step*B .. step*B + B - 1 of the stream of
    epochs, each epoch a permutation of the rows keyed by (key, epoch)."""
    first = step * batch_size
    index = first + jnp.arange(batch_size)
    epoch, position = index // num_rows, index % num_rows
    # A batch spans at most this many epochs (static: the shapes are known when tracing).
    spans = batch_size // num_rows + 2
    first_epoch = first // num_rows
    perms = jnp.stack(
        [
            jax.random.permutation(jax.random.fold_in(key, first_epoch + j), num_rows)
            for j in range(spans)
        ]
    )  # (spans, N)
    return perms[epoch - first_epoch, position]  # (B,)


def make_batch(corpus: DeviceCorpus, transform, key, step, batch_size: int, rates: dict):
    """(x, y, sample_weight) of training step `step`, as the host PyDataset lays them out
    (weights scaled to the mean over the batch's real targets)."""
    # One key for the run's epochs (each a permutation of all rows), one per step for masks.
    rows = stream_rows(jax.random.fold_in(key, 0), step, batch_size, corpus.num_rows)
    mask_key = jax.random.fold_in(jax.random.fold_in(key, 1), step)
    f = {name: jnp.asarray(values)[rows] for name, values in corpus.features.items()}
    x = {
        "token_ids": f["input_ids"],
        "segment_ids": f["segment_ids"],
        "padding_mask": f["input_mask"],
    }
    if corpus.static:
        x["mask_positions"] = f["masked_lm_positions"]
        y, sw = {"mlm": f["masked_lm_ids"]}, {"mlm": f["masked_lm_weights"]}
    else:
        out = transform(mask_key, f["input_ids"], f["input_mask"], rates)
        x.update(out["x"])
        y, sw = out["y"], out["sw"]
    sw = {name: w * (w.size / jnp.maximum(w.sum(), 1.0)) for name, w in sw.items()}
    if "next_sentence_labels" in f:
        y["nsp"] = f["next_sentence_labels"]
        sw["nsp"] = jnp.ones(batch_size, jnp.float32)
    return x, y, sw


# === Each objective's batch, on the device (the twins of the host transforms) ===


def masked_lm(tables, max_predictions: int, whole_word: bool):
    """BERT's and RoBERTa's batch (masking.MaskedLMBatches)."""
    return functools.partial(
        _masked_lm, tables=tables, max_predictions=max_predictions, whole_word=whole_word
    )


def _masked_lm(key, ids, padding, rates, tables, max_predictions, whole_word):
    masked, positions, labels, weights = mask_tokens(
        key, ids, tables, rates, max_predictions, whole_word
    )
    return {
        "x": {"token_ids": masked, "mask_positions": positions},
        "y": {"mlm": labels},
        "sw": {"mlm": weights},
    }


def replaced_token(tables, max_predictions: int, whole_word: bool):
    """ELECTRA's batch (electra.ReplacedTokenBatches): BERT's masking at ELECTRA's rates,
    and the original sequence for the discriminator, weighted by the real tokens."""
    lm = masked_lm(tables, max_predictions, whole_word)

    def batch(key, ids, padding, rates):
        out = lm(key, ids, padding, rates)
        out["y"]["rtd"] = ids
        out["sw"]["rtd"] = padding.astype(jnp.float32)
        return out

    return batch


def span_masked(tables, config):
    """SpanBERT's batch (span_masking.SpanMaskedBatches): span masks with the SBO head's
    boundary inputs; masked-LM and SBO share the labels, not the weights."""

    def batch(key, ids, padding, rates):
        m = span_masks(key, ids, tables, rates, config)
        slots = ("mask_positions", "left_boundaries", "right_boundaries", "relative_positions")
        return {
            "x": {"token_ids": m["token_ids"], **{name: m[name] for name in slots}},
            "y": {"mlm": m["mask_ids"], "sbo": m["mask_ids"]},
            "sw": {"mlm": m["mask_weights"], "sbo": m["sbo_weights"]},
        }

    return batch


def next_token(key, ids, padding, rates):
    """The left-to-right LM's batch (next_token.NextTokenBatches): position i labelled
    with token i + 1, nothing masked."""
    batch, length = ids.shape
    return {
        "x": {"predict_positions": jnp.broadcast_to(jnp.arange(length - 1), (batch, length - 1))},
        "y": {"next_token": ids[:, 1:]},
        "sw": {"next_token": padding[:, 1:].astype(jnp.float32)},
    }
