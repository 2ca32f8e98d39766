"""Scaling with work: inference latency and training step time vs sequence length and batch size.

    PYTHONPATH=. python bench/scaling.py [--model runs/defaults/minilm] [--seq-lens 64 128 256 512] \\
        [--batches 1 4 16 64]
    PYTHONPATH=. python bench/scaling.py --quick     # tiny random encoder, seconds

Two sweeps over the project's model (the real all-MiniLM-L6-v2 by default):

    sequence length  --seq-lens at batch --batch-for-seq (8)
    batch size       --batches at --seq-for-batch tokens (128)

At every point: inference = the Keras encoder's predict_on_batch compiled with XLA;
training = one pre-training step (MLM + NSP, AdamW: bench/pretrain_step.py's project model, the
same sizes, ceil(0.15 * T) masked positions as model/train.py's default, XLA unless
--no-train-jit). Inputs are real Wikipedia sentence pairs packed without padding (every
position is real work). Figures are medians of --repeats calls after --warmup (which also
compiles each new shape).

The plots (PNG beside the results file, matplotlib): time per call and achieved GFLOP/s against
each sweep, log-scaled axes. Where the curve bends, and why, comes from the same numbers: the
knee is the first point whose GFLOP/s reaches 90 % of the sweep's best (before it the CPU is
under-used: small matrices, per-op overhead); along the sequence axis the attention matmuls'
share of the FLOPs (2*2*T*T*H against 2*T*(4*H*H + 2*H*I) per layer) and the (T x T) softmax
traffic grow with T, so the time per token rises. FLOPs: common.encoder_flops (inference),
common.training_flops(common.pretraining_forward_flops(...)) (training).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import common


def attention_share(config, tokens: int) -> float:
    """Share of an encoder layer's matmul FLOPs spent in attention scores and values."""
    h, i = config.hidden_dim, config.intermediate_dim
    attention = 2 * 2 * tokens * tokens * h
    return attention / common.encoder_layer_flops(tokens, h, i)


def knee(points: list[tuple[int, float]]) -> int | None:
    """The first x whose rate reaches 90 % of the best rate of `points` [(x, rate)]."""
    valid = [(x, r) for x, r in points if r]
    if not valid:
        return None
    best = max(r for _, r in valid)
    return next(x for x, r in valid if r >= 0.9 * best)


def plot(path: str, title: str, xlabel: str, series: dict[str, list[tuple]]) -> str | None:
    """Two panels (ms per call, GFLOP/s) of {label: [(x, ms, gflops)]}; None without matplotlib."""
    if not common.installed("matplotlib"):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from model.io.files import atomic_path

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, points in series.items():
        points = [p for p in points if p[1] is not None]
        if not points:
            continue
        xs = [p[0] for p in points]
        left.plot(xs, [p[1] for p in points], marker="o", label=label)
        right.plot(xs, [p[2] for p in points], marker="o", label=label)
    xs = sorted({p[0] for points in series.values() for p in points})
    for axis, ylabel in ((left, "ms per call (median)"), (right, "achieved GFLOP/s")):
        axis.set_xscale("log", base=2)
        axis.set_xticks(xs, [str(x) for x in xs])  # 64, 128, ... rather than 2^6, 2^7
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabel)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    left.set_yscale("log")
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/scaling.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        default=None,
        help=f"our model directory (default {common.MINILM_DIR}; --quick: a tiny random encoder)",
    )
    parser.add_argument(
        "--seq-lens",
        type=int,
        nargs="+",
        default=None,
        help="default 64 128 256 512 (--quick 16 32)",
    )
    parser.add_argument(
        "--batches", type=int, nargs="+", default=None, help="default 1 4 16 64 (--quick 1 2)"
    )
    parser.add_argument("--batch-for-seq", type=int, default=None, help="default 8 (--quick 2)")
    parser.add_argument("--seq-for-batch", type=int, default=None, help="default 128 (--quick 32)")
    parser.add_argument("--no-train", action="store_true", help="inference only")
    parser.add_argument("--no-train-jit", action="store_true", help="train without XLA")
    parser.add_argument("--data", default=common.DATA_DIR)
    return common.parse(parser, argv)


def measure(args, model_dir: str, points: list[tuple[str, int, int]]) -> list[dict]:
    """A row per (sweep, batch, tokens): inference and training-step times (or the error),
    and the FLOPs each does."""
    import pretrain_step

    from model.checkpoints import model_dir as model_dirs
    from model.config import BertConfig
    from model.text.wordpiece import WordPieceTokenizer

    config = BertConfig.from_dict(model_dirs.read_info(model_dir)["encoder"])
    tokenizer = WordPieceTokenizer(os.path.join(model_dir, "vocab.txt"), lowercase=config.lowercase)
    encoder = model_dirs.load(model_dir)
    encoder.compile(jit_compile=True)
    warmup = max(args.warmup, 1)
    results = []
    for sweep, batch, tokens in points:
        print(f"{sweep} sweep: batch {batch} x {tokens}", file=sys.stderr, flush=True)
        masked = math.ceil(0.15 * tokens)
        x, y, sw = pretrain_step.pretraining_batch(tokenizer, batch, tokens, masked, args.data)
        features = {k: v for k, v in x.items() if k != "mask_positions"}
        row = {"sweep": sweep, "batch": batch, "tokens": tokens}
        try:
            call = lambda: encoder.predict_on_batch(features)
            row["infer"] = common.time_repeats(call, args.repeats, warmup)
        except Exception as e:
            row["infer_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        if not args.no_train:
            try:
                step = pretrain_step.project_step(
                    config, "float32", not args.no_train_jit, (x, y, sw), 10_000
                )
                row["train"] = common.time_repeats(step, args.repeats, warmup)
            except Exception as e:
                row["train_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            finally:
                pretrain_step.reset_policy()
                encoder = model_dirs.load(model_dir)  # clear_session dropped the old one
                encoder.compile(jit_compile=True)
        row["infer_flops"] = common.encoder_flops(config, batch, tokens)
        row["train_flops"] = common.training_flops(
            common.pretraining_forward_flops(config, batch, tokens, masked)
        )
        results.append(row)
    return results


def rate(row: dict, kind: str) -> float | None:
    """GFLOP/s of `kind` ("infer" or "train") at a measured point; None where it failed."""
    t = row.get(kind)
    return row[f"{kind}_flops"] / t.median / 1e9 if t else None


def results_table(results: list[dict], config) -> str:
    rows = []
    for r in results:
        cells = [r["sweep"], r["batch"], r["tokens"]]
        for kind in ("infer", "train"):
            t = r.get(kind)
            cells += (
                [
                    common.ms_cell(t),
                    common.fmt(rate(r, kind)),
                    f"{t.median / (r['batch'] * r['tokens']) * 1e6:.1f}",
                ]
                if t
                else [r.get(f"{kind}_error", "-"), "-", "-"]
            )
        cells.append(f"{100 * attention_share(config, r['tokens']):.0f} %")
        rows.append(cells)
    header = [
        "sweep",
        "batch",
        "seq_len",
        "inference ms (min-max)",
        "inference GFLOP/s",
        "inference µs/token",
        "train ms (min-max)",
        "train GFLOP/s",
        "train µs/token",
        "attention share of layer FLOPs",
    ]
    return common.table(header, rows)


def sweep_lines(args, model_dir: str, results: list[dict], sweep: str, axis: str, label: str):
    """Where one sweep's curves bend (the knee, time per token at both ends) and its plot."""
    rows = [r for r in results if r["sweep"] == sweep]
    lines = []
    for kind, kind_label in (("infer", "inference"), ("train", "training")):
        bend = knee([(r[axis], rate(r, kind)) for r in rows])
        if bend is None:
            continue
        per_token = [
            (r[axis], r[kind].median / (r["batch"] * r["tokens"]) * 1e6)
            for r in rows
            if r.get(kind)
        ]
        lines.append(
            f"- {kind_label} vs {label}: GFLOP/s reaches 90 % of its best at "
            f"{axis} {bend}; time per token {per_token[0][1]:.1f} µs at "
            f"{per_token[0][0]} -> {per_token[-1][1]:.1f} µs at {per_token[-1][0]}"
        )
    if args.no_write:
        return lines + ["- plot: not written (--no-write)"]
    series = {
        kind_label: [
            (r[axis], r[kind].median * 1e3 if r.get(kind) else None, rate(r, kind)) for r in rows
        ]
        for kind, kind_label in (("infer", "inference"), ("train", "training step"))
    }
    path = plot(
        f"{os.path.splitext(args.results)[0]}-scaling-{sweep}.png",
        f"{os.path.basename(model_dir)}: time and throughput vs {label}",
        label,
        series,
    )
    if path is None:
        return lines + ["- plot: not written (matplotlib not installed)"]
    return lines + [f"- plot: {os.path.relpath(path, os.path.dirname(args.results))}"]


def main(argv=None) -> int:
    args = parse_args(argv)
    common.tensorflow_threads(args.threads)
    from model.checkpoints import model_dir as model_dirs
    from model.config import BertConfig

    quick = args.quick
    model_dir = args.model or (
        common.tiny_model_dir(
            os.path.join(common.quick_dir("scaling"), "tiny-encoder"), common.VOCAB
        )
        if quick
        else common.MINILM_DIR
    )
    seq_lens = args.seq_lens or ([16, 32] if quick else [64, 128, 256, 512])
    batches = args.batches or ([1, 2] if quick else [1, 4, 16, 64])
    batch_for_seq = args.batch_for_seq or (2 if quick else 8)
    seq_for_batch = args.seq_for_batch or (32 if quick else 128)
    points = [("seq", batch_for_seq, t) for t in seq_lens]
    points += [("batch", b, seq_for_batch) for b in batches]
    results = measure(args, model_dir, points)
    config = BertConfig.from_dict(model_dirs.read_info(model_dir)["encoder"])
    text = [
        f"Model {model_dir} ({config.num_layers} layers, hidden {config.hidden_dim}); "
        f"inference: Keras encoder, XLA; training: pre-training step, AdamW, "
        f"{'no XLA' if args.no_train_jit else 'XLA'}, float32. Median of {args.repeats} "
        f"calls (min-max).",
        "",
        results_table(results, config),
        "",
    ]
    text += sweep_lines(
        args, model_dir, results, "seq", "tokens", f"sequence length (batch {batch_for_seq})"
    )
    text += sweep_lines(
        args, model_dir, results, "batch", "batch", f"batch size ({seq_for_batch} tokens)"
    )
    text.append(
        "- attention's share of a layer's matmul FLOPs: "
        + ", ".join(
            f"{100 * attention_share(config, t):.0f} % at T={t}"
            for t in sorted(set(seq_lens + [seq_for_batch]))
        )
        + " (2*2*T*T*H of 2*T*(4*H*H + 2*H*I) + 2*2*T*T*H)."
    )
    common.publish(args, "Scaling with sequence length and batch size", "\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
