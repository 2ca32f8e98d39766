"""A table's commands in order, and its measured values once they have run.

`steps(table, work)`: records for every input format the rows need, then per run
its pre-training (calibrated to the scale's budget) and what each column
measures from it for every row made from that run, for every seed. `results(table, work)`: {row: {column: [values
over the seeds that have finished]}}, read from the commands' own output files.
"""

from __future__ import annotations

from model.experiments.plan import Work
from model.experiments.scales import Task
from model.experiments.tables import Table
from model.recipes.runner import Step, read_json

# The feature-based tagger's metrics.json: seqeval's entity F1, a fraction.
FEATURE_TAGGER = Task("conll2003", "f1")


def steps(table: Table, work: Work) -> list[Step]:
    formats = []
    for row in table.rows:
        key = (row.run.inputs, row.run.static)
        if key not in formats:
            formats.append(key)

    plan = [
        Step(
            records_step(inputs, static),
            tuple(work.make_records(inputs, static)),
            summary=f"{inputs} records of the scale's corpora, and held-out ones",
        )
        for inputs, static in formats
    ]
    # One step per run: its pre-training, then every column of every row made from it
    # (a run's checkpoints and its BiLSTM fine-tuning are rows of their own).
    runs: dict[str, list] = {}
    for row in table.rows:
        runs.setdefault(work.run_name(row.run), []).append(row)
    for name, rows in runs.items():
        commands = list(work.pretrain(rows[0].run))
        for row in rows:
            for column in table.columns:
                commands += column_commands(column, row, work)
        run = rows[0].run
        # a static run's held-out records are its format's dynamic ones
        needs = (records_step(run.inputs, run.static),) + (
            (records_step(run.inputs),) if run.static else ()
        )
        summary = "; ".join(r.label for r in rows)
        plan.append(Step(name, tuple(commands), needs=needs, summary=summary))
    return plan


def records_step(inputs: str, static: bool = False) -> str:
    """The name of the step that makes the records of `inputs` (masked at creation: static)."""
    return f"records-{inputs}" + ("-static" if static else "")


def select_runs(plan: list[Step], runs: str | None) -> list[Step]:
    """The steps of the runs named in `runs` (comma-separated; None: all), and the records
    steps they read; ValueError naming the runs the plan has when one is not among them."""
    if runs is None:
        return plan
    wanted = [r.strip() for r in runs.split(",") if r.strip()]
    if not wanted:  # `--runs ""` (an unset shell variable): not the whole table
        raise ValueError(f"--runs {runs!r} names no run: leave it out to run the whole table")
    names = [s.name for s in plan if not s.name.startswith("records-")]
    unknown = [r for r in wanted if r not in names]
    if unknown:
        raise ValueError(
            f"--runs {', '.join(unknown)}: not a run of this table ({', '.join(names)})"
        )
    chosen = [s for s in plan if s.name in wanted]
    needed = {n for s in chosen for n in s.needs}
    return [s for s in plan if s.name in needed] + chosen


def column_commands(column, row, work: Work) -> list:
    if column.kind == "finetune":
        seeds = [None] if work.scale.seeds_together else work.scale.seeds
        return [
            work.finetune(row.run, column.arg, seed, row.checkpoint, row.bilstm) for seed in seeds
        ]
    if row.checkpoint is not None or row.bilstm:
        raise ValueError(f"{row.label}: only fine-tuning starts from a checkpoint or a BiLSTM")
    if column.kind == "features":
        return [
            work.feature_tagger(row.run, column.arg, seed, column.combine)
            for seed in work.scale.seeds
        ]
    if column.kind == "mlm":
        return [work.mlm_score(row.run)]
    raise ValueError(f"unknown column kind {column.kind!r}")


def results(table: Table, work: Work) -> dict[str, dict[str, list[float]]]:
    """{row label: {column name: the values measured so far, one per seed}} (percent, or
    perplexity for an `mlm` column); a seed whose score is missing or not a number is left
    out (its cell's n says so)."""
    out = {}
    for row in table.rows:
        values = {}
        for column in table.columns:
            if column.kind == "mlm":
                scores = read_json(work.mlm_file(row.run))
                found = [scores["mlm_perplexity"]] if "mlm_perplexity" in scores else []
            else:
                found = []
                for path, task in seed_dirs(row, column, work):
                    score = task.dev_percent(read_json(f"{path}/metrics.json"))
                    if score is not None:
                        found.append(score)
            values[column.name] = found
        out[row.label] = values
    return out


def seed_dirs(row, column, work: Work) -> list[tuple[str, Task]]:
    """(output directory, task as the scale scores it) of each seed of a `finetune` or
    `features` column of `row`."""
    if column.kind == "finetune":
        task = work.scale.tasks[column.arg]
        return [
            (work.finetune_dir(row.run, column.arg, seed, row.checkpoint, row.bilstm), task)
            for seed in work.scale.seeds
        ]
    return [
        (work.features_dir(row.run, column.arg, seed, column.combine), FEATURE_TAGGER)
        for seed in work.scale.seeds
    ]
