"""Raw text to sharded TFRecord files of pre-training instances (the work of `python -m model.data`).

    from model.pretraining.build import build
    info = build(files, tokenizer, "data/wiki128", InstanceConfig(128, inputs="full-sentences"))

Documents stream through a bounded pool (`pool_tokens`), so memory stays flat for a corpus
larger than RAM; the same inputs and seed give the same bytes; the output directory appears
only when complete. The flags, the masking modes and the record format are described in
model/data.py's docstring (`python -m model.data --help`).
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import random
import shutil
import tempfile

import numpy as np

from model.pretraining.corpus import iter_documents
from model.pretraining.instances import (
    InstanceConfig,
    SentencePacker,
    create_instances_from_document,
)
from model.pretraining.masking import Masker, MaskingConfig

INFO = "dataset.json"


def expand_inputs(patterns: list[str]) -> list[str]:
    files = []
    for pattern in patterns:
        matched = sorted(glob.glob(pattern))
        if not matched:
            raise FileNotFoundError(f"{pattern}: no such file")
        files.extend(p for p in matched if os.path.isfile(p))
    if not files:
        raise FileNotFoundError(f"no input files in {patterns}")
    return files


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _example(tf, features: dict) -> bytes:
    feats = {}
    for name, value in features.items():
        if value.dtype.kind == "f":
            feats[name] = tf.train.Feature(float_list=tf.train.FloatList(value=value.tolist()))
        else:
            feats[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=value.tolist()))
    # Protobuf map order is arbitrary unless asked: same seed, same bytes.
    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString(
        deterministic=True
    )


def _instance_features(instance, tokenizer, seq_len: int, nsp_label: bool = True) -> dict:
    second = instance.second if instance.second else None
    ids, segments, mask = tokenizer.pack(instance.first, second, seq_len)
    features = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
    if nsp_label:
        features["next_sentence_labels"] = np.array([int(instance.is_random_next)])
    return features


def _writes_nsp_label(instance_config: InstanceConfig) -> bool:
    # `segments` records keep the all-zero label that `--no-nsp` always wrote,
    # so they stay byte for byte what they were; the packed formats, new, have
    # none (records without dataset.json are then seen to have no NSP).
    return not instance_config.packed


def _tokenized_documents(files, fmt, tokenizer, progress=None, batch_sentences=4096):
    """Yields documents as lists of int32 arrays, tokenising many sentences per call."""
    pending, pending_sentences = [], 0

    def flush():
        texts = [s for doc in pending for s in doc]
        encoded = iter(tokenizer.encode(texts))
        for doc in pending:
            # `doc` first: zip(encoded, doc) would pull one more sentence from
            # `encoded` at the end of each document and drop it.
            yield [np.asarray(ids, dtype=np.int32) for _, ids in zip(doc, encoded)]

    for path in files:
        for doc in iter_documents(path, fmt):
            pending.append(doc)
            pending_sentences += len(doc)
            if pending_sentences >= batch_sentences:
                yield from flush()
                pending, pending_sentences = [], 0
        if progress is not None:
            progress.update(os.path.getsize(path))
    yield from flush()


def generate_instances(
    files: list[str],
    tokenizer,
    instance_config: InstanceConfig,
    seed: int = 12345,
    corpus_format: str = "auto",
    pool_tokens: int = 2_000_000,
    dupe_factor: int = 1,
    progress=None,
):
    """Yields pre-training `Instance`s of `files`, a bounded pool of documents at a time.

    Deterministic for a given `seed`; `dupe_factor` makes each document's
    instances that many times (with different random pairings; the packed
    formats have no randomness, so their copies are identical, to be masked
    differently). Each pool's instances are shuffled together.

    The packed formats pack the documents in the order they are read;
    `full-sentences` carries the input being filled at the end of a pool over
    to the next pool, so only the very last input of the stream is short.
    """
    rng = random.Random(seed)
    packer = SentencePacker(instance_config, tokenizer.sep_id) if instance_config.packed else None

    def from_pool(pool, last=False):
        if packer is not None:
            packed = [inst for doc in pool for inst in packer.add(doc)]
            if last:
                packed += packer.finish()
            instances = packed * dupe_factor
        else:
            instances = [
                inst
                for _ in range(dupe_factor)
                for d in range(len(pool))
                for inst in create_instances_from_document(pool, d, instance_config, rng)
            ]
        rng.shuffle(instances)
        return instances

    pool, pool_size = [], 0
    for doc in _tokenized_documents(files, corpus_format, tokenizer, progress):
        doc = [s for s in doc if len(s)]
        if not doc:
            continue
        if progress is not None:
            progress.document(doc)
        pool.append(doc)
        pool_size += sum(len(s) for s in doc)
        if pool_size >= pool_tokens:
            yield from from_pool(pool)
            pool, pool_size = [], 0
    # A full-sentences input may be left over from the last full pool.
    if pool or packer is not None:
        yield from from_pool(pool, last=True)


def build(
    files: list[str],
    tokenizer,
    output: str,
    instance_config: InstanceConfig,
    masking: str = "dynamic",
    masking_config: MaskingConfig = MaskingConfig(),
    dupe_factor: int = 1,
    num_shards: int = 8,
    seed: int = 12345,
    corpus_format: str = "auto",
    pool_tokens: int = 2_000_000,
    show_progress: bool = True,
) -> dict:
    """Writes the shards of `files` into the new directory `output`; returns its info."""
    import tensorflow as tf
    from tqdm import tqdm

    if masking not in ("dynamic", "static"):
        raise ValueError(f"masking must be 'dynamic' or 'static', got {masking!r}")
    try:
        masker = Masker(tokenizer.vocabulary, masking_config)  # checks [MASK] early
    except ValueError as e:
        raise ValueError(f"{tokenizer.vocab_path}: {e}") from None
    if os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        raise FileExistsError(f"{output}: output exists and is not an empty directory")
    parent = os.path.dirname(os.path.abspath(output))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(output)}.tmp-", dir=parent)
    try:
        names = [f"part-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]
        writers = [tf.io.TFRecordWriter(os.path.join(tmp, n)) for n in names]
        counts = [0] * num_shards
        seq_len = instance_config.max_seq_length
        progress = tqdm(
            total=sum(os.path.getsize(f) for f in files),
            unit="B",
            unit_scale=True,
            desc="instances",
            disable=not show_progress,
        )
        stats = {"num_documents": 0, "num_tokens": 0}
        nsp_label = _writes_nsp_label(instance_config)
        total = 0
        for inst in generate_instances(
            files,
            tokenizer,
            instance_config,
            seed,
            corpus_format,
            pool_tokens,
            dupe_factor if masking == "static" else 1,
            _Progress(progress, stats),
        ):
            feats = _instance_features(inst, tokenizer, seq_len, nsp_label)
            if masking == "static":
                masked, pos, labels, weights = masker(
                    feats["input_ids"], np.random.default_rng([seed, total])
                )
                feats.update(
                    input_ids=masked,
                    masked_lm_positions=pos,
                    masked_lm_ids=labels,
                    masked_lm_weights=weights,
                )
            shard = total % num_shards
            writers[shard].write(_example(tf, feats))
            counts[shard] += 1
            total += 1
            if total % 1000 == 0:
                progress.set_postfix(instances=total)
        progress.close()
        for w in writers:
            w.close()
        if total == 0:
            raise ValueError(f"no instances: the input has no text ({', '.join(files[:3])})")
        shutil.copyfile(tokenizer.vocab_path, os.path.join(tmp, "vocab.txt"))
        info = {
            "format": "bert-pretraining-records/1",
            "num_instances": total,
            "shards": dict(zip(names, counts)),
            **stats,
            "max_seq_length": seq_len,
            "input_format": instance_config.inputs,
            "next_sentence": instance_config.next_sentence,
            # The packed formats never shorten an instance on purpose.
            "short_seq_prob": 0.0 if instance_config.packed else instance_config.short_seq_prob,
            "masking": masking,
            "masking_config": dataclasses.asdict(masking_config) if masking == "static" else None,
            "dupe_factor": dupe_factor,
            "lowercase": tokenizer.lowercase,
            "vocab_sha256": file_sha256(tokenizer.vocab_path),
            "seed": seed,
            "inputs": files,
        }
        with open(os.path.join(tmp, INFO), "w", encoding="utf-8") as f:
            json.dump(info, f, indent=2)
        if os.path.isdir(output):
            os.rmdir(output)  # empty, checked above
        os.chmod(tmp, 0o755)  # mkdtemp made it private
        os.replace(tmp, output)
        return info
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class _Progress:
    """Counts documents and tokens as they stream past, and advances the bar by file size."""

    def __init__(self, bar, stats):
        self.bar, self.stats = bar, stats

    def update(self, nbytes):
        self.bar.update(nbytes)

    def document(self, doc):
        self.stats["num_documents"] += 1
        self.stats["num_tokens"] += sum(len(s) for s in doc)
