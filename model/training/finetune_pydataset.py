"""The fine-tuning input pipeline without TensorFlow: a `keras.utils.PyDataset`.

    KERAS_BACKEND=jax python -m model.train finetune --task sst2 --data DATA --init INIT \\
        --output RUN

picks it (model/training/finetune.py uses it whenever the Keras backend is not
TensorFlow). For the same encoded features, seed and epoch it yields exactly
the batches of `tf_dataset` in model/training/finetune_tfdata.py, which the TensorFlow
backend trains on: the same rows in the same order, cut to the same length,
with `--group-by-length` too, and from the same batch on after a restart
(`start`). tests/test_jax_finetune.py checks it against TensorFlow.

TensorFlow's pipeline, step by step, and its numpy twin here:

- `shuffle(num_features, seed=seed + epoch, reshuffle_each_iteration=False)`
  after `keras.utils.set_random_seed(seed)`: the whole set in one buffer,
  drawn with Philox keyed by (global seed, op seed), which
  model/pretraining/pydataset.py reproduces (`shuffled`); `epoch_order`.
- `batch(batch_size)`, or with `--group-by-length`
  `bucket_by_sequence_length(boundaries=length_boundaries(seq_len))`:
  a feature goes to the bucket of its length (its longest row of
  `padding_mask`; SWAG has one per choice), a bucket is emitted as a batch
  the moment it holds `batch_size` features, and when the input ends the
  partly filled buckets follow in order of bucket, shortest first
  (tf.data's `group_by_window`); `epoch_batches`.
- `trim_batch`: every input, and every per-token label, cut to the longest
  row of the batch rounded up to `LENGTH_MULTIPLE` (`trim`).

One difference, only under `keras.distribution.DataParallel` with N devices
(`multiple_of=N`): Keras splits every batch evenly over the devices, so a
short batch (an epoch's last, or a bucket's leftover) keeps a multiple of N
rows, dropping its last few, and one of fewer than N rows is left out.
TensorFlow's mirrored strategy splits such a batch unevenly instead.
"""

from __future__ import annotations

import keras
import numpy as np

from model.pretraining.pydataset import shuffle_seeds, shuffled
from model.tasks.base import LENGTH_MULTIPLE, Encoded, trimmed_length

_MAXINT32 = 2**31 - 1


def length_boundaries(seq_len: int) -> list[int]:
    """`--group-by-length`'s bucket boundaries: lengths 1-16, 17-32, ... share
    a bucket, so a bucket's batches trim to one width (`trim`)."""
    return list(range(LENGTH_MULTIPLE + 1, seq_len + 1, LENGTH_MULTIPLE))


def feature_lengths(encoded: Encoded) -> np.ndarray:
    """(num_features,) real tokens of each feature's longest row (SWAG: of its choices)."""
    mask = np.asarray(encoded.x["padding_mask"])
    return mask.reshape(len(mask), -1, mask.shape[-1]).sum(-1, dtype=np.int64).max(-1)


def epoch_order(num: int, seed: int, epoch: int) -> list[int]:
    """The order of `Dataset.from_tensor_slices(range(num)).shuffle(num,
    seed=seed + epoch, reshuffle_each_iteration=False)` built eagerly after
    `tf.random.set_seed(seed)` (what `keras.utils.set_random_seed` does)."""
    if seed == 0:
        # Eagerly, TensorFlow takes a global seed of 0 as a seed (the
        # pre-training pipeline's flat_map treats it as none: `shuffle_seeds`).
        seed2 = epoch % _MAXINT32
        seeds = (0, seed2 or _MAXINT32)  # (0, 0) means "random" to the kernel
    else:
        seeds = shuffle_seeds(seed + epoch, seed)
    return list(shuffled(range(num), num, *seeds))


def epoch_batches(
    order: list[int],
    batch_size: int,
    lengths: np.ndarray | None = None,
    boundaries: list[int] | None = None,
) -> list[np.ndarray]:
    """The features of each batch, in order: `order` cut into batches, or with
    `lengths` and `boundaries` grouped as `bucket_by_sequence_length` does."""
    if lengths is None:
        return [np.asarray(order[i : i + batch_size]) for i in range(0, len(order), batch_size)]
    buckets = np.searchsorted(np.asarray(boundaries), lengths, side="right")
    batches, open_buckets = [], {}
    for i in order:
        bucket = open_buckets.setdefault(int(buckets[i]), [])
        bucket.append(i)
        if len(bucket) == batch_size:
            batches.append(np.asarray(bucket))
            del open_buckets[int(buckets[i])]
    # The input is done: the leftovers, shortest bucket first.
    batches += [np.asarray(open_buckets[b]) for b in sorted(open_buckets)]
    return batches


def grouped_batch_count(lengths: np.ndarray, boundaries: list[int], batch_size: int) -> int:
    """The batches of one `--group-by-length` epoch, whatever the order: each
    bucket yields its full batches, then its part-filled one."""
    buckets = np.searchsorted(np.asarray(boundaries), lengths, side="right")
    return int(sum(-(-int(n) // batch_size) for n in np.bincount(buckets) if n))


def trim(batch: tuple, seq_len: int) -> tuple:
    """`(x, y[, sample_weight])` cut to `trimmed_length` of the batch's
    padding mask: every input, and labels or weights of shape (batch, ..., seq_len)."""
    x, *rest = batch
    length = trimmed_length(x["padding_mask"])

    def cut(a):
        return a[..., :length] if a.ndim >= 2 and a.shape[-1] == seq_len else a

    return (
        {k: v[..., :length] for k, v in x.items()},
        *(keras.tree.map_structure(cut, item) for item in rest),
    )


class FinetunePyDataset(keras.utils.PyDataset):
    """Epoch `epoch` of fine-tuning batches `(x, y[, sample_weight])` as numpy
    arrays, from batch `start` on (a restart inside the epoch).

    Args:
        encoded: the task's training features (`Task.encode(..., training=True)`).
        batch_size: rows a batch.
        seq_len: the length the features were encoded to.
        seed: `--seed` (the global seed and, plus `epoch`, the shuffle's seed).
        epoch: which epoch's order.
        start: the first batch to yield.
        group_by_length: `--group-by-length`'s buckets.
        multiple_of: rows a batch must be a multiple of (see the module docstring).

    Example:
    >>> ds = FinetunePyDataset(encoded, 32, 128, seed=12345, epoch=0)  # doctest: +SKIP
    >>> x, y = ds[0]                                                  # doctest: +SKIP
    """

    def __init__(
        self,
        encoded: Encoded,
        batch_size: int,
        seq_len: int,
        seed: int,
        epoch: int,
        start: int = 0,
        group_by_length: bool = False,
        multiple_of: int = 1,
    ):
        super().__init__(workers=1, use_multiprocessing=False)
        if batch_size % multiple_of:
            raise ValueError(f"batch size {batch_size} is not a multiple of {multiple_of}")
        order = epoch_order(len(encoded), seed, epoch)
        grouping = (feature_lengths(encoded), length_boundaries(seq_len)) if group_by_length else ()
        batches = [
            b[: len(b) - len(b) % multiple_of] for b in epoch_batches(order, batch_size, *grouping)
        ]
        self.batches = [b for b in batches if len(b)][start:]
        self.encoded, self.seq_len = encoded, seq_len

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int):
        rows = self.batches[index]
        items = [self.encoded.x, self.encoded.y]
        if self.encoded.sample_weight is not None:
            items.append(self.encoded.sample_weight)
        return trim(
            tuple(keras.tree.map_structure(lambda a: np.asarray(a)[rows], item) for item in items),
            self.seq_len,
        )
