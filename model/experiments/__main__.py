"""Rerun a table of the BERT, RoBERTa, SpanBERT or ELECTRA papers at the scale your hardware allows.

    python -m model.experiments pretraining-tasks --scale cpu --work runs/experiments
    python -m model.experiments beyond-bert --scale paper --work runs/experiments --dry-run

TABLE: pretraining-tasks (BERT Table 5), model-size (Table 6), training-steps
(Figure 5), feature-based (Table 7), masking (Table 8), beyond-bert (RoBERTa,
SpanBERT and ELECTRA against BERT at equal pre-training time).

Scales: smoke (tiny models, a few steps: a table end to end in a few minutes on
2 cores, about two with --in-process; it checks the commands, its numbers say
nothing; run by the test suite), cpu (a 2-core CPU, a few hours a table: `mini`
models, ~21 min of pre-training each, fine-tuning slices, 3 seeds), gpu (one
GPU, TensorFlow-free: a minute of pre-training a model, whole training sets; a
call of 8 minutes runs a part of a table), paper (the papers' sizes and steps; --dry-run here).

The experiment is a list of `python -m model.*` commands, printed with
--dry-run. Each is skipped when its output exists, so the same command line
started again after a stop goes on where it was (and the training commands
resume from their checkpoints); one pre-training run serves every table that
needs it. Where the scale gives each pre-training a wall-clock budget, its steps
come from the scale's measured step time on this device or, where there is none,
from a short calibration run of the same command. The end is
DIR/TABLE.md: the measured table (median and range over the seeds) beside the
paper's figures, whether each effect exceeded the seed spread, the hardware,
the commands and their wall times.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from model.experiments.scales import SCALES
from model.experiments.tables import TABLES


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m model.experiments",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("table", choices=sorted(TABLES))
    p.add_argument("--scale", choices=list(SCALES), required=True)
    p.add_argument("--work", help="directory for every run and the report")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.add_argument(
        "--device",
        metavar="KIND",
        help="with --dry-run: plan as on this accelerator (its JAX device kind, e.g. "
        "'NVIDIA H200'), whose stored step times spare its budgeted runs their calibration; "
        "a real run reads the device it is on",
    )
    p.add_argument(
        "--prepare",
        metavar="DIR",
        help="write everything the table reads (corpora as WordPiece ids, the tasks' files) "
        "to DIR and stop; then run it with --data DIR on any machine (model/experiments/"
        "prepare.py)",
    )
    p.add_argument(
        "--runs",
        help="only these pre-training runs and what is measured from them (names as "
        "--dry-run prints them, comma-separated): a table in parts",
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="write WORK/TABLE.md from the results already in WORK, run nothing (a table "
        "run in parts on other machines, their results unpacked into one WORK)",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        metavar="SECONDS",
        help="start no command after this many seconds; the report shows what finished, "
        "the exit status is 75, and the same command line goes on from there",
    )
    p.add_argument(
        "--data", default="../shared/data", help="the data directory (default: %(default)s)"
    )
    p.add_argument(
        "--in-process",
        action="store_true",
        help="run every command in this process (tiny scales: no start-up per command)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="run up to N fine-tunings, feature taggers and masked-LM scores at once, as "
        "child processes (their output in WORK/logs); pre-training and records still run "
        "alone, so that a budget's steps are timed alone. For an accelerator that one "
        "small model leaves idle; each JAX process then takes 0.9/(N+1) of its memory "
        "(XLA_PYTHON_CLIENT_MEM_FRACTION, unless set) (default: %(default)s)",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="let every command show TensorFlow's C++ start-up log lines",
    )
    p.add_argument(
        "--vocab", default=None, help="vocab.txt of the records (default: bert-base-uncased's)"
    )
    args = p.parse_args(argv)
    if not (args.work or args.prepare):
        p.error("--work is required (or --prepare DIR)")
    if args.prepare and (args.dry_run or args.report):
        p.error("--prepare writes its directory: not with --dry-run or --report")
    if args.jobs < 1:
        p.error(f"--jobs must be at least 1, got {args.jobs}")
    return args


def main(argv=None) -> int:
    from model.experiments.experiment import select_runs, steps
    from model.experiments.plan import Work
    from model.experiments.prepare import prepared_work
    from model.io.files import check_writable_dir
    from model.recipes.runner import STOPPED, run

    args = parse_args(argv)
    share_the_accelerator(args.jobs)
    if args.verbose:
        # The commands show TensorFlow's start-up lines when the user set this themselves.
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
    scale = SCALES[args.scale]
    work = Work(args.work or "", args.data, scale, **({"vocab": args.vocab} if args.vocab else {}))
    table = TABLES[args.table](work)
    if args.prepare:
        return prepare_input(table, work, args.prepare)
    try:
        work = prepared_work(table, _on_device(args, work))
        table = TABLES[args.table](work)
        plan = select_runs(steps(table, work), args.runs)
        _refuse(args, table, work, plan)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.dry_run:
        check_writable_dir(work.work)  # a file, or unwritable: one line, before anything runs
    if not (args.dry_run or args.report):
        warn_without_accelerator(scale, work.device)
        _set_up(work)
    print(f"# {table.title}, scale {scale.name}, work {args.work}")
    rc = 0
    if not args.report:
        rc = run(
            plan,
            dry_run=args.dry_run,
            timings=work.in_work("timings.json"),
            in_process=args.in_process,
            time_limit=args.time_limit,
            jobs=args.jobs,
            log_dir=work.in_work("logs"),
        )
    if (rc != 0 and rc != STOPPED) or args.dry_run:
        return rc
    return _write_report(table, work, plan, args.report) or rc


def _on_device(args, work):
    """`work` with the device its budgeted runs are timed for (--device, else this machine's
    accelerator); ValueError for --device without --dry-run. Warns when no step time of the
    scale is stored for --device."""
    from model.experiments.report import accelerators

    scale = work.scale
    if args.device and not args.dry_run:
        raise ValueError("--device is a flag of --dry-run (a run reads its own device)")
    known = sorted({device for device, _, _ in scale.step_seconds})
    if args.device and args.device not in known:
        print(
            f"warning: --device {args.device!r}: no step time of --scale {scale.name} is stored "
            f"for it (stored: {', '.join(known) or 'none'}), so the plan calibrates every "
            f"budgeted run",
            file=sys.stderr,
        )
    if not (args.dry_run or args.report) or args.device:
        # A budgeted run takes its steps from the scale's measured step time on this device.
        return dataclasses.replace(work, device=args.device or next(iter(accelerators()), None))
    return work


def _refuse(args, table, work, plan) -> None:
    """ValueError (FileNotFoundError for a missing input) for what cannot run as asked:
    a cluster scale run here, a report without a work directory, inputs missing or
    untokenisable here (checked before the work directory is made)."""
    from model.experiments.prepare import check_inputs, check_tokenising

    scale = work.scale
    if not (args.dry_run or args.report) and not scale.executable:
        raise ValueError(
            f"--scale {scale.name} is for clusters of GPUs or TPUs; print its commands "
            f"with --dry-run"
        )
    if args.report and not os.path.isdir(work.work):
        raise ValueError(f"--work {work.work}: not a work directory (nothing to report)")
    if not (args.dry_run or args.report):
        check_inputs(table, work)
        check_tokenising(plan, work, table)


def _write_report(table, work, plan, only_report: bool) -> int:
    """Writes WORK/TABLE.md from the results there: 0; for --report (`only_report`) with no
    result at this scale, 1 and the report left as it was."""
    from model.experiments.experiment import results
    from model.experiments.report import write

    report = work.in_work(f"{table.name}.md")
    if only_report and not any(v for row in results(table, work).values() for v in row.values()):
        print(
            f"error: no result of {table.name} at --scale {work.scale.name} in {work.work}: "
            f"nothing to report (another --work or --scale?); {report} is left as it was",
            file=sys.stderr,
        )
        return 1
    write(table, work, [c for step in plan for c in step.commands], report)
    print(f"wrote {report}")
    return 0


def warn_without_accelerator(scale, device: str | None) -> None:
    """One line when a scale sized for a GPU runs without one (CPU, or not KERAS_BACKEND=jax):
    its wall-clock budgets then buy a small fraction of the steps its results assume."""
    if scale.accelerator and device is None:
        print(
            f"warning: --scale {scale.name} is sized for one GPU (KERAS_BACKEND=jax), and this "
            f"run sees none: each budget buys far fewer steps here, another experiment than "
            f"docs/experiments.md reports (--scale cpu is sized for this machine)",
            file=sys.stderr,
        )


def _set_up(work) -> None:
    """The work folder of a run: the configs its commands read (kept when there), and
    the hardware it runs on, recorded for the report."""
    from model.experiments.report import record_hardware
    from model.io.files import write_json

    for path, fields in work.config_files().items():
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_json(path, fields)
    os.makedirs(work.work, exist_ok=True)
    record_hardware(work)


def share_the_accelerator(jobs: int) -> None:
    """With `--jobs` above 1, each JAX process (this one, which pre-trains, and its children)
    takes an equal share of the accelerator's memory instead of JAX's default 75 % each, unless
    the user set JAX's memory settings themselves. Before JAX starts: its children inherit it."""
    memory = ("XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_PREALLOCATE")
    if jobs > 1 and not any(name in os.environ for name in memory):
        os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{0.9 / (jobs + 1):.2f}"


def prepare_input(table, work, out) -> int:
    from model.experiments.prepare import check_inputs, prepare
    from model.io.files import check_writable_dir

    try:
        check_inputs(table, work)  # before DIR is made
        check_writable_dir(out)
        manifest = prepare(table, work, out)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(
        f"prepared {out} ({manifest['megabytes']} MB) for {', '.join(manifest['tables'])} at "
        f"--scale {manifest['scale']}: run with --data {out}"
    )
    return 0


if __name__ == "__main__":
    from model.io.files import exit_with

    exit_with(main())
