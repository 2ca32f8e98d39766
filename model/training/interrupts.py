"""Ctrl-C that reaches a training run wherever it waits.

On JAX a step's end waits for the device inside `np.array(jax_array)` (Keras turns each
batch's logs into numbers there), and an exception that a signal handler raises inside
that call is lost in numpy's C code: a `--device-data` run, which spends nearly all its
time waiting there, went on to its last step after Ctrl-C. `interruptible()` notes each
interrupt as well as raising it, and the callback it yields raises it again at the next
batch end, outside numpy; a SIGTERM (where Python handles it) is raised there alone.
"""

from __future__ import annotations

import contextlib
import signal
import threading

import keras


class RaiseAtBatchEnd(keras.callbacks.Callback):
    """Raises the stop of the first signal noted (KeyboardInterrupt for Ctrl-C, SystemExit
    for a SIGTERM under `model.io.files.exit_on_sigterm`) at the next batch end."""

    def __init__(self):
        super().__init__()
        self.pending = None  # (the handler that raised, its signal) once one was noted

    def check(self) -> None:
        if self.pending:
            handler, signum = self.pending
            self.pending = None
            handler(signum, None)

    def on_train_batch_end(self, batch, logs=None):
        self.check()

    def on_test_batch_end(self, batch, logs=None):
        self.check()


@contextlib.contextmanager
def interruptible():
    """Yields a `RaiseAtBatchEnd` for `model.fit`'s callbacks. Within the block a SIGINT
    raises as usual and is also noted for it; a SIGTERM that Python handles is only noted,
    so the run stops at the next batch end: raised wherever it landed, inside TensorFlow's
    C++ as a step runs, its SystemExit crashed the process (SIGSEGV) before any line was
    printed. A signal that is ignored (SIGINT in a background job of a script) or not
    Python's to handle (SIGTERM by default kills) is left as it is."""
    callback = RaiseAtBatchEnd()
    if threading.current_thread() is not threading.main_thread():
        yield callback
        return
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if callable(handler):
            previous[signum] = handler
            signal.signal(signum, _noting(callback, handler, now=signum == signal.SIGINT))
    try:
        yield callback
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _noting(callback: RaiseAtBatchEnd, handler, now: bool):
    def noted(signum, frame):
        again = callback.pending is not None
        callback.pending = (handler, signum)
        if now or again:  # a second SIGTERM does not wait (a long compile, a stuck step)
            handler(signum, frame)

    return noted
