"""Where a pre-training step's time goes: the TensorFlow profiler's op stats, grouped.

    PYTHONPATH=. python bench/pretrain_profile.py [--preset minilm-l6] [--batch 32] \\
        [--masked 26] [--variants bf16 bf16-no-dropout fp32]
    PYTHONPATH=. python bench/pretrain_profile.py --quick      # tiny preset, seconds

The step is bench/pretrain_step.py's (the model, losses, metrics and AdamW of
`python -m model.train pretrain`, compiled as it compiles them, without XLA), on the same real
Wikipedia batch. For each variant: the step's wall time (median of --repeats steps after
--warmup), then `tf.profiler.experimental` traces --profile-steps steps and xprof's
`framework_op_stats` tool turns the trace into per-op self times, which are summed into the
groups below by op name and type. Self times are thread time: with 2 threads a wall second
holds up to 2 s of it; "idle" is the executor threads' idle time the profiler reports.

Groups (first match wins; the op's scope name says which layer it belongs to):
    vocabulary projection   the tied decoder: the MLM head's matmul with the 30,522 x H token
                            embedding, its two gradient matmuls and the transpose
    MLM loss + accuracy     softmax cross-entropy and argmax over the vocabulary logits
    dropout                 the random numbers and masking of every Dropout layer
    attention matmuls       QK^T and probabilities x V (BatchMatMul)
    dense matmuls           the other matmuls (Q/K/V/output projections, feed-forward, heads)
    GELU                    the feed-forward activation (erf) and its gradient
    layer norm              statistics and scaling of the LayerNormalization layers
    optimizer               AdamW's updates, clipping, weight decay
    other                   everything else (casts, adds, gathers, ...)

Needs `xprof` (bench/requirements.txt) to read the trace.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import json
import os
import sys
import tempfile
import time

import common

VARIANTS = {  # name: (Keras dtype policy, dropout override or None)
    "bf16": ("mixed_bfloat16", None),
    "bf16-no-dropout": ("mixed_bfloat16", 0.0),
    "fp32": ("float32", None),
    "fp32-no-dropout": ("float32", 0.0),
}
GROUPS = (
    "vocabulary projection",
    "MLM loss + accuracy",
    "dropout",
    "attention matmuls",
    "dense matmuls",
    "GELU",
    "layer norm",
    "optimizer",
    "other",
    "idle",
)


def group_of(op_type: str, name: str) -> str:
    """The GROUPS entry of one op (see the module docstring)."""
    lowered = name.lower()
    if op_type == "IDLE":
        return "idle"
    if "token_embedding" in lowered and (
        "matmul" in op_type.lower() or "transpose" in op_type.lower() or "einsum" in op_type.lower()
    ):
        return "vocabulary projection"
    if op_type in ("SparseSoftmaxCrossEntropyWithLogits", "ArgMax"):
        return "MLM loss + accuracy"
    if "dropout" in lowered or op_type.startswith("StatelessRandom"):
        return "dropout"
    if "BatchMatMul" in op_type:
        return "attention matmuls"
    if "MatMul" in op_type or "Einsum" in op_type or op_type == "BiasAddGrad":
        return "dense matmuls"
    if "gelu" in lowered or op_type in ("Erf", "Erfc"):
        return "GELU"
    if "layer_norm" in lowered or "layernorm" in lowered:
        return "layer norm"
    if lowered.startswith("adam") or "/adam" in lowered or "clip" in lowered:
        return "optimizer"
    return "other"


def op_rows(trace_dir: str) -> list[dict]:
    """[{type, operation, total_self_time (us)}] of the newest trace under `trace_dir`."""
    from xprof.convert import raw_to_tool_data

    paths = sorted(glob.glob(os.path.join(trace_dir, "plugins", "profile", "*", "*.xplane.pb")))
    if not paths:
        raise RuntimeError(f"the profiler wrote no trace under {trace_dir}")
    data, _ = raw_to_tool_data.xspace_to_tool_data([paths[-1]], "framework_op_stats", {})
    tables = json.loads(data)
    table = tables[0] if isinstance(tables, list) else tables
    ids = [c["id"] for c in table["cols"]]
    rows = []
    for row in table["rows"]:
        values = dict(zip(ids, [cell.get("v") if cell else None for cell in row["c"]]))
        rows.append(
            {
                "type": values["type"],
                "operation": values["operation"],
                "total_self_time": float(values["total_self_time"] or 0.0),
            }
        )
    return rows


def grouped(rows: list[dict], steps: int) -> dict[str, float]:
    """{group: thread milliseconds per step}."""
    out = collections.Counter()
    for r in rows:
        out[group_of(r["type"], r["operation"])] += r["total_self_time"] / 1e3 / steps
    return {g: out.get(g, 0.0) for g in GROUPS}


def profile_variant(
    config, arrays, precision: str, steps: int, repeats: int, warmup: int, trace_dir: str
) -> tuple[common.Timing, dict[str, float]]:
    import tensorflow as tf
    from pretrain_step import project_step, reset_policy

    try:
        step = project_step(config, precision, False, arrays, warmup + repeats + steps + 1)
        timing = common.time_repeats(step, repeats, warmup)
        tf.profiler.experimental.start(trace_dir)
        try:
            for _ in range(steps):
                step()
        finally:
            tf.profiler.experimental.stop()
        return timing, grouped(op_rows(trace_dir), steps)
    finally:
        reset_policy()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/pretrain_profile.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--preset",
        default=None,
        help="model/config.py preset (default "
        "minilm-l6, the shape of the default masked-LM model; --quick tiny)",
    )
    parser.add_argument("--batch", type=int, default=None, help="default 32 (--quick 4)")
    parser.add_argument("--seq-len", type=int, default=None, help="default 128 (--quick 32)")
    parser.add_argument(
        "--masked",
        type=int,
        default=None,
        help="masked positions per sequence (default 26, as the default "
        "masked-LM model was trained; --quick 5)",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=sorted(VARIANTS),
        default=["bf16", "bf16-no-dropout", "fp32"],
    )
    parser.add_argument("--profile-steps", type=int, default=2)
    parser.add_argument("--vocab", default=common.VOCAB)
    parser.add_argument("--data", default=common.DATA_DIR)
    args = common.parse(parser, argv, warmup=3)
    if not common.installed("xprof"):
        parser.error("needs xprof: pip install -r bench/requirements.txt")
    common.tensorflow_threads(args.threads)
    from pretrain_step import pretraining_batch

    from model.config import BertConfig
    from model.text.wordpiece import WordPieceTokenizer

    preset = args.preset or ("tiny" if args.quick else "minilm-l6")
    batch = args.batch or (4 if args.quick else 32)
    seq_len = args.seq_len or (32 if args.quick else 128)
    masked = args.masked or (5 if args.quick else 26)
    tokenizer = WordPieceTokenizer(args.vocab)
    base = BertConfig.preset(preset, vocabulary_size=tokenizer.vocabulary_size)
    arrays = pretraining_batch(tokenizer, batch, seq_len, masked, args.data)
    flops = common.training_flops(common.pretraining_forward_flops(base, batch, seq_len, masked))

    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        for name in args.variants:
            precision, dropout = VARIANTS[name]
            config = base if dropout is None else dataclasses.replace(base, dropout=dropout)
            print(f"{preset}: {name}", file=sys.stderr, flush=True)
            started = time.perf_counter()
            results[name] = profile_variant(
                config,
                arrays,
                precision,
                args.profile_steps,
                args.repeats,
                args.warmup,
                os.path.join(tmp, name),
            )
            print(f"  {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)

    names = list(results)
    rows = [
        ["step wall ms (min-max)", *[common.ms_cell(results[n][0]) for n in names]],
        ["model GFLOP/s", *[common.fmt(flops / results[n][0].median / 1e9) for n in names]],
    ]
    for g in GROUPS:
        cells = []
        for n in names:
            groups = results[n][1]
            total = sum(groups.values())
            cells.append(f"{groups[g]:.0f} ({100 * groups[g] / total:.0f} %)" if total else "-")
        rows.append([g, *cells])
    rows.append(
        ["sum (thread ms per step)", *[f"{sum(results[n][1].values()):.0f}" for n in names]]
    )
    body = (
        f"Preset `{preset}` ({base.num_layers} layers, hidden {base.hidden_dim}, vocabulary "
        f"{base.vocabulary_size}), batch {batch} x {seq_len} tokens, {masked} masked positions, "
        f"{args.threads} threads, no XLA: {flops / 1e9:.1f} model GFLOP per step. Wall time: "
        f"median of {args.repeats} steps after {args.warmup} warm-up steps. Groups: thread "
        f"milliseconds per step (self time summed over {args.profile_steps} profiled steps "
        "by the TensorFlow profiler, divided by the steps) and their share of the sum.\n\n"
        + common.table(["", *names], rows)
    )
    common.publish(args, "Pre-training step: where the time goes", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
