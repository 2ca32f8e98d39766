"""Raw text to sharded TFRecord files of pre-training instances (the work of `python -m model.data`).

    from model.pretraining.build import build
    info = build(files, tokenizer, "data/wiki128", InstanceConfig(128, inputs="full-sentences"))

Documents stream through a bounded pool (`pool_tokens`), so memory stays flat for a corpus
larger than RAM; the same inputs and seed give the same bytes; the output directory appears
only when complete. The flags, the masking modes and the record format are described in
model/data.py's docstring (`python -m model.data --help`).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import glob
import itertools
import json
import os
import random
import shutil
import types

import numpy as np

from model.io.files import staging_dir
from model.pretraining.corpus import iter_documents
from model.pretraining.instances import (
    InstanceConfig,
    SentencePacker,
    create_instances_from_document,
)
from model.pretraining.masking import Masker, MaskingConfig
from model.pretraining.records import RecordWriter, frame, serialize_example
from model.pretraining.tokenized import is_tokenized, read_documents
from model.text.wordpiece import copy_vocabulary, vocabulary_sha256

INFO = "dataset.json"


def expand_inputs(patterns: list[str]) -> list[str]:
    """The files `patterns` (paths and globs) name, each once, in order; a directory is
    not read (its files are: DIR/*)."""
    files = []
    for pattern in patterns:
        matched = sorted(glob.glob(pattern))
        if not matched:
            raise FileNotFoundError(f"{pattern}: no such file")
        files.extend(p for p in matched if os.path.isfile(p) and p not in files)
    if not files:
        folders = [p for p in patterns if os.path.isdir(p)]
        hint = f" (a directory is not read; its files are: {folders[0]}/*)" if folders else ""
        raise FileNotFoundError(f"no input files in {patterns}{hint}")
    return files


def instance_features(instance, tokenizer, seq_len: int, nsp_label: bool = True) -> dict:
    second = instance.second if instance.second else None
    ids, segments, mask = tokenizer.pack(instance.first, second, seq_len)
    features = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
    if nsp_label:
        features["next_sentence_labels"] = np.array([int(instance.is_random_next)])
    return features


def _writes_nsp_label(instance_config: InstanceConfig) -> bool:
    # `segments` records keep the all-zero label that `--no-nsp` always wrote,
    # so they stay byte for byte what they were; the formats added since have
    # none (records without dataset.json are then seen to have no NSP).
    return instance_config.inputs in ("sentence-pairs", "segments")


def tokenized_documents(files, fmt, tokenizer, progress=None, batch_sentences=4096):
    """Yields documents as lists of int32 arrays, tokenising many sentences per call (a
    tokenized corpus, model/pretraining/tokenized.py, as it is)."""
    pending, pending_sentences = [], 0

    def flush():
        if not pending:
            return
        texts = [s for doc in pending for s in doc]
        encoded = iter(tokenizer.encode(texts))
        for doc in pending:
            # `doc` first: zip(encoded, doc) would pull one more sentence from
            # `encoded` at the end of each document and drop it.
            yield [np.asarray(ids, dtype=np.int32) for _, ids in zip(doc, encoded)]

    for path in files:
        if is_tokenized(path):  # already ids: no tokenizer call
            yield from flush()
            pending, pending_sentences = [], 0
            yield from read_documents(
                path, vocabulary_sha256(tokenizer.vocab_path), tokenizer.lowercase
            )
            if progress is not None:
                progress.update(os.path.getsize(path))
            continue
        for doc in iter_documents(path, fmt):
            pending.append(doc)
            pending_sentences += len(doc)
            if pending_sentences >= batch_sentences:
                yield from flush()
                pending, pending_sentences = [], 0
        if progress is not None:
            progress.update(os.path.getsize(path))
    yield from flush()


def pool_rng(seed: int, index: int) -> random.Random:
    """Pool `index`'s random numbers: its own stream, so pools are made in any order or in
    parallel with the same result. Pool 0 takes the seed itself, so a one-pool corpus
    (every held-out set) gives the instances it always gave."""
    return random.Random(seed if index == 0 else f"{seed}/{index}")


def pools(files, tokenizer, instance_config, corpus_format, pool_tokens, progress=None):
    """Yields `(documents, packed)` for each pool of about `pool_tokens` tokens, in reading
    order; `packed` is the pool's inputs in a packed format (None otherwise), packed here
    because `full-sentences` carries an unfinished input over from one pool to the next."""
    packer = SentencePacker(instance_config, tokenizer.sep_id) if instance_config.packed else None

    def finish(pool, last=False):
        if packer is None:
            return pool, None
        packed = [inst for doc in pool for inst in packer.add(doc)]
        return pool, packed + (packer.finish() if last else [])

    pool, pool_size = [], 0
    for doc in tokenized_documents(files, corpus_format, tokenizer, progress):
        doc = [s for s in doc if len(s)]
        if not doc:
            continue
        if progress is not None:
            progress.document(doc)
        pool.append(doc)
        pool_size += sum(len(s) for s in doc)
        if pool_size >= pool_tokens:
            yield finish(pool)
            pool, pool_size = [], 0
    # A full-sentences input may be left over from the last full pool.
    if pool or packer is not None:
        yield finish(pool, last=True)


def pool_instances(pool, packed, index, instance_config, seed, dupe_factor=1) -> list:
    """Pool `index`'s instances, shuffled: `dupe_factor` times each document's (with
    different random pairings; the packed inputs have no randomness, so their copies are
    identical, to be masked differently)."""
    rng = pool_rng(seed, index)
    if packed is not None:
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
    """Yields pre-training `Instance`s of `files`, a bounded pool of documents at a time
    (`pools`, `pool_instances`), deterministic for a given `seed`."""
    stream = pools(files, tokenizer, instance_config, corpus_format, pool_tokens, progress)
    for index, (pool, packed) in enumerate(stream):
        yield from pool_instances(pool, packed, index, instance_config, seed, dupe_factor)


@dataclasses.dataclass(frozen=True)
class _PoolRecords:
    """What turns a pool into framed records, in this process or a worker's: the pool's
    instances, packed into features, masked when static, serialized and framed."""

    vocab_path: str
    lowercase: bool
    instance_config: InstanceConfig
    masking: str
    masking_config: MaskingConfig
    dupe_factor: int
    seed: int

    def __call__(self, pool, packed, index) -> list[bytes]:
        from model.text.wordpiece import WordPieceTokenizer  # its pack(): the ids only

        tokenizer = _worker_tokenizer(WordPieceTokenizer, self.vocab_path, self.lowercase)
        masker = Masker(tokenizer.vocabulary, self.masking_config)
        seq_len = self.instance_config.max_seq_length
        nsp_label = _writes_nsp_label(self.instance_config)
        dupes = self.dupe_factor if self.masking == "static" else 1
        out = []
        instances = pool_instances(pool, packed, index, self.instance_config, self.seed, dupes)
        for i, inst in enumerate(instances):
            feats = instance_features(inst, tokenizer, seq_len, nsp_label)
            if self.masking == "static":
                masked, pos, labels, weights = masker(
                    feats["input_ids"], np.random.default_rng([self.seed, index, i])
                )
                feats.update(
                    input_ids=masked,
                    masked_lm_positions=pos,
                    masked_lm_ids=labels,
                    masked_lm_weights=weights,
                )
            out.append(frame(serialize_example(feats)))
        return out


@functools.lru_cache(maxsize=2)
def _worker_tokenizer(cls, vocab_path: str, lowercase: bool):
    return cls(vocab_path, lowercase=lowercase)


def _pool_results(pool_stream, make: _PoolRecords, workers: int):
    """Each pool's framed records, in pool order: made here, or by `workers` processes
    (spawned, not forked: the parent may hold TensorFlow's threads) a few pools ahead."""
    stream = iter(pool_stream)
    ahead = list(itertools.islice(stream, 2))
    if workers <= 1 or len(ahead) < 2:  # one pool (a small corpus): no processes to start
        for index, (pool, packed) in enumerate(itertools.chain(ahead, stream)):
            yield make(pool, packed, index)
        return
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as executor:
        pending = collections.deque()
        for index, (pool, packed) in enumerate(itertools.chain(ahead, stream)):
            pending.append(executor.submit(make, pool, packed, index))
            if len(pending) > 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


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
    workers: int = 1,
) -> dict:
    """Writes the shards of `files` into the new directory `output`; returns its info.
    `workers` processes make the pools' records (the same bytes for any number)."""

    _check(tokenizer, output, masking, masking_config)
    parent = os.path.dirname(os.path.abspath(output))
    os.makedirs(parent, exist_ok=True)
    tmp = staging_dir(parent, f".{os.path.basename(output)}.tmp-")
    try:
        progress = _bar(sum(os.path.getsize(f) for f in files), show_progress)
        stats = {"num_documents": 0, "num_tokens": 0}
        make = _PoolRecords(
            tokenizer.vocab_path,
            tokenizer.lowercase,
            instance_config,
            masking,
            masking_config,
            dupe_factor,
            seed,
        )
        stream = pools(
            files,
            tokenizer,
            instance_config,
            corpus_format,
            pool_tokens,
            _Progress(progress, stats),
        )
        shards = _write_shards(tmp, _pool_results(stream, make, workers), num_shards, progress)
        if sum(shards.values()) == 0:
            raise ValueError(f"no instances: the input has no text ({', '.join(files[:3])})")
        copy_vocabulary(tokenizer.vocab_path, tmp)
        info = {
            "format": "bert-pretraining-records/1",
            "num_instances": sum(shards.values()),
            "shards": shards,
            **stats,
            **_recipe(tokenizer, instance_config, masking, masking_config, dupe_factor),
            "seed": seed,
            "inputs": files,
        }
        _publish(tmp, output, info)
        return info
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _check(tokenizer, output: str, masking: str, masking_config: MaskingConfig) -> None:
    """Stops a build that would fail late (or overwrite): before any text is read."""
    if masking not in ("dynamic", "static"):
        raise ValueError(f"masking must be 'dynamic' or 'static', got {masking!r}")
    try:
        Masker(tokenizer.vocabulary, masking_config)  # checks [MASK] early
    except ValueError as e:
        raise ValueError(f"{tokenizer.vocab_path}: {e}") from None
    check_free(output)


def check_free(output: str) -> None:
    """FileExistsError where `output`, the records' folder, exists and is a file or holds
    anything: a build never writes among or over other files."""
    if os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        raise FileExistsError(f"{output}: output exists and is not an empty directory")


def _recipe(tokenizer, instance_config, masking, masking_config, dupe_factor: int) -> dict:
    """The dataset info's fields that say how its instances were made."""
    return {
        "max_seq_length": instance_config.max_seq_length,
        "input_format": instance_config.inputs,
        "next_sentence": instance_config.next_sentence,
        # The packed formats never shorten an instance on purpose.
        "short_seq_prob": 0.0 if instance_config.packed else instance_config.short_seq_prob,
        "masking": masking,
        "masking_config": dataclasses.asdict(masking_config) if masking == "static" else None,
        "dupe_factor": dupe_factor,
        "lowercase": tokenizer.lowercase,
        "vocab_sha256": vocabulary_sha256(tokenizer.vocab_path),
    }


def _publish(tmp: str, output: str, info: dict) -> None:
    """Writes the info into the finished folder `tmp` and renames it to `output`."""
    with open(os.path.join(tmp, INFO), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
    if os.path.isdir(output):
        os.rmdir(output)  # empty, checked before the build
    os.replace(tmp, output)


def _write_shards(folder: str, pool_records, num_shards: int, progress) -> dict[str, int]:
    """Deals each pool's framed records in turn to `num_shards` shard files in `folder`
    (record k to shard k mod num_shards); returns {shard file name: records}."""
    names = [f"part-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]
    writers = [RecordWriter(os.path.join(folder, n)) for n in names]
    counts = [0] * num_shards
    total = 0
    for records in pool_records:
        for framed in records:
            shard = total % num_shards
            writers[shard].write_framed(framed)
            counts[shard] += 1
            total += 1
        progress.set_postfix(instances=total)
    progress.close()
    for w in writers:
        w.close()
    return dict(zip(names, counts))


def _bar(total: int, show: bool):
    """tqdm's progress bar over the input bytes; a silent one where tqdm is not installed
    (a GPU machine's environment of model/requirements-jax.txt)."""
    try:
        from tqdm import tqdm
    except ImportError:
        show = False
    if not show:
        return types.SimpleNamespace(
            update=lambda n: None, set_postfix=lambda **k: None, close=lambda: None
        )
    return tqdm(total=total, unit="B", unit_scale=True, desc="instances")


class _Progress:
    """Counts documents and tokens as they stream past, and advances the bar by file size."""

    def __init__(self, bar, stats):
        self.bar, self.stats = bar, stats

    def update(self, nbytes):
        self.bar.update(nbytes)

    def document(self, doc):
        self.stats["num_documents"] += 1
        self.stats["num_tokens"] += sum(len(s) for s in doc)
