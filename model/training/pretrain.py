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
import sys
import time


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
    # start from a bidirectional encoder's weights): the rest must match.
    if ours.replace(dropout=0.0, causal=False) != theirs.replace(dropout=0.0, causal=False):
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


class Throughput:
    """Wall time and examples of the steps this process ran (restarts excluded); `in_steps`
    the seconds inside the training steps alone (no held-out evaluation, no checkpoint save),
    what a calibration run measures."""

    def __init__(self):
        self.start = None
        self.steps = 0
        self.in_steps = 0.0


def pretrain(args) -> int:
    import contextlib

    import keras
    import numpy as np

    from model import objectives
    from model.checkpoints import model_dir
    from model.io.files import check_writable_dir, write_json
    from model.networks.encoder import BertEncoder
    from model.pretraining.pydataset import find_records
    from model.text.wordpiece import load_vocabulary
    from model.training.checkpointing import ResumableCheckpoint
    from model.training.optimizer import bert_adamw

    # Under another backend (JAX) nothing on this path imports TensorFlow:
    # the input pipeline is a PyDataset and the strategy keras.distribution.
    tf_backend = keras.backend.backend() == "tensorflow"
    if tf_backend:
        import tensorflow as tf

        from model.training.strategy import is_chief, make_strategy

        # First: splitting the CPU into logical devices and configuring
        # multi-worker collectives both fail once TensorFlow has initialised.
        strategy = make_strategy(args.strategy, args.tpu, args.cpu_replicas)
        chief = is_chief(strategy)
        replicas, scope = strategy.num_replicas_in_sync, strategy.scope
        strategy_name = type(strategy).__name__
    else:
        from model.training.strategy import jax_process, make_jax_distribution

        distribution = make_jax_distribution(args.strategy, args.cpu_replicas)
        process_index, process_count = jax_process()
        chief = process_index == 0
        replicas = len(keras.distribution.list_devices()) if distribution else 1
        scope = contextlib.nullcontext
        strategy_name = type(distribution).__name__ if distribution else "one device"
    check_writable_dir(args.output)
    files, info = find_records(args.data)
    vocab_path = args.vocab or os.path.join(os.path.dirname(files[0]), "vocab.txt")
    vocabulary = load_vocabulary(vocab_path)
    if "[MASK]" not in vocabulary:
        raise ValueError(f"{vocab_path}: the vocabulary has no [MASK] token")
    seq_len = info["max_seq_length"]
    if args.seq_len is not None and args.seq_len != seq_len:
        raise ValueError(
            f"--seq-len {args.seq_len} differs from the records' {seq_len}; "
            f"make records of that length with python -m model.data"
        )
    objective = objectives.get(args.objective)(
        vocabulary,
        objectives.ObjectiveOptions(
            seq_len=seq_len,
            mask_rate=args.mask_rate,
            mask_token_rate=args.mask_token_rate,
            random_token_rate=args.random_token_rate,
            max_predictions=args.max_predictions,
            whole_word=args.whole_word_masking,
            next_sentence=not args.no_nsp,
            generator_size=args.generator_size,
            discriminator_weight=args.discriminator_weight,
        ),
    )
    objective.check_records(args.data, info)
    if args.eval_data:
        eval_info = find_records(args.eval_data)[1]
        objective.check_records(args.eval_data, eval_info)
        if eval_info["max_seq_length"] != seq_len:
            raise ValueError(
                f"{args.eval_data}: records of {eval_info['max_seq_length']} tokens, "
                f"the training records' are {seq_len}"
            )
    config = objective.encoder_config(resolve_config(args.config, len(vocabulary), args.dropout))
    if seq_len > config.max_sequence_length:
        raise ValueError(
            f"records of {seq_len} tokens exceed the model's "
            f"max_sequence_length {config.max_sequence_length}"
        )
    if args.steps < 1 or args.batch_size < 1 or args.checkpoint_every < 1:
        raise ValueError("--steps, --batch-size and --checkpoint-every must be positive")
    if args.stop_at is not None and args.stop_at < 1:
        raise ValueError(f"--stop-at must be positive, got {args.stop_at}")
    if (
        tf_backend
        and args.jit
        and strategy.num_replicas_in_sync > 1
        and not isinstance(strategy, tf.distribute.TPUStrategy)
    ):
        # Keras 3 compiles `strategy.run` over all replicas as one XLA
        # function, which fails when the replicas' variables live on
        # different devices (keras-team/keras#19005).
        raise ValueError(
            f"--jit with {strategy.num_replicas_in_sync} replicas of "
            f"{type(strategy).__name__}: Keras cannot compile a step that spans "
            f"devices; leave --jit out, or use one device or a TPU"
        )
    if args.batch_size % replicas:
        raise ValueError(
            f"--batch-size {args.batch_size} (the global batch) is not a multiple "
            f"of the {replicas} replicas"
        )
    next_sentence = objective.next_sentence
    transform = objective.batches
    warmup = args.warmup_steps if args.warmup_steps is not None else min(10_000, args.steps // 10)

    keras.utils.set_random_seed(args.seed)
    keras.mixed_precision.set_global_policy(args.mixed_precision)
    print(
        f"objective: {objective.name}; "
        f"backend: {keras.backend.backend()}; strategy: {strategy_name} with {replicas} "
        f"replica(s); "
        f"global batch {args.batch_size}; {info['num_instances']} instances of {seq_len} tokens"
    )

    with scope():
        model = objective.build_model(BertEncoder.from_config_object(config), seed=args.seed)
        if not next_sentence:
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
            jit_compile=args.jit if tf_backend else "auto",
        )
        model.optimizer.build(model.trainable_variables)
        if tf_backend:
            from model.training.strategy import sum_gradients_first

            sum_gradients_first(model.optimizer)

    checkpoint = ResumableCheckpoint(
        os.path.join(args.output, "checkpoints"),
        every=args.checkpoint_every,
        keep=args.keep_checkpoints,
        is_chief=chief,
    )
    if chief:  # another worker's temporaries may be the chief's save in progress
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

    timing = Throughput()
    interval_losses = []
    stop = min(args.steps, args.stop_at or args.steps)
    if start_step < stop:
        data_args = dict(
            transform=transform,
            seed=args.seed,
            start_step=start_step,
            shuffle_buffer=args.shuffle_buffer,
            next_sentence=next_sentence,
        )
        # The same held-out batches every time: from the stream's start, the run's seed.
        eval_args = {**data_args, "start_step": 0}
        if tf_backend:
            from model.pretraining.dataset import (
                distributed_pretraining_dataset,
                pretraining_dataset,
            )
            from model.training.strategy import prepare_fit

            dataset = distributed_pretraining_dataset(
                strategy, args.data, args.batch_size, **data_args
            )
            if args.eval_data:
                eval_dataset = pretraining_dataset(args.eval_data, args.batch_size, **eval_args)
            prepare_fit(
                model,
                strategy,
                pretraining_dataset(args.data, args.batch_size, **data_args).element_spec,
            )
        else:
            from model.pretraining.pydataset import PretrainingPyDataset

            # The same batches as TensorFlow's pipeline in a process where
            # keras.utils.set_random_seed(--seed) set TensorFlow's graph seed.
            def py_dataset(path, **kwargs):
                return PretrainingPyDataset(
                    path,
                    args.batch_size,
                    graph_seed=args.seed,
                    worker_index=process_index,
                    num_workers=process_count,
                    **kwargs,
                )

            dataset = py_dataset(args.data, **data_args)
            if args.eval_data:
                eval_dataset = py_dataset(args.eval_data, **eval_args)
        # One Keras "epoch" is one checkpoint interval.
        every = args.checkpoint_every
        callbacks = [
            checkpoint,
            _StopAt(stop),
            keras.callbacks.TerminateOnNaN(),
            _Timer(timing),
        ]
        if args.eval_data and chief:
            callbacks.append(_EvalLog(os.path.join(args.output, "eval.json")))
        if chief and (tf_backend or _tensorflow_installed()):
            callbacks.append(
                keras.callbacks.TensorBoard(
                    os.path.join(args.output, "logs"), update_freq=args.log_every
                )
            )
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
        if not np.isfinite(last_loss) or (model.stop_training and _step(model) < stop):
            print(
                f"error: training stopped at step {_step(model)}: the loss is not finite. "
                f"The last good checkpoint is kept in {checkpoint.directory}",
                file=sys.stderr,
            )
            return 3

    if not chief:
        print(f"worker done at step {_step(model)}; the chief writes {args.output}")
        return 0
    model_dir.save(
        model,
        args.output,
        vocab_path,
        extra={
            "objective": objective.name,
            "max_seq_length": seq_len,
            "lowercase": info.get("lowercase", True),
        },
    )
    elapsed = time.time() - timing.start if timing.start else 0.0
    tokens = timing.steps * args.batch_size * seq_len
    summary = {
        "objective": objective.name,
        "steps": _step(model),
        "steps_this_run": timing.steps,
        "seconds_this_run": round(elapsed, 1),
        # the same steps' time without evaluation and checkpoint saves
        "seconds_in_steps": round(timing.in_steps, 1),
        "tokens_per_second": round(tokens / elapsed, 1) if elapsed else None,
        "examples_seen": _step(model) * args.batch_size,
        "batch_size": args.batch_size,
        "seq_len": seq_len,
        # mean training loss of each checkpoint interval this run ran
        "interval_losses": interval_losses,
        "config": config.to_dict(),
        "strategy": args.strategy,
        "backend": keras.backend.backend(),
        "replicas": replicas,
        "mixed_precision": args.mixed_precision,
        "jit": args.jit,
        "data": args.data,
        "argv": sys.argv,
    }
    write_json(os.path.join(args.output, "train_summary.json"), summary)
    if summary["tokens_per_second"]:
        print(
            f"{timing.steps} steps in {elapsed:.0f} s: {summary['tokens_per_second']:.0f} tokens/s "
            f"(batch x seq_len, padding included)"
        )
    print(f"saved {args.output}")
    return 0


def _tensorflow_installed() -> bool:
    """Whether Keras can write TensorBoard logs (its callback needs tf.summary);
    a JAX machine without TensorFlow trains without them."""
    import importlib.util

    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):
        return False


def _step(model) -> int:
    import keras

    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


def _is_chief(strategy) -> bool:
    from model.training.strategy import is_chief

    return is_chief(strategy)


def _callbacks_base():
    import keras

    return keras.callbacks.Callback


class _StopAt(_callbacks_base()):
    def __init__(self, steps):
        super().__init__()
        self.steps = steps

    def on_train_batch_end(self, batch, logs=None):
        if _step(self.model) >= self.steps:
            self.model.stop_training = True


class _Timer(_callbacks_base()):
    """Times the steps after the first (tracing and compilation excluded): the wall time
    since the first step ended, and the time inside the steps alone."""

    def __init__(self, timing: Throughput):
        super().__init__()
        self.timing = timing
        self.began = None

    def on_train_batch_begin(self, batch, logs=None):
        self.began = time.time()

    def on_train_batch_end(self, batch, logs=None):
        now = time.time()
        if self.timing.start is None:
            self.timing.start = now
        else:
            self.timing.steps += 1
            self.timing.in_steps += now - self.began


class _EvalLog(_callbacks_base()):
    """Appends the held-out metrics of every checkpoint interval, with the step,
    to a JSON list (rewritten atomically; a resumed run goes on appending)."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def on_epoch_end(self, epoch, logs=None):
        from model.io.files import read_json_object, write_json

        held_out = {k[4:]: float(v) for k, v in (logs or {}).items() if k.startswith("val_")}
        if not held_out:
            return
        rows = read_json_object(self.path, "eval log")["rows"] if os.path.isfile(self.path) else []
        step = _step(self.model)
        rows = [r for r in rows if r["step"] < step] + [{"step": step, **held_out}]
        write_json(self.path, {"rows": rows})
