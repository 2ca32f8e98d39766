"""Throughput and loss curve of `mini` pre-training under each precision, with and without XLA.

    PYTHONPATH=. python bench/precision_and_xla.py --data data/wiki_gut_128 \\
        --steps 300 --batch-size 32 --every 50

Runs `python -m model.train pretrain` once per combination of
`--mixed-precision` (float32, mixed_bfloat16, mixed_float16) and `--jit`
(off, on), each in a fresh process on the same data, seed and schedule, and
prints a markdown table for docs/performance.md's precision section: steps/s and
tokens/s (steps after the first, so tracing and XLA compilation are left
out; padding counts as tokens) and the mean training loss of each interval of
`--every` steps. All runs see the same batches and masks; the loss columns
differ by numerics (and, with XLA, possibly by dropout's random draws).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")


def run(args, precision: str, jit: bool, output: str) -> dict:
    """One training run; its train_summary.json plus the wall time of the process."""
    argv = [
        sys.executable,
        "-m",
        "model.train",
        "pretrain",
        "--config",
        args.config,
        "--data",
        args.data,
        "--output",
        output,
        "--steps",
        str(args.steps),
        "--batch-size",
        str(args.batch_size),
        "--checkpoint-every",
        str(args.every),
        "--keep-checkpoints",
        "1",
        "--log-every",
        str(10**9),
        "--learning-rate",
        str(args.learning_rate),
        "--strategy",
        args.strategy,
        "--mixed-precision",
        precision,
        *(["--jit"] if jit else []),
    ]
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    start = time.time()
    done = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    with open(os.path.join(output, "train_summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    summary["wall_seconds"] = time.time() - start
    return summary


def table(args, results) -> str:
    marks = [min((i + 1) * args.every, args.steps) for i in range(-(-args.steps // args.every))]
    head = ["precision", "jit", "steps/s", "tokens/s", "process s"] + [f"loss @{m}" for m in marks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (precision, jit), r in results:
        if "error" in r:
            lines.append(f"| {precision} | {'on' if jit else 'off'} | failed: {r['error']} |")
            continue
        steps_per_s = r["steps_this_run"] / r["seconds_this_run"] if r["seconds_this_run"] else 0
        losses = [f"{v:.3f}" for v in r["interval_losses"]]
        lines.append(
            "| "
            + " | ".join(
                [
                    precision,
                    "on" if jit else "off",
                    f"{steps_per_s:.2f}",
                    f"{r['tokens_per_second'] or 0:.0f}",
                    f"{r['wall_seconds']:.0f}",
                    *losses,
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", required=True, help="pre-training records (seq 128 for the README)")
    p.add_argument("--config", default="mini")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--every", type=int, default=50, help="steps per loss column")
    p.add_argument("--learning-rate", type=float, default=3e-4)
    p.add_argument("--strategy", default="auto")
    p.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    p.add_argument("--jit", choices=("off", "on", "both"), default="both")
    p.add_argument("--output", default=None, help="keep the runs here (default: a temp dir)")
    args = p.parse_args(argv)

    jits = {"off": [False], "on": [True], "both": [False, True]}[args.jit]
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        root = args.output or tmp
        for precision in args.precisions:
            for jit in jits:
                output = os.path.join(root, f"{precision}{'-jit' if jit else ''}")
                results.append(((precision, jit), run(args, precision, jit, output)))
                print(table(args, results[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    print(
        f"`{args.config}`, batch {args.batch_size}, {args.steps} steps, "
        f"strategy {args.strategy}; loss @N: mean training loss of steps "
        f"N-{args.every}+1..N\n"
    )
    print(table(args, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
