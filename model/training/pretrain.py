"""Pre-training: the work of `python -m model.train pretrain`.

`pretrain(args)` takes the parsed flags of that command (model/train.py, whose
docstring describes the run: checkpoints, resuming, strategies, the JAX
backend) and trains the `--objective` (model/objectives/: its batch transform
in the input pipeline, its heads, its losses), resuming from
OUTPUT/checkpoints if it holds any. With `--eval-data`, held-out records are
scored after every checkpoint interval into OUTPUT/eval.json: the run's
pre-training curve.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time

import keras

from model.training import layout
from model.training.checkpointing import optimizer_step
from model.training.run_command import command_line


def resolve_config(spec: str, vocabulary_size: int, dropout: float | None):
    from model.config import PRESETS, BertConfig

    if spec in PRESETS:
        config = BertConfig.preset(spec, vocabulary_size=vocabulary_size)
    else:
        config = BertConfig.from_json(spec)
        if config.vocabulary_size != vocabulary_size:
            raise ValueError(
                f"{spec}: vocabulary_size {config.vocabulary_size} differs from the "
                f"vocabulary's {vocabulary_size} tokens"
            )
    return config.replace(dropout=dropout) if dropout is not None else config


# Every part of a pre-training model beside its encoder, by attribute name (ELECTRA's generator
# is a whole encoder of its own, over the shared embeddings): a part of the same name and
# shapes in the source checkpoint is copied, any other starts fresh.
HEADS = (
    "masked_lm_head",
    "next_sentence_head",
    "span_boundary_head",
    "generator",
    "replaced_token_head",
)


def init_from_checkpoint(model, path: str) -> list[str]:
    """Copies the encoder (and the pre-training heads it shares) of `path` into `model`.
    Returns what was left fresh, each with why: a head `path` has no weights for, or one of
    the same name but other shapes (a BERT masked-LM head is as wide as its encoder, ELECTRA's
    generator head as wide as the generator). The encoder itself must match."""
    from model import load

    source = load(path)
    src_encoder = source.encoder if hasattr(source, "encoder") else source
    ours, theirs = model.encoder.config, src_encoder.config
    # Dropout is the run's; causal attention the objective's (a left-to-right run may
    # start from a bidirectional encoder's weights); the casing the records' (a Google
    # bert_config.json does not state one): the rest must match.
    same = {"dropout": 0.0, "causal": False, "lowercase": ours.lowercase}
    if ours.replace(**same) != theirs.replace(**same):
        raise ValueError(f"{path}: its encoder config {theirs} differs from this run's {ours}")
    model.encoder.set_weights(src_encoder.get_weights())
    fresh = []
    for name in HEADS:
        head = getattr(model, name, None)
        if head is None:
            continue
        theirs = getattr(source, name, None)
        if theirs is None:
            fresh.append(name)
            continue
        weights = theirs.get_weights()
        if [w.shape for w in weights] != [tuple(v.shape) for v in head.weights]:
            fresh.append(f"{name} (its shapes in {path} differ from this run's)")
            continue
        head.set_weights(weights)
    return fresh


# Steps in one compiled call of --device-data unless --steps-per-call says otherwise: enough
# that launching a call costs little beside its steps, few enough that callbacks come often.
DEVICE_STEPS_PER_CALL = 100


CALLS_KEPT = 10_000


class Throughput:
    """Wall time and examples of the steps this process ran (restarts excluded); `in_steps`
    the seconds inside the training steps alone (no held-out evaluation, no checkpoint save);
    `calls` the first CALLS_KEPT timed calls' (steps, seconds), whose median step is what a
    calibration run measures (a slow first call after compiling, or any one slow call, does
    not move it; a long run keeps no more, as one step a call would make a million)."""

    def __init__(self):
        self.start = None
        self.steps = 0
        self.in_steps = 0.0
        self.calls: list[tuple[int, float]] = []

    def median_step(self) -> float | None:
        """The median over the timed calls of their seconds a step; None with no call."""
        if not self.calls:
            return None
        return statistics.median(seconds / steps for steps, seconds in self.calls)


def pretrain(args) -> int:
    """The stages of a run, in the order they run."""
    import keras

    from model.training.interrupts import interruptible

    runtime = _runtime(args)  # first: TensorFlow's strategies must precede its initialisation
    data = _data(args)
    config = _check(args, runtime, data)
    keras.utils.set_random_seed(args.seed)
    keras.mixed_precision.set_global_policy(args.mixed_precision)
    print(
        f"objective: {data.objective.name}; backend: {keras.backend.backend()}; "
        f"strategy: {runtime.name} with {runtime.replicas} replica(s); global batch "
        f"{args.batch_size}; {data.info['num_instances']} instances of {data.seq_len} tokens"
        + ("; batches made on the device" if args.device_data else "")
    )
    model = build_model(args, runtime, data, config)
    checkpoint, start_step = _resume(args, runtime, model, data)
    timing = Throughput()
    stop = min(args.steps, args.stop_at or args.steps)
    interval_losses = []
    if start_step < stop:
        with interruptible() as interrupts:  # Ctrl-C stops a run on the device path too
            interval_losses = _fit(
                args, runtime, data, model, checkpoint, timing, start_step, stop, interrupts
            )
        if interval_losses is None:
            return 3
    elif start_step and runtime.chief:
        flag = "--stop-at" if stop < args.steps else "--steps"
        done = _summary_step(args.output) == start_step
        print(
            f"nothing to train: the newest checkpoint is at step {start_step}, at or past "
            f"{flag} {stop}; "
            + ("the run's model and summary stay as they are" if done else "writing its model")
            + f" (raise {flag} to train on)"
        )
        if done:
            return 0
    if not runtime.chief:
        print(f"worker done at step {optimizer_step(model)}; the chief writes {args.output}")
        return 0
    _save(args, runtime, data, config, model, timing, interval_losses, start_step)
    return 0


def _summary_step(output: str) -> int | None:
    """The step train_summary.json says the run's model is at (None: no summary)."""
    from model.io.files import read_json_object

    path = os.path.join(output, layout.SUMMARY)
    return read_json_object(path, "run summary").get("steps") if os.path.isfile(path) else None


def _note_repeated_eval(args, instances: int) -> None:
    """Says so when --eval-steps batches hold more than the held-out records: the
    stream goes round again, so the curve weighs some instances twice or more."""
    wanted = args.eval_steps * args.batch_size
    if instances and wanted > instances:
        fix = (
            f"--eval-steps {instances // args.batch_size} reads each once at most"
            if instances >= args.batch_size
            else "more held-out text would read each once (one batch is already more)"
        )
        print(
            f"note: {args.eval_data} holds {instances} instances, fewer than --eval-steps "
            f"{args.eval_steps} x --batch-size {args.batch_size} = {wanted}: each score "
            f"reads them {wanted / instances:.1f} times over; {fix}"
        )


def _runtime(args):
    """The backend's strategy: TensorFlow's tf.distribute, or JAX's keras.distribution
    (under which nothing on this path imports TensorFlow)."""
    import contextlib
    import types

    import keras

    if keras.backend.backend() == "tensorflow":
        from model.training.strategy import is_chief, make_strategy

        # (--device-data is JAX's: `check_device_flags` refuses it.) First: splitting the CPU
        # into logical devices and configuring multi-worker collectives both fail once
        # TensorFlow has initialised.
        strategy = make_strategy(args.strategy, args.tpu, args.cpu_replicas)
        return types.SimpleNamespace(
            tf=True,
            strategy=strategy,
            chief=is_chief(strategy),
            replicas=strategy.num_replicas_in_sync,
            scope=strategy.scope,
            name=type(strategy).__name__,
            process=(0, 1),
        )
    from model.training.strategy import jax_process, make_jax_distribution

    distribution = make_jax_distribution(args.strategy, args.cpu_replicas)
    process = jax_process()
    return types.SimpleNamespace(
        tf=False,
        strategy=None,
        chief=process[0] == 0,
        replicas=len(keras.distribution.list_devices()) if distribution else 1,
        scope=contextlib.nullcontext,
        name=type(distribution).__name__ if distribution else "one device",
        process=process,
    )


def _data(args):
    """The records, their vocabulary and the objective (`pretrain_data.checked_data`, which
    `model.train` ran before TensorFlow too), and the output folder, writable."""
    from model.io.files import check_writable_dir
    from model.training.pretrain_data import checked_data

    data = checked_data(args)
    if data.eval_info:
        _note_repeated_eval(args, data.eval_info["num_instances"])
    check_writable_dir(args.output)  # last: a refused run leaves no empty output behind
    return data


def _check(args, runtime, data):
    """The encoder's config, once every flag is known to fit the records and the devices."""
    config = resolve_config(args.config, len(data.vocabulary), _dropout(args))
    config = data.objective.encoder_config(_records_casing(config, args.config, data))
    if data.seq_len > config.max_sequence_length:
        raise ValueError(
            f"records of {data.seq_len} tokens exceed the model's "
            f"max_sequence_length {config.max_sequence_length}"
        )
    if args.steps < 0 or args.batch_size < 1 or args.checkpoint_every < 1:
        raise ValueError(
            "--batch-size and --checkpoint-every must be positive, --steps not negative"
        )
    if args.stop_at is not None and args.stop_at < 1:
        raise ValueError(f"--stop-at must be positive, got {args.stop_at}")
    from model.training.strategy import check_device_flags

    check_device_flags(args, keras.backend.backend())
    if runtime.tf and args.jit and runtime.replicas > 1:
        import tensorflow as tf

        if not isinstance(runtime.strategy, tf.distribute.TPUStrategy):
            # Keras 3 compiles `strategy.run` over all replicas as one XLA
            # function, which fails when the replicas' variables live on
            # different devices (keras-team/keras#19005).
            raise ValueError(
                f"--jit with {runtime.replicas} replicas of {runtime.name}: Keras cannot "
                f"compile a step that spans devices; leave --jit out, or use one device or a TPU"
            )
    if args.batch_size % runtime.replicas:
        raise ValueError(
            f"--batch-size {args.batch_size} (the global batch) is not a multiple "
            f"of the {runtime.replicas} replicas"
        )
    if args.device_data:
        from model.pretraining.vocabulary_tables import VocabularyTables

        data.objective.device_batches(VocabularyTables.from_vocabulary(data.vocabulary))
    return config


def _records_casing(config, spec: str, data):
    """`config` with the records' casing: the model reads text as they were tokenised
    (a preset's default gives way; a config file that names the other casing stops)."""
    from model.config import PRESETS
    from model.io.files import read_json_object

    lowercase = bool(data.info.get("lowercase", True))
    named = None if spec in PRESETS else _named_casing(read_json_object(spec, "config"))
    if named is not None and named != lowercase:
        raise ValueError(
            f"{spec}: lowercase is {named}, but the records were tokenised "
            f"{'uncased' if lowercase else 'cased'} (make them again, or change the file)"
        )
    return config.replace(lowercase=lowercase)


def _named_casing(fields: dict) -> bool | None:
    """The casing a config file states (ours, Google's or Hugging Face's), or None."""
    if "encoder" in fields:  # a model directory's config.json
        from model.checkpoints.model_info import with_records_casing

        return with_records_casing(fields)["encoder"].get("lowercase")
    return fields.get("lowercase", fields.get("do_lower_case"))


def _dropout(args):
    """--dropout, else the device path's default of 0 (the fused attention kernels run only
    without attention dropout, and a short budget underfits with it), else the config's."""
    if args.dropout is None and args.device_data:
        return 0.0
    return args.dropout


def build_model(args, runtime, data, config):
    """The objective's model over a fresh encoder, compiled, its optimizer built."""

    from model.networks.encoder import BertEncoder
    from model.training.optimizer import bert_adamw, create_optimizer_variables

    objective = data.objective
    warmup = args.warmup_steps if args.warmup_steps is not None else min(10_000, args.steps // 10)
    with runtime.scope():
        model = objective.build_model(BertEncoder.from_config_object(config), seed=args.seed)
        if not objective.next_sentence:
            # Nothing reads the pooled output without NSP: frozen, the pooler gets no
            # optimizer slots and no "Gradients do not exist" warning, and is saved as it
            # was initialised (see model.training.finetune.freeze_unused_pooler).
            model.encoder.pooled_dense.trainable = False
        model.compile(
            optimizer=bert_adamw(args.learning_rate, warmup, args.steps, args.weight_decay),
            # JAX always compiles its step (not compiling is eager, op by op)
            loss=objective.losses(),
            loss_weights=objective.loss_weights(),
            weighted_metrics=objective.metrics(),
            jit_compile=args.jit if runtime.tf else "auto",
        )
        create_optimizer_variables(model)
        if runtime.tf:
            from model.training.strategy import sum_gradients_first

            sum_gradients_first(model.optimizer)
    return model


def _resume(args, runtime, model, data):
    """The run's checkpoints: the newest restored, else --init's weights."""
    from model.objectives.base import records_inputs
    from model.training.checkpointing import ResumableCheckpoint, run_identity

    checkpoint = ResumableCheckpoint(
        os.path.join(args.output, layout.CHECKPOINTS),
        every=args.checkpoint_every,
        keep=args.keep_checkpoints,
        is_chief=runtime.chief,
        run=run_identity(
            f"--objective {args.objective}" + " --no-nsp" * args.no_nsp,
            model,
            reads={"--batch-size": args.batch_size, "records of": records_inputs(data.info)},
        ),
    )
    if runtime.chief:  # another worker's temporaries may be the chief's save in progress
        checkpoint.clean_partial()
    checkpoint.set_model(model)
    start_step = checkpoint.restore(model)
    if start_step:
        print(f"resuming from step {start_step} ({checkpoint.directory})")
    elif args.init_checkpoint:
        fresh = init_from_checkpoint(model, args.init_checkpoint)
        print(
            f"initialised from {args.init_checkpoint}"
            + (f"; created fresh (not in the checkpoint): {', '.join(fresh)}" if fresh else "")
        )
    return checkpoint, start_step


def _fit(args, runtime, data, model, checkpoint, timing, start_step, stop, interrupts):
    """Trains from `start_step` to `stop`, one Keras "epoch" per checkpoint interval
    (`interrupts`: `interrupts.interruptible`'s callback). Returns the mean loss of each
    interval, or None when the loss stopped being finite."""
    import keras
    import numpy as np

    dataset, eval_dataset = _datasets(args, runtime, data, model, start_step, stop)
    # A run shorter than a checkpoint interval is one interval: the progress bar counts its
    # own steps, not the interval's.
    every = min(args.checkpoint_every, stop)
    # The timer first: a checkpoint's save, which runs at the end of its step, is then not
    # counted as the step's time (it was, before: a calibration run's one save with it).
    callbacks = [_Timer(timing), checkpoint, _StopAt(stop), keras.callbacks.TerminateOnNaN()]
    callbacks.append(interrupts)  # last: a checkpoint due at this batch end is saved first
    log = _EvalLog(os.path.join(args.output, "eval.json"))
    if args.eval_data and runtime.chief:
        callbacks.append(log)
    if args.eval_data and start_step:
        # The checkpoint resumed from, scored again: a kill between its save and its scores
        # left no row. Every process scores (a strategy's collectives); the chief writes.
        scores = model.evaluate(eval_dataset, steps=args.eval_steps, verbose=0, return_dict=True)
        if runtime.chief:
            log.write(start_step, {k: float(v) for k, v in scores.items()})
    if runtime.chief:
        from model.training.scalar_log import run_logs

        logs = os.path.join(args.output, "logs")
        callbacks.append(run_logs(logs, args.log_every, runtime.tf)[0])
    history = model.fit(
        dataset,
        initial_epoch=start_step // every,
        epochs=math.ceil(stop / every),
        steps_per_epoch=every,
        callbacks=callbacks,
        shuffle=False,
        verbose=1 if sys.stdout.isatty() else 2,
        **(
            {"validation_data": eval_dataset, "validation_steps": args.eval_steps}
            if args.eval_data
            else {}
        ),
    )
    # A NaN on the very last step also sets stop_training with the step
    # count reached, so look at the loss itself, not only at the step.
    interval_losses = [float(v) for v in history.history.get("loss", [])]
    last_loss = (interval_losses or [0.0])[-1]
    if not np.isfinite(last_loss) or (model.stop_training and optimizer_step(model) < stop):
        print(
            f"error: training stopped at step {optimizer_step(model)}: the loss is not finite. "
            f"The last good checkpoint is kept in {checkpoint.directory}",
            file=sys.stderr,
        )
        return None
    return interval_losses


def _datasets(args, runtime, data, model, start_step, stop):
    """(training data, held-out data or None) for `model.fit`: tf.data under TensorFlow,
    a PyDataset under JAX, or (--device-data) batches made inside the compiled step, which
    then runs several steps per call. Held-out batches always come from the host pipeline:
    the same batches, whichever path trains."""
    objective = data.objective
    data_args = dict(
        transform=objective.batches,
        seed=args.seed,
        start_step=start_step,
        shuffle_buffer=args.shuffle_buffer,
        next_sentence=objective.next_sentence,
    )
    # The same held-out batches every time: the first --eval-steps of the stream from its
    # start, the run's seed. (Keras goes on where an endless validation stream stopped, so
    # the held-out data is made finite: `take` and `cache`, a PyDataset's `steps`.)
    eval_args = {**data_args, "start_step": 0}
    if runtime.tf:
        from model.pretraining.dataset import distributed_pretraining_dataset, pretraining_dataset
        from model.training.strategy import prepare_fit

        dataset = distributed_pretraining_dataset(
            runtime.strategy, args.data, args.batch_size, **data_args
        )
        prepare_fit(
            model,
            runtime.strategy,
            pretraining_dataset(args.data, args.batch_size, **data_args).element_spec,
        )
        held_out = args.eval_data and (
            pretraining_dataset(args.eval_data, args.batch_size, **eval_args)
            .take(args.eval_steps)
            .cache()
        )
        return dataset, held_out or None
    from model.pretraining.pydataset import PretrainingPyDataset

    # The same batches as TensorFlow's pipeline in a process where
    # keras.utils.set_random_seed(--seed) set TensorFlow's graph seed.
    def py_dataset(path, **kwargs):
        worker_index, num_workers = runtime.process
        return PretrainingPyDataset(
            path,
            args.batch_size,
            graph_seed=args.seed,
            worker_index=worker_index,
            num_workers=num_workers,
            **kwargs,
        )

    held_out = (
        py_dataset(args.eval_data, steps=args.eval_steps, **eval_args) if args.eval_data else None
    )
    if not args.device_data:
        return py_dataset(args.data, **data_args), held_out
    return _device_dataset(args, data, model, start_step, stop), held_out


def _device_dataset(args, data, model, start_step, stop):
    from model.pretraining.device_data import DeviceCorpus
    from model.pretraining.vocabulary_tables import VocabularyTables
    from model.training import device_loop

    objective = data.objective
    requested = args.steps_per_call or DEVICE_STEPS_PER_CALL
    k = device_loop.steps_per_call(requested, args.checkpoint_every, stop, start_step)
    if k != requested:
        print(
            f"{k} steps per call: the largest number up to {requested} that divides "
            f"--checkpoint-every, the stop step and the resumed step"
        )
    if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        print(
            "note: compiled programs are not kept between runs; set JAX_COMPILATION_CACHE_DIR "
            "to a directory and runs that differ only in masking rates or seed compile once"
        )
    began = time.time()
    corpus = DeviceCorpus.read(args.data, objective.next_sentence)
    print(f"{corpus.num_rows} records read into device arrays in {time.time() - began:.1f} s")
    model.steps_per_execution = k
    device_loop.attach(
        model,
        corpus,
        objective.device_batches(VocabularyTables.from_vocabulary(data.vocabulary)),
        objective.masking_rates(),
        args.seed,
        args.batch_size,
        k,
    )
    return device_loop.calls()


def _save(args, runtime, data, config, model, timing, interval_losses, start_step=0):
    """The model directory and train_summary.json (the chief's)."""
    import keras

    from model.checkpoints import model_dir
    from model.io.files import write_json
    from model.objectives.base import records_inputs

    objective, seq_len = data.objective, data.seq_len
    model_dir.save(
        model,
        args.output,
        data.vocab_path,
        extra={
            "objective": objective.name,
            "max_seq_length": seq_len,
        },
    )
    elapsed = time.time() - timing.start if timing.start else 0.0
    median_step = timing.median_step()
    tokens = timing.steps * args.batch_size * seq_len
    summary = {
        "objective": objective.name,
        "steps": optimizer_step(model),
        # the steps timed: this run's after its first call (which compiles), as the
        # seconds below; not all the steps it ran (`steps` less the step it resumed from)
        "steps_this_run": timing.steps,
        "seconds_this_run": round(elapsed, 1),
        # the same steps' time without evaluation and checkpoint saves
        "seconds_in_steps": round(timing.in_steps, 3),
        # the median call's seconds a step (what a budget's calibration reads)
        "median_step_seconds": round(median_step, 6) if median_step is not None else None,
        "tokens_per_second": round(tokens / elapsed, 1) if elapsed else None,
        # the same tokens over the steps' own time
        "tokens_per_second_in_steps": round(tokens / timing.in_steps, 1)
        if timing.in_steps
        else None,
        "examples_seen": optimizer_step(model) * args.batch_size,
        "batch_size": args.batch_size,
        "seq_len": seq_len,
        # mean training loss of each checkpoint interval this run ran, the first one starting
        # at the step it resumed from (0: a run from the start); the whole run's curve is in
        # logs/, which every resumed run appends to
        "resumed_from_step": start_step,
        "interval_losses": interval_losses,
        "config": config.to_dict(),
        "strategy": args.strategy,
        "backend": keras.backend.backend(),
        "replicas": runtime.replicas,
        "mixed_precision": args.mixed_precision,
        "jit": args.jit,
        "device_data": args.device_data,
        "steps_per_call": model.steps_per_execution,
        "data": args.data,
        "input_format": records_inputs(data.info),  # what the records were made as
        "command": command_line(args),  # what repeats this run (model.recipes.runner reads it)
    }
    write_json(os.path.join(args.output, layout.SUMMARY), summary)
    if summary["tokens_per_second"] and summary["tokens_per_second_in_steps"]:
        print(
            f"step {summary['steps']} of {args.steps}; "
            f"{summary['tokens_per_second_in_steps']:.0f} tokens/s in the {timing.steps} steps "
            f"after the first call (which compiles), {summary['tokens_per_second']:.0f} with "
            f"their evaluations and checkpoint saves, {elapsed:.0f} s (batch x seq_len, "
            f"padding included)"
        )
    print(f"saved {args.output}")


class _StopAt(keras.callbacks.Callback):
    def __init__(self, steps):
        super().__init__()
        self.steps = steps

    def on_train_batch_end(self, batch, logs=None):
        if optimizer_step(self.model) >= self.steps:
            self.model.stop_training = True


class _Timer(keras.callbacks.Callback):
    """Times the steps after the first (tracing and compilation excluded): the wall time
    since the first step ended, and the time inside the steps alone, up to the moment their
    results are there (it waits for the step count: the steps may run after their call
    returns)."""

    def __init__(self, timing: Throughput):
        super().__init__()
        self.timing = timing
        self.began = self.first = None

    def on_train_batch_begin(self, batch, logs=None):
        self.began, self.first = time.time(), batch

    def on_train_batch_end(self, batch, logs=None):
        # One call may run several steps (steps_per_execution): batch - first + 1 of them.
        optimizer_step(self.model)  # the device has finished them
        now = time.time()
        if self.timing.start is None:
            self.timing.start = now
        else:
            steps = batch - self.first + 1
            self.timing.steps += steps
            self.timing.in_steps += now - self.began
            if len(self.timing.calls) < CALLS_KEPT:
                self.timing.calls.append((steps, now - self.began))


class _EvalLog(keras.callbacks.Callback):
    """Appends the held-out metrics of every checkpoint interval, with the step,
    to a JSON list (rewritten atomically; a resumed run goes on appending)."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def on_epoch_end(self, epoch, logs=None):
        held_out = {k[4:]: float(v) for k, v in (logs or {}).items() if k.startswith("val_")}
        if held_out:
            self.write(optimizer_step(self.model), held_out)

    def write(self, step: int, scores: dict) -> None:
        from model.io.files import read_json_object, write_json

        rows = read_json_object(self.path, "eval log")["rows"] if os.path.isfile(self.path) else []
        rows = [r for r in rows if r["step"] < step] + [{"step": step, **scores}]
        write_json(self.path, {"rows": rows})
