"""The machine's ceiling: matrix-multiply throughput through TensorFlow (oneDNN), fp32, bf16, int8.

    PYTHONPATH=. python bench/ceiling.py [--threads 2] [--size 4096] [--json ceiling.json]
    PYTHONPATH=. python bench/ceiling.py --quick          # smoke test, seconds

One (N x N) @ (N x N) product per timed repeat, operands made beforehand (no casts in the
timed call), in a `tf.function` so each repeat is one kernel call:

    fp32   tf.matmul, float32                                     -> oneDNN sgemm
    bf16   tf.matmul, bfloat16 in and out (AVX-512 BF16 / AMX)    -> oneDNN bf16 gemm
    int8   tf.raw_ops.QuantizedMatMulWithBias, uint8 x int8 -> int32 (AVX-512 VNNI / AMX)
           -> oneDNN's int8 gemm; TensorFlow's generic int8 path, tf.linalg.matmul on int8
           with output_type=int32, is not oneDNN and runs at a tenth of the fp32 speed, so
           it is no ceiling.

Throughput = 2 * M * N * K / median seconds (a multiply-add is 2 operations): GFLOP/s for
the float types, GOP/s for int8. This is the physical reference of the other benchmarks:
achieved model FLOP/s divided by it is their utilisation. `--json` writes the figures for
`bench/run_all.py`, which passes them on (`--ceiling-gflops`) so every script of one run is
compared with the same ceiling.
"""

from __future__ import annotations

import argparse
import sys

import common

DTYPES = ("float32", "bfloat16", "int8")


def matmul_fn(dtype: str, size: int, seed: int = 0):
    """A no-argument callable running one (size x size) @ (size x size) product of `dtype`
    (TensorFlow must already have its threads set)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    if dtype == "int8":
        a = tf.bitcast(tf.constant(rng.integers(0, 256, (size, size), dtype=np.uint8)), tf.quint8)
        b = tf.bitcast(tf.constant(rng.integers(-128, 128, (size, size), dtype=np.int8)), tf.qint8)
        bias = tf.zeros((size,), tf.float32)
        lo, hi = tf.constant(0.0), tf.constant(1.0)

        @tf.function
        def run():
            out = tf.raw_ops.QuantizedMatMulWithBias(
                a=a, b=b, bias=bias, min_a=lo, max_a=hi, min_b=-hi, max_b=hi, Toutput=tf.qint32
            )
            return out[0][0, 0]  # one element back: the product itself stays in place
    else:
        x = tf.constant(rng.standard_normal((size, size), dtype=np.float32), dtype=dtype)
        y = tf.constant(rng.standard_normal((size, size), dtype=np.float32), dtype=dtype)

        @tf.function
        def run():
            return tf.matmul(x, y)[0, 0]

    return lambda: run().numpy()


def measure(dtype: str, size: int, repeats: int, warmup: int) -> tuple[float, common.Timing]:
    """(G(FL)OP/s at the median, Timing) of one dtype."""
    timing = common.time_repeats(matmul_fn(dtype, size), repeats, warmup)
    return common.matmul_flops(size, size, size) / timing.median / 1e9, timing


def ceilings(
    threads: int,
    size: int = 4096,
    repeats: int = common.MIN_REPEATS,
    warmup: int = 2,
    dtypes=DTYPES,
) -> dict[str, dict]:
    """{dtype: {"gflops", "gflops_min", "gflops_max", "ms", "size"}}; sets TensorFlow's
    threads first (so call it before any other TensorFlow op of the process)."""
    common.tensorflow_threads(threads)
    out = {}
    for dtype in dtypes:
        try:
            rate, t = measure(dtype, size, repeats, warmup)
        except Exception as e:  # e.g. no oneDNN int8 kernel in this TensorFlow build
            out[dtype] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
            continue
        work = common.matmul_flops(size, size, size) / 1e9
        out[dtype] = {
            "gflops": rate,
            "gflops_min": work / t.max,
            "gflops_max": work / t.min,
            "ms": t.median * 1000,
            "ms_spread": t.spread(1000),
            "size": size,
            "repeats": t.n,
        }
    return out


def render(results: dict[str, dict]) -> str:
    rows = []
    for dtype, r in results.items():
        unit = "GOP/s" if dtype == "int8" else "GFLOP/s"
        if "error" in r:
            rows.append([dtype, r.get("size"), "failed: " + r["error"]])
            continue
        rows.append(
            [
                dtype,
                f"{r['size']}^3",
                f"{r['ms']:.1f}",
                r["ms_spread"],
                f"{common.fmt(r['gflops'])} {unit}",
                f"{common.fmt(r['gflops_min'])}-{common.fmt(r['gflops_max'])}",
            ]
        )
    text = common.table(
        ["dtype", "M=N=K", "ms (median)", "ms min-max", "throughput", "throughput range"], rows
    )
    fp32 = results.get("float32", {}).get("gflops")
    extra = [
        f"{d}: {results[d]['gflops'] / fp32:.2f}x fp32"
        for d in ("bfloat16", "int8")
        if fp32 and results.get(d, {}).get("gflops")
    ]
    return (
        text + "\n\nThroughput = 2 * M * N * K / median seconds (int8: GOP/s, "
        "QuantizedMatMulWithBias uint8 x int8 -> int32). " + "; ".join(extra)
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/ceiling.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--size", type=int, default=None, help="M = N = K (default 4096; --quick 256)"
    )
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    parser.add_argument("--json", default=None, help="also write the figures here (JSON)")
    args = common.parse(parser, argv)
    size = args.size or (256 if args.quick else 4096)
    results = ceilings(args.threads, size, args.repeats, args.warmup, args.dtypes)
    common.publish(args, "Ceiling: matrix multiply through TensorFlow (oneDNN)", render(results))
    if args.json:
        from model.io.files import write_json

        write_json(args.json, {"threads": args.threads, **results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
