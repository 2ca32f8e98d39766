"""Several replicas train like one: MirroredStrategy over two logical CPUs,
MultiWorkerMirroredStrategy over two worker processes, kill -9 and restart.

    PYTHONPATH=. python -m pytest tests/test_distribute.py

Each run is a child `python -m model.train pretrain` (the CPU split and the
collective ops must be set before TensorFlow starts, so never in the pytest
process) of the `tiny` preset on 32-token records, 12 steps of a global batch
of 4, a checkpoint every step so that `train_summary.json` holds the loss of
every step. Dropout is 0: a replica draws its dropout masks for its own part
of the batch, so 2 replicas of 2 rows cannot draw the masks one replica draws
for 4 rows; everything else (data order, masks, loss normalisation, gradient
sum and clipping) must then agree to float rounding.
(`--strategy tpu` without a TPU is tested in test_train.py.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from tests.helpers import (
    REPO_ROOT,
    assert_same_weights,
    free_ports,
    make_records,
    module_command,
    pretrain_argv,
    run_module,
    subprocess_env,
    tf_config,
    write_vocab,
)

STEPS = 12
RUN = {"steps": STEPS, "batch_size": 4, "checkpoint_every": 1}
SAME = ["--dropout", "0.0"]
WORKER_TIMEOUT = 150  # seconds for a whole two-worker run on a loaded 2-core machine


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return make_records(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def one_replica(records, tmp_path_factory):
    """The output directory of the reference run: one replica, the CPU."""
    output = str(tmp_path_factory.mktemp("one") / "run")
    done = run_module(
        "model.train",
        pretrain_argv(records, output, **RUN, extra=[*SAME, "--strategy", "cpu"]),
        timeout=WORKER_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return output


def summary(output) -> dict:
    with open(os.path.join(output, "train_summary.json"), encoding="utf-8") as f:
        return json.load(f)


def assert_matches_one_replica(output, one_replica) -> None:
    """Two replicas trained as one: same losses, same weights."""
    ours, reference = summary(output), summary(one_replica)
    assert ours["replicas"] == 2
    # Step 1 runs on the same initial weights: the loss is one mean over the
    # same 4 rows, however they are split.
    assert ours["interval_losses"][0] == pytest.approx(reference["interval_losses"][0], rel=1e-6)
    np.testing.assert_allclose(ours["interval_losses"], reference["interval_losses"], rtol=1e-5)
    assert_same_final_weights(one_replica, output)


def assert_same_final_weights(output_a, output_b, atol=1e-5):
    assert_same_weights(
        os.path.join(output_a, "model.weights.h5"),
        os.path.join(output_b, "model.weights.h5"),
        atol=atol,
    )


# === The input pipeline's shards ===


@pytest.mark.parametrize("num_workers,replica_batch", [(2, 2), (1, 2), (2, 1), (4, 1)])
def test_shards_put_together_are_the_global_batch(records, tmp_path, num_workers, replica_batch):
    """Every replica's rows, in order, are one replica's batch, loss weights included
    (normalised by the global batch's real masked positions, not the shard's)."""
    import tensorflow as tf

    from model.pretraining.dataset import pretraining_dataset
    from model.pretraining.masking import Masker, MaskingConfig
    from model.text.tokenizer import load_vocabulary

    masker = Masker(
        load_vocabulary(write_vocab(tmp_path / "vocab.txt")), MaskingConfig(max_predictions=5)
    )
    common = dict(masker=masker, seed=3, start_step=2, shuffle_buffer=64)
    steps = 6
    to_numpy = lambda b: tf.nest.map_structure(lambda t: t.numpy(), b)
    whole = [to_numpy(b) for b in pretraining_dataset(records, 4, **common).take(steps)]
    per_worker = 4 // num_workers // replica_batch  # consecutive batches a worker yields a step
    shards = [
        [
            to_numpy(b)
            for b in pretraining_dataset(
                records,
                4,
                worker_index=w,
                num_workers=num_workers,
                replica_batch_size=replica_batch,
                **common,
            ).take(steps * per_worker)
        ]
        for w in range(num_workers)
    ]
    for step in range(steps):
        parts = [shard[step * per_worker + k] for shard in shards for k in range(per_worker)]
        joined = tf.nest.map_structure(lambda *t: np.concatenate(t), *parts)
        for got, want in zip(tf.nest.flatten(joined), tf.nest.flatten(whole[step])):
            np.testing.assert_array_equal(got, want)


def test_a_global_batch_that_does_not_split_is_refused(records):
    from model.pretraining.dataset import pretraining_dataset

    with pytest.raises(ValueError, match="cannot be split"):
        pretraining_dataset(records, 4, num_workers=3)


# === One machine, two replicas ===


@pytest.mark.slow
def test_mirrored_over_two_cpus_matches_one_replica(records, one_replica, tmp_path):
    output = str(tmp_path / "run")
    done = run_module(
        "model.train",
        pretrain_argv(
            records, output, **RUN, extra=[*SAME, "--strategy", "mirrored", "--cpu-replicas", "2"]
        ),
        timeout=WORKER_TIMEOUT,
        # as from a user's shell: TensorFlow's start-up lines filtered, whose first op
        # initialised the devices before the split ("already initialised 1 CPU device(s)")
        env={"TF_CPP_MIN_LOG_LEVEL": None},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "MirroredStrategy with 2 replica(s)" in done.stdout
    assert summary(one_replica)["replicas"] == 1
    assert_matches_one_replica(output, one_replica)


def test_cpu_replicas_needs_mirrored(records, tmp_path, capsys):
    from model import train

    rc = train.main(
        pretrain_argv(records, tmp_path / "run", extra=["--strategy", "cpu", "--cpu-replicas", "2"])
    )
    assert rc == 1
    assert "--cpu-replicas needs --strategy mirrored" in capsys.readouterr().err


# === Two worker processes ===


def start_workers(argv, ports) -> list[subprocess.Popen]:
    workers = []
    for index in range(len(ports)):
        env = subprocess_env()
        env["TF_CONFIG"] = tf_config(ports, index)
        if index == 0:
            # As a user starts it: without TF_CPP_MIN_LOG_LEVEL, TensorFlow's start-up lines are
            # filtered by running an op, which the strategy must precede (the others: the
            # variable set, no op before it).
            del env["TF_CPP_MIN_LOG_LEVEL"]
        workers.append(
            subprocess.Popen(
                module_command("model.train", argv),
                cwd=REPO_ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return workers


def kill(workers) -> None:
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGKILL)
        w.wait()


def finish(workers, timeout=WORKER_TIMEOUT) -> list[str]:
    """Waits for every worker to exit 0 (all are killed on a failure); returns their output."""
    deadline = time.monotonic() + timeout
    outputs = []
    try:
        for w in workers:
            out, _ = w.communicate(timeout=max(1.0, deadline - time.monotonic()))
            outputs.append(out)
            assert w.returncode == 0, f"worker exited with {w.returncode}:\n{out[-3000:]}"
    finally:
        kill(workers)
    return outputs


def multiworker_argv(records, output):
    return pretrain_argv(records, output, **RUN, extra=[*SAME, "--strategy", "multiworker"])


@pytest.mark.slow
def test_two_workers_match_one_replica(records, one_replica, tmp_path):
    output = str(tmp_path / "run")
    chief, other = finish(start_workers(multiworker_argv(records, output), free_ports(2)))
    assert "CollectiveAllReduceStrategy with 2 replica(s)" in chief
    assert "the chief writes" in other  # worker 1 published nothing of its own
    assert summary(output)["steps"] == STEPS
    assert_matches_one_replica(output, one_replica)


@pytest.mark.slow
def test_two_workers_killed_and_restarted_match_one_replica(records, one_replica, tmp_path):
    output = str(tmp_path / "run")
    argv = multiworker_argv(records, output)
    first = os.path.join(output, "checkpoints", "ckpt-00000001")
    workers = start_workers(argv, free_ports(2))
    try:
        deadline = time.monotonic() + WORKER_TIMEOUT
        while not os.path.isdir(first):
            assert all(w.poll() is None for w in workers), "a worker exited before step 1"
            assert time.monotonic() < deadline, "no checkpoint in time"
            time.sleep(0.02)
        # Worker 1 dies; the chief, stuck in the next all-reduce, is stopped too.
        workers[1].send_signal(signal.SIGKILL)
        workers[1].wait()
    finally:
        kill(workers)
    assert not os.path.exists(os.path.join(output, "model.weights.h5")), "killed too late"
    saved = sorted(
        n for n in os.listdir(os.path.join(output, "checkpoints")) if n.startswith("ckpt-")
    )
    assert saved and saved[-1] < f"ckpt-{STEPS:08d}"

    # The same command on both, new ports: they resume from the chief's newest checkpoint.
    finish(start_workers(argv, free_ports(2)))
    ours = summary(output)
    assert ours["steps"] == STEPS and 0 < ours["steps_this_run"] < STEPS
    assert_same_final_weights(one_replica, output)


def test_jit_over_several_replicas_stops_with_a_message(records, tmp_path):
    done = run_module(
        "model.train",
        pretrain_argv(
            records,
            tmp_path / "run",
            extra=["--strategy", "mirrored", "--cpu-replicas", "2", "--jit"],
        ),
    )
    assert done.returncode == 1
    assert "--jit with 2 replicas of MirroredStrategy" in done.stderr


def test_fine_tuning_refuses_multiworker_before_tensorflow(tmp_path):
    """Fine-tuning's batches are one process's pipeline: --strategy multiworker is refused in
    one line at once (it failed after reading the data, or at start-up), leaving nothing."""
    output = tmp_path / "ft"
    done = run_module(
        "model.train",
        ["finetune", "--task", "sst2", "--data", str(tmp_path), "--init", str(tmp_path)]
        + ["--output", str(output), "--strategy", "multiworker"],
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "error: fine-tuning runs in one process: --strategy multiworker is pre-training's; "
        "use the default (auto), or mirrored for this machine's GPUs under TensorFlow"
    )
    assert not output.exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "config, message",
    [
        (None, "--strategy multiworker needs TF_CONFIG (cluster and task) set"),
        ("{not json", "TF_CONFIG is not valid JSON"),
        ('{"cluster": {"worker": ["localhost:1", "localhost:2"]}}', 'no "task" with a "type"'),
        ('"{}"', "TF_CONFIG is str JSON, not an object"),  # quoted twice (trained alone before)
    ],
)
def test_a_bad_tf_config_is_one_line_as_a_user_starts_the_worker(
    records, tmp_path, config, message
):
    """Without TF_CPP_MIN_LOG_LEVEL (the strategy is made inside TensorFlow's quiet start)."""
    output = tmp_path / "run"
    env = {"TF_CPP_MIN_LOG_LEVEL": None, "TF_CONFIG": config}
    argv = multiworker_argv(records, str(output))
    done = run_module("model.train", argv, timeout=WORKER_TIMEOUT, env=env)
    assert done.returncode == 1, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], done.stderr[-3000:]
    assert "Traceback" not in done.stderr and not output.exists()


@pytest.mark.parametrize(
    "config, message",
    [
        ("[]", "TF_CONFIG is list JSON, not an object"),
        ('{"cluster": {}, "task": {"type": "worker", "index": 0}}', 'no "cluster" of addresses'),
        ('{"clusters": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}', "no \"cluster\""),
        ('{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 2}}',
         "task (worker 2) is not in its cluster (2 worker)"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}',
         "task (chief 0) is not in its cluster (1 worker)"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "one"}}',
         "task (worker one) is not in its cluster (1 worker)"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "evaluator", "index": 0}}',
         "an evaluator: model.train runs no evaluator task"),
    ],
)  # fmt: skip
def test_tf_config_must_put_this_task_in_its_cluster(config, message):
    """TensorFlow made a strategy of one worker, without a word, from each of these."""
    from model.training.strategy import StrategyError, check_tf_config

    with pytest.raises(StrategyError) as e:
        check_tf_config(config)
    assert message in str(e.value)
    for task in ('{"type": "worker", "index": 0}', '{"type": "chief", "index": "0"}'):
        check_tf_config(f'{{"cluster": {{"chief": ["a:1"], "worker": ["b:2"]}}, "task": {task}}}')
