"""Runs every benchmark, one after the other, into one results file.

    PYTHONPATH=. python bench/run_all.py            # -> bench/results/<YYYY-MM-DD>-<machine>.md
    PYTHONPATH=. python bench/run_all.py --quick    # smoke test of every script, /tmp/bench-quick/
    PYTHONPATH=. python bench/run_all.py --only ceiling tokenization --threads 2

Run it with the bench venv's Python (bench/README.md) on an otherwise idle machine: other jobs
on the CPU slow every figure down (each section records the load average).

Order: ceiling (its fp32 and bf16 figures are passed on with --ceiling-gflops /
--ceiling-bf16-gflops, so every script of the run is compared with the same ceiling), encoder
inference, where the encoder's time goes (encoder_breakdown), tokenization, pre-training
step, fine-tuning throughput, scaling, and the app's
end-to-end latency (bench/app_latency.py, only when --models holds bundles or model
directories; its printed table becomes a section of the same file). Each script runs in a
fresh process (`--threads`, `--quick` and `--results` passed through); one that fails does
not stop the others, and the file ends with a summary of what ran and how long it took.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import common

SCRIPTS = (
    "ceiling",
    "encoder_inference",
    "encoder_breakdown",
    "tokenization",
    "pretrain_step",
    "finetune_throughput",
    "scaling",
    "app_latency",
)
DEFAULT_MODELS = os.path.join(common.REPO_ROOT, "assets", "models")


def has_models(directory: str) -> bool:
    """Whether `directory` has a sub-folder the app would load (bundle.json or config.json)."""
    if not os.path.isdir(directory):
        return False
    return any(
        os.path.isfile(os.path.join(directory, d, name))
        for d in os.listdir(directory)
        for name in ("bundle.json", "config.json")
    )


def run(argv: list[str], capture: bool = False) -> tuple[int, float, str]:
    """(exit status, seconds, captured stdout) of one script in a fresh process."""
    env = dict(os.environ, PYTHONPATH=common.REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    start = time.time()
    print(f"\n$ {' '.join(argv)}", file=sys.stderr, flush=True)
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=common.REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE if capture else None,
        text=True,
    )
    return done.returncode, time.time() - start, done.stdout or ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/run_all.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--only", nargs="+", choices=SCRIPTS, default=None)
    parser.add_argument("--skip", nargs="+", choices=SCRIPTS, default=[])
    parser.add_argument(
        "--models",
        default=DEFAULT_MODELS,
        help="the app's models for app_latency.py (default assets/models)",
    )
    args = common.parse(parser, argv)
    if args.no_write:
        parser.error("run_all exists to write the results file; run a script alone to print")
    chosen = [s for s in (args.only or SCRIPTS) if s not in args.skip]
    common_flags = ["--threads", str(args.threads), "--results", args.results]
    if args.quick:
        common_flags.append("--quick")
    # --repeats/--warmup only when given: each script has its own defaults (e.g. warm-up steps)
    given = sys.argv[1:] if argv is None else argv
    for flag, value in (("--repeats", args.repeats), ("--warmup", args.warmup)):
        if any(a == flag or a.startswith(flag + "=") for a in given):
            common_flags += [flag, str(value)]

    bench = os.path.relpath(common.BENCH_DIR, common.REPO_ROOT)
    summary, ceilings = [], {}  # {flag: GFLOP/s} from the ceiling run
    with tempfile.TemporaryDirectory(prefix="bench-run-all-") as tmp:
        for name in chosen:
            if name == "app_latency":
                if not has_models(args.models):
                    summary.append([name, "skipped", f"no bundles or models in {args.models}"])
                    continue
                flags = ["--models", args.models, "--backend", "litert"]
                if args.quick:
                    flags += ["--requests", "5", "--warmup", "1"]
                status, seconds, out = run(
                    [os.path.join(bench, "app_latency.py"), *flags], capture=True
                )
                print(out)
                if status == 0:
                    common.append_section(
                        args.results,
                        "End-to-end app latency",
                        f"`python {bench}/app_latency.py {' '.join(flags)}`\n\n{out}",
                    )
                summary.append(
                    [name, "ok" if status == 0 else f"exit {status}", f"{seconds:.0f} s"]
                )
                continue
            flags = list(common_flags)
            if name == "ceiling":
                ceiling_json = os.path.join(tmp, "ceiling.json")
                flags += ["--json", ceiling_json]
            elif (
                name in ("encoder_inference", "encoder_breakdown")
                and "--ceiling-gflops" in ceilings
            ):
                flags += ["--ceiling-gflops", ceilings["--ceiling-gflops"]]
            elif name == "pretrain_step":
                flags += [item for pair in ceilings.items() for item in pair]
            status, seconds, _ = run([os.path.join(bench, f"{name}.py"), *flags])
            summary.append([name, "ok" if status == 0 else f"exit {status}", f"{seconds:.0f} s"])
            if name == "ceiling" and status == 0:
                with open(ceiling_json, encoding="utf-8") as f:
                    figures = json.load(f)
                for dtype, flag in (
                    ("float32", "--ceiling-gflops"),
                    ("bfloat16", "--ceiling-bf16-gflops"),
                ):
                    if figures.get(dtype, {}).get("gflops"):
                        ceilings[flag] = f"{figures[dtype]['gflops']:.1f}"
    common.append_section(
        args.results,
        "Run summary",
        f"`{common.command()}`\n\n" + common.table(["script", "status", "wall time"], summary),
    )
    print("\n" + common.table(["script", "status", "wall time"], summary))
    print(f"\nresults: {args.results}")
    return 0 if all(row[1] in ("ok", "skipped") for row in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
