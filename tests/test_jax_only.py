"""The commands a GPU machine runs, in an environment with JAX and no TensorFlow.

    BERT_JAX_VENV=/tmp/jax-venv PYTHONPATH=. python -m pytest -q --runslow tests/test_jax_only.py

A GPU machine rented by the minute has JAX and nothing of TensorFlow; an import that
fails there costs minutes. This environment is built from model/requirements-jax.txt
alone (`pip install --no-deps`): numpy, CPU jax, keras, keras-hub and their pinned
dependencies; with Python 3.12 (CI's choice where the machine has one) its jax is the GPU
image's, 0.11.2. In it, at smoke scale: pre-training on the device path for every objective,
fine-tuning SST-2 from that run, and evaluating the fine-tuned model and the masked LM; and
every table of `model.experiments` at the smoke scale from its prepared input (`--prepare`,
made here), records included, its pre-trainings on the host pipeline.

The environment is $BERT_JAX_VENV when that names a non-empty directory (used as it is,
never modified; .ci/run builds it), else one is built in pytest's temporary directory
(~30 s with a warm pip cache). The test fails, never skips, when it cannot be built.
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from tests.helpers import (
    REPO_ROOT,
    isolated_python,
    make_record_formats,
    make_smoke_data,
    measured_cells,
    pretrain_argv,
    run_module,
    subprocess_env,
)

REQUIREMENTS = os.path.join(REPO_ROOT, "model", "requirements-jax.txt")
SST2 = os.path.join(REPO_ROOT, "..", "shared", "data", "glue", "SST-2")
WIKITEXT = os.path.join(REPO_ROOT, "..", "shared", "data", "wikitext-2-raw", "wiki.valid.raw")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def jax_python(tmp_path_factory):
    return isolated_python(
        "BERT_JAX_VENV",
        REQUIREMENTS,
        tmp_path_factory,
        pip_flags=("--no-deps",),
        imports=("numpy", "jax", "keras", "keras_hub"),
    )


def run(python, module, argv, timeout=400):
    done = run_module(module, argv, timeout, python=python, env={"KERAS_BACKEND": "jax"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return make_record_formats(tmp_path_factory.mktemp("records"))


RUNS = {  # objective: (records, flags)
    "bert": ("pairs", ["--device-data"]),
    "roberta": ("static", ["--device-data"]),
    "electra": ("segment-pairs", ["--device-data"]),
    "ltr": ("segments", ["--device-data"]),
    "spanbert": ("segments", ["--device-data"]),
}  # the host pipeline (a PyDataset): every table's pre-trainings, below


# Commands one after the other in one process (as `model.experiments --in-process` runs them
# on a GPU): the imports are paid once, and a program compiled for one is reused by the next.
IN_ONE_PROCESS = """
import importlib, json, sys
main = importlib.import_module(sys.argv[1]).main
for argv in json.loads(sys.argv[2]):
    if main(argv) not in (0, None):
        sys.exit(f"failed: python -m {sys.argv[1]} {' '.join(argv)}")
"""


def run_in_one_process(python, module, argvs, timeout=900):
    import subprocess

    argvs = [[str(a) for a in argv] for argv in argvs]
    done = subprocess.run(
        [python, "-c", IN_ONE_PROCESS, module, json.dumps(argvs)],
        cwd=REPO_ROOT,
        env={**subprocess_env(), "KERAS_BACKEND": "jax"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def runs(jax_python, records, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    argvs = []
    for objective, (kind, flags) in RUNS.items():
        extra = ["--objective", objective, *flags, "--steps-per-call", "5", "--log-every", "4"]
        argvs.append(pretrain_argv(records[kind], root / objective, steps=10, extra=extra))
    run_in_one_process(jax_python, "model.train", argvs, timeout=600)
    out = {}
    for objective in RUNS:
        with open(root / objective / "train_summary.json", encoding="utf-8") as f:
            out[objective] = (str(root / objective), json.load(f))
    return out


@pytest.mark.parametrize("objective", RUNS)
def test_every_objective_pretrains_without_tensorflow(runs, objective):
    output, summary = runs[objective]
    assert summary["backend"] == "jax" and summary["steps"] == 10 and summary["device_data"]
    # 5 steps a call; the first call (compiling) is not timed
    assert (summary["steps_per_call"], summary["steps_this_run"]) == (5, 5)
    assert summary["config"]["dropout"] == 0.0  # the device path's default
    assert os.path.isfile(os.path.join(output, "model.weights.h5"))
    # No TensorBoard without TensorFlow: the curves as CSV, at each call that passed a
    # multiple of --log-every (calls of 5 steps end at 5 and 10, past 4 and 8)
    with open(os.path.join(output, "logs", "scalars.csv"), encoding="utf-8") as f:
        rows = [line.split(",") for line in f.read().splitlines()]
    assert rows[0] == ["tag", "step", "value"]
    assert [step for tag, step, _ in rows[1:] if tag == "train/loss"] == ["5", "10"]


def test_steps_in_one_call_and_donated_state_are_single_steps_with_this_jax(jax_python, records):
    """tests/test_device_data.py's check of jax itself (jax 0.7.2's CPU build computed other
    steps once Keras's fit had donated its state), in this environment: with Python 3.12 it
    has the GPU image's jax (model/requirements-jax.txt)."""
    from tests.test_device_data import check_donated_steps

    check_donated_steps(jax_python, records["pairs"], timeout=600)


def test_finetune_and_evaluate_without_tensorflow(jax_python, runs, tmp_path):
    """As a GPU call fine-tunes: the features on the device, two seeds in one program."""
    encoder = runs["bert"][0]
    run(
        jax_python,
        "model.train",
        [
            "finetune", "--task", "sst2", "--data", SST2, "--init", encoder, "--output",
            tmp_path / "sst2-{seed}", "--epochs", "1", "--max-train-examples", "32",
            "--batch-size", "8", "--seq-len", "32", "--device-data", "--steps-per-call", "2",
            "--seeds", "1,2",
        ],
    )  # fmt: skip
    classifier = tmp_path / "sst2-2"
    assert json.loads((classifier / "metrics.json").read_text())["seed"] == 2
    assert (classifier / "SST-2.dev.tsv").read_text().startswith("index\tprediction\n")
    done = run(
        jax_python,
        "model.evaluate",
        ["--task", "sst2", "--model", classifier, "--data", os.path.join(SST2, "dev.tsv")],
    )
    # the saved weights score the dev set as the fine-tuning's own evaluation did (to one
    # sentence's flip: the compiled program and the command sum in other orders)
    dev = json.loads((classifier / "metrics.json").read_text())["dev"]
    scored = json.loads(done.stdout[done.stdout.index("{") :])
    assert scored["examples"] == dev["examples"] == 872
    assert scored["accuracy"] == pytest.approx(dev["accuracy"], abs=1.01 / 872)
    done = run(
        jax_python,
        "model.evaluate",
        ["--task", "mlm", "--model", encoder, "--data", WIKITEXT, "--batch-size", "64"],
    )
    metrics = json.loads(done.stdout[done.stdout.index("{") :])
    assert metrics["masked_positions"] > 10_000
    assert 0.0 < metrics["mlm_gold_chance_copy_rate"] < metrics["mlm_gold_copy_rate"] < 1.0


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Every table's smoke-scale input, prepared here (with TensorFlow), as before a GPU call."""
    from model.experiments.__main__ import main
    from model.experiments.tables import TABLES

    data = make_smoke_data(tmp_path_factory.mktemp("data"))
    out = str(tmp_path_factory.mktemp("prepared") / "input")
    for table in TABLES:
        assert main([table, "--scale", "smoke", "--prepare", out, "--data", data]) == 0
    return out


@pytest.fixture(scope="module")
def tables(jax_python, prepared, tmp_path_factory):
    """Every table at the smoke scale from its prepared input, in one work directory."""
    from model.experiments.tables import TABLES

    work = tmp_path_factory.mktemp("tables") / "work"
    # First the LTR run's two fine-tunings (with and without the BiLSTM) side by side, as
    # child processes (`--jobs`, as on a GPU); the tables then skip them.
    ltr = ["--runs", "ltr-4x16-seed1", "--jobs", "2"]
    argvs = [["pretraining-tasks", "--scale", "smoke", "--data", prepared, "--work", work, *ltr]]
    argvs += [
        [table, "--scale", "smoke", "--data", prepared, "--work", work, "--in-process"]
        for table in TABLES
    ]
    run_in_one_process(jax_python, "model.experiments.__main__", argvs, timeout=1500)
    return work


def test_every_table_runs_from_its_prepared_input_without_tensorflow(prepared, tables):
    """The records are made there from the corpus's ids (no tokenising, no TensorFlow), the
    vocabulary is the prepared one, and nothing outside the prepared directory is read."""
    from model.experiments.tables import TABLES

    for table in TABLES:
        with open(tables / f"{table}.md", encoding="utf-8") as f:
            text = f.read()
        cells = measured_cells(text)
        assert len(cells) >= 2 and all(c != "—" for row in cells for c in row), text
        assert "## Commands" in text and "python -m model.train pretrain" in text
    with open(tables / "data" / "train-segments" / "dataset.json", encoding="utf-8") as f:
        info = json.load(f)
    assert info["inputs"] == [os.path.join(prepared, "corpus", "train.ids.npz.xz")]
    assert "AMD" in text or "Intel" in text or "CPUs" in text  # the hardware line
    bert = tables / "runs" / "bert-4x16-seed1"  # the host pipeline (a PyDataset)
    with open(bert / "train_summary.json", encoding="utf-8") as f:
        summary = json.load(f)
    assert summary["backend"] == "jax" and not summary["device_data"]
    assert os.path.isfile(bert / "model.weights.h5")
    assert not os.path.isdir(bert / "logs")  # its few steps reach no multiple of --log-every


def test_jobs_runs_the_fine_tunings_as_child_processes_with_their_logs_kept(tables):
    logs = sorted(os.listdir(tables / "logs"))
    assert logs == [
        "ltr-4x16-seed1-conll2003-bilstm-seed1-metrics.log",
        "ltr-4x16-seed1-conll2003-seed1-metrics.log",
    ]
    outputs = set()
    for name in logs:
        with open(tables / "logs" / name, encoding="utf-8") as f:
            text = f.read()
        assert "dev f1" in text, text  # each child's own output, its dev score
        outputs.add(re.search(r"go to (\S+)/logs/scalars.csv", text).group(1))
    runs = tables / "finetune" / "ltr-4x16-seed1"
    assert outputs == {str(runs / "conll2003-seed1"), str(runs / "conll2003-bilstm-seed1")}


def test_one_pretraining_serves_every_table_that_needs_it(tables):
    runs = sorted(os.listdir(tables / "runs"))
    # bert: pretraining-tasks, feature-based, masking's 80/10/10, beyond-bert, training-steps
    assert runs.count("bert-4x16-seed1") == 1
    assert "mask-100-0-0-4x16-seed1" in runs and "electra-4x16-seed1" in runs
    features = sorted(os.listdir(tables / "features" / "bert-4x16-seed1"))
    assert {"embeddings-seed1", "layers-1,-2,-3,-4-sum-seed1", "all-sum-seed1"} <= set(features)


def test_the_gpu_table_call_rehearses_prepare_run_and_merge(jax_python, tmp_path):
    """bench/gpu_table.sh as a GPU call uses it, at the smoke scale: `prepare` here (the
    wheels, the input), `run` in the JAX-only environment (SMOKE=1: its own python, no
    install) for one pre-training run, then `merge` and `--report` here. A fault in the
    script's own steps costs a lent GPU's minutes; here it costs a test."""
    import subprocess
    import tarfile

    script = os.path.join(REPO_ROOT, "bench", "gpu_table.sh")
    job, out, work = tmp_path / "job", tmp_path / "out", tmp_path / "w"
    data = make_smoke_data(tmp_path / "data")
    env = {**subprocess_env(), "SMOKE": "1", "JOB": str(job), "DATA": data, "W": str(work)}

    def bash(*args, **more):
        done = subprocess.run(
            ["bash", script, *args], env={**env, **more}, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout

    bash("prepare", "pretraining-tasks", PY=sys.executable)
    wheels = {name.split("-")[0] for name in os.listdir(job / "whl")}
    assert {"keras", "keras_hub", "optree", "namex"} <= wheels, wheels
    assert {"input.tar.xz", "corpus"} <= set(os.listdir(job))

    printed = bash(
        "run", PY=jax_python, OUT=str(out), TABLE="pretraining-tasks", RUNS="bert-4x16-seed1",
        JOBS="1", JOB_INPUT=str(tmp_path / "input"),
        JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jc"), PACK_EVERY="2",
    )  # fmt: skip
    assert "pretraining-tasks exit 0" in printed, printed[-2000:]
    # packed as the runs finish, not only at the end: a call cut off at its limit keeps them
    assert printed.count("results packed at") >= 2, printed[-2000:]
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]
    assert {"pretraining-tasks.md", "results.tar.xz", "run.log", "env.txt"} <= set(os.listdir(out))
    with tarfile.open(out / "results.tar.xz") as archive:
        names = archive.getnames()
    assert any(n.endswith("bert-4x16-seed1/conll2003-seed1/metrics.json") for n in names)

    merged = tmp_path / "merged"
    bash("merge", str(out / "results.tar.xz"), str(merged), PY=sys.executable)
    done = run_module(
        "model.experiments",
        ["pretraining-tasks", "--scale", "smoke", "--data", str(tmp_path / "input"),
         "--work", str(merged), "--report"],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with open(merged / "pretraining-tasks.md", encoding="utf-8") as f:
        rows = dict(zip(("bert", "no-nsp"), measured_cells(f.read())))
    assert "—" not in rows["bert"] and set(rows["no-nsp"]) == {"—"}


def test_a_gpu_call_without_a_gpu_stops_at_once(jax_python, tmp_path):
    """bench/gpu_env.sh's device_env: outside a CPU rehearsal (SMOKE=1), a JAX that sees no
    GPU ends the call before its minutes go at a CPU's speed; it says so in its env file."""
    import subprocess

    env_sh = os.path.join(REPO_ROOT, "bench", "gpu_env.sh")
    env = {k: v for k, v in subprocess_env().items() if k != "SMOKE"}
    line = f'source "{env_sh}"; export KERAS_BACKEND=jax; PY="{jax_python}"; device_env "{tmp_path}/env.txt"'
    done = subprocess.run(
        ["bash", "-c", line], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "JAX sees no GPU (backend cpu)" in done.stdout
    line = line.replace("device_env", "SMOKE=1 device_env")
    done = subprocess.run(
        ["bash", "-c", line], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
