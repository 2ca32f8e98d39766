"""WORK/TABLE.md: the measured table beside the paper's, what it can show, and how it was made.

Each cell is the median over the fine-tuning seeds with its range (min-max) and
the number of seeds; an effect "exceeds the seed spread" only when the two
rows' ranges do not overlap, and a pre-trained row "beats the floor" only when
its range lies wholly above the random encoder's. Nothing is rounded into a win.

A table whose rows are checkpoints of runs (`training-steps`) also gets a
"pre-training steps" column and WORK/TABLE.png: each fine-tuning column's median
with its min-max band against the steps, one line per run (matplotlib's Agg
backend, imported only here and only then).
"""

from __future__ import annotations

import os
import platform
import statistics

from model.experiments.experiment import results
from model.experiments.plan import Work
from model.experiments.tables import Table
from model.recipes.runner import read_json


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


def hardware() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if names:
            cpu = names[0]
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()}"


def write(table: Table, work: Work, commands: list[str], path: str) -> list[str]:
    """Writes the markdown report to `path`; returns its lines."""
    from model.io.files import atomic_path

    measured = results(table, work)
    lower = {c.name for c in table.columns if c.kind == "mlm"}  # perplexity: lower is better
    lines = [f"# {table.title}", ""]
    lines += [
        f"Scale `{work.scale.name}`: `{work.scale.size}` models, {work.scale.budget_text()}, "
        f"batch {work.scale.batch_size} x {work.scale.seq_len} tokens, fine-tuning seeds "
        f"{', '.join(map(str, work.scale.seeds))}. Hardware: {hardware()}.",
        "",
        "Cells: median over the seeds [min–max] (n seeds); percent (entity F1, accuracy, "
        "F1), perplexity for masked-LM columns.",
        "",
    ]
    curves = any(r.checkpoint is not None for r in table.rows)
    header = ["row", *(["pre-training steps"] if curves else []), *[c.name for c in table.columns]]
    header += [f"paper: {c}" for c in table.paper_columns]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
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
    lines += ["", "## What this scale can show", ""]
    floors = [r for r in table.rows if r.floor]
    for floor in floors:
        for column in table.columns:
            base = measured[floor.label][column.name]
            for row in table.rows:
                if row.floor:
                    continue
                mine = measured[row.label][column.name]
                if column.name in lower:
                    beats = separated([-v for v in base], [-v for v in mine])
                else:
                    beats = separated(mine, base)
                if mine and base:
                    verdict = "beats" if beats else "does NOT clearly beat"
                    lines.append(
                        f"- {column.name}: {row.label} {verdict} the random floor "
                        f"({cell(mine)} against {cell(base)})."
                    )
    for comparison in table.comparisons:
        for column in table.columns:
            a = measured.get(comparison.better, {}).get(column.name, [])
            b = measured.get(comparison.worse, {}).get(column.name, [])
            if not (a and b):
                continue
            if column.name in lower:
                a, b = [-v for v in a], [-v for v in b]
            if separated(a, b):
                verdict = "exceeds the seed spread"
            elif separated(b, a):
                verdict = "is reversed, beyond the seed spread"
            else:
                verdict = "is within the seed spread (a tie at this scale)"
            lines.append(
                f"- {column.name}: {comparison.better} over {comparison.worse} {verdict} "
                f"(the paper: {comparison.paper_says})."
            )
    if table.note:
        lines += ["", table.note]
    if curves:
        image = os.path.splitext(path)[0] + ".png"
        if plot(table, work, measured, image):
            lines += ["", f"The curves: ![{table.title}]({os.path.basename(image)})"]
    if table.not_built:
        lines += ["", "Not run here:", ""] + [f"- {item}" for item in table.not_built]
    timings = read_json(work.w("timings.json"))
    lines += ["", "## Commands", "", "Wall times as measured on the hardware above.", ""]
    for command, output in commands:
        seconds = timings.get(output)
        took = f"  # {seconds / 60:.1f} min" if isinstance(seconds, (int, float)) else ""
        lines.append(f"    {command}{took}")
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return lines


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
