"""Does the device path learn as the host path does? Held-out masked-LM accuracy of both.

    PYTHONPATH=. python bench/device_path_learning.py --steps 400

`pretrain --device-data` cuts and masks its batches inside the compiled step, in another order
than the host pipeline (a PyDataset masked in numpy), so the two paths cannot be held equal step
for step beyond a few steps (tests/test_device_data.py does that for 6). This runs the same model
from the same records for the same steps on both paths, each with the same seeds (JAX backend,
same dropout, learning rate and schedule), scores every run with `python -m model.evaluate --task
mlm` on the same masked positions of WikiText-2 valid, and compares the paths' difference with
the seed spread within a path and the sampling error of a difference of two accuracies on those
positions (two standard errors of sqrt(2 p (1 - p) / n); both models are scored on the same
positions, so this bounds the paired error from above). The paths agree when the difference is
within the larger of the two; beyond both, the script exits 1.

Records are made once by `python -m model.data` from `--input` (the first ten Wikipedia shards)
unless `--records` names existing ones. `--quick` rehearses it in a minute (`tiny`, 6 steps);
not a measurement.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import common
from common import DATA_DIR, REPO_ROOT

PATHS = ("host", "device")
WIKI = os.path.join(DATA_DIR, "pretrain", "enwiki-2015", "AA", "wiki_0*.gz")
VALID = os.path.join(DATA_DIR, "wikitext-2-raw", "wiki.valid.raw")
VOCAB = os.path.join(REPO_ROOT, "tests", "fixtures", "bert-base-uncased-vocab.txt")


def module(args, name: str, argv: list[str]) -> str:
    """`python -m name argv` under the JAX backend (the runs, their scoring, the records);
    its stdout (the failure's tail raised)."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [args.python, "-m", name, *map(str, argv)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"python -m {name} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def make_records(args, root: str) -> str:
    if args.records:
        return args.records
    records = os.path.join(root, "records")
    if not os.path.isdir(records):
        argv = ["--input", args.input, "--vocab", VOCAB, "--output", records]
        argv += ["--seq-len", args.seq_len, "--num-shards", 4, "--seed", 12345]
        module(args, "model.data", argv)
    return records


def train_and_score(args, records: str, path: str, seed: int, root: str) -> dict:
    """One run on `path` ("host" or "device") and its held-out scores."""
    output = os.path.join(root, f"{path}-seed{seed}")
    argv = ["pretrain", "--config", args.config, "--data", records, "--output", output]
    argv += ["--steps", args.steps, "--batch-size", args.batch_size, "--seed", seed]
    argv += ["--learning-rate", args.learning_rate, "--warmup-steps", args.steps // 10]
    argv += ["--dropout", args.dropout, "--checkpoint-every", args.steps]
    if path == "device":
        argv += ["--device-data", "--steps-per-call", args.steps_per_call]
    start = time.time()
    module(args, "model.train", argv)
    wall = time.time() - start
    with open(os.path.join(output, "train_summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    out = module(args, "model.evaluate", ["--task", "mlm", "--model", output, "--data", VALID])
    scores = json.loads(out[out.index("{") :])
    step_s = summary["seconds_in_steps"] / max(summary["steps_this_run"], 1)
    return {"path": path, "seed": seed, "wall_s": wall, "step_s": step_s, **scores}


def verdict(runs: list[dict]) -> tuple[list[str], bool]:
    """The comparison's lines and whether the paths agree within the noise."""
    top1 = {p: [100 * r["mlm_top1_accuracy"] for r in runs if r["path"] == p] for p in PATHS}
    mean = {p: sum(v) / len(v) for p, v in top1.items()}
    spread = max(max(v) - min(v) for v in top1.values())
    p, n = sum(mean.values()) / 200, runs[0]["masked_positions"]
    sampling = 200 * math.sqrt(2 * p * (1 - p) / n)  # two standard errors, in points
    diff = mean["device"] - mean["host"]
    agree = abs(diff) <= max(spread, sampling)
    lines = [
        f"- top-1 mean: host {mean['host']:.2f} %, device {mean['device']:.2f} % "
        f"(device - host {diff:+.2f} points)",
        f"- seed spread within a path (largest range): {spread:.2f} points; sampling error of a "
        f"difference on these {n:,} positions: +-{sampling:.2f} points (2 s.e.)",
        f"- the paths {'agree' if agree else 'DIFFER'}: the difference is "
        f"{'within' if agree else 'beyond'} the larger of the two",
    ]
    return lines, agree


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--input", default=WIKI, help="text for the records (a glob; default %(default)s)"
    )
    p.add_argument("--records", help="existing pre-training records (skip making them)")
    p.add_argument("--config", default="mini")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--learning-rate", type=float, default=5e-4)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--steps-per-call", type=int, default=20)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--python", default=sys.executable, help="interpreter of the runs")
    p.add_argument("--work", help="keep the records and runs here (default: a temp dir)")
    p.add_argument("--quick", action="store_true", help="rehearsal: tiny, 6 steps")
    p.add_argument("--results", default=None)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.config, args.steps, args.steps_per_call, args.seq_len = "tiny", 6, 3, 64
        args.input = WIKI.replace("wiki_0*", "wiki_00")
    if args.results is None:
        directory = common.QUICK_RESULTS_DIR if args.quick else common.RESULTS_DIR
        args.results = common.results_path(directory=directory)
    args.threads = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="bench-paths-") as tmp:
        root = args.work or tmp
        records = make_records(args, root)
        runs = []
        for seed in args.seeds:
            for path in PATHS:
                runs.append(train_and_score(args, records, path, seed, root))
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    rows = [
        [
            r["path"], r["seed"], f"{100 * r['mlm_top1_accuracy']:.2f}",
            f"{100 * r['mlm_top5_accuracy']:.2f}", f"{r['mlm_loss']:.3f}",
            f"{1000 * r['step_s']:.0f}", f"{r['wall_s']:.0f}",
        ]
        for r in runs
    ]  # fmt: skip
    heads = ["path", "seed", "top-1 %", "top-5 %", "MLM loss", "ms/step", "process s"]
    lines, agree = verdict(runs)
    body = (
        f"`{args.config}`, batch {args.batch_size} x {args.seq_len}, {args.steps} steps, "
        f"learning rate {args.learning_rate}, dropout {args.dropout}, JAX backend; the device "
        f"path {args.steps_per_call} steps a call. Held out: WikiText-2 valid, "
        f"{runs[0]['masked_positions']:,} masked positions, the same for every run.\n\n"
        + common.table(heads, rows)
        + "\n\n"
        + "\n".join(lines)
    )
    common.publish(args, "The device path learns as the host path does", body)
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
