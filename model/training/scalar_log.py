"""The training curves where TensorBoard cannot write them (no TensorFlow: the JAX backend).

`OUTPUT/logs/scalars.csv` holds `tag,step,value` rows: `train/loss` (and every other number
Keras logs at a batch end: a pre-training's `mlm_loss`, `nsp_accuracy`, ...) every
`--log-every` steps, and what a run adds (fine-tuning's `dev/...` metrics).
"""

from __future__ import annotations

import os

import keras

from model.training.checkpointing import optimizer_step

SCALARS = "scalars.csv"


def append_scalars(path: str, step: int, scalars: dict) -> None:
    """Adds `tag,step,value` rows to the CSV log `path` (a header first when
    it is new): the backend-neutral stand-in for TensorBoard's scalars. Rows of
    steps run again after a restart appear twice, as in TensorBoard."""
    from model.io.files import atomic_open

    old = "tag,step,value\n"
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            old = f.read()
    with atomic_open(path) as f:  # a small file: rewritten whole, never half-written
        f.write(old + "".join(f"{tag},{step},{float(value)!r}\n" for tag, value in scalars.items()))


class ScalarLog(keras.callbacks.Callback):
    """Appends the batch-end logs, as `train/NAME`, to the CSV log `path` whenever the step
    reaches a multiple of `every` (a call of several steps: when it passes one)."""

    def __init__(self, path: str, every: int):
        super().__init__()
        self.path, self.every = path, max(1, every)
        self.last = 0

    def on_train_begin(self, logs=None):
        self.last = optimizer_step(self.model)  # a resumed run's first step

    def on_train_batch_end(self, batch, logs=None):
        step = optimizer_step(self.model)
        last, self.last = self.last, step
        if step // self.every > last // self.every and logs:
            scalars = {f"train/{k}": v for k, v in logs.items() if _is_number(v)}
            if scalars:
                append_scalars(self.path, step, scalars)


def _is_number(value) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True
