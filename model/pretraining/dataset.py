"""The pre-training input pipeline: TFRecord shards to `(inputs, labels, weights)` batches.

The stream is an endless sequence of epochs; epoch `e` reads the shards in an
order and shuffle fixed by `(seed, e)`. Every example therefore has a fixed
position in the stream, which gives two properties the trainer relies on:

- resuming at step `s` starts at position `s * batch_size` (`start_step`):
  no example is lost or repeated after a restart;
- dynamic masks are drawn from `default_rng([seed, position])`: fresh masks
  every epoch (RoBERTa), identical masks after a restart.

What happens to a batch is the objective's: a batch transform (the
interface of `model.pretraining.masking.MaskedLMBatches`: BERT's masking,
SpanBERT's span masking, the left-to-right LM's next-token labels) runs on
each batch in numpy and adds its inputs, labels and weights. Static records
(made with `--masking static` or google-research's script) carry their own
masks and are used as they are.

Under a tf.distribute strategy (`distributed_pretraining_dataset`) every
input pipeline (one per worker) builds the same global batches and keeps its
own contiguous rows of each, split into consecutive per-replica batches: the
replicas of all workers together see exactly the global batch one replica
would, in the same order, whatever the number of workers.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from model.pretraining.masking import MaskedLMBatches, Masker

# TensorFlow-free, shared with the JAX backend's pipeline; re-exported here.
from model.pretraining.records import INFO, find_records  # noqa: F401


def pretraining_dataset(
    pattern: str,
    batch_size: int,
    masker: Masker | None = None,
    seed: int = 0,
    start_step: int = 0,
    shuffle_buffer: int = 10_000,
    next_sentence: bool = True,
    worker_index: int = 0,
    num_workers: int = 1,
    replica_batch_size: int | None = None,
    transform=None,
) -> tf.data.Dataset:
    """Batches of `(inputs, labels, weights)` dicts, endless, starting
    `start_step` batches in: `({token_ids, segment_ids, padding_mask,
    mask_positions}, {mlm, nsp}, {mlm, nsp})` for BERT's objective.

    `transform` (an objective's batch transform) or `masker` (BERT's masking,
    as `MaskedLMBatches(masker)`) is required for unmasked records and
    ignored for static ones, whose own masks are used. Batches are full
    (`drop_remainder`): TPUs need static shapes.

    `batch_size` is always the global batch. With `num_workers` > 1 this
    pipeline keeps rows `[worker_index * b, (worker_index + 1) * b)` of every
    global batch (`b = batch_size / num_workers`); `replica_batch_size` then
    cuts those rows into consecutive batches of that size, one per local
    replica (tf.distribute hands them to the replicas in turn).
    """
    replica_batch_size = replica_batch_size or batch_size // num_workers
    worker_rows = batch_size // num_workers
    if (
        batch_size % num_workers
        or worker_rows % replica_batch_size
        or not 0 <= worker_index < num_workers
    ):
        raise ValueError(
            f"global batch {batch_size} cannot be split into {num_workers} "
            f"worker(s) of batches of {replica_batch_size}"
        )
    files, info = find_records(pattern)
    static = info.get("masking") == "static"
    if transform is None and masker is not None:
        transform = MaskedLMBatches(masker)
    if not static and transform is None:
        raise ValueError(f"{pattern}: records are not masked; pass a Masker for dynamic masking")
    if next_sentence and not info.get("next_sentence", True):
        raise ValueError(f"{pattern}: records were made without next-sentence labels (--no-nsp)")

    start = start_step * batch_size
    stream = _records_from(files, info["num_instances"], start, seed, shuffle_buffer)
    stream = stream.enumerate(start=start).batch(batch_size, drop_remainder=True)
    to_model = _batch_parser(info, batch_size, seed, None if static else transform, next_sentence)
    batches = stream.map(to_model, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if replica_batch_size != batch_size:
        first = worker_index * worker_rows

        def own_rows(*batch):  # (batch_size, ...) -> (worker_rows, ...)
            return tf.nest.map_structure(lambda t: t[first : first + worker_rows], batch)

        # then (replica_batch_size, ...) batches, one per local replica in turn
        batches = batches.map(own_rows).rebatch(replica_batch_size, drop_remainder=True)
    return batches.prefetch(tf.data.AUTOTUNE)


def _records_from(
    files: list[str], num: int, start: int, seed: int, shuffle_buffer: int
) -> tf.data.Dataset:
    """The endless stream of serialized records from position `start`: epoch `e`
    reads the shards in an order, and shuffles their records, fixed by `(seed, e)`."""
    file_list = tf.constant(files)

    def epoch(e):
        e = tf.cast(e, tf.int64)
        order = tf.random.experimental.stateless_shuffle(
            file_list, seed=tf.stack([tf.constant(seed, tf.int64), e])
        )
        records = tf.data.Dataset.from_tensor_slices(order).interleave(
            tf.data.TFRecordDataset, cycle_length=min(8, len(files)), block_length=1
        )
        # Each epoch is its own dataset with its own seed; reshuffling on
        # re-iteration would break "same position, same example".
        op_seed = tf.constant(seed, tf.int64) * 1_000_003 + e
        graph = tf.compat.v1.get_default_graph()
        if graph.seed == 0:
            # TensorFlow's get_seed tests `(global, op_seed) == (0, 0)`, which
            # turns this symbolic op seed into a Python bool (an error) when
            # the global seed is 0 (`--seed 0`); inside flat_map, treat 0 as unset.
            graph.seed = None
            try:
                return records.shuffle(shuffle_buffer, seed=op_seed, reshuffle_each_iteration=False)
            finally:
                graph.seed = 0
        return records.shuffle(shuffle_buffer, seed=op_seed, reshuffle_each_iteration=False)

    first_epoch, offset = divmod(start, num)
    # Every epoch is built inside flat_map (none eagerly), so each gets its
    # seeds by the same rule whatever the global seed (see `epoch`).
    return tf.data.Dataset.range(first_epoch, 2**62).flat_map(epoch).skip(offset)


def _feature_spec(info: dict) -> dict:
    """`tf.io.parse_example`'s spec of the records `info` (dataset.json) describes."""
    seq_len = info["max_seq_length"]
    spec = {
        "input_ids": tf.io.FixedLenFeature([seq_len], tf.int64),
        "input_mask": tf.io.FixedLenFeature([seq_len], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([seq_len], tf.int64),
    }
    if info.get("next_sentence", True):
        spec["next_sentence_labels"] = tf.io.FixedLenFeature([1], tf.int64)
    if info.get("masking") == "static":
        max_predictions = info["masking_config"]["max_predictions"]
        spec.update(
            {
                "masked_lm_positions": tf.io.FixedLenFeature([max_predictions], tf.int64),
                "masked_lm_ids": tf.io.FixedLenFeature([max_predictions], tf.int64),
                "masked_lm_weights": tf.io.FixedLenFeature([max_predictions], tf.float32),
            }
        )
    return spec


def _batch_parser(info: dict, batch_size: int, seed: int, transform, next_sentence: bool):
    """`(positions, serialized records) -> (x, y, sw)` of one batch: the records'
    own masks (`transform` None: static records) or the transform's outputs."""
    spec = _feature_spec(info)
    apply = None if transform is None else _in_graph(transform, info, batch_size, seed)

    def to_model(positions, serialized):
        ex = tf.io.parse_example(serialized, spec)
        token_ids = tf.cast(ex["input_ids"], tf.int32)  # (batch, seq_len)
        padding_mask = tf.cast(ex["input_mask"], tf.int32)
        x = {
            "token_ids": token_ids,
            "segment_ids": tf.cast(ex["segment_ids"], tf.int32),
            "padding_mask": padding_mask,
        }
        if apply is None:
            x["mask_positions"] = tf.cast(ex["masked_lm_positions"], tf.int32)
            y = {"mlm": tf.cast(ex["masked_lm_ids"], tf.int32)}
            sw = {"mlm": ex["masked_lm_weights"]}  # (batch, max_predictions)
        else:
            y, sw = apply(x, positions)  # an "x" token_ids replaces the record's
        sw = {name: _global_mean_weights(weights) for name, weights in sw.items()}
        if next_sentence:
            y["nsp"] = tf.cast(ex["next_sentence_labels"], tf.int32)  # (batch, 1)
            sw["nsp"] = tf.ones([batch_size], tf.float32)
        return x, y, sw

    return to_model


def _in_graph(transform, info: dict, batch_size: int, seed: int):
    """`transform` (numpy, on a whole batch) as a graph step `(x, positions) -> (y, sw)`
    that also adds its inputs to `x`; the masks of the example at position `p` are
    drawn from `default_rng([seed, p])`."""
    layout = transform.outputs(info["max_seq_length"])
    # The transform's arrays in one fixed order: (group, name, dtype, shape).
    flat = [
        (group, name, dtype, shape)
        for group in ("x", "y", "sw")
        for name, (dtype, shape) in sorted(layout[group].items())
    ]

    def run_transform(token_ids, padding_mask, keys):
        out = transform(token_ids, padding_mask, keys)
        return [np.asarray(out[g][n], dtype) for g, n, dtype, _ in flat]

    def apply(x, positions):
        keys = tf.stack([tf.fill(tf.shape(positions), tf.constant(seed, tf.int64)), positions], 1)
        values = tf.numpy_function(
            run_transform,
            [x["token_ids"], x["padding_mask"], keys],
            [tf.as_dtype(dtype) for _, _, dtype, _ in flat],
            stateful=False,
        )
        out = {"x": x, "y": {}, "sw": {}}
        for (group, name, _, shape), value in zip(flat, values):
            value.set_shape([batch_size, *shape])
            out[group][name] = value
        return out["y"], out["sw"]

    return apply


def _global_mean_weights(weights):
    """The paper's loss is the mean over the global batch's real masked
    positions. Keras divides each replica's weighted loss by its element
    count (batch / N * P), divides again by the N replicas and sums the
    gradients over them; scaling the weights by (batch * P) / (real
    positions of the whole global batch) makes that sum the exact global
    mean on 1 or N replicas, on one worker or several. It is why every
    worker masks the whole global batch before keeping its rows: a worker
    that saw only its own rows could not know the global count without a
    cross-replica sum inside the loss. The price is that each worker
    parses and masks N times the rows it trains on, which is small next
    to a train step of the encoder."""
    scale = tf.cast(tf.size(weights), tf.float32) / tf.maximum(tf.reduce_sum(weights), 1.0)
    return weights * scale


def distributed_pretraining_dataset(
    strategy: tf.distribute.Strategy, pattern: str, batch_size: int, **kwargs
):
    """`pretraining_dataset` (same arguments; `batch_size` global) distributed
    over `strategy`'s replicas: one pipeline per worker, each keeping its rows
    of every global batch, so that N replicas train on what one would."""
    replicas = strategy.num_replicas_in_sync
    if batch_size % replicas:
        raise ValueError(
            f"--batch-size {batch_size} (the global batch) is not a multiple "
            f"of the {replicas} replicas"
        )

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return pretraining_dataset(
            pattern,
            batch_size,
            worker_index=context.input_pipeline_id,
            num_workers=context.num_input_pipelines,
            replica_batch_size=context.get_per_replica_batch_size(batch_size),
            **kwargs,
        )

    return strategy.distribute_datasets_from_function(dataset_fn)
