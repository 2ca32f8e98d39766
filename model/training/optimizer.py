"""AdamW with BERT's learning-rate schedule: linear warm-up, then linear decay to 0.

Weight decay 0.01 applies to weight matrices only, never to LayerNorm
parameters or biases (google-research/bert `optimization.py`). Two differences
from that file, both Hugging Face's choices too (docs/finetuning.md): Keras's
AdamW corrects Adam's moment estimates for their bias, which google-research's
`AdamWeightDecayOptimizer` does not (its early steps are larger: 3.2x at steps
1 and 100, 1.26x at step 1,000), and the decay starts from the peak where the
warm-up ends, where google-research's `polynomial_decay` counts from step 0
(0.9x the peak after a 10 % warm-up).
"""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="bert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """`peak * step / warmup` for `step < warmup`, then linear to 0 at `total_steps`."""

    def __init__(self, peak_learning_rate: float, warmup_steps: int, total_steps: int):
        self.peak_learning_rate = peak_learning_rate
        self.warmup_steps = warmup_steps
        self.total_steps = max(total_steps, 1)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        # Compare and decay with the real warm-up length: with warmup_steps=0
        # the first step gets the peak rate, not 0 (the max(.., 1) only keeps
        # the warm-up division defined).
        warmup = ops.cast(self.warmup_steps, "float32")
        total = ops.cast(self.total_steps, "float32")
        decay = ops.maximum(0.0, (total - step) / ops.maximum(total - warmup, 1.0))
        rate = ops.where(step < warmup, step / ops.maximum(warmup, 1.0), decay)
        return self.peak_learning_rate * rate

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
        }


def bert_adamw(
    learning_rate: float,
    warmup_steps: int,
    total_steps: int,
    weight_decay: float = 0.01,
    clipnorm: float | None = 1.0,
) -> keras.optimizers.AdamW:
    optimizer = keras.optimizers.AdamW(
        learning_rate=WarmupLinearDecay(learning_rate, warmup_steps, total_steps),
        weight_decay=weight_decay,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        global_clipnorm=clipnorm,
    )
    # Keras matches these against variable paths: LayerNorm gamma/beta, biases.
    optimizer.exclude_from_weight_decay(var_names=["gamma", "beta", "bias"])
    return optimizer


def create_optimizer_variables(model: keras.Model) -> None:
    """Creates the compiled `model`'s optimizer variables now, outside any traced function.

    Otherwise, on TensorFlow without a tf.distribute strategy (whose scope has Keras build
    them before the first step), Keras creates them inside the first traced train step;
    TensorFlow then traces that step twice, once creating each variable behind a
    conditional and once using them. Created first, the step is traced once: a tiny
    ELECTRA's first `train_on_batch` took 3.2 s instead of 7.4 (2-core CPU). What the steps
    compute is unchanged. The training commands call it too (the optimizer's slots are
    checkpointed from the start). `model` must be built (its weights exist)."""
    model.optimizer.build(model.trainable_variables)
