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
    predictions.json    SQuAD: the best epoch's dev answers, with nbest_predictions.json
                        (and null_odds.json for v2.0); other tasks write none

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
"""

from __future__ import annotations

import copy
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import time

from model.tasks.base import LENGTH_MULTIPLE

# The paper's fine-tuning recipe (section 4), for tasks that set no default of their own.
PAPER_EPOCHS = 3.0
PAPER_BATCH_SIZE = 32
# Heads that read only the sequence output: the pooler gets no gradient there.
POOLER_UNUSED = ("question_answerer", "token_classifier")
# Scratch folders (inside OUTPUT) for one epoch's dev predictions.
SCRATCH_PREFIX = ".epoch-predictions-"
# Resumable checkpoints (inside OUTPUT), removed when the run ends.
CHECKPOINTS = "checkpoints"
# Under a backend other than TensorFlow: the scalars TensorBoard would get (OUTPUT/logs/).
SCALARS = "scalars.csv"


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
    """Trains `args.task` from `args.init` into `args.output`; returns the exit code."""
    import contextlib

    import keras

    from model import tasks
    from model.checkpoints import model_dir
    from model.checkpoints.formats import read
    from model.heads.bilstm_encoder import BertBiLstmEncoder
    from model.io.files import check_writable_dir, write_json
    from model.networks.encoder import BertEncoder
    from model.text import tokenizer_class
    from model.training.checkpointing import ResumableCheckpoint, checkpoint_of, load_checkpoint
    from model.training.optimizer import bert_adamw

    # Under another backend (JAX) nothing here imports TensorFlow: the
    # tokenizer is the pure-Python one (the same ids), the batches come from
    # a PyDataset and the strategy is keras.distribution.
    tf_backend = keras.backend.backend() == "tensorflow"

    task = tasks.get(args.task)
    args = resolve_defaults(args, task)
    if args.init_checkpoint:
        raise ValueError("finetune starts from --init; --init-checkpoint is pretrain's flag")
    if args.epochs <= 0 or args.batch_size < 1:
        raise ValueError("--epochs and --batch-size must be positive")
    if args.seq_len < 1 or args.learning_rate <= 0:
        raise ValueError("--seq-len and --learning-rate must be positive")
    if args.max_train_examples is not None and args.max_train_examples < 1:
        raise ValueError("--max-train-examples must be positive")
    bilstm = getattr(args, "bilstm", None)
    if bilstm is not None and bilstm < 1:
        raise ValueError(f"--bilstm must be a positive number of units, got {bilstm}")
    seq_len, learning_rate = args.seq_len, args.learning_rate

    # Read the data first: a malformed row should stop the run before a
    # checkpoint of hundreds of MB is loaded.
    train_file, _ = task.files(args.data)
    dev_files = task.dev_files(args.data)
    train_examples = task.read(train_file)[: args.max_train_examples]
    if not train_examples:
        raise ValueError(f"{train_file}: no training examples")
    dev_sets = {prefix: task.read(path) for prefix, path in dev_files.items()}
    check_writable_dir(args.output)
    for name in os.listdir(args.output):  # left by a killed run
        if name.startswith(SCRATCH_PREFIX):
            shutil.rmtree(os.path.join(args.output, name), ignore_errors=True)

    init_step = None
    if checkpoint_of(args.init) is not None:  # one step of a training run
        source, vocab_path, init_step = load_checkpoint(args.init)
        notes = [f"the run's model at step {init_step}"]
    else:
        source, vocab_path, notes = read(args.init)
    for note in notes:
        print(f"{args.init}: {note}")
    if vocab_path is None:
        vocab_path = os.path.join(args.init, model_dir.VOCAB)
        if not os.path.isfile(vocab_path):
            raise FileNotFoundError(f"{args.init}: no vocab.txt beside the checkpoint")
    source_encoder = model_dir.encoder_of(source)  # a BiLSTM of --init's own is left behind
    config = source_encoder.config.replace(dropout=args.dropout)
    if seq_len > config.max_sequence_length:
        raise ValueError(
            f"--seq-len {seq_len} exceeds the model's max_sequence_length "
            f"{config.max_sequence_length}"
        )
    tokenizer = tokenizer_class()(vocab_path, lowercase=config.lowercase)
    if tokenizer.vocabulary_size != config.vocabulary_size:
        raise ValueError(
            f"{vocab_path}: {tokenizer.vocabulary_size} tokens, but the checkpoint's "
            f"embedding has {config.vocabulary_size} rows"
        )
    encoded = task.encode(train_examples, tokenizer, seq_len, training=True)
    num_train = len(encoded)

    keras.utils.set_random_seed(args.seed)
    keras.mixed_precision.set_global_policy(args.mixed_precision)
    if tf_backend:
        import tensorflow as tf

        from model.training.strategy import is_chief, make_strategy

        strategy = make_strategy(args.strategy, args.tpu)
        chief, scope = is_chief(strategy), strategy.scope
        strategy_name, replicas = type(strategy).__name__, strategy.num_replicas_in_sync
        # TPUs need static shapes: every batch full.
        drop_remainder = isinstance(strategy, tf.distribute.TPUStrategy)
        if drop_remainder:
            steps_per_epoch = num_train // args.batch_size
        elif args.group_by_length:  # each bucket ends with a part-filled batch
            from model.training.finetune_pydataset import (
                feature_lengths,
                grouped_batch_count,
                length_boundaries,
            )

            steps_per_epoch = grouped_batch_count(
                feature_lengths(encoded), length_boundaries(seq_len), args.batch_size
            )
        else:
            steps_per_epoch = math.ceil(num_train / args.batch_size)

        def dataset(epoch: int, start: int):
            return tf_dataset(
                encoded,
                args.batch_size,
                seq_len,
                args.seed + epoch,
                group_by_length=args.group_by_length,
                drop_remainder=drop_remainder,
            ).skip(start)
    else:
        from model.training.finetune_pydataset import FinetunePyDataset
        from model.training.strategy import jax_process, make_jax_distribution

        distribution = make_jax_distribution(args.strategy)
        if jax_process()[1] > 1:
            raise ValueError(
                "fine-tuning under JAX runs in one process (--strategy "
                "data-parallel uses all of its devices); start it on one host"
            )
        chief, scope = True, contextlib.nullcontext
        strategy_name = type(distribution).__name__ if distribution else "one device"
        replicas = len(keras.distribution.list_devices()) if distribution else 1
        if args.batch_size % replicas:
            raise ValueError(
                f"--batch-size {args.batch_size} is not a multiple of the "
                f"{replicas} devices of --strategy data-parallel"
            )

        def dataset(epoch: int, start: int):
            # The batches of `tf_dataset` (see model/training/finetune_pydataset.py).
            return FinetunePyDataset(
                encoded,
                args.batch_size,
                seq_len,
                args.seed,
                epoch,
                start=start,
                group_by_length=args.group_by_length,
                multiple_of=replicas,
            )

        # Every batch of an epoch (grouped: one more per bucket's remainder;
        # data-parallel: fewer if short batches were dropped).
        steps_per_epoch = len(dataset(0, 0))
    if steps_per_epoch < 1:
        raise ValueError(f"{num_train} training features make no full batch of {args.batch_size}")
    total_steps = max(1, math.ceil(args.epochs * steps_per_epoch))
    warmup = args.warmup_steps if args.warmup_steps is not None else int(0.1 * total_steps)
    print(
        f"task {task.name}: {len(train_examples)} training examples ({num_train} features of "
        f"{seq_len} tokens) from {train_file}; dev: {', '.join(dev_files.values()) or 'none'}"
    )
    print(
        ("" if tf_backend else f"backend: {keras.backend.backend()}; ")
        + f"strategy: {strategy_name} with {replicas} replica(s); "
        f"batch {args.batch_size}, {total_steps} steps ({steps_per_epoch} an epoch), "
        f"learning rate {learning_rate:g}, warm-up {warmup} steps"
    )

    with scope():
        encoder = BertEncoder.from_config_object(config)
        encoder.set_weights(source_encoder.get_weights())
        # The head sees the BiLSTM where it would see the encoder: same inputs and outputs.
        top = BertBiLstmEncoder(encoder, bilstm) if bilstm else encoder
        model = task.build_model(top, dropout=args.dropout)
        pooler_frozen = freeze_unused_pooler(task, encoder, bilstm=bool(bilstm))  # before compile
        model.compile(
            optimizer=bert_adamw(learning_rate, warmup, total_steps, args.weight_decay),
            # JAX always compiles its step (not compiling is eager, op by op)
            loss=task.loss(),
            jit_compile=args.jit if tf_backend else "auto",
        )
        model.optimizer.build(model.trainable_variables)  # its slots are checkpointed too
    del source, source_encoder
    extra = {"finetuned_task": task.name, "max_seq_length": seq_len}

    def save(record: dict):
        if "best_f1_thresh" in record:
            # SQuAD v2.0: the dev-tuned null threshold goes with the weights it was tuned for.
            extra["null_threshold"] = record["best_f1_thresh"]
        model_dir.save(model, args.output, vocab_path, extra=extra)
        if task.labels():
            write_json(
                os.path.join(args.output, "label_map.json"),
                {"task": task.name, "id2label": dict(enumerate(task.labels()))},
            )

    logs = os.path.join(args.output, "logs")
    callbacks = [keras.callbacks.TerminateOnNaN()]
    if tf_backend:
        dev_writer = tf.summary.create_file_writer(os.path.join(logs, "dev"))
        callbacks.append(keras.callbacks.TensorBoard(logs, update_freq=args.log_every))
    else:
        # Keras' TensorBoard callback needs TensorFlow: the same scalars as CSV.
        print(
            f"backend {keras.backend.backend()}: no TensorBoard logs; training loss and dev "
            f"metrics go to {os.path.join(logs, SCALARS)}"
        )
        callbacks.append(_ScalarLog(os.path.join(logs, SCALARS), args.log_every))
    if not sys.stdout.isatty():
        # Keras' non-interactive output is one line an epoch; a log file
        # should show progress inside long epochs too.
        callbacks.append(_ProgressLines(args.log_every, total_steps))
    # Resumable: a checkpoint every --checkpoint-every steps and at the end of
    # every epoch, holding the dev history too; the same command restarted
    # after a crash goes on from the newest one (same data order, same dropout).
    progress = {"history": [], "best": None, "wall_seconds": 0.0}
    checkpoint = ResumableCheckpoint(
        os.path.join(args.output, CHECKPOINTS),
        every=args.checkpoint_every,
        keep=args.keep_checkpoints,
        is_chief=chief,
        state=lambda: progress,
    )
    checkpoint.clean_partial()
    checkpoint.set_model(model)
    done = checkpoint.restore(model)
    if done:
        progress.update(checkpoint.restored_state)
        print(f"resuming from step {done} ({checkpoint.directory})")
    callbacks.insert(0, checkpoint)
    history, best = progress["history"], progress["best"]
    start = time.time() - progress["wall_seconds"]
    for epoch in range(math.ceil(args.epochs)):
        epoch_end = min((epoch + 1) * steps_per_epoch, total_steps)
        if any(record["step"] == epoch_end for record in history):
            continue  # trained and scored before a restart
        steps = epoch_end - done
        if steps > 0:
            offset = done - epoch * steps_per_epoch  # > 0 when resuming inside this epoch
            model.fit(
                dataset(epoch, offset),
                initial_epoch=epoch,
                epochs=epoch + 1,
                steps_per_epoch=steps,
                callbacks=callbacks,
                shuffle=False,
                verbose=1 if sys.stdout.isatty() else 2,
            )
            if model.stop_training:
                print(
                    f"error: training stopped in epoch {epoch + 1}: the loss is not finite; "
                    f"the last good checkpoint is kept in {checkpoint.directory}",
                    file=sys.stderr,
                )
                return 3
            done = epoch_end
        # This epoch's predictions (SQuAD's) wait here until it proves the best.
        scratch = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=args.output)
        try:
            metrics = {}
            for prefix, examples in dev_sets.items():
                scores = task.evaluate(
                    model.predict_on_batch,
                    examples,
                    tokenizer,
                    seq_len,
                    batch_size=2 * args.batch_size,
                    output_dir=os.path.join(scratch, prefix.rstrip("_")),
                )
                metrics.update({prefix + k: v for k, v in scores.items()})
            record = {"epoch": round(done / steps_per_epoch, 4), "step": done, **metrics}
            history.append(record)
            progress["wall_seconds"] = time.time() - start
            scalars = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
            if tf_backend:
                with dev_writer.as_default():
                    for k, v in scalars.items():
                        tf.summary.scalar(k, v, step=done)
            else:
                append_scalars(
                    os.path.join(logs, SCALARS), done, {f"dev/{k}": v for k, v in scalars.items()}
                )
            if metrics:
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
                if best is None or score > best[task.main_metric]:
                    best = progress["best"] = record
                    save(record)
                    publish_predictions(scratch, args.output)
                    print(f"  best so far: saved {args.output}")
            checkpoint.update_state()  # this epoch is scored: a restart skips it
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    if not dev_sets:
        best = history[-1] if history else None
        save(best or {})
    elapsed = time.time() - start

    summary = {
        "task": task.name,
        "main_metric": task.main_metric,
        "dev": {k: v for k, v in (best or {}).items() if k not in ("epoch", "step")},
        "best_epoch": best["epoch"] if best else None,
        "best_step": best["step"] if best else None,
        "history": history,
        "train_file": train_file,
        "dev_files": dev_files,
        "init": args.init,
        **({"init_step": init_step} if init_step is not None else {}),
        **({"bilstm_units": bilstm} if bilstm else {}),
        "train_examples": len(train_examples),
        "train_features": num_train,
        "examples_seen": examples_seen(done, steps_per_epoch, args.batch_size, num_train),
        "steps": done,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "learning_rate": learning_rate,
        "warmup_steps": warmup,
        "weight_decay": args.weight_decay,
        "dropout": args.dropout,
        "seq_len": seq_len,
        "seed": args.seed,
        "strategy": args.strategy,
        "backend": keras.backend.backend(),
        "mixed_precision": args.mixed_precision,
        **({"null_threshold": extra["null_threshold"]} if "null_threshold" in extra else {}),
        "pooler_frozen": pooler_frozen,
        "wall_seconds": round(elapsed, 1),
        "command": command_line(args),
        "argv": sys.argv,
    }
    write_json(os.path.join(args.output, "metrics.json"), summary)
    checkpoint.remove_all()  # the model directory is complete without them
    print(json.dumps({"dev": summary["dev"], "wall_seconds": summary["wall_seconds"]}, indent=2))
    print(f"saved {args.output}")
    return 0


def examples_seen(steps: int, steps_per_epoch: int, batch_size: int, num_train: int) -> int:
    """Training examples in the first `steps` steps: full batches, but an
    epoch never holds more than `num_train`."""
    full, rest = divmod(steps, steps_per_epoch)
    per_epoch = min(steps_per_epoch * batch_size, num_train)
    return full * per_epoch + min(rest * batch_size, num_train)


def tf_dataset(
    encoded,
    batch_size: int,
    seq_len: int,
    shuffle_seed: int,
    group_by_length: bool = False,
    drop_remainder: bool = False,
):
    """One epoch of training batches as a `tf.data.Dataset` (the TensorFlow
    backend's pipeline): shuffled with `shuffle_seed` (`--seed` + epoch, after
    `keras.utils.set_random_seed(--seed)`), batched (by length with
    `group_by_length`), each batch cut by `trim_batch`.
    model/training/finetune_pydataset.py yields the same batches without TensorFlow.
    """
    import tensorflow as tf

    from model.training.finetune_pydataset import length_boundaries

    items = [encoded.x, encoded.y]
    if encoded.sample_weight is not None:
        items.append(encoded.sample_weight)
    ds = tf.data.Dataset.from_tensor_slices(tuple(items))
    ds = ds.shuffle(len(encoded), seed=shuffle_seed, reshuffle_each_iteration=False)
    if drop_remainder:  # TPU: static shapes, every batch full and full-length
        return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    if group_by_length:
        boundaries = length_boundaries(seq_len)
        ds = ds.bucket_by_sequence_length(
            lambda x, *_: tf.reduce_max(
                tf.reduce_sum(tf.reshape(x["padding_mask"], [-1, seq_len]), -1)
            ),
            boundaries,
            [batch_size] * (len(boundaries) + 1),
        )
    else:
        ds = ds.batch(batch_size)
    return ds.map(trim_batch(seq_len)).prefetch(tf.data.AUTOTUNE)


def trim_batch(seq_len: int):
    """A `tf.data` map that cuts a batch to its longest row, rounded up to
    `LENGTH_MULTIPLE` (the rule `predict_in_batches` uses): every input and
    every per-token label or weight loses the padding columns no row needs.

    Padding is masked out of attention and of the loss, so this changes no
    result, only the cost: SST-2's phrases are mostly far shorter than 64.
    """
    import tensorflow as tf

    def trim(*items):
        mask = tf.reshape(items[0]["padding_mask"], [-1, seq_len])
        longest = tf.reduce_max(tf.reduce_sum(tf.cast(mask, tf.int32), -1))
        length = tf.minimum(-(-longest // LENGTH_MULTIPLE) * LENGTH_MULTIPLE, seq_len)

        def cut(t):
            per_token = t.shape.rank >= 2 and t.shape[-1] == seq_len
            return t[..., :length] if per_token else t

        x = {k: v[..., :length] for k, v in items[0].items()}
        return (x, *tf.nest.map_structure(cut, items[1:]))

    return trim


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


def append_scalars(path: str, step: int, scalars: dict) -> None:
    """Adds `tag,step,value` rows to the CSV log `path` (a header first when
    it is new): the backend-neutral stand-in for TensorBoard's scalars. Rows of
    steps run again after a restart appear twice, as in TensorBoard."""
    from model.io.files import atomic_open

    old = "tag,step,value\n"
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            old = f.read()
    with atomic_open(path) as f:  # a small file: rewritten whole, never half-written
        f.write(old + "".join(f"{tag},{step},{float(value)!r}\n" for tag, value in scalars.items()))


def _progress_base():
    import keras

    return keras.callbacks.Callback


class _ProgressLines(_progress_base()):
    """Prints `step N/TOTAL loss L (S s)` every `every` steps."""

    def __init__(self, every: int, total: int):
        super().__init__()
        self.every, self.total = max(1, every), total
        self.start = time.time()

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step % self.every == 0:
            loss = (logs or {}).get("loss")
            loss = f" loss {float(loss):.4f}" if loss is not None else ""
            print(f"step {step}/{self.total}{loss} ({time.time() - self.start:.0f} s)", flush=True)


class _ScalarLog(_progress_base()):
    """Appends the training loss to the CSV log `path` every `every` steps."""

    def __init__(self, path: str, every: int):
        super().__init__()
        self.path, self.every = path, max(1, every)

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step % self.every == 0 and logs and "loss" in logs:
            append_scalars(self.path, step, {"train/loss": logs["loss"]})


def command_line(args) -> str:
    """The `python -m model.train finetune ...` command that repeats this run."""
    words = ["python", "-m", "model.train", "finetune"]
    for key, value in vars(args).items():
        if key == "command" or value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        words += [flag] if value is True else [flag, str(value)]
    return shlex.join(words)
