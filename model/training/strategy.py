"""`--strategy`: which tf.distribute strategy trains the model.

    auto         TPU if one is configured, else all local GPUs, else the CPU
    cpu | gpu    one device
    mirrored     all local GPUs of this machine; with no GPU, the CPU split
                 into `--cpu-replicas N` logical devices (N replicas)
    multiworker  MultiWorkerMirroredStrategy, workers from TF_CONFIG
    tpu          TPUStrategy through TPUClusterResolver(--tpu NAME)

`--cpu-replicas N` exists to run real multi-replica numerics (gradient
all-reduce, per-replica loss scaling) on a laptop or in CI:

    python -m model.train pretrain ... --strategy mirrored --cpu-replicas 2

Splitting the CPU must happen before TensorFlow initialises its devices, and
MultiWorkerMirroredStrategy, which configures collective ops, before its first op:
`model.train` does both at start-up (before reading any data), and the multi-worker
strategy it made is the one `make_strategy` returns afterwards.

Under another Keras backend (KERAS_BACKEND=jax) there is no tf.distribute:

    auto           one device (JAX's default: a GPU if there is one)
    data-parallel  keras.distribution.DataParallel over all devices of all
                   processes; each process reads its own rows of every
                   global batch (model/pretraining/pydataset.py)

and the tf.distribute names are refused (`make_jax_distribution`).
"""

from __future__ import annotations

import json
import os

STRATEGIES = ("auto", "cpu", "gpu", "mirrored", "multiworker", "tpu", "data-parallel")
JAX_STRATEGIES = ("auto", "data-parallel")


class StrategyError(RuntimeError):
    pass


def configure_cpu_replicas(n: int) -> None:
    """Splits the physical CPU into `n` logical CPU devices.

    Must run before TensorFlow initialises its devices; calling it again with
    the same `n` afterwards (a second run in the same process) is a no-op.
    """
    import tensorflow as tf

    if n < 1:
        raise StrategyError(f"--cpu-replicas must be positive, not {n}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)]
        )
    except RuntimeError:  # devices already initialised in this process
        have = len(tf.config.list_logical_devices("CPU"))
        if have != n:
            raise StrategyError(
                f"--cpu-replicas {n}: TensorFlow already initialised {have} CPU device(s) in "
                f"this process; the split must happen before any other TensorFlow work"
            ) from None


_MULTI_WORKER = []  # the process's one MultiWorkerMirroredStrategy, or why it failed


def check_tf_config(text: str | None) -> None:
    """StrategyError unless `text` (TF_CONFIG) describes a cluster with this process's task
    in it: {"cluster": {"worker": ["host:port", ...], ...}, "task": {"type": "worker",
    "index": 0}}. TensorFlow itself trains alone, silently, on JSON that is not such an
    object (a value quoted twice, a misspelt key)."""
    if text is None:
        raise StrategyError("--strategy multiworker needs TF_CONFIG (cluster and task) set")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise StrategyError(f"TF_CONFIG is not valid JSON: {e}") from None
    example = '{"cluster": {"worker": ["host1:port", ...]}, "task": {"type": "worker", "index": 0}}'
    if not isinstance(config, dict):
        raise StrategyError(f"TF_CONFIG is {type(config).__name__} JSON, not an object: {example}")
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise StrategyError(f'TF_CONFIG has no "cluster" of addresses by task type: {example}')
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise StrategyError(f'TF_CONFIG has no "task" with a "type" and an "index": {example}')
    kind = task["type"]
    if kind == "evaluator":  # TensorFlow's side-car task, outside the cluster
        raise StrategyError("TF_CONFIG's task is an evaluator: model.train runs no evaluator task")
    try:
        index = int(task["index"])  # TensorFlow reads "1" as 1 too
    except (TypeError, ValueError):
        index = task["index"]
    members = cluster.get(kind)
    if not isinstance(members, list) or not isinstance(index, int) or not 0 <= index < len(members):
        sizes = ", ".join(
            f"{len(v) if isinstance(v, list) else v!r} {k}" for k, v in cluster.items()
        )
        raise StrategyError(f"TF_CONFIG's task ({kind} {index}) is not in its cluster ({sizes})")


def _multi_worker():
    """MultiWorkerMirroredStrategy from TF_CONFIG, made once a process: it configures
    collective ops, which must happen before TensorFlow's first op (`model.train` makes it
    at start-up, and the command's own call gets the same strategy)."""
    if not _MULTI_WORKER:
        import tensorflow as tf

        try:
            _MULTI_WORKER.append(tf.distribute.MultiWorkerMirroredStrategy())
        except (RuntimeError, ValueError) as e:  # TF_CONFIG's task; collectives set too late
            # kept: a second try would fail on the collectives the first configured
            _MULTI_WORKER.append(StrategyError(f"--strategy multiworker: {e}"))
    if isinstance(_MULTI_WORKER[0], StrategyError):
        raise _MULTI_WORKER[0]
    return _MULTI_WORKER[0]


def check_flags(name: str, cpu_replicas: int | None, backend: str) -> None:
    """StrategyError for a --strategy (and --cpu-replicas) that `backend` cannot run, and
    for a multi-worker run's TF_CONFIG, without starting a framework: the command line
    checks them before its heavy imports, the strategy makers again."""
    if backend != "tensorflow":
        if name not in JAX_STRATEGIES:
            raise StrategyError(
                f"--strategy {name} is a tf.distribute strategy; under KERAS_BACKEND="
                f"{backend} choose auto (one device) or data-parallel "
                f"(keras.distribution.DataParallel over all devices)"
            )
        if cpu_replicas is not None:
            raise StrategyError(
                "--cpu-replicas is for TensorFlow's mirrored strategy; under JAX set "
                "XLA_FLAGS=--xla_force_host_platform_device_count=N and use "
                "--strategy data-parallel"
            )
        return
    if name not in STRATEGIES:
        raise StrategyError(f"unknown strategy {name!r}; choose from {STRATEGIES}")
    if name == "data-parallel":
        raise StrategyError(
            "--strategy data-parallel is for KERAS_BACKEND=jax; under "
            "TensorFlow use mirrored, multiworker or tpu"
        )
    if cpu_replicas is not None and name != "mirrored":
        raise StrategyError("--cpu-replicas needs --strategy mirrored")
    if cpu_replicas is not None and cpu_replicas < 1:
        raise StrategyError(f"--cpu-replicas must be positive, not {cpu_replicas}")
    if name == "multiworker":
        check_tf_config(os.environ.get("TF_CONFIG"))


def check_device_flags(args, backend: str) -> None:
    """StrategyError for the one-accelerator flags (--device-data, --steps-per-call, --seeds)
    where they cannot run, without starting a framework: the command line checks them before
    its heavy imports (they were found after TensorFlow's 10 s), the runs again."""
    device_data = getattr(args, "device_data", False)
    steps_per_call = getattr(args, "steps_per_call", None)
    if steps_per_call is not None and (not device_data or steps_per_call < 1):
        raise StrategyError(
            "--steps-per-call takes a positive number, with --device-data (the host pipeline "
            "runs one step a call)"
        )
    seeds = getattr(args, "seeds", None)
    if seeds and not device_data:
        raise StrategyError("--seeds trains its seeds together: it needs --device-data")
    if seeds and len(set(seeds)) != len(seeds):
        raise StrategyError(f"--seeds: a seed is given twice ({seeds})")
    if seeds and len(seeds) > 1 and "{seed}" not in args.output:
        raise StrategyError(
            "--seeds: --output names each seed's directory with {seed} (runs/sst2-seed{seed})"
        )
    if device_data and (backend != "jax" or getattr(args, "strategy", "auto") != "auto"):
        raise StrategyError(
            "--device-data runs under KERAS_BACKEND=jax on one device (--strategy auto)"
        )


def make_strategy(name: str, tpu: str | None = None, cpu_replicas: int | None = None):
    """The strategy `name` (one of STRATEGIES). `cpu_replicas` splits the CPU
    into that many logical devices first, for `mirrored` on a machine with no
    GPU. Raises StrategyError with a message for the user."""
    check_flags(name, cpu_replicas, "tensorflow")
    import tensorflow as tf

    if cpu_replicas is not None:
        configure_cpu_replicas(cpu_replicas)
    if name == "multiworker":
        return _multi_worker()
    if name == "tpu" or (name == "auto" and (tpu or os.environ.get("TPU_NAME"))):
        return _tpu_strategy(tpu)
    gpus = tf.config.list_logical_devices("GPU")
    if name == "auto":
        name = "mirrored" if len(gpus) > 1 else "gpu" if gpus else "cpu"
    if name == "cpu":
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    if name == "gpu":
        if not gpus:
            raise StrategyError("--strategy gpu: TensorFlow sees no GPU on this machine")
        return tf.distribute.OneDeviceStrategy(gpus[0].name)
    # mirrored
    if not gpus:
        cpus = tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([d.name for d in cpus])
    return tf.distribute.MirroredStrategy()


def make_jax_distribution(name: str, cpu_replicas: int | None = None):
    """What `--strategy name` means under a backend other than TensorFlow:
    None (one device) or a `keras.distribution.DataParallel`, installed as
    the global distribution. Raises StrategyError for the tf.distribute names."""
    import keras

    check_flags(name, cpu_replicas, "jax")  # the backend besides TensorFlow
    if name == "auto":
        return None
    distribution = keras.distribution.DataParallel()
    keras.distribution.set_distribution(distribution)
    return distribution


def jax_process() -> tuple[int, int]:
    """(this process's index, number of processes) of a JAX run."""
    import jax

    return jax.process_index(), jax.process_count()


def _tpu_strategy(tpu: str | None):
    import tensorflow as tf

    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as e:
        where = f"--tpu {tpu}" if tpu else "this machine (no --tpu NAME, no TPU_NAME)"
        raise StrategyError(
            f"--strategy tpu: no TPU found for {where}: "
            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
        ) from None
    return tf.distribute.TPUStrategy(resolver)


def is_chief(strategy) -> bool:
    """Whether this process writes checkpoints and the final model: always,
    except for the workers other than worker 0 (or "chief") of a multi-worker
    cluster, which train in lockstep and write nothing."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return True
    return resolver.task_type == "chief" or (
        resolver.task_type == "worker" and resolver.task_id == 0
    )


def sum_gradients_first(optimizer) -> None:
    """Makes `optimizer` sum the replicas' gradients before anything else looks at them.

    Keras 3 (TensorFlow backend) sums them only in its last update step:
    - gradient clipping comes before the sum, so with `global_clipnorm=1` and
      N replicas each replica's part is clipped to norm 1 and the update is
      not one replica's (up to N times longer);
    - mixed_float16's loss-scale optimizer checks each replica's part for
      inf/NaN, so replicas can disagree on skipping a step, and the one that
      goes on waits for the others in the sum.
    Here the outermost `apply` sums first (in the replica context) and the
    later sum is skipped. Patches the instance in place.
    """
    import tensorflow as tf

    inner = getattr(optimizer, "inner_optimizer", optimizer)
    apply = optimizer.apply

    def apply_summed(grads, trainable_variables=None):
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            grads = list(grads)
            present = [i for i, g in enumerate(grads) if g is not None]
            summed = context.all_reduce(tf.distribute.ReduceOp.SUM, [grads[i] for i in present])
            for i, g in zip(present, summed):
                grads[i] = g
        return apply(grads, trainable_variables)

    optimizer.apply = apply_summed
    inner._all_reduce_sum_gradients = lambda grads_and_vars: list(grads_and_vars)


def prepare_fit(model, strategy, element_spec) -> None:
    """Works around two failures of Keras 3's `fit` under a multi-worker
    MultiWorkerMirroredStrategy (both fine on one worker); patches `model`.

    - `fit` first averages one real batch over the replicas with
      `strategy.reduce` to build the compiled loss and metrics, which fails
      for a dict of tensors ("Attempt to convert a value ({'token_ids':
      PerReplica ...}) to a Tensor"). They are built here from the spec of a
      batch (`element_spec`, any batch size) and that step is switched off.
    - Each step's logs are averaged over workers with `reduce("MEAN", v,
      axis=0)`, which fails on scalars ("Invalid reduction dimension 0 for
      input with 0 dimensions"). The train step here returns them with a
      leading axis of 1, so that mean is the mean over replicas, a scalar.
    """
    import keras
    import tensorflow as tf

    spec = tf.nest.map_structure(
        lambda s: tf.TensorSpec([None, *s.shape[1:]], s.dtype), element_spec
    )
    with strategy.scope():
        model._symbolic_build(data_batch=spec)
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None

    if (
        isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        and strategy.extended._in_multi_worker_mode()
    ):
        train_step = model.train_step
        model.train_step = lambda data: {
            k: keras.ops.expand_dims(v, 0) for k, v in train_step(data).items()
        }
