"""The TensorFlow backend's fine-tuning batches: a `tf.data` pipeline over encoded features.
`model/training/finetune_pydataset.py` yields the same batches without TensorFlow
(tests/test_jax_finetune.py holds them equal, batch for batch).
"""

from __future__ import annotations

from model.tasks.base import LENGTH_MULTIPLE


def tf_dataset(
    encoded,
    batch_size: int,
    seq_len: int,
    shuffle_seed: int,
    group_by_length: bool = False,
    drop_remainder: bool = False,
):
    """One epoch of training batches as a `tf.data.Dataset` (the TensorFlow
    backend's pipeline): shuffled with `shuffle_seed` (`--seed` + epoch, after
    `keras.utils.set_random_seed(--seed)`), batched (by length with
    `group_by_length`), each batch cut by `trim_batch`.
    """
    import tensorflow as tf

    from model.training.finetune_pydataset import length_boundaries

    items = [encoded.x, encoded.y]
    if encoded.sample_weight is not None:
        items.append(encoded.sample_weight)
    ds = tf.data.Dataset.from_tensor_slices(tuple(items))
    ds = ds.shuffle(len(encoded), seed=shuffle_seed, reshuffle_each_iteration=False)
    if drop_remainder:  # TPU: static shapes, every batch full and full-length
        return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    if group_by_length:
        boundaries = length_boundaries(seq_len)
        ds = ds.bucket_by_sequence_length(
            lambda x, *_: tf.reduce_max(
                tf.reduce_sum(tf.reshape(x["padding_mask"], [-1, seq_len]), -1)
            ),
            boundaries,
            [batch_size] * (len(boundaries) + 1),
        )
    else:
        ds = ds.batch(batch_size)
    return ds.map(trim_batch(seq_len)).prefetch(tf.data.AUTOTUNE)


def trim_batch(seq_len: int):
    """A `tf.data` map that cuts a batch to its longest row, rounded up to
    `LENGTH_MULTIPLE` (the rule `predict_in_batches` uses): every input and
    every per-token label or weight loses the padding columns no row needs.

    Padding is masked out of attention and of the loss, so this changes no
    result, only the cost: SST-2's phrases are mostly far shorter than 64.
    """
    import tensorflow as tf

    def trim(*items):
        mask = tf.reshape(items[0]["padding_mask"], [-1, seq_len])
        longest = tf.reduce_max(tf.reduce_sum(tf.cast(mask, tf.int32), -1))
        length = tf.minimum(-(-longest // LENGTH_MULTIPLE) * LENGTH_MULTIPLE, seq_len)

        def cut(t):
            per_token = t.shape.rank >= 2 and t.shape[-1] == seq_len
            return t[..., :length] if per_token else t

        x = {k: v[..., :length] for k, v in items[0].items()}
        return (x, *tf.nest.map_structure(cut, items[1:]))

    return trim
