"""One accelerator, fully used: the device path's pre-training throughput (JAX, no TensorFlow).

    KERAS_BACKEND=jax JAX_COMPILATION_CACHE_DIR=/tmp/jax-cache python bench/gpu.py
    KERAS_BACKEND=jax python bench/gpu.py --quick            # minutes on a CPU: a rehearsal

For each preset (`mini`, `small`, `electra-small`, `minilm-l6`, `base`) and each dropout
(0, the device path's default, and 0.1), at batch 256 x 128 in bf16: the model of
`python -m model.train pretrain --device-data` (BERT's masked LM + NSP; ELECTRA's generator
and discriminator for `electra-small`) over a corpus on the device, K steps per compiled call
(model/training/device_loop.py). It reports

- tokens/s (batch x sequence length, padding included: the figure train_summary.json gives);
- model FLOP utilisation: the model's training FLOPs (bench/common.py's formulas, the
  masked-LM head at the masked positions only) per second over the chip's dense bf16 peak
  (`--peak-tflops`, else the device's datasheet figure below);
- the compile time of the call (its first run less one timed run), and for the presets of
  `--cache-check` the same program built again in a fresh function, read from JAX's
  persistent cache when JAX_COMPILATION_CACHE_DIR is set.

Rows are printed as they come and written as JSON lines to `--json` (a call cut short keeps
what it measured). The corpus: `--data RECORDS` (records of `python -m model.data`, read as
the training command reads them) or random token ids (throughput does not depend on which
words). Fine-tuning: SST-2 (`mini`, 64 tokens) with one seed and with three seeds trained together
in one program (model/training/seeds.py), and SQuAD v1.1 (`minilm-l6`, 384 tokens); the
seconds an epoch would take at the measured examples/s, against the goals.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import types

import common
import numpy as np

# Dense bf16 matrix throughput (TFLOP/s) by device name, from the datasheets (no sparsity).
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100 PCIe": 756.0, "H100": 989.0, "A100": 312.0}
GOALS = {  # the goals, bf16 at 128 tokens
    ("base", "mfu"): 35.0,
    ("minilm-l6", "tokens"): 1.4e6,
    ("mini", "tokens"): 3e6,
    ("electra-small", "tokens"): 1e6,
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--presets", nargs="+", default=["mini", "small", "electra-small", "minilm-l6", "base"]
    )
    p.add_argument("--dropouts", nargs="+", type=float, default=[0.0, 0.1])
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps-per-call", type=int, default=20)
    p.add_argument("--precision", default="mixed_bfloat16")
    p.add_argument("--data", default=None, help="records to train on (default: random ids)")
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--cache-check", nargs="*", default=["mini", "base"])
    p.add_argument("--json", default=None, help="also write each row here (JSON lines)")
    p.add_argument(
        "--profile",
        choices=("missed", "all", "none"),
        default="missed",
        help="split a row's step into the batches alone, the steps alone and the rest (two "
        "more compiled programs): for the dropout-0 rows that miss their goal (default), every "
        "row (--quick's), or none",
    )
    p.add_argument(
        "--sections",
        nargs="+",
        choices=("pretrain", "finetune"),
        default=["pretrain", "finetune"],
        help="what to measure (default: both)",
    )
    args = common.parse(p, argv, repeats=5, warmup=1, machine=accelerator_name)
    if args.quick:
        args.presets, args.dropouts = ["tiny", "electra-mini"], [0.0, 0.1]
        args.batch_size, args.seq_len, args.steps_per_call = 8, 32, 4
        args.cache_check, args.profile = ["tiny"], "all"
    import jax
    import keras

    if keras.backend.backend() != "jax":
        p.error("run it with KERAS_BACKEND=jax")
    if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        # The "from cache" column needs a persistent cache: a fresh one, so the first build
        # of each program is a cold compile.
        import tempfile

        jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="jax-cache-"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    device = jax.devices()[0]
    peak = args.peak_tflops or next(
        (v for k, v in PEAK_BF16_TFLOPS.items() if k in device.device_kind), None
    )
    print(f"device: {device.device_kind} ({device.platform}); peak bf16 {peak} TFLOP/s", flush=True)
    rows, results, splits = [], [], []
    for preset in args.presets if "pretrain" in args.sections else []:
        for dropout in args.dropouts:
            row = measure(
                args, preset, dropout, peak, cache=preset in args.cache_check and dropout == 0.0
            )
            results.append(record(args, row))
            rows.append(
                [
                    preset,
                    dropout,
                    f"{row['ms_per_step']:.1f}",
                    f"{row['tokens_per_second']:,.0f}",
                    common.fmt(row["mfu_percent"]),
                    f"{row['compile_seconds']:.1f}",
                    common.fmt(row.get("cached_compile_seconds")),
                ]
            )
    body = (
        f"Device: {device.device_kind} ({device.platform}), jax {jax.__version__}, keras "
        f"{keras.__version__}; batch {args.batch_size} x {args.seq_len}, {args.precision}, "
        f"{args.steps_per_call} steps per call, median of {args.repeats} calls; corpus: "
        f"{args.data or 'random ids'}; peak {peak} TFLOP/s\n\n"
        + common.table(
            ["preset", "dropout", "ms/step", "tokens/s", "MFU %", "compile s", "from cache s"], rows
        )
        + "\n\n"
        + "\n".join(goal_lines(results))
        + "\n\n"
        + (finetune_section(args) if "finetune" in args.sections else "")
    )
    title = "One accelerator: the device path's pre-training throughput"
    common.publish(args, title, body, accelerator_lines())
    # Last, each in its own programs: a call cut short here has published everything above.
    for row in [r for r in results if profiled(args, r)]:
        split = where_time_goes(args, row["preset"], row["dropout"], row)
        record(args, {"preset": row["preset"], "dropout": row["dropout"], **split})
        splits.append(row | split)
    if splits:
        common.publish(args, "Where the device path's step time goes", split_section(splits))
    return 0


def accelerator_name() -> str:
    """The results file's machine name: the accelerator's ("nvidia-h200"), else the CPU's."""
    import jax

    device = jax.devices()[0]
    return common.machine_name() if device.platform == "cpu" else common.slug(device.device_kind)


def accelerator_lines() -> str:
    """Markdown lines for the results file: the devices, nvidia-smi's name, memory and driver
    (where it runs), and the jax and jaxlib versions."""
    import subprocess

    import jax
    import jaxlib

    devices = jax.devices()
    lines = [f"- accelerator: {len(devices)} x {devices[0].device_kind} ({devices[0].platform})"]
    query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
    try:
        smi = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        smi = ""
    if smi:
        lines.append(f"- nvidia-smi: {smi.splitlines()[0]} (name, memory, driver)")
    lines.append(f"- jax {jax.__version__}, jaxlib {jaxlib.__version__}")
    return "\n".join(lines) + "\n"


def record(args, row: dict) -> dict:
    """Prints a row as it comes and appends it to --json (a cut-short run keeps it)."""
    print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
    return row


# Fine-tuning: (task, preset, sequence length, batch, seeds trained together, examples an
# epoch (SST-2's goal counts 20,000; SQuAD v1.1 train makes 88,641 features at 384), goal
# seconds for that epoch of all the seeds).
FINETUNE = (
    ("sst2", "mini", 64, 32, 1, 20_000, None),
    ("sst2", "mini", 64, 32, 3, 20_000, 15.0),
    ("squad1", "minilm-l6", 384, 32, 1, 88_641, 90.0),
)


def finetune_section(args) -> str:
    """Fine-tuning examples/s on the device (model/training/seeds.py), random ids."""
    rows, goals = [], []
    plan = FINETUNE if not args.quick else (("sst2", "tiny", 32, 8, 3, 2_000, None),)
    for task, preset, seq_len, batch, seeds, epoch, goal in plan:
        row = record(args, measure_finetune(args, task, preset, seq_len, batch, seeds))
        seconds = epoch * seeds / row["examples_per_second"]
        rows.append(
            [task, preset, f"{batch} x {seq_len}", seeds, f"{row['examples_per_second']:,.0f}",
             f"{seconds:.1f}", f"{row['compile_seconds']:.1f}"]
        )  # fmt: skip
        if goal:
            name = f"{task} `{preset}` epoch of {epoch:,} examples, {seeds} seed(s) together"
            goals.append(common.goal_line(name, seconds, goal, "s", higher=False))
    return (
        "Fine-tuning, every seed's model in one compiled program (random ids, "
        f"{args.precision}, {args.steps_per_call} steps per call):\n\n"
        + common.table(
            ["task", "preset", "batch", "seeds", "examples/s (all seeds)", "epoch s", "compile s"],
            rows,
        )
        + "\n\n"
        + "\n".join(goals)
    )


def measure_finetune(args, task, preset, seq_len, batch, seeds) -> dict:
    import jax
    import keras

    from model.config import BertConfig
    from model.heads.classifier import BertClassifier
    from model.heads.question_answerer import BertQuestionAnswerer
    from model.networks.encoder import BertEncoder
    from model.training.optimizer import bert_adamw
    from model.training.seeds import SeedTrainer

    keras.mixed_precision.set_global_policy(args.precision)
    rng = np.random.default_rng(0)
    n = max(4 * batch * args.steps_per_call, 1024)
    features = {
        "token_ids": rng.integers(1000, 30000, (n, seq_len)).astype(np.int32),
        "segment_ids": np.zeros((n, seq_len), np.int32),
        "padding_mask": np.ones((n, seq_len), np.int32),
    }
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if task == "squad1":
        labels = {
            "start_logits": rng.integers(0, seq_len, n).astype(np.int32),
            "end_logits": rng.integers(0, seq_len, n).astype(np.int32),
        }
        losses = {"start_logits": loss, "end_logits": loss}
    else:
        labels, losses = rng.integers(0, 2, n).astype(np.int32), loss

    def build(seed):
        keras.utils.set_random_seed(seed)
        config = BertConfig.preset(preset, vocabulary_size=30522)
        encoder = BertEncoder.from_config_object(config)
        model = BertQuestionAnswerer(encoder) if task == "squad1" else BertClassifier(encoder, 2)
        model.compile(optimizer=bert_adamw(2e-5, 100, 10_000), loss=losses)
        return model

    trainer = SeedTrainer(
        [build(s) for s in range(seeds)], features, labels, batch, args.steps_per_call
    )

    def call():
        trainer.run(args.steps_per_call)
        jax.block_until_ready(trainer.state)

    first, timing = time_calls(call, args.repeats, args.warmup)
    per_call = timing.median
    return {
        "task": task,
        "preset": preset,
        "device": jax.devices()[0].device_kind,
        "seq_len": seq_len,
        "batch_size": batch,
        "seeds": seeds,
        "precision": args.precision,
        "steps_per_call": args.steps_per_call,
        "examples_per_second": seeds * batch * args.steps_per_call / per_call,
        "compile_seconds": first - per_call,
    }


def profiled(args, row: dict) -> bool:
    """Whether `row` gets `where_time_goes`: --profile all, or a dropout-0 row under its goal."""
    if args.profile != "missed":
        return args.profile == "all"
    kind = next((k for p, k in GOALS if p == row["preset"]), None)
    if row["dropout"] != 0.0 or kind is None:
        return False
    value = row["mfu_percent" if kind == "mfu" else "tokens_per_second"]
    return value is not None and value < GOALS[(row["preset"], kind)]


def split_section(splits: list[dict]) -> str:
    if not splits:
        return ""
    rows = [
        [
            r["preset"],
            r["dropout"],
            f"{r['ms_per_step']:.2f}",
            f"{r['input_ms_per_step']:.2f}",
            f"{r['steps_ms_per_step']:.2f}",
            f"{r['rest_ms_per_step']:+.2f}",
        ]
        for r in splits
    ]
    header = ["preset", "dropout", "ms/step", "batches alone", "steps alone", "the rest"]
    return (
        "Where a step's time goes (`--profile`; each part its own compiled program of K steps "
        "a call, estimates: XLA may hoist work on the fixed batch out of the steps' loop, and "
        "fuse the batches' making into their sum; the rest: launching, the host, and what of "
        "the two does not overlap):\n\n" + common.table(header, rows) + "\n\n"
    )


def goal_lines(results) -> list[str]:
    lines = []
    for (preset, kind), target in GOALS.items():
        row = next((r for r in results if r["preset"] == preset and r["dropout"] == 0.0), None)
        value = (
            None if row is None else row["mfu_percent" if kind == "mfu" else "tokens_per_second"]
        )
        unit = "%" if kind == "mfu" else "tokens/s"
        lines.append(common.goal_line(f"`{preset}` dropout 0 {kind}", value, target, unit))
    return lines


def time_calls(call, repeats: int, warmup: int = 1):
    """(seconds of the first call, compilation included; `common.Timing` of `repeats` more,
    after `warmup` - 1 untimed ones: the first is the first warm-up)."""
    began = time.perf_counter()
    call()
    first = time.perf_counter() - began
    return first, common.time_repeats(call, repeats, warmup=max(0, warmup - 1))


def measure(args, preset, dropout, peak, cache: bool) -> dict:
    import jax

    model, run, config, objective = build(args, preset, dropout)
    state = [model_state(model)]

    def call():
        state[0] = block(run(state[0]))

    first, timing = time_calls(call, args.repeats, args.warmup)
    per_call = timing.median
    per_step = per_call / args.steps_per_call
    tokens = args.batch_size * args.seq_len / per_step
    flops = step_flops(config, objective, args)
    row = {
        "preset": preset,
        "dropout": dropout,
        "device": jax.devices()[0].device_kind,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "precision": args.precision,
        "steps_per_call": args.steps_per_call,
        "ms_per_step": per_step * 1e3,
        "call_seconds_min_max": [min(timing.seconds), max(timing.seconds)],
        "tokens_per_second": tokens,
        "model_tflops_per_second": flops / per_step / 1e12,
        "mfu_percent": 100 * flops / per_step / (peak * 1e12) if peak else None,
        "compile_seconds": first - per_call,
    }
    if cache:
        again, rerun, _, _ = build(args, preset, dropout)
        began = time.perf_counter()
        block(rerun(model_state(again)))
        row["cached_compile_seconds"] = time.perf_counter() - began - per_call
    return row


def where_time_goes(args, preset, dropout, row) -> dict:
    """A step's time split (issue 34: where a goal is missed, say where the time goes): the
    batches alone (rows cut and masked on the device, K to a call, as the training program
    makes them) and the training steps alone on one fixed batch (K to a call), each its own
    compiled program, and what is left of the measured step (launching calls, the host, and
    whatever of the two does not overlap; below 0 where they do)."""
    import jax
    import jax.numpy as jnp

    from model.pretraining.device_data import make_batch
    from model.pretraining.vocabulary_tables import VocabularyTables

    model, _, _, objective = build(args, preset, dropout)
    transform = objective.device_batches(VocabularyTables.from_vocabulary(bench_vocabulary()))
    k, b = args.steps_per_call, args.batch_size
    data = {
        "corpus": corpus(args, objective).on_device(),
        "key": jax.random.PRNGKey(0),
        "rates": {n: jnp.asarray(v) for n, v in objective.masking_rates().items()},
    }

    def batch(data, step):
        return make_batch(data["corpus"], transform, data["key"], step, b, data["rates"])

    def batches(data):
        def one(i, total):  # every array of the batch summed: nothing left out as unused
            leaves = jax.tree_util.tree_leaves(batch(data, i))
            return total + sum(jnp.sum(x.astype(jnp.float32)) for x in leaves)

        return jax.lax.fori_loop(0, k, one, jnp.float32(0))

    def steps(state, fixed):
        logs, state = model.train_step(state, fixed)
        return jax.lax.fori_loop(1, k, lambda i, c: model.train_step(c[1], fixed), (logs, state))

    making, stepping = jax.jit(batches), jax.jit(steps, donate_argnums=0)
    fixed = jax.jit(batch)(data, 0)
    _, inputs = time_calls(lambda: jax.block_until_ready(making(data)), args.repeats)
    state = [model_state(model)]

    def call():
        state[0] = block(stepping(state[0], fixed))

    _, computing = time_calls(call, args.repeats, args.warmup)
    split = {
        "input_ms_per_step": inputs.median / k * 1e3,
        "steps_ms_per_step": computing.median / k * 1e3,
    }
    split["rest_ms_per_step"] = row["ms_per_step"] - sum(split.values())
    return split


def build(args, preset, dropout):
    """The training command's model and compiled call (pretrain.build_model, device_loop)."""
    import keras

    from model import objectives
    from model.config import BertConfig
    from model.pretraining.vocabulary_tables import VocabularyTables
    from model.training import device_loop
    from model.training.pretrain import build_model

    vocabulary = bench_vocabulary()
    kind = "electra" if preset.startswith("electra") else "bert"
    objective = objectives.get(kind)(vocabulary, objectives.ObjectiveOptions(seq_len=args.seq_len))
    config = BertConfig.preset(preset, vocabulary_size=len(vocabulary)).replace(dropout=dropout)
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy(args.precision)
    flags = types.SimpleNamespace(
        warmup_steps=100, steps=10_000, learning_rate=1e-4, weight_decay=0.01, seed=0, jit=True
    )
    runtime = types.SimpleNamespace(tf=False, scope=contextlib.nullcontext)
    model = build_model(flags, runtime, types.SimpleNamespace(objective=objective), config)
    model.steps_per_execution = args.steps_per_call
    device_loop.attach(
        model,
        corpus(args, objective),
        objective.device_batches(VocabularyTables.from_vocabulary(vocabulary)),
        objective.masking_rates(),
        0,
        args.batch_size,
        args.steps_per_call,
    )
    return model, lambda state: model.train_function(state, None), config, objective


def model_state(model):
    return model._get_jax_state(
        trainable_variables=True,
        non_trainable_variables=True,
        optimizer_variables=True,
        metrics_variables=True,
    )


def block(output):
    import jax

    logs, state = output
    jax.block_until_ready(state)
    return state


def bench_vocabulary() -> list[str]:
    """bert-base-uncased's vocabulary (the project's fixture): the size every preset has."""
    from model.text.wordpiece import load_vocabulary

    return load_vocabulary(
        os.path.join(common.REPO_ROOT, "tests", "fixtures", "bert-base-uncased-vocab.txt")
    )


def corpus(args, objective):
    from model.pretraining.device_data import DeviceCorpus

    if args.data:
        read = DeviceCorpus.read(args.data, objective.next_sentence)
        if read.seq_len != args.seq_len:
            sys.exit(f"{args.data}: records of {read.seq_len} tokens, --seq-len is {args.seq_len}")
        return read
    rng = np.random.default_rng(0)
    n, length = 4096, args.seq_len
    ids = rng.integers(1000, 30000, size=(n, length), dtype=np.int32)
    ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP]
    features = {
        "input_ids": ids,
        "segment_ids": np.zeros((n, length), np.int32),
        "input_mask": np.ones((n, length), np.int32),
    }
    if objective.next_sentence:
        features["next_sentence_labels"] = rng.integers(0, 2, size=(n, 1), dtype=np.int32)
    return DeviceCorpus(features=features, seq_len=length, static=False)


def step_flops(config, objective, args) -> float:
    """Training FLOPs of one step: 3x the forward (common.training_flops)."""
    b, t = args.batch_size, args.seq_len
    masked = objective.max_predictions()
    if objective.name != "electra":
        return common.training_flops(common.pretraining_forward_flops(config, b, t, masked))
    from model.heads.electra import generator_config

    generator = generator_config(config, objective.options.generator_size)
    discriminator = common.encoder_flops(config, b, t) + b * t * 2 * config.hidden_dim
    if config.embedding_dim:
        discriminator += 2 * b * t * config.embedding_dim * config.hidden_dim
    return common.training_flops(
        discriminator + common.pretraining_forward_flops(generator, b, t, masked)
    )


if __name__ == "__main__":
    sys.exit(main())
