"""`--strategy`: which tf.distribute strategy trains the model.

    auto         TPU if one is configured, else all local GPUs, else the CPU
    cpu | gpu    one device
    mirrored     all local GPUs (or logical CPUs) of this machine
    multiworker  MultiWorkerMirroredStrategy, workers from TF_CONFIG
    tpu          TPUStrategy through TPUClusterResolver(--tpu NAME)
"""

from __future__ import annotations

import json
import os

STRATEGIES = ("auto", "cpu", "gpu", "mirrored", "multiworker", "tpu")


class StrategyError(RuntimeError):
    pass


def make_strategy(name: str, tpu: str | None = None):
    import tensorflow as tf

    if name not in STRATEGIES:
        raise StrategyError(f"unknown strategy {name!r}; choose from {STRATEGIES}")
    gpus = tf.config.list_logical_devices("GPU")
    if name == "auto":
        if tpu or os.environ.get("TPU_NAME"):
            name = "tpu"
        elif len(gpus) > 1:
            name = "mirrored"
        else:
            name = "gpu" if gpus else "cpu"
    if name == "cpu":
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    if name == "gpu":
        if not gpus:
            raise StrategyError("--strategy gpu: TensorFlow sees no GPU on this machine")
        return tf.distribute.OneDeviceStrategy(gpus[0].name)
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multiworker":
        if "TF_CONFIG" not in os.environ:
            raise StrategyError("--strategy multiworker needs TF_CONFIG (cluster and task) set")
        try:
            json.loads(os.environ["TF_CONFIG"])
        except json.JSONDecodeError as e:
            raise StrategyError(f"TF_CONFIG is not valid JSON: {e}") from None
        return tf.distribute.MultiWorkerMirroredStrategy()
    # tpu
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as e:
        where = f"--tpu {tpu}" if tpu else "this machine (no --tpu NAME, no TPU_NAME)"
        raise StrategyError(f"--strategy tpu: no TPU found for {where}: "
                            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return tf.distribute.TPUStrategy(resolver)
