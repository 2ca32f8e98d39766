"""Several fine-tuning seeds in one compiled program (model/training/seeds.py, JAX).

    PYTHONPATH=. python -m pytest tests/test_seeds.py

Three `tiny` classifiers (seeds 1-3, dropout 0) trained together by `SeedTrainer` end with
the weights of each trained alone by Keras's own `model.fit` on the same batches in the same
order: the stacked, vmapped program changes how the seeds run, not what each computes
(measured: 7.5e-9 at most, in float32). Their heads stay apart (each seed its own
initialisation and data order). Runs in a JAX child process; TensorFlow is blocked there.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import BLOCK_TENSORFLOW, REPO_ROOT, subprocess_env

SCRIPT = (
    BLOCK_TENSORFLOW
    + """
import json
import numpy as np
import jax, keras
from model.heads.classifier import BertClassifier
from model.networks.encoder import BertEncoder
from model.training.optimizer import bert_adamw
from model.training.seeds import SeedTrainer
from model.pretraining.device_data import stream_rows

N, L, B, K, STEPS, SEEDS = 40, 16, 8, 3, 6, (1, 2, 3)
rng = np.random.default_rng(0)
features = {"token_ids": rng.integers(5, 100, (N, L)).astype("int32"),
            "segment_ids": np.zeros((N, L), "int32"), "padding_mask": np.ones((N, L), "int32")}
labels = rng.integers(0, 2, (N,)).astype("int32")

def build(seed):
    keras.utils.set_random_seed(seed)
    m = BertClassifier(BertEncoder.from_preset("tiny", vocabulary_size=100, dropout=0.0), 2, dropout=0.0)
    m.compile(optimizer=bert_adamw(1e-3, 2, STEPS), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return m

together = [build(s) for s in SEEDS]
trainer = SeedTrainer(together, features, labels, B, K, seeds=SEEDS)
logs = trainer.run(STEPS)
trainer.write_back()
diff = 0.0
for seed, model in zip(SEEDS, together):
    alone = build(seed)
    rows = np.concatenate([np.asarray(stream_rows(jax.random.PRNGKey(seed), s, B, N)) for s in range(STEPS)])
    x = {k: v[rows] for k, v in features.items()}
    alone.fit(x, labels[rows], batch_size=B, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(alone.trainable_variables, model.trainable_variables):
        diff = max(diff, float(np.max(np.abs(np.asarray(a.value) - np.asarray(b.value)))))
spread = min(
    float(np.max(np.abs(np.asarray(a.value) - np.asarray(b.value))))
    for a, b in zip(together[0].trainable_variables, together[1].trainable_variables)
    if a.path.endswith("logits/kernel")
)
print(json.dumps({"max_diff": diff, "seed_spread": spread, "accuracy": logs["accuracy"].tolist()}))
"""
)


def test_seeds_trained_together_end_where_each_alone_does():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO_ROOT,
        env={**subprocess_env(), "KERAS_BACKEND": "jax"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["max_diff"] < 1e-5
    assert result["seed_spread"] > 1e-3  # the seeds' heads differ: three models, not one
    assert len(result["accuracy"]) == 3
