"""Fine-tuning on a task of the paper: `python -m model.train finetune`.

    python -m model.train finetune --task mrpc --data ../shared/data/glue/MRPC \\
        --init runs/base --output runs/mrpc
    python -m model.evaluate --task mrpc --model runs/mrpc --data ../shared/data/glue/MRPC/dev.tsv

`--init` is any checkpoint `model.load` reads (our model directory, a Hugging
Face or a Google folder), or one checkpoint of a training run,
RUN/checkpoints/ckpt-NNNNNNNN (`model.training.checkpointing.load_checkpoint`:
the run's config.json and vocab.txt, that step's weights; BERT Figure 5 fine-tunes
from several steps of one pre-training run). Only its encoder is used, and the
task's head (`model/tasks/`) starts fresh.

`--bilstm UNITS` puts a randomly initialised bidirectional LSTM (UNITS a
direction) between the encoder and the task's head (BERT Table 5's "+ BiLSTM",
`model/heads/bilstm_encoder.py`): token heads (NER, SQuAD) read its states,
sentence heads its two final states. config.json records it (`bilstm_units`),
so loading, `model.evaluate` and a later `--init` need no flag. The defaults are the paper's: batch 32, 3
epochs, AdamW with the task's learning rate (GLUE and SWAG 2e-5, NER 3e-5),
linear warm-up over the first 10 % of the steps then linear decay, dropout 0.1,
weight decay 0.01; each is a flag. A flag left unset (None) takes the task's
own default first (`default_epochs`, `default_batch_size`,
`default_learning_rate`, `default_seq_len`: SQuAD v2.0 trains 2 epochs at
batch 48), then the paper's.

Heads on the sequence output alone (SQuAD, NER) never read the pooler, so its
Dense is frozen for the run (no gradient would reach it anyway) and saved
unchanged from `--init`.

The training examples are shuffled anew every epoch (seed `--seed` + epoch).
After every epoch the model is scored on the task's dev file(s) with the
task's own metric, and the best by `task.main_metric` is kept. OUTPUT then
holds a self-contained model directory:

    config.json         encoder config, head, label map (id2label), max_seq_length
    vocab.txt           the vocabulary
    model.weights.h5    the best epoch's weights (no optimizer state)
    label_map.json      {"id2label": ...}, for tasks with named labels
    metrics.json        best dev metrics, every epoch's, wall time, examples seen, command
    logs/               TensorBoard: training loss and dev metrics
    predictions         the best epoch's dev predictions: SQuAD's predictions.json (with
                        nbest_predictions.json, and null_odds.json for v2.0), GLUE's
                        <TASK>.<dev file>.tsv, CoNLL-2003's predictions.txt
    dev_units.json      the best epoch's dev metric by example (by sentence for CoNLL-2003;
                        under matched/ and mismatched/ for MNLI; none for STS-B, SQuAD
                        v2.0, SWAG): the tables' paired sampling error (model/tasks/dev_units.py)

A run is resumable: a checkpoint (weights, optimizer, dropout state and the
dev history so far) is written atomically under OUTPUT/checkpoints every
`--checkpoint-every` steps and at the end of every epoch; the same command
started again after a crash goes on from the newest one with the same data
order, so it ends with the weights an uninterrupted run would have. The
checkpoints are removed when the run has finished.

Every epoch's dev predictions go to a scratch folder inside OUTPUT
(`.epoch-predictions-*`) and are renamed into OUTPUT only when that epoch is
the new best, so they always match model.weights.h5. For SQuAD v2.0 the null
threshold that maximises dev F1 (`best_f1_thresh`) is stored as
`null_threshold` in config.json and metrics.json; `model.evaluate` uses it
unless `--null-threshold` says otherwise.

The JAX backend fine-tunes the same way, without TensorFlow:

    KERAS_BACKEND=jax python -m model.train finetune --task sst2 \\
        --data ../shared/data/glue/SST-2 --init runs/base --output runs/sst2-jax \\
        [--strategy data-parallel]

It tokenizes with the pure-Python WordPiece tokenizer (model/text/wordpiece.py:
the same ids) and trains on the very batches of the tf.data pipeline,
trimming and `--group-by-length` included (model/training/finetune_pydataset.py), so
with dropout 0 it ends with TensorFlow's weights up to float rounding
(tests/test_jax_finetune.py). `--strategy` is then auto (one device) or
data-parallel (keras.distribution.DataParallel over the devices of this
process; a short batch then keeps a multiple of the device count). There is
no TensorBoard without TensorFlow: the training loss (every `--log-every`
steps) and the dev metrics go to OUTPUT/logs/scalars.csv (`tag,step,value`).

`--device-data` (JAX, one device) keeps the encoded features on the accelerator and runs
`--steps-per-call` full-length steps in one compiled call (`model/training/seeds.py`), in
its own example order; an epoch is rounded up to whole calls, and the dev evaluation pads
every batch to one shape (`fixed_shape`), so a GPU compiles one program for it.
`--seeds 1,2,3` with it trains those seeds together, one compiled program for all (a small
model's steps leave an accelerator mostly idle, so three cost about one): each seed is its
own run, in `--output` with {seed} filled in (`runs/sst2-seed{seed}`), with its own head,
example order, dropout, checkpoints and metrics.json, ending where `--seed S` alone would.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import shutil
import sys
import tempfile
import time
import types

from model.io.memo import Memo, stamp
from model.training import layout
from model.training.run_command import command_line, commands_differ

# The paper's fine-tuning recipe (section 4), for tasks that set no default of their own.
PAPER_EPOCHS = 3.0
PAPER_BATCH_SIZE = 32
# Heads that read only the sequence output: the pooler gets no gradient there.
POOLER_UNUSED = ("question_answerer", "token_classifier")
# Scratch folders (inside OUTPUT) for one epoch's dev predictions.
SCRATCH_PREFIX = ".epoch-predictions-"
# --device-data: training steps in one compiled call unless --steps-per-call says.
DEVICE_STEPS_PER_CALL = 50


def resolve_defaults(args, task):
    """A copy of `args` with each hyper-parameter left unset (None) filled in:
    the task's default (`task.default_epochs`, ...) if it has one, else the paper's.

    Explicit values are kept as given, so `--epochs 3` on SQuAD v2.0 means 3.
    """
    resolved = copy.copy(args)
    for flag, attribute, paper in (
        ("epochs", "default_epochs", PAPER_EPOCHS),
        ("batch_size", "default_batch_size", PAPER_BATCH_SIZE),
        ("learning_rate", "default_learning_rate", None),
        ("seq_len", "default_seq_len", None),
    ):
        if getattr(args, flag, None) is None:
            default = getattr(task, attribute, None)
            setattr(resolved, flag, paper if default is None else default)
    return resolved


def finetune(args) -> int:
    """Trains `args.task` from `args.init` into `args.output`; returns the exit code.

    The stages, in the order they run. The backends differ in `_runtime` (the
    strategy and the batches), `_callbacks` (TensorBoard or a CSV) and
    `_build`'s compile flag, nowhere else. `--seeds` (with --device-data) makes one
    run of these stages per seed, trained together in one compiled program.
    """
    task = task_of(args)
    args = resolve_defaults(args, task)
    _check(args)
    finished = _finished(args)
    if finished:
        print(
            f"nothing to train: {', '.join(finished)} holds a finished run (its metrics.json, "
            "no checkpoint left); remove it, or name another --output, to train again"
        )
        return 0
    runs, runtime = [], None
    for seed_args in layout.per_seed(args):
        runs.append(_run(seed_args, task, runtime))
        runtime = runs[0].runtime  # the seeds share the features on the device and a trainer
    if len({run.done for run in runs}) > 1:
        _back_to_a_shared_step(runs)
    from model.training.interrupts import interruptible

    with interruptible() as interrupts:  # Ctrl-C and SIGTERM stop a run on the device path too
        if not _loop(args, runs, interrupts):
            return 3
    for run in runs:
        _finish(run)
    for run in runs:  # after every seed's metrics.json: a stop between leaves them all resumable
        run.checkpoint.remove_all()
    return 0


def _finished(args) -> list[str]:
    """The outputs (each seed's) that hold a finished run of this command: the same command
    again trains nothing rather than a new run over it. ValueError when one holds another
    command's run (its metrics.json says which), or when only some seeds finished."""
    from model.io.files import read_json_object
    from model.training.checkpointing import of_run

    runs = layout.per_seed(args)
    finished = []
    for run in runs:
        metrics = os.path.join(run.output, "metrics.json")
        if not os.path.isfile(metrics):
            continue
        command = read_json_object(metrics, "metrics").get("command")
        differs = commands_differ(str(command), command_line(run))
        if differs:
            raise ValueError(
                f"{run.output} holds a finished run of another command ({'; '.join(differs)}); "
                f"remove it, or name another --output"
            )
        finished.append(run)

    if len(finished) == len(runs):
        for run in finished:  # a stop between the metrics and the checkpoints' removal
            of_run(run.output).remove_all()
        return [run.output for run in finished]
    if not all(of_run(run.output).checkpoints() for run in finished):
        raise ValueError(
            f"--seeds: {', '.join(r.output for r in finished)} holds a finished run, the "
            f"other seeds' do not; remove it to train the seeds together again"
        )
    return []  # none finished, or a stop while the seeds wrote theirs: all go on


def _back_to_a_shared_step(runs) -> None:
    """--seeds stopped while its seeds saved one after another: each resumes from the newest
    step all of them have a checkpoint of, and the later ones go (the seeds train as one
    program, at one step). With no such step, the seeds cannot go on together."""
    shared = set.intersection(*({s for s, _ in run.checkpoint.checkpoints()} for run in runs))
    if not shared:
        raise ValueError(
            "--seeds: the seeds' checkpoints share no step ("
            + ", ".join(f"{run.args.output}: {run.done}" for run in runs)
            + "); remove their checkpoints/ folders to start again"
        )
    step = max(shared)
    for run in runs:
        if run.done != step:
            print(f"{run.args.output}: back to step {step}, the newest every seed has")
            run.done = run.checkpoint.restore(run.model, at_most=step)
            run.progress.update(run.checkpoint.restored_state)
        run.checkpoint.remove_after(step)
    if len({run.done for run in runs}) > 1:  # a checkpoint of that step was unreadable
        raise ValueError(f"--seeds: the seeds could not all go back to step {step}")


def _run(args, task, runtime=None):
    """One seed's run: its data, --init, model, callbacks and resumed progress."""
    import keras

    data = _data(args, task)  # first: a malformed row stops the run before a checkpoint loads
    init = _init(args)
    encoded = _encoded(task, data, init.tokenizer, args)
    keras.utils.set_random_seed(args.seed)
    keras.mixed_precision.set_global_policy(args.mixed_precision)
    runtime = runtime or _runtime(args, encoded)
    schedule = _schedule(args, task, data, runtime, len(encoded))
    model, pooler_frozen = _build(args, task, init, runtime, schedule)
    callbacks, log_dev = _callbacks(args, runtime, schedule.total_steps)
    checkpoint, progress, done = _resume(args, runtime, model, len(encoded))
    return types.SimpleNamespace(
        args=args,
        task=task,
        data=data,
        init=init,
        runtime=runtime,
        schedule=schedule,
        model=model,
        done=done,
        pooler_frozen=pooler_frozen,
        num_train=len(encoded),
        callbacks=[checkpoint, *callbacks],
        log_dev=log_dev,
        checkpoint=checkpoint,
        progress=progress,
    )


def _finish(run) -> None:
    """metrics.json of the best epoch (the last without a dev set, its model saved then);
    the caller then removes the resumable checkpoints: the model directory is complete
    without them."""
    best = run.progress["best"]
    if not run.data.dev_sets:
        best = run.progress["history"][-1] if run.progress["history"] else None
        _save(run, best or {})
    _summarise(run, best)


def task_of(args):
    """--task, with the reading --document-context asks for (CoNLL-2003's only)."""
    from model import tasks

    task = tasks.get(args.task)
    if getattr(args, "document_context", False):
        if not hasattr(task, "document_context"):
            raise ValueError(
                f"--document-context: task {task.name} has no documents; conll2003 has"
            )
        task.document_context = True
    if getattr(args, "skip_invalid", False):
        if not hasattr(task, "skip_invalid"):
            raise ValueError(
                f"--skip-invalid: task {task.name} reads its files strictly and cannot skip "
                f"examples (squad1 and squad2 can)"
            )
        task.skip_invalid = True
    return task


def _check(args) -> None:
    """The flags' values, before anything is read."""
    import keras

    from model.training.strategy import check_device_flags

    if args.epochs <= 0 or args.batch_size < 1:
        raise ValueError("--epochs and --batch-size must be positive")
    if args.seq_len < 1 or args.learning_rate <= 0:
        raise ValueError("--seq-len and --learning-rate must be positive")
    if args.max_train_examples is not None and args.max_train_examples < 1:
        raise ValueError("--max-train-examples must be positive")
    bilstm = getattr(args, "bilstm", None)
    if bilstm is not None and bilstm < 1:
        raise ValueError(f"--bilstm must be a positive number of units, got {bilstm}")
    check_device_flags(args, keras.backend.backend())


def _data(args, task):
    """The training and dev examples, read and checked; OUTPUT made writable and
    cleared of the scratch folders a killed run left."""
    from model.io.files import check_writable_dir
    from model.tasks.base import check_labelled

    train_file, _ = task.files(args.data)
    dev_files = task.dev_files(args.data)
    skip = getattr(task, "skip_invalid", False)
    train = MEMO.get(("read", task.name, skip, stamp(train_file)), task.read, train_file)
    train = train[: args.max_train_examples]
    if not train:
        raise ValueError(f"{train_file}: no training examples")
    dev_sets = {
        prefix: MEMO.get(("read_gold", task.name, skip, stamp(path)), task.read_gold, path)
        for prefix, path in dev_files.items()
    }
    for prefix, path in dev_files.items():  # found now, not after the training they would end
        if not dev_sets[prefix]:
            raise ValueError(f"{path}: no dev examples")
        labels = next((a for a in ("label", "tags") if hasattr(dev_sets[prefix][0], a)), None)
        if labels:  # a GLUE test.tsv given as dev (SQuAD's reader refuses a question unanswered)
            check_labelled(dev_sets[prefix], labels)
    check_writable_dir(args.output)
    for name in os.listdir(args.output):
        if name.startswith(SCRATCH_PREFIX):
            shutil.rmtree(os.path.join(args.output, name), ignore_errors=True)
    return types.SimpleNamespace(
        train_file=train_file, dev_files=dev_files, train=train, dev_sets=dev_sets
    )


# Examples read and features encoded by earlier runs of this process, by what they were made
# from (`model.experiments --in-process` runs its fine-tunings in one process, unless `--jobs`
# runs them as children: each row of a task reads and encodes the same file, SQuAD's in
# seconds).
MEMO = Memo(8)


def _encoded(task, data, tokenizer, args):
    """The training features of `data.train` (remembered: the same file, slice, length,
    vocabulary and task options encode to the same features)."""
    # The task's reading and encoding options; not what its last read found (`skipped`).
    options = vars(task).items()
    options = repr(sorted((k, v) for k, v in options if not k.startswith("_") and k != "skipped"))
    key = ("encode", task.name, options, stamp(data.train_file), len(data.train))
    key += (args.seq_len, stamp(tokenizer.vocab_path), tokenizer.lowercase)
    return MEMO.get(key, task.encode, data.train, tokenizer, args.seq_len, True)


def _init(args):
    """--init's encoder (under --dropout), its vocabulary and tokenizer, checked
    against each other and --seq-len. A BiLSTM of --init's own is left behind."""
    from model.checkpoints import model_dir
    from model.checkpoints.formats import read
    from model.text import tokenizer_class
    from model.text.wordpiece import check_vocabulary
    from model.training.checkpointing import load_checkpoint
    from model.training.layout import checkpoint_of

    step = None
    if checkpoint_of(args.init) is not None:  # one step of a training run
        source, vocab_path, step = load_checkpoint(args.init)
        notes = [f"the run's model at step {step}"]
    else:
        source, vocab_path, notes = read(args.init)
    for note in notes:
        print(f"{args.init}: {note}")
    if vocab_path is None:
        vocab_path = os.path.join(args.init, model_dir.VOCAB)
        if not os.path.isfile(vocab_path):
            raise FileNotFoundError(f"{args.init}: no vocab.txt beside the checkpoint")
    encoder = model_dir.encoder_of(source)
    config = encoder.config.replace(dropout=args.dropout)
    if args.seq_len > config.max_sequence_length:
        raise ValueError(
            f"--seq-len {args.seq_len} exceeds the model's max_sequence_length "
            f"{config.max_sequence_length}"
        )
    check_vocabulary(vocab_path, config.vocabulary_size, "the checkpoint's")
    tokenizer = tokenizer_class()(vocab_path, lowercase=config.lowercase)
    return types.SimpleNamespace(
        weights=encoder.get_weights(),
        config=config,
        vocab_path=vocab_path,
        tokenizer=tokenizer,
        step=step,
    )


def _runtime(args, encoded):
    """The backend's strategy and one epoch's batches: TensorFlow's tf.distribute and
    tf.data, or (JAX) keras.distribution and a PyDataset, under which nothing here
    imports TensorFlow. `dataset(epoch, start)` is that epoch's batches from `start`."""
    import keras

    if keras.backend.backend() == "tensorflow":
        runtime = _tf_runtime(args, encoded)
    else:
        runtime = _jax_runtime(args, encoded)
    if runtime.steps_per_epoch < 1:
        raise ValueError(
            f"{len(encoded)} training features make no full batch of {args.batch_size}"
        )
    return runtime


def _tf_runtime(args, encoded):
    import tensorflow as tf

    from model.training.finetune_pydataset import (
        feature_lengths,
        grouped_batch_count,
        length_boundaries,
    )
    from model.training.finetune_tfdata import tf_dataset
    from model.training.strategy import is_chief, make_strategy

    strategy = make_strategy(args.strategy, args.tpu)
    # TPUs need static shapes: every batch full.
    drop_remainder = isinstance(strategy, tf.distribute.TPUStrategy)
    if drop_remainder:
        steps_per_epoch = len(encoded) // args.batch_size
    elif args.group_by_length:  # each bucket ends with a part-filled batch
        lengths = feature_lengths(encoded)
        boundaries = length_boundaries(args.seq_len)
        steps_per_epoch = grouped_batch_count(lengths, boundaries, args.batch_size)
    else:
        steps_per_epoch = math.ceil(len(encoded) / args.batch_size)

    def dataset(epoch: int, start: int):
        return tf_dataset(
            encoded,
            args.batch_size,
            args.seq_len,
            args.seed + epoch,
            group_by_length=args.group_by_length,
            drop_remainder=drop_remainder,
        ).skip(start)

    return types.SimpleNamespace(
        tf=True,
        chief=is_chief(strategy),
        scope=strategy.scope,
        name=type(strategy).__name__,
        replicas=strategy.num_replicas_in_sync,
        steps_per_epoch=steps_per_epoch,
        dataset=dataset,
    )


def _jax_runtime(args, encoded):
    import keras

    from model.training.finetune_pydataset import FinetunePyDataset
    from model.training.strategy import jax_process, make_jax_distribution

    if getattr(args, "device_data", False):
        return _device_runtime(args, encoded)
    distribution = make_jax_distribution(args.strategy)
    if jax_process()[1] > 1:
        raise ValueError(
            "fine-tuning under JAX runs in one process (--strategy "
            "data-parallel uses all of its devices); start it on one host"
        )
    replicas = len(keras.distribution.list_devices()) if distribution else 1
    if args.batch_size % replicas:
        raise ValueError(
            f"--batch-size {args.batch_size} is not a multiple of the "
            f"{replicas} devices of --strategy data-parallel"
        )

    def dataset(epoch: int, start: int):
        # The batches of `finetune_tfdata.tf_dataset` (see finetune_pydataset.py).
        return FinetunePyDataset(
            encoded,
            args.batch_size,
            args.seq_len,
            args.seed,
            epoch,
            start=start,
            group_by_length=args.group_by_length,
            multiple_of=replicas,
        )

    return types.SimpleNamespace(
        tf=False,
        chief=True,
        scope=contextlib.nullcontext,
        name=type(distribution).__name__ if distribution else "one device",
        replicas=replicas,
        # Every batch of an epoch (grouped: one more per bucket's remainder;
        # data-parallel: fewer if short batches were dropped).
        steps_per_epoch=len(dataset(0, 0)),
        dataset=dataset,
    )


def _device_runtime(args, encoded):
    """--device-data: the features stay on the device and `SeedTrainer` runs K full-length
    steps a call, its own example order (a fresh permutation an epoch, keyed by --seed); an
    epoch is rounded up to whole calls."""
    if encoded.sample_weight is not None:
        raise ValueError("--device-data: this task weights its examples; train without it")
    k = args.steps_per_call or DEVICE_STEPS_PER_CALL
    return types.SimpleNamespace(
        tf=False,
        chief=True,
        scope=contextlib.nullcontext,
        name=f"one device, features on it, {k} steps a call",
        replicas=1,
        steps_per_epoch=math.ceil(len(encoded) / args.batch_size / k) * k,
        steps_per_call=k,
        encoded=encoded,
        trainer=None,  # built on the compiled model by `_device_fit`
    )


def _schedule(args, task, data, runtime, num_train: int):
    """The run's steps and warm-up, said before training starts."""
    import keras

    total_steps = max(1, math.ceil(args.epochs * runtime.steps_per_epoch))
    k = getattr(runtime, "steps_per_call", None)
    if k:  # --device-data: whole calls
        total_steps = math.ceil(total_steps / k) * k
    warmup = args.warmup_steps if args.warmup_steps is not None else int(0.1 * total_steps)
    print(
        f"task {task.name}: {len(data.train)} training examples ({num_train} features of "
        f"{args.seq_len} tokens) from {data.train_file}; dev: "
        f"{', '.join(data.dev_files.values()) or 'none'}"
    )
    print(
        ("" if runtime.tf else f"backend: {keras.backend.backend()}; ")
        + f"strategy: {runtime.name} with {runtime.replicas} replica(s); "
        f"batch {args.batch_size}, {total_steps} steps ({runtime.steps_per_epoch} an epoch), "
        f"learning rate {args.learning_rate:g}, warm-up {warmup} steps"
    )
    return types.SimpleNamespace(
        total_steps=total_steps, warmup=warmup, steps_per_epoch=runtime.steps_per_epoch
    )


def _build(args, task, init, runtime, schedule):
    """(the compiled model, whether its pooler is frozen): --init's encoder, the
    --bilstm if asked, the task's fresh head, AdamW with its slots built."""
    from model.heads.bilstm_encoder import BertBiLstmEncoder
    from model.networks.encoder import BertEncoder
    from model.training.optimizer import bert_adamw, create_optimizer_variables

    bilstm = getattr(args, "bilstm", None)
    with runtime.scope():
        encoder = BertEncoder.from_config_object(init.config)
        encoder.set_weights(init.weights)
        # The head sees the BiLSTM where it would see the encoder: same inputs and outputs.
        top = BertBiLstmEncoder(encoder, bilstm) if bilstm else encoder
        model = task.build_model(top, dropout=args.dropout)
        pooler_frozen = freeze_unused_pooler(task, encoder, bilstm=bool(bilstm))  # before compile
        model.compile(
            optimizer=bert_adamw(
                args.learning_rate, schedule.warmup, schedule.total_steps, args.weight_decay
            ),
            loss=task.loss(),
            # JAX always compiles its step (not compiling is eager, op by op)
            jit_compile=args.jit if runtime.tf else "auto",
        )
        create_optimizer_variables(model)  # its slots are checkpointed too
    init.weights = None  # the model holds them now
    return model, pooler_frozen


def _callbacks(args, runtime, total_steps: int):
    """(Keras callbacks, `log_dev(step, scalars)`): the training and dev scalars
    (`scalar_log.run_logs`: TensorBoard under TensorFlow, OUTPUT/logs/scalars.csv otherwise);
    progress lines in a log file."""
    import keras

    from model.training.scalar_log import ProgressLines, run_logs

    scalars, log_dev = run_logs(os.path.join(args.output, "logs"), args.log_every, runtime.tf)
    callbacks = [keras.callbacks.TerminateOnNaN(), scalars]
    if not sys.stdout.isatty():
        # Keras' non-interactive output is one line an epoch; a log file
        # should show progress inside long epochs too.
        callbacks.append(ProgressLines(args.log_every, total_steps))
    return callbacks, log_dev


def _resume(args, runtime, model, num_train: int):
    """(the checkpoint callback, the run's progress, the steps done): a checkpoint every
    --checkpoint-every steps and at the end of every epoch holds the dev history
    too, so the same command restarted after a crash goes on from the newest one
    (same data order, same dropout)."""
    from model import tasks
    from model.training.checkpointing import ResumableCheckpoint, run_identity

    progress = {"history": [], "best": None, "wall_seconds": 0.0}
    checkpoint = ResumableCheckpoint(
        os.path.join(args.output, layout.CHECKPOINTS),
        every=args.checkpoint_every,
        keep=args.keep_checkpoints,
        is_chief=runtime.chief,
        state=lambda: progress,
        run=run_identity(
            f"--task {tasks.get(args.task).name}",
            model,
            reads={  # what sets the examples of each step (the data's order, its batches)
                "--batch-size": args.batch_size,
                "--seq-len": args.seq_len,
                "--seed": args.seed,
                "--group-by-length": args.group_by_length,
                "training examples": num_train,
                "steps an epoch": runtime.steps_per_epoch,
            },
        ),
    )
    checkpoint.clean_partial()
    checkpoint.set_model(model)
    done = checkpoint.restore(model)
    if done:
        progress.update(checkpoint.restored_state)
        print(f"resuming from step {done} ({checkpoint.directory})")
    return checkpoint, progress, done


def _loop(args, runs, interrupts) -> bool:
    """Every epoch: train it (from where a restart left off; the seeds of --seeds together),
    then score each run on the dev sets and keep its best. False when the loss stopped
    being finite. `interrupts` (`interrupts.interruptible`'s callback) raises a noted
    Ctrl-C or SIGTERM at the next batch end (a device call's, a scoring's)."""
    lead = runs[0]
    steps_per_epoch = lead.schedule.steps_per_epoch
    for run in runs:
        run.start = time.time() - run.progress["wall_seconds"]
    for epoch in range(math.ceil(args.epochs)):
        epoch_end = min((epoch + 1) * steps_per_epoch, lead.schedule.total_steps)
        if any(record["step"] == epoch_end for record in lead.progress["history"]):
            continue  # trained and scored before a restart
        done = lead.done
        if epoch_end > done and getattr(lead.runtime, "steps_per_call", None):
            if not _device_fit(args, runs, epoch_end, interrupts):
                return False
        elif epoch_end > done:
            lead.model.fit(
                lead.runtime.dataset(epoch, done - epoch * steps_per_epoch),  # > 0: resumed inside
                initial_epoch=epoch,
                epochs=epoch + 1,
                steps_per_epoch=epoch_end - done,
                callbacks=[*lead.callbacks, interrupts],  # last: a checkpoint due is saved first
                shuffle=False,
                verbose=1 if sys.stdout.isatty() else 2,
            )
            if lead.model.stop_training:
                print(
                    f"error: training stopped in epoch {epoch + 1}: the loss is not finite; "
                    f"the last good checkpoint is kept in {lead.checkpoint.directory}",
                    file=sys.stderr,
                )
                return False
            lead.done = epoch_end
        for run in runs:
            _score(run)
            run.checkpoint.update_state()  # this epoch is scored: a restart skips it
        interrupts.check()
    return True


def _device_fit(args, runs, epoch_end: int, interrupts) -> bool:
    """--device-data: trains every run from `done` to `epoch_end` in whole calls (the seeds
    of --seeds in one program), the weights written back and checkpointed every
    --checkpoint-every steps (rounded up to a call) and at the end; False, with the last
    good checkpoints kept, when a seed's loss is not finite."""
    import numpy as np

    from model.training.seeds import SeedTrainer

    lead = runs[0]
    runtime, k = lead.runtime, lead.runtime.steps_per_call
    if runtime.trainer is None:
        x, y = runtime.encoded.x, runtime.encoded.y
        models, seeds = [r.model for r in runs], [r.args.seed for r in runs]
        runtime.trainer = SeedTrainer(models, x, y, args.batch_size, k, seeds=seeds)
        runtime.trainer.step = lead.done  # a resumed run goes on in the same example order
    chunk = max(k, args.checkpoint_every // k * k)
    while lead.done < epoch_end:
        began, steps = time.time(), min(chunk, epoch_end - lead.done)
        logs = runtime.trainer.run(steps)
        losses = np.asarray(logs.get("loss", np.zeros(len(runs))), dtype=float).reshape(-1)
        runtime.trainer.reset_metrics()
        if not np.all(np.isfinite(losses)):
            print(f"error: the loss is not finite at step {lead.done + steps}", file=sys.stderr)
            return False
        runtime.trainer.write_back()
        for run in runs:
            run.done += steps
            run.checkpoint.save(run.done)
        rate = steps * args.batch_size * len(runs) / (time.time() - began)
        loss = "/".join(f"{v:.4f}" for v in losses)
        print(f"step {lead.done}/{lead.schedule.total_steps}: loss {loss}, {rate:,.0f} examples/s")
        interrupts.check()
    return True


def fixed_shape(predict, rows: int, seq_len: int):
    """`predict` fed every batch padded to `rows` x `seq_len` (padding rows and tokens, masked
    out), its outputs cut back to the batch's own rows and length: one compiled program for
    the whole evaluation where trimmed batches would compile one per width, tens of seconds
    each on a GPU."""
    import numpy as np

    def run(x):
        n, length = np.shape(x["padding_mask"])[0], np.shape(x["padding_mask"])[-1]
        padded = {
            k: np.pad(v, [(0, rows - n)] + [(0, 0)] * (v.ndim - 2) + [(0, seq_len - length)])
            for k, v in x.items()
        }

        def cut(a):
            a = np.asarray(a)[:n]
            return a[:, :length] if a.ndim >= 2 and a.shape[1] == seq_len else a

        out = predict(padded)
        if isinstance(out, dict):
            return {k: cut(v) for k, v in out.items()}
        return type(out)(cut(v) for v in out) if isinstance(out, (list, tuple)) else cut(out)

    return run


def _score(run) -> None:
    """Scores the model on the dev sets, logs it, and saves it (with this epoch's
    predictions) when it is the best so far by the task's main metric."""
    args, task, done, progress = run.args, run.task, run.done, run.progress
    # This epoch's predictions (SQuAD's) wait here until it proves the best.
    scratch = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=args.output)
    try:
        metrics = {}
        for prefix, examples in run.data.dev_sets.items():
            predict = run.model.predict_on_batch
            if getattr(run.runtime, "steps_per_call", None):  # --device-data
                predict = fixed_shape(predict, 2 * args.batch_size, args.seq_len)
            scores = task.evaluate(
                predict,
                examples,
                run.init.tokenizer,
                args.seq_len,
                batch_size=2 * args.batch_size,
                output_dir=os.path.join(scratch, prefix.rstrip("_")),
            )
            metrics.update({prefix + k: v for k, v in scores.items()})
        record = {"epoch": round(done / run.schedule.steps_per_epoch, 4), "step": done, **metrics}
        progress["history"].append(record)
        progress["wall_seconds"] = time.time() - run.start
        run.log_dev(done, {k: v for k, v in metrics.items() if isinstance(v, (int, float))})
        if not metrics:
            return
        score = metrics.get(task.main_metric)
        if score is None:
            raise ValueError(
                f"task {task.name}: the dev metrics lack its main metric "
                f"{task.main_metric!r} ({sorted(metrics)})"
            )
        print(
            f"epoch {record['epoch']:g}: dev {task.main_metric} {score:.4f}  "
            + json.dumps({k: v for k, v in metrics.items() if isinstance(v, float)})
        )
        best = progress["best"]
        if best is None or score > best[task.main_metric]:
            progress["best"] = record
            _save(run, record)
            publish_predictions(scratch, args.output)
            print("  the best epoch so far: its model is kept")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _save(run, record: dict) -> None:
    """The model directory of `record`'s epoch (with SQuAD v2.0's dev-tuned null
    threshold), and the label map of a task with named labels."""
    from model.checkpoints import model_dir
    from model.io.files import write_json

    args = run.args
    extra = {"finetuned_task": run.task.name, "max_seq_length": args.seq_len}
    if getattr(run.task, "document_context", False):
        extra["document_context"] = True  # model.evaluate and export read it
    if "best_f1_thresh" in record:
        extra["null_threshold"] = record["best_f1_thresh"]
    model_dir.save(run.model, args.output, run.init.vocab_path, extra=extra)
    if run.task.labels():
        write_json(
            os.path.join(args.output, "label_map.json"),
            {"task": run.task.name, "id2label": dict(enumerate(run.task.labels()))},
        )


def _summarise(run, best) -> None:
    """OUTPUT/metrics.json: the best dev metrics, every epoch's, and how the run went."""
    import keras

    from model.io.files import write_json

    args, progress, done = run.args, run.progress, run.done
    bilstm = getattr(args, "bilstm", None)
    threshold = (best or {}).get("best_f1_thresh")
    steps_per_epoch = run.schedule.steps_per_epoch
    summary = {
        "task": run.task.name,
        "main_metric": run.task.main_metric,
        "dev": {k: v for k, v in (best or {}).items() if k not in ("epoch", "step")},
        "best_epoch": best["epoch"] if best else None,
        "best_step": best["step"] if best else None,
        "history": progress["history"],
        "train_file": run.data.train_file,
        "dev_files": run.data.dev_files,
        # examples a dev metric is over (its sampling error: model/experiments/report.py)
        "dev_examples": {prefix: len(ex) for prefix, ex in run.data.dev_sets.items()},
        "init": args.init,
        **({"init_step": run.init.step} if run.init.step is not None else {}),
        **({"bilstm_units": bilstm} if bilstm else {}),
        "train_examples": len(run.data.train),
        "train_features": run.num_train,
        "examples_seen": examples_seen(done, steps_per_epoch, args.batch_size, run.num_train),
        "steps": done,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "learning_rate": args.learning_rate,
        "warmup_steps": run.schedule.warmup,
        "weight_decay": args.weight_decay,
        "dropout": args.dropout,
        "seq_len": args.seq_len,
        "seed": args.seed,
        "strategy": args.strategy,
        "backend": keras.backend.backend(),
        "mixed_precision": args.mixed_precision,
        **({"null_threshold": threshold} if threshold is not None else {}),
        "pooler_frozen": run.pooler_frozen,
        "wall_seconds": round(time.time() - run.start, 1),
        "command": command_line(args),
    }
    write_json(os.path.join(args.output, "metrics.json"), summary)
    print(json.dumps({"dev": summary["dev"], "wall_seconds": summary["wall_seconds"]}, indent=2))
    print(f"saved {args.output}")


def examples_seen(steps: int, steps_per_epoch: int, batch_size: int, num_train: int) -> int:
    """Training examples in the first `steps` steps: full batches, but an
    epoch never holds more than `num_train`."""
    full, rest = divmod(steps, steps_per_epoch)
    per_epoch = min(steps_per_epoch * batch_size, num_train)
    return full * per_epoch + min(rest * batch_size, num_train)


def freeze_unused_pooler(task, encoder, bilstm: bool = False) -> bool:
    """Freezes `encoder.pooled_dense` when the task's head never reads the
    pooled output (SQuAD, NER; every head over a BiLSTM, which pools its own
    states); returns whether it did.

    Left trainable, it gets no gradient: Keras warns "Gradients do not exist
    for variables [...pooled_dense...]" and AdamW still allocates its two
    moment slots. Frozen, it is saved exactly as loaded (`get_weights` and
    `save_weights` hold non-trainable variables too, in the same order), so a
    classifier fine-tuned later from this directory still finds the
    pre-trained pooler.
    """
    if task.head not in POOLER_UNUSED and not bilstm:
        return False
    encoder.pooled_dense.trainable = False
    return True


def publish_predictions(scratch: str, output: str) -> list[str]:
    """Moves every file under `scratch` to the same relative path under `output`.

    The task wrote each file atomically (`model.io.files.write_json`: a temporary
    name, fsync, rename); `scratch` lies inside `output`, on the same file
    system, so each move is one atomic `os.replace` too: a reader sees the
    previous best epoch's file or this one's, never a mix inside a file.
    Returns the published paths.
    """
    published = []
    for folder, _, names in os.walk(scratch):
        for name in sorted(names):
            source = os.path.join(folder, name)
            target = os.path.join(output, os.path.relpath(source, scratch))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(source, target)
            published.append(target)
    return published
