"""Fine-tuning throughput: training examples/s of SST-2 at 64 tokens and SQuAD v1.1 at 384.

    PYTHONPATH=. python bench/finetune_throughput.py [--init runs/defaults/minilm] \\
        [--variants fp32 fp32+jit bf16 bf16+jit]
    PYTHONPATH=. python bench/finetune_throughput.py --quick     # tiny random encoder, seconds

The project's fine-tuning path (model/training/finetune.py), in process, from the real all-MiniLM-L6-v2
(--init; any checkpoint model.convert.read takes): the task's reader and encoder
(model.tasks), its head over the encoder (task.build_model; the unused pooler frozen for SQuAD
as finetune does), task.loss(), model.training.optimizer.bert_adamw, compiled with jit_compile = --jit
under the float32 or mixed_bfloat16 policy; the batches of model.training.finetune_tfdata.tf_dataset (shuffled,
each cut to its longest row rounded up to 16 tokens, as training does: SST-2's phrases are
mostly far shorter than 64), taken out of tf.data beforehand so that only the train steps are
timed (`train_on_batch`, the same compiled train function as `fit`).

    sst2    glue/SST-2/train.tsv, seq_len 64, batch 32 (the paper's)
    squad1  squad/dev-v1.1.json (the only SQuAD file here: its questions have answers, so it
            trains like the train file), seq_len 384 (doc stride 128), batch 32

Every distinct batch length is compiled before timing (one warm-up step per length), so the
figures are the steady state of a long run. One repeat = --steps consecutive batches;
examples/s = examples in those batches / their seconds (median and range over the repeats).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import common

TASKS = {"sst2": ("glue/SST-2/train.tsv", 64), "squad1": ("squad/dev-v1.1.json", 384)}
VARIANTS = ("fp32", "fp32+jit", "bf16", "bf16+jit")


def batches(task, encoded, batch_size: int, seq_len: int, count: int) -> list[tuple]:
    """The first `count` training batches of model.training.finetune's tf.data pipeline, as tensors."""
    import itertools

    from model.training.finetune_tfdata import tf_dataset

    dataset = tf_dataset(encoded, batch_size, seq_len, shuffle_seed=0)
    out = list(itertools.islice(iter(dataset.repeat()), count))
    if len(out) < count:
        raise ValueError(f"task {task.name}: only {len(out)} batches")
    return out


def train_step(task, encoder_source, precision: str, jit: bool, total_steps: int):
    """(model, callable(batch)): the fine-tuning model of model/training/finetune.py, compiled as there."""
    import keras

    from model.networks.encoder import BertEncoder
    from model.training.finetune import freeze_unused_pooler
    from model.training.optimizer import bert_adamw, create_optimizer_variables

    keras.backend.clear_session()
    keras.mixed_precision.set_global_policy(precision)
    keras.utils.set_random_seed(0)
    encoder = BertEncoder.from_config_object(encoder_source.config.replace(dropout=0.1))
    encoder.set_weights(encoder_source.get_weights())
    model = task.build_model(encoder, dropout=0.1)
    freeze_unused_pooler(task, encoder)
    model.compile(
        optimizer=bert_adamw(task.default_learning_rate, int(0.1 * total_steps), total_steps, 0.01),
        loss=task.loss(),
        jit_compile=jit,
    )
    create_optimizer_variables(model)

    def step(batch):
        x, y, *sw = batch
        return model.train_on_batch(x, y, sample_weight=sw[0] if sw else None)

    return step


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/finetune_throughput.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--init",
        default=None,
        help=f"pre-trained checkpoint (default {common.MINILM_DIR}; --quick: a "
        "tiny random encoder)",
    )
    parser.add_argument("--tasks", nargs="+", choices=tuple(TASKS), default=list(TASKS))
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=["fp32", "fp32+jit"])
    parser.add_argument("--batch", type=int, default=None, help="default 32 (--quick 4)")
    parser.add_argument(
        "--steps", type=int, default=None, help="batches per timed repeat (default 4; --quick 1)"
    )
    parser.add_argument("--data", default=common.DATA_DIR)
    return common.parse(parser, argv)


def time_variant(args, task, encoder, variant: str, data: list, steps: int) -> list:
    """The table cells after task, seq_len, variant and batch: mean batch length,
    examples/s (median, range) and ms per step of `variant` on the batches `data`."""
    timed = args.repeats * steps
    lengths = sorted({int(b[0]["token_ids"].shape[-1]) for b in data})
    precision = "mixed_bfloat16" if variant.startswith("bf16") else "float32"
    total = timed + len(lengths) + args.warmup
    step = train_step(task, encoder, precision, variant.endswith("+jit"), total)
    for length in lengths:  # compile every shape the timed steps will see
        step(next(b for b in data if b[0]["token_ids"].shape[-1] == length))
    for _ in range(args.warmup):
        step(data[0])
    blocks = [data[i * steps : (i + 1) * steps] for i in range(args.repeats)]
    index = iter(range(args.repeats))
    timing = common.time_repeats(
        lambda: [step(b) for b in blocks[next(index)]], args.repeats, warmup=0
    )
    # examples per repeat (the last batch of an epoch may be short)
    counts = [sum(int(b[0]["token_ids"].shape[0]) for b in block) for block in blocks]
    rates = sorted(c / s for c, s in zip(counts, timing.seconds))
    mean_length = sum(int(b[0]["token_ids"].shape[-1]) for b in data[:timed]) / timed
    return [
        f"{mean_length:.0f}",
        f"{statistics.median(rates):.1f}",
        f"{rates[0]:.1f}-{rates[-1]:.1f}",
        f"{1000 * timing.median / steps:.0f}",
    ]


def main(argv=None) -> int:
    args = parse_args(argv)
    tf = common.tensorflow_threads(args.threads)
    tf.get_logger().setLevel("ERROR")  # retracing per batch length is expected here
    import keras

    from model import tasks
    from model.checkpoints.formats import read
    from model.networks.encoder import BertEncoder
    from model.text.tokenizer import WordPieceTokenizer

    init = args.init or (
        common.tiny_model_dir(
            os.path.join(common.quick_dir("finetune"), "tiny-encoder"), common.VOCAB
        )
        if args.quick
        else common.MINILM_DIR
    )
    source, vocab, _ = read(init)
    encoder = source if isinstance(source, BertEncoder) else source.encoder
    tokenizer = WordPieceTokenizer(
        vocab or os.path.join(init, "vocab.txt"), lowercase=encoder.config.lowercase
    )
    batch_size = args.batch or (4 if args.quick else 32)
    steps = args.steps or (1 if args.quick else 4)
    rows = []
    for name in args.tasks:
        task = tasks.get(name)
        path, seq_len = TASKS[name]
        seq_len = 64 if args.quick and name == "squad1" else seq_len
        timed = args.repeats * steps
        examples = task.read(os.path.join(args.data, path))
        wanted = batch_size * (timed + 8)  # room for one warm-up batch per length
        encoded = task.encode(examples[:wanted], tokenizer, seq_len, training=True)
        data = batches(task, encoded, batch_size, seq_len, timed + 1)
        for variant in args.variants:
            print(f"{name}: {variant}", file=sys.stderr, flush=True)
            row = [name, seq_len, variant, batch_size]
            try:
                rows.append(row + time_variant(args, task, encoder, variant, data, steps))
            except Exception as e:
                first_line = str(e).splitlines()[0][:300]
                rows.append(row + [f"failed: {type(e).__name__}: {first_line}"])
            finally:
                keras.mixed_precision.set_global_policy("float32")
    header = [
        "task",
        "seq_len",
        "variant",
        "batch",
        "mean batch length (trimmed)",
        "examples/s",
        "examples/s range",
        "ms per step",
    ]
    body = (
        f"From {init}. {steps} batch(es) per repeat, median of {args.repeats} repeats, "
        f"after one warm-up step per distinct batch length and {args.warmup} more.\n\n"
        + common.table(header, rows)
    )
    common.publish(args, "Fine-tuning throughput", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
