"""WORK/TABLE.md: the measured table beside the paper's, what it can show, and how it was made.

Each cell is the median over the fine-tuning seeds with its range (min-max) and
the number of seeds (a seed without a score is left out). An effect is shown only when it
exceeds both the seed spread (the two rows' ranges do not overlap) and the dev set's
sampling error (the 95 % interval of the difference of the medians, a paired bootstrap
over the runs' dev units, does not hold 0: `sampling_error`, `model/experiments/bootstrap.py`);
a pre-trained row "beats its floor" (the random encoder; the random causal one for a
left-to-right row) only on the same terms, and the paper's comparisons are judged
only between rows that beat their floors. One pre-training seed per row: its
variance is not measured. Nothing is rounded into a win.

A table whose rows are checkpoints of runs (`training-steps`) also gets a
"pre-training steps" column and WORK/TABLE.png: each fine-tuning column's median
with its min-max band against the steps, one line per run (matplotlib's Agg
backend, imported only here and only then).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import platform
import statistics

from model.experiments import bootstrap
from model.experiments.experiment import results, seed_dirs
from model.experiments.plan import Work
from model.experiments.tables import Table
from model.recipes.runner import read_json, time_of
from model.tasks import dev_units
from model.training import layout

HOW_TO_READ = (
    "How to read the lines below: an effect is *shown* only when the two rows' seed ranges do "
    "not overlap and the dev set's sampling error cannot explain it. The sampling error is a "
    "95 % interval of the difference itself (the row's median minus the other's): a paired "
    "bootstrap redraws the dev examples (CoNLL-2003's documents whole, where a dev file has 30 "
    "or more) and scores both rows on the same draws; an interval that does not hold 0 is "
    "beyond the sampling error. Runs that wrote no per-example scores, or were scored on "
    "different dev sets, get the unpaired binomial bound instead. A row that does not "
    "beat its floor (the random encoder) on these terms makes no claim; see "
    'docs/experiments.md, "How a report judges an effect".'
)


def cell(values: list[float], lower_is_better: bool = False) -> str:
    if not values:
        return "—"
    median = statistics.median(values)
    if len(values) == 1:
        return f"{median:.2f} (n=1)"
    return f"{median:.2f} [{min(values):.2f}–{max(values):.2f}] (n={len(values)})"


def separated(a: list[float], b: list[float]) -> bool:
    """Whether every value of `a` is above every value of `b` (needs 2+ seeds each)."""
    return len(a) >= 2 and len(b) >= 2 and min(a) > max(b)


def floor_of(row, floors):
    """The floor a row is read against: the causal one for a left-to-right row, where the
    table has one (left-only context hurts token tasks even untrained), else the first."""
    causal = row.run.objective == "ltr"
    same = [f for f in floors if (f.run.objective == "ltr") == causal]
    return (same or floors or [None])[0]


def hardware() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if names:
            cpu = names[0]
    except OSError:
        pass
    from model.io.backend import keras_backend
    from model.io.cpus import usable_cpus

    return (
        f"{accelerator()}{cpu}, {usable_cpus()} logical CPUs, {platform.system()}, "
        f"Keras backend {keras_backend()}"
    )


def record_hardware(work: Work) -> None:
    """Adds this machine to WORK/hardware.json, the machines the table's commands ran on
    (parts of a table may run on several)."""
    from model.io.files import write_json

    path = work.in_work("hardware.json")
    machines = read_json(path).get("machines", [])
    if hardware() not in machines:
        write_json(path, {"machines": [*machines, hardware()]})


def hardware_text(work: Work) -> str:
    """The machines WORK's commands ran on (WORK/hardware.json), never guessed from this one."""
    machines = read_json(work.in_work("hardware.json")).get("machines")
    return "; ".join(machines) if machines else "not recorded (no command has run in WORK)"


def accelerators() -> list[str]:
    """The device kinds of the JAX backend's accelerators ("NVIDIA H200"), where the commands
    run; [] on a CPU or under another backend."""
    if os.environ.get("KERAS_BACKEND") != "jax":
        return []
    import jax

    return [d.device_kind for d in jax.devices() if d.platform != "cpu"]


def accelerator() -> str:
    """ "N x DEVICE KIND, " of the JAX backend's accelerators, or ""."""
    devices = accelerators()
    return f"{len(devices)} x {devices[0]}, " if devices else ""


def write(table: Table, work: Work, commands: list, path: str) -> list[str]:
    """Writes the markdown report to `path`; returns its lines."""
    from model.io.files import atomic_path

    measured = results(table, work)
    lower = {c.name for c in table.columns if c.kind == "mlm"}  # perplexity: lower is better
    lines = [f"# {table.title}", ""]
    lines += [
        f"Scale `{work.scale.name}`: `{work.scale.size}` models, {work.scale.budget_text()}, "
        f"batch {work.scale.batch_size} x {work.scale.seq_len} tokens, fine-tuning seeds "
        f"{', '.join(map(str, work.scale.seeds))}. Hardware: {hardware_text(work)}.",
        "",
        "Cells: median over the fine-tuning seeds [min–max] (n seeds); percent (entity F1, "
        "accuracy, F1), perplexity for masked-LM columns. One pre-training seed per row: its "
        "variance is not measured.",
        "",
    ]
    lines += results_table(table, work, measured)
    lines += ["", "## What this scale can show", ""]
    lines += [work.scale.note, ""] if work.scale.note else []
    lines += [HOW_TO_READ, ""]
    lines += budgets(table, work)
    lines += baselines(table, work, measured)
    lines += judgements(table, work, measured, lower)
    if table.note:
        lines += ["", table.note]
    if any(r.checkpoint is not None for r in table.rows):
        lines += curves_lines(table, work, measured, os.path.splitext(path)[0] + ".png")
    if table.not_built:
        lines += ["", "Not run here:", ""] + [f"- {item}" for item in table.not_built]
    lines += command_lines(work, commands)
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return lines


def results_table(table: Table, work: Work, measured: dict) -> list[str]:
    """The markdown table: a line per row, its cells and the paper's; with the pre-training
    steps of each row's checkpoint where the table is a curve."""
    curves = any(r.checkpoint is not None for r in table.rows)
    header = ["row", *(["pre-training steps"] if curves else []), *[c.name for c in table.columns]]
    header += [f"paper: {c}" for c in table.paper_columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table.rows:
        cells = [row.label]
        if curves:
            step = (
                work.checkpoint_step(row.run, row.checkpoint)
                if row.checkpoint is not None
                else None
            )
            cells.append(f"{step:,}" if step is not None else "—")
        cells += [cell(measured[row.label][c.name]) for c in table.columns]
        cells += [str(row.paper.get(c, "—")) for c in table.paper_columns]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def curves_lines(table: Table, work: Work, measured: dict, image: str) -> list[str]:
    """The plot of a table of curves (drawn to `image`), or why there is none."""
    if importlib.util.find_spec("matplotlib") is None:  # a GPU machine's JAX environment
        lines = [
            "",
            "No plot drawn: matplotlib is not installed where this report was "
            "written (`--report` where it is draws one).",
        ]
        if os.path.isfile(image):
            lines += [
                "An earlier drawing (rows measured after it are not in it): "
                f"![{table.title}]({os.path.basename(image)})"
            ]
        return lines
    if plot(table, work, measured, image):
        return ["", f"The curves: ![{table.title}]({os.path.basename(image)})"]
    return []


def command_lines(work: Work, commands: list) -> list[str]:
    """The commands that made the table (`runner.Command`s), each with its wall time; where a
    result was made by another command than this version's plan (an earlier version's, with
    other flags), the command that made it, as it recorded itself."""
    deferred = any("<" in command.shell() for command in commands)
    lines = [
        "",
        "## Commands",
        "",
        "Wall times as measured on the hardware above (with `--jobs`, fine-tunings ran "
        "several at a time and their times overlap)."
        + (
            " An argument in `<...>` was computed when its command ran (a budget's steps, from "
            "the calibration or the scale's step time): the steps each pre-training took are "
            "in the lines above."
            if deferred
            else ""
        ),
        "",
    ]
    for command in commands:
        seconds = time_of(work.in_work("timings.json"), command.output)
        took = f"  # {seconds / 60:.1f} min" if seconds is not None else ""
        other = command.ran_otherwise()
        if other:  # what made the result, not what this version would run
            lines.append(f"    # made by another command than this plan's: {'; '.join(other[1])}")
        lines.append(f"    {other[0] if other else command.shell()}{took}")
    return lines


# A budgeted run whose steps took under this share of the budget (or over its inverse) is
# not at the others' budget: a calibration run misjudged its step.
BUDGET_TOLERANCE = 0.9


def budgets(table: Table, work: Work) -> list[str]:
    """With a time budget: a line per finished pre-training of the table, its steps and the
    seconds they took (`seconds_in_steps`), flagged where that is not the budget (the rows
    then compare different amounts of pre-training, not the objectives alone)."""
    budget = work.scale.budget_seconds
    if not budget:
        return []
    lines, seen = [], set()
    for row in table.rows:
        p = row.run
        if p.random or p in seen:
            continue
        seen.add(p)
        summary = read_json(os.path.join(work.run_dir(p), layout.SUMMARY))
        steps, seconds = summary.get("steps"), summary.get("seconds_in_steps")
        timed = summary.get("steps_this_run")
        if not isinstance(steps, int) or not seconds or not timed:
            continue
        spent = seconds * steps / timed  # the steps after the first call are timed
        line = f"- pre-training {work.run_name(p)}: {steps:,} steps, {spent:.1f} s of steps"
        if not BUDGET_TOLERANCE <= spent / budget <= 1 / BUDGET_TOLERANCE:
            line += (
                f", **{spent / budget:.0%} of the {budget:.0f} s budget**: not at the "
                "others' budget (its step time was misjudged); compare its row with care"
            )
        lines.append(line + ".")
    return lines


def baselines(table: Table, work: Work, measured: dict) -> list[str]:
    """A line per classification column: the dev score of answering the training set's most
    frequent label, and the rows whose every seed scores no more (they learned nothing from
    the text). No line for a task without classes, or whose files are not in `--data`."""
    from model import tasks

    lines = []
    for column in table.columns:
        if column.kind != "finetune":
            continue
        task, spec = tasks.get(column.arg), work.scale.tasks[column.arg]
        if not hasattr(task, "majority_metrics"):
            continue
        majority = {}  # by dev set: MNLI's metrics are "matched_accuracy", ...
        try:
            train = task.read(task.files(work.in_data(spec.data))[0])
            for prefix, dev in task.dev_files(work.in_data(spec.data)).items():
                metrics = task.majority_metrics(train, task.read(dev)) or {}
                majority.update({prefix + k: v for k, v in metrics.items()})
        except (OSError, ValueError):
            continue
        score = spec.dev_percent({"dev": majority})
        if score is None:
            continue
        line = f"- {column.name}: the majority class (the training set's most frequent label "
        line += f"for every dev example) scores {score:.2f}"
        scores = {r.label: measured[r.label][column.name] for r in table.rows}
        empty = [label for label, v in scores.items() if v and max(v) <= score + 0.005]
        if empty:
            line += f"; no better: {', '.join(empty)} (nothing learned from the text)"
        lines.append(line + ".")
    return lines


def judgements(table: Table, work: Work, measured: dict, lower: set) -> list[str]:
    """A line per (row, floor) and per comparison of the paper, for every column: an effect is
    shown only when it exceeds both the seed spread and the dev set's sampling error, and a
    comparison is judged only between rows that beat their floors."""
    lines = []
    floors = [r for r in table.rows if r.floor]
    rows = {r.label: r for r in table.rows}
    below = {}  # (row, column) -> why it is not judged: not clearly above its floor, or the
    # floor not measured yet (a table built in parts)
    for column in table.columns:
        for row in table.rows:
            floor = floor_of(row, floors)
            if row.floor or floor is None:
                continue
            mine, base = measured[row.label][column.name], measured[floor.label][column.name]
            if not base:
                below[(row.label, column.name)] = f"is read against {floor.label}, not measured yet"
            if not (mine and base):
                continue
            noise = sampling_error(work, row, floor, column, mine, base)
            verdict = effect(mine, base, noise, column.name in lower)
            if not verdict.shown:
                below[(row.label, column.name)] = verdict.why_not
            said = "beats" if verdict.shown else "does NOT clearly beat"
            lines.append(
                f"- {column.name}: {row.label} {said} its floor, {floor.label} "
                f"({cell(mine)} against {cell(base)}: {verdict.text})."
            )
    for comparison in table.comparisons:
        for column in table.columns:
            a = measured.get(comparison.better, {}).get(column.name, [])
            b = measured.get(comparison.worse, {}).get(column.name, [])
            if not (a and b):
                continue
            weak = [r for r in (comparison.better, comparison.worse) if (r, column.name) in below]
            if weak:
                whys = [below[(r, column.name)] for r in weak]
                which = "; ".join(f"{r} {why}" for r, why in zip(weak, whys))
                if whys == [NOT_ABOVE_FLOOR] * 2:
                    which = "neither clearly beats its floor"
                if NOT_ABOVE_FLOOR in whys:
                    which += " (budget too small)"
                lines.append(
                    f"- {column.name}: {comparison.better} against {comparison.worse} is not "
                    f"judged: {which}."
                )
                continue
            better, worse = rows[comparison.better], rows[comparison.worse]
            noise = sampling_error(work, better, worse, column, a, b)
            verdict = effect(a, b, noise, column.name in lower)
            lines.append(
                f"- {column.name}: {comparison.better} over {comparison.worse} {verdict.text} "
                f"(the paper: {comparison.paper_says})."
            )
    return lines


NOT_ABOVE_FLOOR = "does not clearly beat its floor"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What `effect` found: its words for the report, whether the effect is shown, and if
    not, why (for a row against its floor)."""

    text: str
    shown: bool = False
    why_not: str = NOT_ABOVE_FLOOR


def effect(
    a: list[float], b: list[float], noise: bootstrap.Interval | None, lower: bool
) -> Verdict:
    """Whether `a` is better than `b` beyond the seed spread (the ranges do not overlap) and
    beyond the sampling error (`noise`: the interval of median(a) - median(b) it allows; None:
    not known, and then nothing is shown). A gap that prints as 0.00 is a tie."""
    if lower:  # perplexity: the difference the other way round
        a, b = [-v for v in a], [-v for v in b]
        if noise is not None:
            noise = dataclasses.replace(noise, low=-noise.high, high=-noise.low)
    gap = statistics.median(a) - statistics.median(b)
    said = f"{gap:+.2f}; sampling error: {noise}" if noise else f"{gap:+.2f}"
    if min(len(a), len(b)) < 2:  # no spread to exceed: never shown, whatever the gap
        if noise is not None:
            where = "within" if noise.holds_zero() else "beyond"
            said = f"{gap:+.2f}, {where} the sampling error: {noise}"
        return Verdict(
            f"one fine-tuning seed, so no seed spread to exceed: not shown ({said})",
            why_not="has one fine-tuning seed (no seed spread to judge it against its floor)",
        )
    if not (separated(a, b) or separated(b, a)):
        return Verdict(f"within the seed spread, a tie at this scale ({said})")
    if round(gap, 2) == 0:
        return Verdict(f"a tie at the precision printed ({said})")
    if noise is None:
        return Verdict(
            f"a gap of {gap:+.2f} beyond the seed spread, but the dev set's sampling error is "
            "not known (no per-example dev scores): not shown",
            why_not="has no known sampling error against its floor",
        )
    if noise.holds_zero() or (noise.low > 0) != (gap > 0):
        return Verdict(f"a gap beyond the seed spread but within the sampling error ({said})")
    if gap < 0:
        return Verdict(f"is reversed beyond the seed spread and the sampling error ({said})")
    return Verdict(f"exceeds the seed spread and the sampling error ({said})", shown=True)


def sampling_error(work: Work, row, other, column, a: list[float], b: list[float]):
    """The interval of median(a) - median(b) (`row`'s seeds' scores against `other`'s) that the
    dev set's sampling error allows (`model/experiments/bootstrap.py`): the paired bootstrap
    when every seed of both rows wrote its dev units, else the unpaired binomial bound from
    the dev set's size; None for a column without either (perplexity)."""
    if column.kind not in ("finetune", "features"):
        return None
    mine, theirs = seed_dirs(row, column, work), seed_dirs(other, column, work)
    task = mine[0][1]
    units = [[dev_units.read(path) for path, _ in dirs] for dirs in (mine, theirs)]
    if all(u is not None for us in units for u in us):
        paired = bootstrap.paired(*units, task.metric, task.scale)
        if paired is not None:
            return paired
    sizes = [
        (read_json(os.path.join(path, "metrics.json")).get("dev_examples") or {}).get("")
        for path, _ in mine
    ]
    n = next((s for s in sizes if isinstance(s, int) and s > 0), None)
    return bootstrap.binomial(a, b, n, task.metric != "accuracy") if n else None


def curve_points(table: Table, work: Work, measured: dict, column) -> dict[str, list]:
    """{series: [(step, values over the seeds)] in step order} of `column`, for the rows that
    are checkpoints and have been measured."""
    curves: dict[str, list] = {}
    for row in table.rows:
        if row.checkpoint is None:
            continue
        step = work.checkpoint_step(row.run, row.checkpoint)
        values = measured[row.label][column.name]
        if step is not None and values:
            curves.setdefault(row.series or row.label, []).append((step, values))
    return {name: sorted(points) for name, points in curves.items()}


def plot(table: Table, work: Work, measured: dict, path: str) -> bool:
    """Writes `path` (PNG): each fine-tuning column's median [min-max] over the seeds against
    the pre-training steps, a line per series. False (nothing written) with no point yet."""
    columns = [c for c in table.columns if c.kind == "finetune"]
    curves = {c.name: curve_points(table, work, measured, c) for c in columns}
    if not any(curves.values()):
        return False
    # The Agg canvas directly: no pyplot, no global backend, nothing opened on a display.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    from model.io.files import atomic_path

    figure = Figure(figsize=(max(8.0, 6.4 * len(columns)), 4.8), layout="constrained")
    FigureCanvasAgg(figure)
    for i, column in enumerate(columns, 1):
        axes = figure.add_subplot(1, len(columns), i)
        for name, points in curves[column.name].items():
            steps = [step for step, _ in points]
            line = axes.plot(
                steps, [statistics.median(v) for _, v in points], marker="o", label=name
            )[0]
            axes.fill_between(
                steps,
                [min(v) for _, v in points],
                [max(v) for _, v in points],
                color=line.get_color(),
                alpha=0.2,
                linewidth=0,
            )
        metric = work.scale.tasks[column.arg].metric
        axes.set(
            xlabel="pre-training steps",
            ylabel=f"{column.name} dev {metric} (%)",
            title=f"{column.name}: median, band min–max over {len(work.scale.seeds)} seed(s)",
        )
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(alpha=0.3)
        axes.legend()
    figure.suptitle(f"{table.title}\nscale {work.scale.name}", fontsize="medium")
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=110)
    return True
