"""Several fine-tuning seeds in one compiled program, their features on the device (JAX).

A table of the papers fine-tunes each pre-trained model with three seeds. Run one after the
other, a small model's three runs each leave an accelerator mostly idle; here the seeds'
models are one stacked state, and one `jax.jit` program runs K steps of all of them
(`jax.vmap` over the seeds of Keras's own pure `train_step`, in a `fori_loop`), so three
seeds cost about one. Each seed keeps its own head initialisation, its own example order
(an epoch a fresh permutation keyed by the seed: model/pretraining/device_data.py's
`stream_rows`), its own dropout masks and optimizer state; nothing passes between them.

    trainer = SeedTrainer(models, features, labels, batch_size=32, steps_per_call=50)
    trainer.run(steps)            # every seed `steps` steps further
    trainer.write_back()          # the trained weights into `models`

`models` are one compiled Keras model per seed (the same architecture and compile
arguments; their weights differ). This is the building block; the `finetune` command does
not use it yet.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from model.pretraining.device_data import stream_rows
from model.training.optimizer import create_optimizer_variables


def _state(model):
    return (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in model.optimizer.variables],
        [v.value for v in model.metrics_variables],
    )


class SeedTrainer:
    """Trains `models` (one per seed) together on `features` (name: (N, ...) array) and
    `labels` (an (N, ...) array, or a dict of them for a model of several outputs); `seeds`
    key each model's example order (default 0, 1, ...)."""

    def __init__(self, models, features, labels, batch_size, steps_per_call, seeds=None):
        if not models:
            raise ValueError("no models to train")
        self.models = models
        template = models[0]
        # Builds the compiled loss and metrics from one real batch, as fit would.
        first = jax.tree.map(lambda v: np.asarray(v)[:batch_size], (features, labels))
        for model in models:
            model._symbolic_build(data_batch=first)
            create_optimizer_variables(model)
        # (seeds, ...) arrays: one stacked state for all models.
        self.state = jax.tree.map(lambda *v: jnp.stack(v), *[_state(m) for m in models])
        seeds = range(len(models)) if seeds is None else seeds
        self.keys = jnp.stack([jax.random.PRNGKey(int(s)) for s in seeds])
        self.data = jax.tree.map(jnp.asarray, (features, labels))
        self.step = 0
        num_rows = int(jax.tree.leaves(labels)[0].shape[0])

        def seed_steps(state, key, data, first_step):
            x_all, y_all = data

            def one(i, carry):
                rows = stream_rows(key, first_step + i, batch_size, num_rows)
                return template.train_step(carry[1], _batch(x_all, y_all, rows))

            logs, state = template.train_step(
                state, _batch(x_all, y_all, stream_rows(key, first_step, batch_size, num_rows))
            )
            return jax.lax.fori_loop(1, steps_per_call, one, (logs, state))

        all_seeds = jax.vmap(seed_steps, in_axes=(0, 0, None, None))
        self._call = jax.jit(all_seeds, donate_argnums=0)
        self.steps_per_call = steps_per_call

    def run(self, steps: int) -> dict:
        """Every seed `steps` steps further (a multiple of steps_per_call); returns the last
        call's logs, each a (seeds,) array (the metrics since the last `reset_metrics`)."""
        if steps % self.steps_per_call:
            raise ValueError(f"{steps} steps are not a multiple of {self.steps_per_call} a call")
        logs = {}
        for _ in range(steps // self.steps_per_call):
            logs, self.state = self._call(self.state, self.keys, self.data, self.step)
            self.step += self.steps_per_call
        return {k: np.asarray(v) for k, v in logs.items()}

    def reset_metrics(self) -> None:
        trainable, non_trainable, optimizer, metrics = self.state
        self.state = (trainable, non_trainable, optimizer, jax.tree.map(jnp.zeros_like, metrics))

    def write_back(self) -> None:
        """Assigns each seed's trained variables to its model."""
        for i, model in enumerate(self.models):
            trainable, non_trainable, optimizer, metrics = jax.tree.map(
                lambda v, i=i: v[i], self.state
            )
            for group, values in (
                (model.trainable_variables, trainable),
                (model.non_trainable_variables, non_trainable),
                (model.optimizer.variables, optimizer),
                (model.metrics_variables, metrics),
            ):
                for variable, value in zip(group, values):
                    variable.assign(value)


def _batch(x_all, y_all, rows):
    return jax.tree.map(lambda v: v[rows], (x_all, y_all))
