"""`python -m model.experiments TABLE --scale S --work DIR [--dry-run]`: the smoke scale runs end
to end under TensorFlow (one work directory, so runs are shared between tables; every table runs
in tests/test_jax_only.py), resumes by skipping, and the paper and gpu scales print their whole
command lists."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest

from model.experiments.__main__ import main
from model.experiments.scales import SCALES
from model.experiments.tables import TABLES
from model.recipes.runner import read_json
from tests.helpers import SHARED_DATA, make_smoke_data, measured_cells

needs_data = pytest.mark.skipif(
    not os.path.isdir(SHARED_DATA), reason=f"{SHARED_DATA} (the real data) is not here"
)


@pytest.mark.parametrize("scale", ["paper", "gpu", "cpu"])
@pytest.mark.parametrize("table", sorted(TABLES))
def test_dry_run_prints_every_command_and_runs_nothing(table, scale, tmp_path, capsys):
    work = tmp_path / "work"
    assert main([table, "--scale", scale, "--work", str(work), "--dry-run"]) == 0
    out = capsys.readouterr().out
    commands = [line for line in out.splitlines() if "python -m model." in line]
    assert commands and all("skip" not in line for line in commands)
    assert any("model.train pretrain" in line for line in commands)
    assert any(
        "model.train finetune" in line or "model.feature_tagger" in line for line in commands
    )
    assert not work.exists()  # nothing written, not even the size configs
    if SCALES[scale].budget_seconds:
        assert "calibrated s per step" in out


def test_the_paper_scale_refuses_to_run_here(tmp_path, capsys):
    assert main(["masking", "--scale", "paper", "--work", str(tmp_path)]) == 2
    assert "--dry-run" in capsys.readouterr().err


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    return make_smoke_data(tmp_path_factory.mktemp("data"))


# Every table runs at the smoke scale in the JAX-only environment, from its prepared input
# (tests/test_jax_only.py checks each cell there, and the runs the tables share). Here, under
# TensorFlow from the raw text: the table with the most kinds of row (NSP, no NSP, left to
# right, a BiLSTM, the floors) and training-steps, which reads its runs' checkpoints and
# draws its plot (matplotlib is not in the JAX-only environment).
TF_TABLES = ("pretraining-tasks", "training-steps")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, small_data):
    """TF_TABLES at the smoke scale in one work directory, their TensorFlow functions run
    eagerly: tracing a graph is most of a smoke command's time. The same commands run traced
    in their own tests (test_objectives, test_finetune, ...)."""
    import tensorflow as tf

    if not os.path.isdir(SHARED_DATA):
        pytest.skip(f"{SHARED_DATA} (the real data) is not here")
    work = tmp_path_factory.mktemp("experiments")
    tf.config.run_functions_eagerly(True)
    try:
        for table in TF_TABLES:
            argv = [table, "--scale", "smoke", "--work", str(work), "--data", small_data]
            assert main([*argv, "--in-process"]) == 0, table
    finally:
        tf.config.run_functions_eagerly(False)
    return work


@pytest.mark.slow
@needs_data
@pytest.mark.parametrize("table", TF_TABLES)
def test_smoke_scale_writes_the_table_with_a_value_in_every_cell(table, smoke):
    with open(smoke / f"{table}.md", encoding="utf-8") as f:
        text = f.read()
    cells = measured_cells(text)
    assert cells, text
    for row in cells:
        assert all(c != "—" for c in row), row  # every column measured for every row
    assert "## Commands" in text and "python -m model.train pretrain" in text


@pytest.mark.slow
@needs_data
def test_a_second_run_skips_every_command(smoke, small_data, capsys):
    for table in TF_TABLES:
        argv = [table, "--scale", "smoke", "--work", str(smoke), "--data", small_data]
        assert main([*argv, "--in-process"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    # each skipped, none said to be another command's: every run recorded this plan's command
    assert lines and all(" skip, " in line for line in lines)
    for summary in ("runs/*/train_summary.json", "finetune/*/*/metrics.json"):
        found = glob.glob(str(smoke / summary))
        assert found and all("command" in read_json(path) for path in found), summary


@pytest.mark.slow
@needs_data
def test_training_steps_fine_tunes_from_every_kept_checkpoint_and_plots_them(smoke):
    with open(smoke / "training-steps.md", encoding="utf-8") as f:
        text = f.read()
    # The smoke runs: 4 steps, checkpoints at 2 and 4 (the finished run).
    for label in ("BERT (MLM + NSP)", "LTR & No NSP"):
        assert f"| {label}, 1/2 of the steps | 2 |" in text
        assert f"| {label}, 2/2 of the steps | 4 |" in text
    assert (
        "--init " + str(smoke / "runs" / "ltr-4x16-seed1" / "checkpoints" / "ckpt-00000002") in text
    )
    with open(smoke / "training-steps.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@needs_data
def test_the_bilstm_row_is_measured(smoke):
    with open(smoke / "pretraining-tasks.md", encoding="utf-8") as f:
        assert "| LTR & No NSP + BiLSTM | " in f.read()
    with open(
        smoke / "finetune" / "ltr-4x16-seed1" / "conll2003-bilstm-seed1" / "config.json"
    ) as f:
        assert json.load(f)["bilstm_units"] == 8  # half the 16-wide encoder, a direction


def test_every_table_is_built_whole_but_for_data_that_is_not_here(tmp_path):
    from model.experiments.plan import Work

    work = Work(str(tmp_path), "data", SCALES["cpu"])
    for make in TABLES.values():
        assert all(item.endswith("no training data offline") for item in make(work).not_built)


def test_the_plot_draws_median_and_range_against_the_steps(tmp_path, monkeypatch):
    """report.write on made-up metrics of two seeds: the PNG and the steps column; written
    again without matplotlib (a GPU machine's environment), the report links the earlier
    drawing and says it is one."""
    import dataclasses

    from model.experiments.plan import Work
    from model.experiments.report import curve_points, write
    from model.experiments.tables import training_steps

    scale = dataclasses.replace(SCALES["smoke"], seeds=(1, 2))
    work = Work(str(tmp_path), "data", scale)
    table = training_steps(work)
    for i, row in enumerate(table.rows):
        for seed in scale.seeds:
            out = work.finetune_dir(row.run, "conll2003", seed, row.checkpoint)
            os.makedirs(out)
            with open(os.path.join(out, "metrics.json"), "w") as f:
                json.dump({"dev": {"f1": 0.1 * i + 0.01 * seed}}, f)
    lines = write(table, work, [], str(tmp_path / "training-steps.md"))
    assert "| row | pre-training steps | conll2003 |" in lines
    assert "| LTR & No NSP, 1/2 of the steps | 2 | 21.50 [21.00–22.00] (n=2) |" in lines
    from model.experiments.experiment import results

    curves = curve_points(table, work, results(table, work), table.columns[0])
    assert [step for step, _ in curves["BERT (MLM + NSP)"]] == [2, 4]
    with open(tmp_path / "training-steps.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"

    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else find_spec(name, *a),
    )
    again = "\n".join(write(table, work, [], str(tmp_path / "training-steps.md")))
    assert "No plot drawn: matplotlib is not installed" in again
    assert f"not in it): ![{table.title}](training-steps.png)" in again


def test_the_report_gives_the_majority_class_and_the_rows_no_better(tmp_path):
    """A floor whose every seed scores MRPC's majority class learned nothing from the text:
    the report says so beside the baseline (the gpu table's random encoder: 81.22 x 3)."""
    import dataclasses

    from model.experiments.plan import Work
    from model.experiments.report import write
    from model.experiments.tables import pretraining_tasks

    mrpc = tmp_path / "data" / "glue" / "MRPC"
    mrpc.mkdir(parents=True)
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    for name, labels in (("train", "1101"), ("dev", "1011")):  # majority "1": F1 0.75/0.875
        rows = "".join(f"{y}\t{i}\t{i}\ta b\tc d\n" for i, y in enumerate(labels))
        (mrpc / f"{name}.tsv").write_text(header + rows)
    scale = dataclasses.replace(SCALES["cpu"], seeds=(1, 2))
    work = Work(str(tmp_path / "work"), str(tmp_path / "data"), scale)
    table = pretraining_tasks(work)
    floor = next(r for r in table.rows if r.floor)
    best = next(r for r in table.rows if not r.floor)
    for row, f1 in ((floor, 2 * 0.75 / 1.75), (best, 0.9)):
        for seed in scale.seeds:
            out = work.finetune_dir(row.run, "mrpc", seed)
            os.makedirs(out)
            with open(os.path.join(out, "metrics.json"), "w") as f:
                json.dump({"dev": {"f1": f1}}, f)
    lines = write(table, work, [], str(tmp_path / "report.md"))
    said = [line for line in lines if "majority class" in line]
    assert said == [
        "- mrpc: the majority class (the training set's most frequent label for every dev "
        f"example) scores 85.71; no better: {floor.label} (nothing learned from the text)."
    ]


def test_the_report_flags_a_pretraining_that_missed_the_time_budget(tmp_path):
    """The gpu table's No-NSP run got 4,080 steps, 36.6 s of its 60 s (a calibration that
    counted a save): its row is not at BERT's budget, and the report says so."""
    from model.experiments.plan import Work
    from model.experiments.report import write
    from model.experiments.tables import pretraining_tasks

    work = Work(str(tmp_path / "work"), str(tmp_path / "data"), SCALES["gpu"])
    table = pretraining_tasks(work)
    runs = {r.run.name: r.run for r in table.rows}
    for name, steps, seconds in (("bert", 6720, 59.5), ("no-nsp", 4080, 36.6)):
        os.makedirs(work.run_dir(runs[name]))
        summary = {"steps": steps, "steps_this_run": steps - 20, "seconds_in_steps": seconds}
        with open(os.path.join(work.run_dir(runs[name]), "train_summary.json"), "w") as f:
            json.dump(summary, f)
    lines = write(table, work, [], str(tmp_path / "report.md"))
    said = [line for line in lines if line.startswith("- pre-training")]
    assert said[0] == "- pre-training bert-mini-seed1: 6,720 steps, 59.7 s of steps."
    assert said[1].startswith("- pre-training no-nsp-mini-seed1: 4,080 steps, 36.8 s of steps")
    assert "**61% of the 60 s budget**" in said[1]
    assert len(said) == 2  # the floors trained nothing; the rows not run have no summary


def test_the_budget_counts_the_calibration_runs_steps_not_its_evaluation_and_saves(tmp_path):
    """A 30-step calibration run spends a large share of its wall time on the one held-out
    evaluation and the saves; the steps come from the seconds inside the training steps."""
    from model.experiments.plan import Work

    work = Work(str(tmp_path), "data", SCALES["cpu"])  # 1,275 s, six checkpoints
    calibration = tmp_path / "calibration"
    calibration.mkdir()
    summary = {"steps_this_run": 29, "seconds_this_run": 59.8, "seconds_in_steps": 36.25}
    (calibration / "train_summary.json").write_text(json.dumps(summary))
    # 1.25 s a step: 1,275 / 1.25 = 1,020 steps, already six intervals of 170
    assert work.budgeted_steps(str(calibration)) == 1020
    del summary["seconds_in_steps"]  # a run written before the field: its wall time
    (calibration / "train_summary.json").write_text(json.dumps(summary))
    assert work.budgeted_steps(str(calibration)) == 6 * 104
    summary["median_step_seconds"] = 0.625  # the median call's step, where written: first
    (calibration / "train_summary.json").write_text(json.dumps(summary))
    assert work.budgeted_steps(str(calibration)) == 2040
    (calibration / "train_summary.json").write_text(json.dumps({"steps_this_run": 0}))
    with pytest.raises(ValueError, match="no timed steps"):
        work.budgeted_steps(str(calibration))


def test_the_gpu_budget_is_whole_compiled_calls_a_checkpoint(tmp_path):
    from model.experiments.plan import Work

    work = Work(str(tmp_path), "data", SCALES["gpu"])  # 60 s, 6 checkpoints, 20 steps a call
    calibration = tmp_path / "calibration"
    calibration.mkdir()
    summary = {"steps_this_run": 80, "seconds_this_run": 2.0, "seconds_in_steps": 0.8}
    (calibration / "train_summary.json").write_text(json.dumps(summary))
    # 10 ms a step: 6,000 steps, rounded up to 6 x 20: 6,000 (50 calls a checkpoint)
    assert work.budgeted_steps(str(calibration)) == 6000
    summary["seconds_in_steps"] = 0.81  # 10.125 ms: 5,925.9 -> 6,000
    (calibration / "train_summary.json").write_text(json.dumps(summary))
    assert work.budgeted_steps(str(calibration)) % 120 == 0


def test_a_measured_step_time_replaces_the_calibration_run_on_its_device(tmp_path):
    """On an H200 the gpu scale's BERT run takes its steps from the measured 8.99 ms a step
    (60 s: 6,674, rounded up to 6 x 20: 6,720), with no calibration run; a run without a
    measured step time, or another device, is calibrated as before."""
    from model.experiments.experiment import steps
    from model.experiments.plan import Work

    def pretrainings(device):
        work = Work(str(tmp_path), "data", SCALES["gpu"], device=device)
        plan = steps(TABLES["pretraining-tasks"](work), work)
        return {
            step.name: [c.argv for c in step.commands if c.argv[0] == "pretrain"] for step in plan
        }

    h200 = pretrainings("NVIDIA H200")
    [bert] = h200["bert-mini-seed1"]
    assert bert[bert.index("--steps") + 1] == "6720"
    assert bert[bert.index("--checkpoint-every") + 1] == "1120"
    [no_nsp] = h200["no-nsp-mini-seed1"]  # measured too, at 9.02 ms: the same steps
    assert no_nsp[no_nsp.index("--steps") + 1] == "6720"
    assert len(h200["ltr-mini-seed1"]) == 2  # not measured: calibration, then the run
    for device in ("NVIDIA H100 80GB HBM3", None):
        assert len(pretrainings(device)["bert-mini-seed1"]) == 2


def test_the_gpu_scale_fine_tunes_the_three_seeds_in_one_command(tmp_path):
    """`finetune --seeds 1,2,3` (one compiled program): one command a task and row, each
    seed's own directory, done when the last seed's metrics.json exists; the cpu scale runs
    a command a seed."""
    from model.experiments.experiment import steps
    from model.experiments.plan import Work

    def fine_tunings(scale):
        work = Work(str(tmp_path), "data", SCALES[scale])
        plan = steps(TABLES["pretraining-tasks"](work), work)
        step = next(s for s in plan if s.name == "bert-mini-seed1")
        return [c for c in step.commands if c.argv[0] == "finetune"]

    gpu = fine_tunings("gpu")
    assert len(gpu) == 4  # sst2, mrpc, conll2003, squad1
    sst2 = next(c for c in gpu if "sst2" in c.argv)
    argv = list(sst2.argv)
    assert argv[argv.index("--seeds") + 1] == "1,2,3" and "--seed" not in argv
    output = argv[argv.index("--output") + 1]
    assert output.endswith(os.path.join("bert-mini-seed1", "sst2-seed{seed}"))
    assert sst2.output == output.replace("{seed}", "3") + os.sep + "metrics.json"
    assert len(fine_tunings("cpu")) == 12


def around(gap: float, error: float):
    from model.experiments.bootstrap import Interval

    return Interval(gap - error, gap + error, "test")


def test_an_effect_is_shown_only_beyond_the_seed_spread_and_the_sampling_error():
    from model.experiments.report import effect

    assert effect([80, 81, 82], [70, 71, 72], around(10, 2), False).shown
    reversed_ = effect([70, 71, 72], [80, 81, 82], around(-10, 2), False)
    assert reversed_.text.startswith("is reversed beyond") and not reversed_.shown
    # ranges apart, but 1.0 apart where the sampling error allows +-2.0
    close = effect([80.0, 80.5, 81.0], [79.0, 79.5, 79.9], around(1.0, 2.0), False)
    assert "within the sampling error" in close.text and not close.shown
    assert effect([80, 85], [82, 83], None, False).text.startswith("within the seed spread")
    # One seed: no spread to exceed, so never shown, however far apart (said so).
    one = effect([80], [70], around(10, 0.2), False)
    assert one.text == (
        "one fine-tuning seed, so no seed spread to exceed: not shown (+10.00, beyond the "
        "sampling error: the difference's interval [+9.80, +10.20] (test))"
    )
    assert "within the sampling error" in effect([80], [79.9], around(0.1, 0.5), False).text
    assert one.why_not.startswith("has one fine-tuning seed") and not one.shown
    # Apart beyond the seeds, but no sampling error known: not shown, and said why.
    unknown = effect([80, 81], [70, 71], None, False)
    assert not unknown.shown and "sampling error is not known" in unknown.text
    assert unknown.why_not == "has no known sampling error against its floor"
    # A gap that prints as +0.00 is a tie, whatever the intervals say.
    tie = effect([80.004, 80.005], [80.0, 80.001], around(0.004, 0.0001), False)
    assert not tie.shown and tie.text.startswith("a tie at the precision printed (+0.00;")
    # Perplexity: lower is better, its interval turned round with it.
    assert effect([10.0, 11.0], [20.0, 21.0], around(-10, 1), True).shown
    assert not effect([10.0, 11.0], [20.0, 21.0], around(-10, 11), True).shown


def write_seeds(work, row, task: str, scores, units=None, n=None) -> None:
    """metrics.json (and dev_units.json, `units[i]` each seed's 0/1 accuracies) of `row`'s
    seeds on `task`; `n` its dev_examples."""
    from model.tasks import dev_units

    for i, (seed, score) in enumerate(zip(work.scale.seeds, scores)):
        out = work.finetune_dir(row.run, task, seed)
        os.makedirs(out, exist_ok=True)
        metrics = {"dev": {work.scale.tasks[task].metric: score}}
        if n is not None:
            metrics["dev_examples"] = {"": n}
        with open(os.path.join(out, "metrics.json"), "w") as f:
            json.dump(metrics, f)
        if units is not None:
            dev_units.write(out, {"accuracy": dev_units.mean(units[i])}, {"accuracy": score})


def test_the_sampling_error_is_the_paired_bootstrap_or_an_unpaired_bound(tmp_path):
    """Two rows' SST-2 accuracies on the same 872 sentences: with every seed's dev units, the
    paired bootstrap (B right wherever A is: 8 points apart, only the 70 sentences A alone
    gets right vary: 1.96 x sqrt((0.0803 - 0.0803^2) / 872) = 1.80 points); without, the
    unpaired binomial bound (4.07), and with no dev_examples either, none."""
    from model.experiments.plan import Work
    from model.experiments.report import sampling_error
    from model.experiments.tables import TABLES

    work = Work(str(tmp_path), "data", SCALES["gpu"])
    table = TABLES["pretraining-tasks"](work)
    bert, floor = table.rows[0], next(r for r in table.rows if r.floor)
    column = next(c for c in table.columns if c.arg == "sst2")
    assert sampling_error(work, bert, floor, column, [80.0], [72.0]) is None  # nothing run
    a = np.zeros(872)
    a[:698] = 1  # 80.05 %
    b = a.copy()
    b[628:698] = 0  # 72.02 %
    write_seeds(work, bert, "sst2", [a.mean()] * 3, n=872)
    write_seeds(work, floor, "sst2", [b.mean()] * 3, n=872)
    scores = [100 * a.mean()] * 3, [100 * b.mean()] * 3
    unpaired = sampling_error(work, bert, floor, column, *scores)
    assert unpaired.how.startswith("unpaired binomial bound")
    assert unpaired.high - unpaired.low == pytest.approx(2 * 4.07, abs=0.01)
    write_seeds(work, bert, "sst2", [a.mean()] * 3, units=[a] * 3, n=872)
    assert sampling_error(work, bert, floor, column, *scores).how.startswith("unpaired")
    write_seeds(work, floor, "sst2", [b.mean()] * 3, units=[b] * 3, n=872)
    paired = sampling_error(work, bert, floor, column, *scores)
    assert paired.how == "paired bootstrap by 872 examples, 95 %"
    assert paired.low == pytest.approx(8.03 - 1.80, abs=0.25)
    assert paired.high == pytest.approx(8.03 + 1.80, abs=0.25)
    assert sampling_error(work, bert, floor, column, *scores) == paired  # the same draws


def test_squad_f1_in_percent_and_glue_fractions_meet_in_the_same_cells(tmp_path):
    """The official SQuAD script writes F1 in percent, GLUE and seqeval as fractions: the
    table reads both as percent (a gpu-scale report once showed SQuAD F1 13.49 as 1270.77)."""
    from model.experiments.experiment import results
    from model.experiments.plan import Work
    from model.experiments.report import sampling_error
    from model.experiments.tables import TABLES

    work = Work(str(tmp_path), "data", SCALES["gpu"])
    table = TABLES["pretraining-tasks"](work)
    row = table.rows[0]
    for seed, (f1, accuracy) in enumerate(((13.49, 0.8154), (12.71, 0.8119), (11.61, 0.81)), 1):
        for task, dev in (("squad1", {"f1": f1}), ("sst2", {"accuracy": accuracy})):
            out = work.finetune_dir(row.run, task, seed)
            os.makedirs(out)
            with open(os.path.join(out, "metrics.json"), "w") as f:
                json.dump({"dev": dev, "dev_examples": {"": 10570}}, f)
    cells = results(table, work)[row.label]
    assert cells["squad1"] == pytest.approx([13.49, 12.71, 11.61])
    assert cells["sst2"] == pytest.approx([81.54, 81.19, 81.0])
    squad = next(c for c in table.columns if c.arg == "squad1")
    # p = 0.1271 on 10,570 questions: 2 x 100 x sqrt(2 x 0.1271 x 0.8729 / 10570) = 0.916
    bound = sampling_error(work, row, row, squad, cells["squad1"], cells["squad1"])
    assert bound.high == pytest.approx(0.9164, abs=1e-3) and bound.low == -bound.high


def test_a_seed_whose_score_is_not_a_number_is_left_out(tmp_path):
    from model.experiments.experiment import results
    from model.experiments.plan import Work
    from model.experiments.tables import TABLES

    work = Work(str(tmp_path), "data", SCALES["gpu"])
    table = TABLES["pretraining-tasks"](work)
    row = table.rows[0]
    for seed, value in zip(work.scale.seeds, ("NaN", "true", "0.8")):
        out = work.finetune_dir(row.run, "sst2", seed)
        os.makedirs(out)
        with open(os.path.join(out, "metrics.json"), "w") as f:
            f.write('{"dev": {"accuracy": ' + value + "}}")
    assert results(table, work)[row.label]["sst2"] == [80.0]


def test_a_half_built_table_judges_nothing_against_a_floor_not_yet_measured(tmp_path):
    """Rows measured before their floor (a table run in parts): their comparisons wait for
    it, never read as if the floor were beaten; and the hardware of a WORK where nothing
    ran is not this machine's."""
    import dataclasses

    from model.experiments.plan import Work
    from model.experiments.report import write
    from model.experiments.tables import pretraining_tasks

    scale = dataclasses.replace(SCALES["cpu"], seeds=(1, 2))
    work = Work(str(tmp_path / "work"), str(tmp_path / "data"), scale)
    table = pretraining_tasks(work)
    bert, no_nsp = (r for r in table.rows if r.label in ("BERT (MLM + NSP)", "No NSP"))
    for row, f1 in ((bert, 0.90), (no_nsp, 0.80)):
        for seed in scale.seeds:
            out = work.finetune_dir(row.run, "mrpc", seed)
            os.makedirs(out)
            with open(os.path.join(out, "metrics.json"), "w") as f:
                json.dump({"dev": {"f1": f1 + 0.001 * seed}}, f)
    lines = write(table, work, [], str(tmp_path / "report.md"))
    said = [line for line in lines if line.startswith("- mrpc: BERT (MLM + NSP)")]
    floor = next(r for r in table.rows if r.floor).label
    assert said == [
        "- mrpc: BERT (MLM + NSP) against No NSP is not judged: BERT (MLM + NSP) is read "
        f"against {floor}, not measured yet; No NSP is read against {floor}, not measured yet."
    ]
    assert "Hardware: not recorded (no command has run in WORK)." in lines[2]


def test_a_one_seed_row_is_not_blamed_on_the_budget(tmp_path):
    """A comparison held back because a row has one seed says so, not "budget too small"
    (that is for rows measured with their spread that do not beat their floor)."""
    import dataclasses

    from model.experiments.plan import Work
    from model.experiments.report import write
    from model.experiments.tables import pretraining_tasks

    scale = dataclasses.replace(SCALES["cpu"], seeds=(1, 2, 3))
    work = Work(str(tmp_path / "work"), str(tmp_path / "data"), scale)
    table = pretraining_tasks(work)
    floor = next(r for r in table.rows if r.floor and r.run.objective != "ltr")
    rows = {r.label: r for r in table.rows}
    scores = {floor.label: (0.50, 0.51, 0.52), "BERT (MLM + NSP)": (0.90, 0.91, 0.92)}
    scores["No NSP"] = (0.80,)
    for label, f1s in scores.items():
        for seed, f1 in zip(scale.seeds, f1s):
            out = work.finetune_dir(rows[label].run, "mrpc", seed)
            os.makedirs(out)
            with open(os.path.join(out, "metrics.json"), "w") as f:
                json.dump({"dev": {"f1": f1}, "dev_examples": {"": 408}}, f)
    lines = write(table, work, [], str(tmp_path / "report.md"))
    said = [line for line in lines if line.startswith("- mrpc: BERT (MLM + NSP) against")]
    assert said == [
        "- mrpc: BERT (MLM + NSP) against No NSP is not judged: No NSP has one fine-tuning "
        "seed (no seed spread to judge it against its floor)."
    ]
    from model.experiments.report import HOW_TO_READ

    assert HOW_TO_READ in lines and "say nothing about the papers" not in "\n".join(lines)


def test_a_smoke_report_says_its_numbers_say_nothing(tmp_path):
    from model.experiments.plan import Work
    from model.experiments.report import write
    from model.experiments.tables import pretraining_tasks

    work = Work(str(tmp_path / "work"), str(tmp_path / "data"), SCALES["smoke"])
    table = pretraining_tasks(work)
    row = table.rows[0]
    out = work.finetune_dir(row.run, "conll2003", 1)
    os.makedirs(out)
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump({"dev": {"f1": 0.04}}, f)
    lines = write(table, work, [], str(tmp_path / "report.md"))
    shown = lines.index("## What this scale can show")
    assert (
        lines[shown + 2] == SCALES["smoke"].note
        and "say nothing about the papers" in lines[shown + 2]
    )


def test_report_and_prepare_refuse_what_they_cannot_use(tmp_path, capsys, monkeypatch):
    """--report needs WORK to exist (a typo would write an empty table) and a result in it; a WORK or --prepare
    that is a file is one line; --prepare does not take --dry-run; a task folder missing
    from --data stops a run before anything runs, naming it and --data, and before WORK
    is made."""
    import model.experiments.prepare as prepare

    afile = tmp_path / "afile"
    afile.write_text("x")
    base = ["pretraining-tasks", "--scale", "smoke"]
    assert main([*base, "--work", str(tmp_path / "typo"), "--report"]) == 2
    assert "typo: not a work directory" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "typo")
    (tmp_path / "empty").mkdir()  # or a WORK of another --scale: its report is left as it was
    (tmp_path / "empty" / "pretraining-tasks.md").write_text("the cpu scale's table")
    assert main([*base, "--work", str(tmp_path / "empty"), "--report"]) == 1
    assert "error: no result of pretraining-tasks at --scale smoke" in capsys.readouterr().err
    assert (tmp_path / "empty" / "pretraining-tasks.md").read_text() == "the cpu scale's table"
    with monkeypatch.context() as m:  # inputs found: WORK is checked next
        m.setattr(prepare, "check_inputs", lambda table, work: None)
        with pytest.raises(SystemExit, match="is a file, not a directory"):
            main([*base, "--work", str(afile), "--data", str(tmp_path / "none")])
    with pytest.raises(SystemExit) as e:
        main([*base, "--prepare", str(tmp_path / "p"), "--dry-run"])
    assert e.value.code == 2 and "not with --dry-run" in capsys.readouterr().err
    data = tmp_path / "data"
    (data / "wikitext-2-raw").mkdir(parents=True)
    (data / "wikitext-2-raw" / "wiki.valid.raw").write_text(" = A = \n\n Some text .\n")
    argv = [*base, "--work", str(tmp_path / "w"), "--data", str(data)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--data {data}" in err and "no such file or directory" in err
    assert not os.path.exists(tmp_path / "w")  # nothing made, WORK itself neither
    assert main([*base, "--prepare", str(tmp_path / "p"), "--data", str(data)]) == 1
    assert f"--data {data}" in capsys.readouterr().err and not os.path.exists(tmp_path / "p")


def test_left_to_right_rows_are_read_against_the_causal_floor(tmp_path):
    from model.experiments.plan import Work
    from model.experiments.report import floor_of
    from model.experiments.tables import TABLES

    table = TABLES["pretraining-tasks"](Work(str(tmp_path), "data", SCALES["gpu"]))
    floors = [r for r in table.rows if r.floor]
    by_label = {r.label: floor_of(r, floors).run.name for r in table.rows if not r.floor}
    assert by_label["BERT (MLM + NSP)"] == by_label["No NSP"] == "random"
    assert by_label["LTR & No NSP"] == by_label["LTR & No NSP + BiLSTM"] == "random-ltr"


def test_a_part_of_a_table_is_its_runs_and_the_records_they_read(tmp_path, capsys):
    argv = ["beyond-bert", "--scale", "gpu", "--work", str(tmp_path / "w"), "--dry-run"]
    runs = "roberta-static-electra-small-seed1,random-electra-small-seed1"
    assert main([*argv, "--runs", runs]) == 0  # ELECTRA-Small's size at this scale
    steps = [line for line in capsys.readouterr().out.splitlines() if line.startswith("# step")]
    assert [s.split(":")[0] for s in steps] == [
        "# step records-sentence-pairs",
        "# step records-full-sentences",  # the static run's held-out records
        "# step records-full-sentences-static",
        "# step roberta-static-electra-small-seed1",
        "# step random-electra-small-seed1",
    ]
    assert main([*argv, "--runs", "bert,electra-electra-small-seed1"]) == 2
    err = capsys.readouterr().err
    assert "--runs bert: not a run of this table (bert-electra-small-seed1, roberta-" in err
    assert main([*argv, "--runs", ""]) == 2
    assert "--runs '' names no run" in capsys.readouterr().err


def test_the_floors_are_saved_untrained_and_uncompiled(tmp_path, capsys):
    argv = ["pretraining-tasks", "--scale", "gpu", "--work", str(tmp_path / "w"), "--dry-run"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    floors = [line for line in lines if "model.train pretrain" in line and "/runs/random" in line]
    assert len(floors) == 2 and all("--steps 0 " in line for line in floors)
    assert "--objective ltr" in floors[1]
    assert not any("calibration/random" in line for line in lines)


def test_a_prepared_directory_is_checked_before_anything_runs(tmp_path, capsys):
    from model.experiments.prepare import FORMAT, MANIFEST

    data = tmp_path / "input"
    data.mkdir()
    manifest = {
        "format": FORMAT,
        "scale": "cpu",
        "tables": ["feature-based"],
        "train_ids": "corpus/train.ids.npz.xz",
        "valid_ids": "corpus/valid.ids.npz.xz",
        "tasks": {"conll2003": "conll2003"},
    }
    (data / MANIFEST).write_text(json.dumps(manifest))
    argv = ["--work", str(tmp_path / "w"), "--data", str(data), "--dry-run"]
    assert main(["pretraining-tasks", "--scale", "gpu", *argv]) == 2
    assert "prepared for --scale cpu, not --scale gpu" in capsys.readouterr().err
    assert main(["pretraining-tasks", "--scale", "cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert "without the tasks sst2, mrpc, squad1 of pretraining-tasks" in err
    assert f"add them with --prepare {data}" in err
    assert main(["masking", "--scale", "cpu", *argv]) == 0  # CoNLL-2003 alone: all there
    out = capsys.readouterr().out
    assert f"--input {data}/corpus/train.ids.npz.xz" in out
    assert f"--vocab {data}/vocab.txt" in out


def test_a_dry_run_plans_as_the_device_named(tmp_path, capsys):
    """At the gpu scale a dry run here planned a calibration that an H200 skips (its step
    time is stored): --device plans as there. A real run reads its own device."""
    argv = ["pretraining-tasks", "--scale", "gpu", "--work", str(tmp_path / "w"), "--dry-run"]
    assert main(argv) == 0
    assert "calibration/bert-mini-seed1" in capsys.readouterr().out
    assert main([*argv, "--device", "NVIDIA H200"]) == 0
    out = capsys.readouterr().out
    assert "calibration/bert-mini-seed1" not in out
    assert "--output " + str(tmp_path / "w" / "runs" / "bert-mini-seed1") + " --steps 6720" in out
    assert main(argv[:-1] + ["--device", "NVIDIA H200"]) == 2
    assert "--device is a flag of --dry-run" in capsys.readouterr().err


@needs_data
def test_raw_text_without_tensorflow_is_sent_to_prepare_before_anything_runs(
    small_data, tmp_path, capsys, monkeypatch
):
    """A JAX-only machine given the raw --data passed the input check, then stopped at its
    first command with "fix it and run the same command line again", which could not help."""
    from model.io import backend

    monkeypatch.setattr(backend, "has_tensorflow", lambda: False)
    work = tmp_path / "w"
    assert main(["masking", "--scale", "smoke", "--data", small_data, "--work", str(work)]) == 2
    err = capsys.readouterr().err
    assert f"--data {small_data} holds raw text, and tokenising it needs TensorFlow" in err
    assert "(python -m model.experiments masking --scale smoke --prepare DIR)" in err
    assert not work.exists()


@needs_data
def test_squad_is_prepared_as_the_questions_a_run_reads(tmp_path):
    from model import tasks
    from model.experiments.prepare import cut_squad

    source = os.path.join(SHARED_DATA, "squad", "train-v1.1.reconstructed.json")
    target = str(tmp_path / "train.json")
    assert cut_squad("squad1", source, target, 1000)
    full, cut = (tasks.get("squad1").read(p) for p in (source, target))
    assert [e.qas_id for e in cut] == [e.qas_id for e in full[:1000]]
    assert [e.paragraph.context for e in cut] == [e.paragraph.context for e in full[:1000]]
    assert os.path.getsize(target) < os.path.getsize(source) / 20
    assert not cut_squad("squad1", source, str(tmp_path / "all.json"), None)  # all of it: a copy
    assert not cut_squad("sst2", source, str(tmp_path / "other.json"), 10)


def test_jobs_share_the_accelerators_memory_unless_the_user_set_it(monkeypatch):
    from model.experiments.__main__ import share_the_accelerator

    for name in ("XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_PREALLOCATE"):
        monkeypatch.setenv(name, "")  # recorded, so that the test's own settings are undone
        monkeypatch.delenv(name)
    share_the_accelerator(1)
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in os.environ  # one process: JAX's default
    share_the_accelerator(4)
    assert os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.18"  # five processes
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", ".5")
    share_the_accelerator(8)
    assert os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == ".5"


def test_a_gpu_scale_without_a_gpu_is_warned(capsys):
    from model.experiments.__main__ import warn_without_accelerator

    warn_without_accelerator(SCALES["gpu"], None)
    assert "--scale gpu is sized for one GPU" in capsys.readouterr().err
    warn_without_accelerator(SCALES["gpu"], "NVIDIA H200")
    warn_without_accelerator(SCALES["cpu"], None)
    assert capsys.readouterr().err == ""


def test_feature_folders_start_with_no_dash_and_old_ones_are_still_found(tmp_path):
    from model.experiments.plan import Work
    from model.experiments.tables import TABLES

    work = Work(str(tmp_path), "data", SCALES["gpu"])
    run = TABLES["feature-based"](work).rows[0].run
    assert os.path.basename(work.features_dir(run, "-1,-2", 1, "sum")) == "layers-1,-2-sum-seed1"
    assert os.path.basename(work.features_dir(run, "embeddings", 1)) == "embeddings-seed1"
    old = os.path.join(os.path.dirname(work.features_dir(run, "-2", 1)), "-2-seed1")
    os.makedirs(old)  # a WORK from before the rename: its results stay found
    assert work.features_dir(run, "-2", 1) == old
