"""A run's training curves: TensorBoard's logs on the TensorFlow backend, and where a run does
not use TensorFlow (the JAX backend, which never imports it) the same scalars as CSV
(`run_logs`, for pre-training and fine-tuning alike).

`OUTPUT/logs/scalars.csv` holds `tag,step,value` rows: `train/loss` (and every other number
Keras logs at a batch end: a pre-training's `mlm_loss`, `nsp_accuracy`, ...) every
`--log-every` steps, and what a run adds (fine-tuning's `dev/...` metrics).
"""

from __future__ import annotations

import os
import time

import keras

from model.training.checkpointing import optimizer_step

SCALARS = "scalars.csv"


def run_logs(logs: str, every: int, tensorflow: bool):
    """(the Keras callback that logs the training scalars every `every` steps,
    `log(step, scalars)` for what a run adds, e.g. fine-tuning's dev metrics as `dev/NAME`):
    TensorBoard under `logs` on TensorFlow, `logs`/scalars.csv otherwise (said once)."""
    if tensorflow:
        import tensorflow as tf

        writer = {}  # created at the first call: a run that adds nothing leaves no folder

        def log(step: int, scalars: dict) -> None:
            if not scalars:
                return
            if not writer:
                writer["dev"] = tf.summary.create_file_writer(os.path.join(logs, "dev"))
            with writer["dev"].as_default():
                for k, v in scalars.items():
                    tf.summary.scalar(k, v, step=step)

        return keras.callbacks.TensorBoard(logs, update_freq=every), log
    path = os.path.join(logs, SCALARS)
    print(f"backend {keras.backend.backend()}: no TensorBoard; the curves go to {path}")

    def log(step: int, scalars: dict) -> None:
        if scalars:
            append_scalars(path, step, {f"dev/{k}": v for k, v in scalars.items()})

    return ScalarLog(path, every), log


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


class ProgressLines(keras.callbacks.Callback):
    """Prints `step N/TOTAL loss L (S s)` every `every` steps."""

    def __init__(self, every: int, total: int):
        super().__init__()
        self.every, self.total = max(1, every), total
        self.start = time.time()

    def on_train_batch_end(self, batch, logs=None):
        step = optimizer_step(self.model)
        if step % self.every == 0:
            loss = (logs or {}).get("loss")
            loss = f" loss {float(loss):.4f}" if loss is not None else ""
            print(f"step {step}/{self.total}{loss} ({time.time() - self.start:.0f} s)", flush=True)
