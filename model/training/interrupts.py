"""Ctrl-C that reaches a training run wherever it waits.

On JAX a step's end waits for the device inside `np.array(jax_array)` (Keras turns each
batch's logs into numbers there), and an exception that a signal handler raises inside
that call is lost in numpy's C code: a `--device-data` run, which spends nearly all its
time waiting there, went on to its last step after Ctrl-C. `interruptible()` notes each
interrupt as well as raising it, and the callback it yields raises it again at the next
batch end, outside numpy.
"""

from __future__ import annotations

import contextlib
import signal
import threading

import keras


class RaiseAtBatchEnd(keras.callbacks.Callback):
    """Raises KeyboardInterrupt at the first batch end after an interrupt was noted."""

    def __init__(self):
        super().__init__()
        self.pending = False

    def check(self) -> None:
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt

    def on_train_batch_end(self, batch, logs=None):
        self.check()

    def on_test_batch_end(self, batch, logs=None):
        self.check()


@contextlib.contextmanager
def interruptible():
    """Yields a `RaiseAtBatchEnd` for `model.fit`'s callbacks; within the block a SIGINT
    raises KeyboardInterrupt as usual and is also noted for it. Where SIGINT is ignored (a
    background job of a script) or not Python's to handle, nothing changes."""
    callback = RaiseAtBatchEnd()
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield callback
        return

    def noted(signum, frame):
        callback.pending = True
        previous(signum, frame)

    signal.signal(signal.SIGINT, noted)
    try:
        yield callback
    finally:
        signal.signal(signal.SIGINT, previous)
