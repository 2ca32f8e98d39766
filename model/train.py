"""Training: `pretrain` (masked LM + next sentence prediction).

    python -m model.train pretrain --config mini --data 'DATA/*.tfrecord' --output runs/mini \\
        --batch-size 32 --steps 10000 --learning-rate 1e-4 --warmup-steps 1000

`--data` is made by `python -m model.data` (or google-research's
`create_pretraining_data.py`). A checkpoint is written every
`--checkpoint-every` steps under OUTPUT/checkpoints; started again on the same
`--output` after being killed at any moment, the same command resumes from
the newest one, at the same position in the data. TensorBoard logs go to
OUTPUT/logs. At the end OUTPUT holds `config.json`, `vocab.txt`,
`model.weights.h5` and `train_summary.json`.

The paper's two-phase recipe: 90 % of the steps at 128 tokens, then the rest
at 512 from the first run's weights:

    python -m model.train pretrain --config base --data 'd128/*' --output r128 --steps 900000
    python -m model.train pretrain --config base --data 'd512/*' --output r512 --steps 100000 \\
        --init-checkpoint r128

Every command also takes `--strategy` (auto, cpu, gpu, mirrored, multiworker,
tpu), `--mixed-precision` (float32, mixed_float16, mixed_bfloat16), `--jit`
(XLA) and `--init-checkpoint`; `python -m model.train pretrain --help` lists
all flags.

Several replicas: `--batch-size` is the global batch, split evenly over
them, and the loss is the same mean over the global batch as on one replica
(see model/pretraining_dataset.py), so a run gives the same weights on 1 or N
replicas up to float rounding when dropout is 0. On a machine without GPUs,
`--strategy mirrored --cpu-replicas 2` trains on two logical CPUs. Several
machines: start the same command on each with `--strategy multiworker` and
its own TF_CONFIG, e.g. for worker 1 of 2

    TF_CONFIG='{"cluster": {"worker": ["host0:12345", "host1:12345"]},
                "task": {"type": "worker", "index": 1}}' \
        python -m model.train pretrain ... --strategy multiworker --output /shared/run

OUTPUT must be on a filesystem all workers share: worker 0 (the chief)
writes the checkpoints, the logs and the final model; every worker restores
from the chief's checkpoints. After any worker dies, stop the others and
start all of them again with the same command: they resume together from the
newest checkpoint.

The JAX backend trains the same model from the same records, without
TensorFlow (model/pretraining_pydataset.py reads the records and yields the
very batches of the tf.data pipeline):

    KERAS_BACKEND=jax python -m model.train pretrain --config mini --data DATA --output RUN ...
    KERAS_BACKEND=jax python -m model.train pretrain ... --strategy data-parallel

`--strategy` is then auto (one device) or data-parallel
(keras.distribution.DataParallel over all devices); the step is always
XLA-compiled; TensorBoard logs are written only if TensorFlow is installed.
With dropout 0 a run follows the TensorFlow backend's loss curve to float
rounding (tests/test_jax_backend.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

from model.strategy import STRATEGIES

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


def add_common_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output", required=True, help="run directory (resumes if it has checkpoints)")
    p.add_argument("--strategy", choices=STRATEGIES, default="auto",
                   help="tf.distribute strategy; under KERAS_BACKEND=jax auto or "
                        "data-parallel (default: auto)")
    p.add_argument("--tpu", default=None, help="TPU name or address for --strategy tpu")
    p.add_argument("--batch-size", type=int, default=32, help="global batch size")
    p.add_argument("--learning-rate", type=float, default=1e-4)
    p.add_argument("--warmup-steps", type=int, default=None,
                   help="linear warm-up steps (default: 10%% of --steps, at most 10,000)")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--mixed-precision", choices=PRECISIONS, default="float32")
    p.add_argument("--jit", action="store_true", help="compile the train step with XLA")
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--checkpoint-every", type=int, default=1000)
    p.add_argument("--keep-checkpoints", type=int, default=3)
    p.add_argument("--log-every", type=int, default=100, help="TensorBoard logging period (steps)")
    p.add_argument("--init-checkpoint", default=None,
                   help="start from these weights (a model directory, HF or Google checkpoint)")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m model.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pre = sub.add_parser("pretrain", help="masked-LM + next-sentence pre-training",
                         description="Pre-train BERT (MLM + NSP) on TFRecords from model.data.")
    pre.add_argument("--config", default="mini",
                     help="preset (tiny, mini, small, medium, base, large, minilm-l6) "
                          "or a config JSON (ours or Google's bert_config.json)")
    pre.add_argument("--data", required=True, help="record files: a glob or a directory")
    pre.add_argument("--vocab", default=None, help="vocab.txt (default: the data's)")
    pre.add_argument("--steps", type=int, required=True, help="total training steps")
    pre.add_argument("--stop-at", type=int, default=None, metavar="STEP",
                     help="stop after this step and write the model of that step; the "
                          "learning-rate schedule still spans --steps, and a later run with "
                          "the same --output goes on from there")
    pre.add_argument("--seq-len", type=int, default=None,
                     help="sequence length; must equal the records' (default: theirs)")
    pre.add_argument("--dropout", type=float, default=None, help="override the config's dropout")
    pre.add_argument("--no-nsp", action="store_true", help="train masked LM only")
    pre.add_argument("--cpu-replicas", type=int, default=None, metavar="N",
                     help="with --strategy mirrored and no GPU: split the CPU into N logical "
                          "devices, one replica each (tests; multi-replica numerics on a laptop)")
    g = pre.add_argument_group("dynamic masking (records made with --masking dynamic)")
    g.add_argument("--max-predictions", type=int, default=None,
                   help="masked positions per sequence (default: 15%% of --seq-len, rounded up)")
    g.add_argument("--mask-rate", type=float, default=0.15)
    g.add_argument("--mask-token-rate", type=float, default=0.8)
    g.add_argument("--random-token-rate", type=float, default=0.1)
    g.add_argument("--whole-word-masking", action="store_true")
    g.add_argument("--shuffle-buffer", type=int, default=10_000)
    add_common_flags(pre)

    fine = sub.add_parser("finetune", help="fine-tune on a task of the paper",
                          description="Fine-tune a pre-trained encoder on one task "
                                      "(see model/tasks/). Defaults follow the paper.")
    fine.add_argument("--task", required=True, help="task name (model.tasks.TASKS)")
    fine.add_argument("--data", required=True,
                      help="the task's data: its directory or its train file")
    fine.add_argument("--init", required=True,
                      help="pre-trained checkpoint: our model directory, HF or Google folder")
    fine.add_argument("--epochs", type=float, default=None,
                      help="default: the task's (squad2: 2), else 3 (the paper's)")
    fine.add_argument("--seq-len", type=int, default=None, help="default: the task's")
    fine.add_argument("--dropout", type=float, default=0.1)
    fine.add_argument("--max-train-examples", type=int, default=None,
                      help="use only the first N training examples")
    fine.add_argument("--group-by-length", action="store_true",
                      help="batch training examples of similar length together (less "
                           "padding, faster on short texts; batches stay in random order)")
    add_common_flags(fine)
    # None: the task's own default (model/tasks/*), else the paper's.
    fine.set_defaults(learning_rate=None, batch_size=None)
    return p.parse_args(argv)


def resolve_config(spec: str, vocabulary_size: int, dropout: float | None):
    from model.config import PRESETS, BertConfig

    if spec in PRESETS:
        config = BertConfig.preset(spec, vocabulary_size=vocabulary_size)
    else:
        config = BertConfig.from_json(spec)
        if config.vocabulary_size != vocabulary_size:
            raise ValueError(f"{spec}: vocabulary_size {config.vocabulary_size} differs from the "
                             f"vocabulary's {vocabulary_size} tokens")
    return config.replace(dropout=dropout) if dropout is not None else config


def init_from_checkpoint(model, path: str) -> list[str]:
    """Copies the encoder (and any pre-training heads) of `path` into `model`.
    Returns the names of heads that had no weights in `path` (left fresh)."""
    from model import load
    from model.pretrainer import BertPretrainer

    source = load(path)
    src_encoder = source.encoder if hasattr(source, "encoder") else source
    ours, theirs = model.encoder.config, src_encoder.config
    if ours.replace(dropout=0.0) != theirs.replace(dropout=0.0):
        raise ValueError(f"{path}: its encoder config {theirs} differs from this run's {ours}")
    model.encoder.set_weights(src_encoder.get_weights())
    fresh = []
    if isinstance(source, BertPretrainer):
        model.masked_lm_head.set_weights(source.masked_lm_head.get_weights())
        if model.next_sentence_head is not None:
            if source.next_sentence_head is not None:
                model.next_sentence_head.set_weights(source.next_sentence_head.get_weights())
            else:
                fresh.append("next_sentence_head")
    else:
        fresh.append("masked_lm_head")
        if model.next_sentence_head is not None:
            fresh.append("next_sentence_head")
    return fresh


class Throughput:
    """Wall time and examples of the steps this process ran (restarts excluded)."""

    def __init__(self):
        self.start = None
        self.steps = 0


def pretrain(args) -> int:
    import contextlib

    import keras
    import numpy as np

    from model import model_dir
    from model.checkpointing import ResumableCheckpoint
    from model.encoder import BertEncoder
    from model.io import check_writable_dir, write_json
    from model.masking import Masker, MaskingConfig
    from model.optimizer import bert_adamw
    from model.pretrainer import BertPretrainer
    from model.pretraining_pydataset import find_records
    from model.wordpiece import load_vocabulary

    # Under another backend (JAX) nothing on this path imports TensorFlow:
    # the input pipeline is a PyDataset and the strategy keras.distribution.
    tf_backend = keras.backend.backend() == "tensorflow"
    if tf_backend:
        import tensorflow as tf

        from model.strategy import is_chief, make_strategy

        # First: splitting the CPU into logical devices and configuring
        # multi-worker collectives both fail once TensorFlow has initialised.
        strategy = make_strategy(args.strategy, args.tpu, args.cpu_replicas)
        chief = is_chief(strategy)
        replicas, scope = strategy.num_replicas_in_sync, strategy.scope
        strategy_name = type(strategy).__name__
    else:
        from model.strategy import jax_process, make_jax_distribution

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
        raise ValueError(f"--seq-len {args.seq_len} differs from the records' {seq_len}; "
                         f"make records of that length with python -m model.data")
    config = resolve_config(args.config, len(vocabulary), args.dropout)
    if seq_len > config.max_sequence_length:
        raise ValueError(f"records of {seq_len} tokens exceed the model's "
                         f"max_sequence_length {config.max_sequence_length}")
    if args.steps < 1 or args.batch_size < 1 or args.checkpoint_every < 1:
        raise ValueError("--steps, --batch-size and --checkpoint-every must be positive")
    if args.stop_at is not None and args.stop_at < 1:
        raise ValueError(f"--stop-at must be positive, got {args.stop_at}")
    if (tf_backend and args.jit and strategy.num_replicas_in_sync > 1
            and not isinstance(strategy, tf.distribute.TPUStrategy)):
        # Keras 3 compiles `strategy.run` over all replicas as one XLA
        # function, which fails when the replicas' variables live on
        # different devices (keras-team/keras#19005).
        raise ValueError(f"--jit with {strategy.num_replicas_in_sync} replicas of "
                         f"{type(strategy).__name__}: Keras cannot compile a step that spans "
                         f"devices; leave --jit out, or use one device or a TPU")
    if args.batch_size % replicas:
        raise ValueError(f"--batch-size {args.batch_size} (the global batch) is not a multiple "
                         f"of the {replicas} replicas")
    next_sentence = not args.no_nsp
    masker = None
    if info.get("masking") != "static":
        masker = Masker(vocabulary, MaskingConfig(
            mask_rate=args.mask_rate, mask_token_rate=args.mask_token_rate,
            random_token_rate=args.random_token_rate,
            max_predictions=args.max_predictions or math.ceil(0.15 * seq_len),
            whole_word=args.whole_word_masking))
    warmup = args.warmup_steps if args.warmup_steps is not None else min(10_000, args.steps // 10)

    keras.utils.set_random_seed(args.seed)
    keras.mixed_precision.set_global_policy(args.mixed_precision)
    print(f"backend: {keras.backend.backend()}; strategy: {strategy_name} with {replicas} "
          f"replica(s); "
          f"global batch {args.batch_size}; {info['num_instances']} instances of {seq_len} tokens")

    with scope():
        model = BertPretrainer(BertEncoder.from_config_object(config), next_sentence=next_sentence)
        losses = {"mlm": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}
        metrics = {"mlm": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]}
        if next_sentence:
            losses["nsp"] = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
            metrics["nsp"] = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        model.compile(optimizer=bert_adamw(args.learning_rate, warmup, args.steps,
                                           args.weight_decay),
                      # JAX always compiles its step (not compiling is eager, op by op)
                      loss=losses, weighted_metrics=metrics,
                      jit_compile=args.jit if tf_backend else "auto")
        model.optimizer.build(model.trainable_variables)
        if tf_backend:
            from model.strategy import sum_gradients_first

            sum_gradients_first(model.optimizer)

    checkpoint = ResumableCheckpoint(os.path.join(args.output, "checkpoints"),
                                     every=args.checkpoint_every, keep=args.keep_checkpoints,
                                     is_chief=chief)
    if chief:  # another worker's temporaries may be the chief's save in progress
        checkpoint.clean_partial()
    checkpoint.set_model(model)
    start_step = checkpoint.restore(model)
    if start_step:
        print(f"resuming from step {start_step} ({checkpoint.directory})")
    elif args.init_checkpoint:
        fresh = init_from_checkpoint(model, args.init_checkpoint)
        print(f"initialised from {args.init_checkpoint}"
              + (f"; created fresh (not in the checkpoint): {', '.join(fresh)}" if fresh else ""))

    timing = Throughput()
    interval_losses = []
    stop = min(args.steps, args.stop_at or args.steps)
    if start_step < stop:
        data_args = dict(masker=masker, seed=args.seed, start_step=start_step,
                         shuffle_buffer=args.shuffle_buffer, next_sentence=next_sentence)
        if tf_backend:
            from model.pretraining_dataset import (distributed_pretraining_dataset,
                                                  pretraining_dataset)
            from model.strategy import prepare_fit

            dataset = distributed_pretraining_dataset(strategy, args.data, args.batch_size,
                                                      **data_args)
            prepare_fit(model, strategy, pretraining_dataset(
                args.data, args.batch_size, **data_args).element_spec)
        else:
            from model.pretraining_pydataset import PretrainingPyDataset

            # The same batches as TensorFlow's pipeline in a process where
            # keras.utils.set_random_seed(--seed) set TensorFlow's graph seed.
            dataset = PretrainingPyDataset(args.data, args.batch_size, graph_seed=args.seed,
                                           worker_index=process_index,
                                           num_workers=process_count, **data_args)
        # One Keras "epoch" is one checkpoint interval.
        every = args.checkpoint_every
        callbacks = [
            checkpoint,
            _StopAt(stop),
            keras.callbacks.TerminateOnNaN(),
            _Timer(timing),
        ]
        if chief and (tf_backend or _tensorflow_installed()):
            callbacks.append(keras.callbacks.TensorBoard(os.path.join(args.output, "logs"),
                                                         update_freq=args.log_every))
        history = model.fit(dataset, initial_epoch=start_step // every,
                            epochs=math.ceil(stop / every), steps_per_epoch=every,
                            callbacks=callbacks, shuffle=False,
                            verbose=1 if sys.stdout.isatty() else 2)
        # A NaN on the very last step also sets stop_training with the step
        # count reached, so look at the loss itself, not only at the step.
        interval_losses = [float(v) for v in history.history.get("loss", [])]
        last_loss = (interval_losses or [0.0])[-1]
        if not np.isfinite(last_loss) or (model.stop_training and _step(model) < stop):
            print(f"error: training stopped at step {_step(model)}: the loss is not finite. "
                  f"The last good checkpoint is kept in {checkpoint.directory}", file=sys.stderr)
            return 3

    if not chief:
        print(f"worker done at step {_step(model)}; the chief writes {args.output}")
        return 0
    model_dir.save(model, args.output, vocab_path,
                   extra={"max_seq_length": seq_len, "lowercase": info.get("lowercase", True)})
    elapsed = time.time() - timing.start if timing.start else 0.0
    tokens = timing.steps * args.batch_size * seq_len
    summary = {"steps": _step(model), "steps_this_run": timing.steps,
               "seconds_this_run": round(elapsed, 1),
               "tokens_per_second": round(tokens / elapsed, 1) if elapsed else None,
               "examples_seen": _step(model) * args.batch_size,
               "batch_size": args.batch_size, "seq_len": seq_len,
               # mean training loss of each checkpoint interval this run ran
               "interval_losses": interval_losses,
               "config": config.to_dict(), "strategy": args.strategy,
               "backend": keras.backend.backend(), "replicas": replicas,
               "mixed_precision": args.mixed_precision, "jit": args.jit,
               "data": args.data, "argv": sys.argv}
    write_json(os.path.join(args.output, "train_summary.json"), summary)
    if summary["tokens_per_second"]:
        print(f"{timing.steps} steps in {elapsed:.0f} s: {summary['tokens_per_second']:.0f} tokens/s "
              f"(batch x seq_len, padding included)")
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
    from model.strategy import is_chief

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
    """Times the steps after the first (tracing and compilation excluded)."""

    def __init__(self, timing: Throughput):
        super().__init__()
        self.timing = timing

    def on_train_batch_end(self, batch, logs=None):
        if self.timing.start is None:
            self.timing.start = time.time()
        else:
            self.timing.steps += 1


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from model.strategy import StrategyError

    try:
        if args.command == "pretrain":
            return pretrain(args)
        if args.command == "finetune":
            from model.finetune import finetune

            return finetune(args)
    except (FileNotFoundError, ValueError, StrategyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
