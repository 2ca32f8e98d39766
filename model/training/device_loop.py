"""Several pre-training steps in one compiled call, their batches made on the device (JAX).

    KERAS_BACKEND=jax python -m model.train pretrain --device-data --steps-per-call 50 ...

Keras 3.15's JAX trainer runs `steps_per_execution` as a Python loop around a
jitted step, each step fed by the host. Here one `jax.jit` program runs K
steps in a `fori_loop`; each step cuts its rows out of the corpus on the
device and masks them there (model/pretraining/device_data.py), then runs
Keras's own pure `train_step(state, data)` (the compiled losses, loss weights,
metrics and optimizer of `model.compile`), so this path changes where the
batches come from and how steps are launched, nothing of what a step
computes. `model.fit` still drives the run: its callbacks (checkpoints,
held-out evaluation, the stop step, TerminateOnNaN) see one batch end per K
steps.

The masking rates and the data seed are arguments of the compiled program,
not constants in it: runs that differ only in them share one program, and
JAX's persistent cache (JAX_COMPILATION_CACHE_DIR) keeps it between
processes.
"""

from __future__ import annotations

import math

import jax
import keras
import numpy as np

from model.pretraining.device_data import DeviceCorpus, make_batch


def steps_per_call(requested: int, *boundaries: int) -> int:
    """The largest K <= `requested` that divides every boundary (the checkpoint interval,
    the stop step, the resumed step): callbacks see the run only between calls."""
    g = 0
    for b in boundaries:
        g = math.gcd(g, b)
    k = max(1, min(requested, g or requested))
    while g and g % k:
        k -= 1
    return k


class _Calls(keras.utils.PyDataset):
    """What `model.fit` iterates over: nothing (the batches are made on the device); one
    placeholder per call, never read."""

    def __init__(self):
        super().__init__(workers=1, use_multiprocessing=False)

    @property
    def num_batches(self):
        return None

    def __getitem__(self, index):
        return np.zeros((1,), np.float32)


def attach(model, corpus: DeviceCorpus, transform, rates: dict, seed: int, batch_size: int, k: int):
    """Makes `model.fit(calls(), ...)` train K steps per call on device-made batches.
    `model` is compiled (with steps_per_execution=K) and its optimizer built."""
    corpus = corpus.on_device()
    arguments = {
        "key": jax.random.PRNGKey(seed),
        "rates": {name: jax.numpy.asarray(v) for name, v in rates.items()},
        "corpus": corpus,
    }
    iterations = next(
        i for i, v in enumerate(model.optimizer.variables) if v is model.optimizer.iterations
    )

    def batch_of(args, step):
        return make_batch(args["corpus"], transform, args["key"], step, batch_size, args["rates"])

    # Builds the compiled losses and metrics from one real batch, as fit would from its data.
    model._symbolic_build(data_batch=batch_of(arguments, 0))

    def run(state, args):
        first = state[2][iterations]  # the optimizer's step count: the global step
        logs, state = model.train_step(state, batch_of(args, first))

        def step(i, carry):
            return model.train_step(carry[1], batch_of(args, first + i))

        return jax.lax.fori_loop(1, k, step, (logs, state))

    compiled = jax.jit(run, donate_argnums=0)

    def train_function(state, iterator):
        return compiled(state, arguments)

    model.train_function = train_function


def calls() -> keras.utils.PyDataset:
    return _Calls()
