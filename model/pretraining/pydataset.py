"""The pre-training input pipeline without TensorFlow: a `keras.utils.PyDataset`.

    KERAS_BACKEND=jax python -m model.train pretrain --data DATA --output RUN ...

picks it (model/train.py uses it whenever the Keras backend is not
TensorFlow). It yields exactly the batches of `pretraining_dataset` in
model/pretraining/dataset.py for the same records, seed, start step and
worker sharding: same examples in the same order, same dynamic masks, same
weights, so a run can move between the TensorFlow and JAX backends (or
resume on the other one) at the same position in the data.

Same order means reproducing tf.data's own randomness, which this module
does in numpy, checked against TensorFlow by tests/test_jax_backend.py:

- Philox-4x32-10, TensorFlow's counter-based generator;
- `tf.random.experimental.stateless_shuffle(files, seed=[seed, epoch])`:
  the seed scrambled through one Philox block, then a forward
  Fisher-Yates shuffle drawing `uint32 % (n - i)`;
- `interleave(TFRecordDataset, cycle_length=min(8, files), block_length=1)`:
  round robin over open files, an exhausted file's slot refilled from the
  next file when the cycle comes back to it;
- `shuffle(buffer, seed=op_seed)`: a buffer filled to `buffer` elements,
  each output drawn at `uint32 % live` and replaced by the oldest element,
  Philox keyed by (graph seed, op seed mod 2^31-1). The graph seed is the
  one `tf.random.set_seed` (so `keras.utils.set_random_seed`, which the
  trainer calls with `--seed`) installed in the TensorFlow process, or
  TensorFlow's default 87654321 when none was; `graph_seed` says which.

Records are read with model/pretraining/records.py (checksums verified).
"""

from __future__ import annotations

import threading

import keras
import numpy as np

from model.pretraining.masking import MaskedLMBatches, Masker
from model.pretraining.records import (
    check_features,
    find_records,
    parse_record,
    read_records,
)

DEFAULT_GRAPH_SEED = 87654321  # TensorFlow's, used when no global seed is set
_MAXINT32 = 2**31 - 1


# === tf.data's randomness, in numpy ===

_M_A, _M_B, _W_A, _W_B = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85


def philox(
    key: tuple[int, int], counter: tuple[int, int, int, int], n: int, skip: int = 0
) -> np.ndarray:
    """`n` Philox-4x32-10 blocks, (n, 4) uint32, as TensorFlow's PhiloxRandom
    makes them from `key` and `counter`, starting `skip` blocks in."""
    u64 = np.uint64
    mask = u64(0xFFFFFFFF)
    low = u64((counter[0] | counter[1] << 32) + skip) + np.arange(n, dtype=np.uint64)
    c = [low & mask, low >> u64(32), np.full(n, counter[2], u64), np.full(n, counter[3], u64)]
    k0, k1 = u64(key[0]), u64(key[1])
    for _ in range(10):
        p0, p1 = u64(_M_A) * c[0], u64(_M_B) * c[2]  # 32 x 32 -> 64 bits, exact in uint64
        c = [(p1 >> u64(32)) ^ c[1] ^ k0, p1 & mask, (p0 >> u64(32)) ^ c[3] ^ k1, p0 & mask]
        k0, k1 = (k0 + u64(_W_A)) & mask, (k1 + u64(_W_B)) & mask
    return np.stack(c, axis=1).astype(np.uint32)


def _split64(x: int) -> tuple[int, int]:
    x &= (1 << 64) - 1
    return x & 0xFFFFFFFF, x >> 32


def stateless_permutation(size: int, seed0: int, seed1: int) -> list[int]:
    """The permutation `tf.random.experimental.stateless_shuffle(range(size),
    seed=[seed0, seed1])` applies (Philox algorithm)."""
    mix = philox((0x3EC8F720, 0x02461E29), (*_split64(seed0), *_split64(seed1)), 1)[0]
    draws = philox(
        (int(mix[0]), int(mix[1])), (0, 0, int(mix[2]), int(mix[3])), (size + 3) // 4
    ).reshape(-1)
    order = list(range(size))
    for i in range(size - 1):
        j = i + int(draws[i]) % (size - i)
        order[i], order[j] = order[j], order[i]
    return order


def shuffle_seeds(op_seed: int, graph_seed: int | None) -> tuple[int, int]:
    """The (seed, seed2) tf.data's `shuffle(seed=op_seed)` runs on
    (tensorflow/python/data/util/random_seed.py and framework/random_seed.py)."""
    op_seed = (op_seed + (1 << 63)) % (1 << 64) - (1 << 63)  # int64 arithmetic, as in the graph
    # A global seed of 0 counts as none (model/pretraining/dataset.py's `epoch`).
    seed = DEFAULT_GRAPH_SEED if not graph_seed else graph_seed % _MAXINT32
    seed2 = op_seed % _MAXINT32
    if seed == 0 and seed2 == 0:
        seed2 = _MAXINT32
    return seed, seed2


def shuffled(elements, buffer_size: int, seed: int, seed2: int):
    """Yields `elements` in the order of tf.data's `shuffle(buffer_size)` with those seeds."""
    key, counter = _split64(seed), (0, 0, *_split64(seed2))
    draws, used, blocks = np.zeros(0, np.uint32), 0, 0
    buffer, start = [], 0
    source = iter(elements)
    exhausted = False
    while True:
        while not exhausted and len(buffer) - start < buffer_size:
            try:
                buffer.append(next(source))
            except StopIteration:
                exhausted = True
        live = len(buffer) - start
        if live == 0:
            return
        if used == len(draws):
            draws = philox(key, counter, 1024, skip=blocks).reshape(-1)
            blocks, used = blocks + 1024, 0
        i = start + int(draws[used]) % live
        used += 1
        yield buffer[i]
        buffer[i] = buffer[start]
        buffer[start] = None
        start += 1
        if start > 4096 and start * 2 > len(buffer):  # drop the consumed prefix
            del buffer[:start]
            start = 0


def interleaved(files: list[str], cycle_length: int):
    """`(path, offset, record)` in the order of `Dataset.from_tensor_slices(files)
    .interleave(TFRecordDataset, cycle_length, block_length=1)`."""
    pending = iter(files)
    slots = [None] * cycle_length
    open_count, inputs_done, i = 0, False, 0
    while not inputs_done or open_count:
        if slots[i] is not None:
            path, reader = slots[i]
            item = next(reader, None)
            if item is not None:
                yield (path, *item)
            else:
                slots[i] = None
                open_count -= 1
            i = (i + 1) % cycle_length
        elif not inputs_done:
            path = next(pending, None)
            if path is None:
                inputs_done = True
            else:
                slots[i] = (path, read_records(path))
                open_count += 1
        else:
            i = (i + 1) % cycle_length


def epoch_records(
    files: list[str], epoch: int, seed: int, shuffle_buffer: int, graph_seed: int | None
):
    """Epoch `epoch` of the stream, as `(path, offset, record)`s."""
    order = stateless_permutation(len(files), seed, epoch)
    records = interleaved([files[k] for k in order], min(8, len(files)))
    return shuffled(records, shuffle_buffer, *shuffle_seeds(seed * 1_000_003 + epoch, graph_seed))


# === The PyDataset ===


def feature_lengths(seq_len: int, next_sentence: bool, max_predictions: int | None) -> dict:
    """The features a record must have, name: length (a static record's masks too)."""
    want = {"input_ids": seq_len, "input_mask": seq_len, "segment_ids": seq_len}
    if next_sentence:
        want["next_sentence_labels"] = 1
    if max_predictions is not None:
        want.update(
            masked_lm_positions=max_predictions,
            masked_lm_ids=max_predictions,
            masked_lm_weights=max_predictions,
        )
    return want


class PretrainingPyDataset(keras.utils.PyDataset):
    """Batches of `({token_ids, segment_ids, padding_mask, mask_positions},
    {mlm, nsp}, {mlm, nsp})` as numpy arrays, endless; item `i` is training
    step `start_step + i`. The arguments mean what they mean for
    `pretraining_dataset`; `graph_seed` is explained in the module docstring.

    With `num_workers` > 1 (one JAX process per host) this process gets rows
    `[worker_index * b, (worker_index + 1) * b)` of every global batch, and
    the weights are scaled by the whole global batch's masked positions,
    exactly as the TensorFlow pipeline does; the devices of one process
    split its rows through `keras.distribution`, not here.

    Reads are sequential: asking for the next item continues the stream,
    any other item restarts the reader at that position (as a restart does).
    """

    def __init__(
        self,
        pattern: str,
        batch_size: int,
        masker: Masker | None = None,
        seed: int = 0,
        start_step: int = 0,
        shuffle_buffer: int = 10_000,
        next_sentence: bool = True,
        worker_index: int = 0,
        num_workers: int = 1,
        graph_seed: int | None = None,
        transform=None,
        steps: int | None = None,
    ):
        super().__init__(workers=1, use_multiprocessing=False)
        self.steps = steps
        if batch_size % num_workers or not 0 <= worker_index < num_workers:
            raise ValueError(
                f"global batch {batch_size} cannot be split into {num_workers} worker(s)"
            )
        self.files, info = find_records(pattern)
        self.seq_len = info["max_seq_length"]
        self.static = info.get("masking") == "static"
        if transform is None and masker is not None:
            transform = MaskedLMBatches(masker)
        if not self.static and transform is None:
            raise ValueError(
                f"{pattern}: records are not masked; pass a Masker for dynamic masking"
            )
        if next_sentence and not info.get("next_sentence", True):
            raise ValueError(
                f"{pattern}: records were made without next-sentence labels (--no-nsp)"
            )
        self.has_nsp_labels = info.get("next_sentence", True)
        self.num = info["num_instances"]
        if self.static:
            self.max_predictions = info["masking_config"]["max_predictions"]
        self.batch_size, self.transform, self.seed = batch_size, transform, seed
        self.layout = None if self.static else transform.outputs(self.seq_len)
        self.start_step, self.shuffle_buffer = start_step, shuffle_buffer
        self.next_sentence, self.graph_seed = next_sentence, graph_seed
        rows = batch_size // num_workers
        self.rows = slice(worker_index * rows, (worker_index + 1) * rows)
        self._lock = threading.Lock()
        self._position, self._stream = None, None

    @property
    def num_batches(self):
        # Endless, like the tf.data stream; or `steps` batches, the same ones each time Keras
        # goes through it (held-out data: an endless one would go on where it stopped).
        return self.steps

    def _records(self, position: int):
        epoch, offset = divmod(position, self.num)
        while True:
            for k, item in enumerate(
                epoch_records(self.files, epoch, self.seed, self.shuffle_buffer, self.graph_seed)
            ):
                if k >= offset:
                    yield item
            epoch, offset = epoch + 1, 0

    def _read(self, position: int, n: int) -> list:
        with self._lock:
            if self._position != position:
                self._stream, self._position = self._records(position), position
            batch = [next(self._stream) for _ in range(n)]
            self._position += n
            return batch

    def _features(self, path, offset, record) -> dict:
        want = feature_lengths(
            self.seq_len, self.has_nsp_labels, self.max_predictions if self.static else None
        )
        return check_features(parse_record(path, offset, record), want, path, offset)

    def __getitem__(self, index: int):
        start = (self.start_step + index) * self.batch_size
        examples = [self._features(*item) for item in self._read(start, self.batch_size)]

        def stack(name, dtype):
            return np.stack([ex[name] for ex in examples]).astype(dtype)

        token_ids = stack("input_ids", np.int32)  # (batch, seq_len)
        x = {
            "token_ids": token_ids,
            "segment_ids": stack("segment_ids", np.int32),
            "padding_mask": stack("input_mask", np.int32),
        }
        if self.static:
            x["mask_positions"] = stack("masked_lm_positions", np.int32)
            y = {"mlm": stack("masked_lm_ids", np.int32)}
            sw = {"mlm": stack("masked_lm_weights", np.float32)}  # (batch, max_predictions)
        else:
            keys = np.stack(
                [
                    np.full(self.batch_size, self.seed, np.int64),
                    np.arange(start, start + self.batch_size, dtype=np.int64),
                ],
                axis=1,
            )
            out = self.transform(token_ids, x["padding_mask"], keys)
            cast = lambda group: {  # noqa: E731
                name: np.asarray(value, self.layout[group][name][0])
                for name, value in out[group].items()
            }
            x.update(cast("x"))  # an "x" token_ids replaces the record's
            y, sw = cast("y"), cast("sw")
        # The same scaling as the TensorFlow pipeline (see the comment there):
        # the mean over the global batch's real masked positions.
        for name, weights in sw.items():
            scale = np.float32(weights.size) / np.maximum(
                weights.sum(dtype=np.float32), np.float32(1.0)
            )
            sw[name] = (weights * scale).astype(np.float32)
        if self.next_sentence:
            y["nsp"] = stack("next_sentence_labels", np.int32)  # (batch, 1)
            sw["nsp"] = np.ones(self.batch_size, np.float32)
        rows = self.rows
        pick = lambda tree: {k: v[rows] for k, v in tree.items()}  # noqa: E731
        return pick(x), pick(y), pick(sw)
