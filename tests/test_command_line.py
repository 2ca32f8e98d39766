"""The commands' manners: `--help` without TensorFlow, and runs without its C++ start-up lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from model.io.native_logs import STARTUP_LINES
from tests.helpers import (
    REPO_ROOT,
    finetune_argv,
    make_init,
    make_records,
    module_command,
    pretrain_argv,
    write_sst2,
)

COMMANDS = [
    ("model.train",),
    ("model.train", "pretrain"),
    ("model.train", "finetune"),
    ("model.evaluate",),
    ("model.convert",),
    ("model.data",),
    ("model.vocab",),
    ("model.extract_features",),
    ("model.feature_tagger",),
    ("model.experiments",),
    ("export",),
    ("export.report",),
    ("app",),
]

# Runs a module as `python -m` would, then prints which heavy frameworks it imported.
_RUN_AND_LIST_IMPORTS = """
import runpy, sys
module, *sys.argv[1:] = sys.argv[1:]
sys.argv[0] = module
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code
else:
    code = 0
heavy = sorted(m for m in sys.modules
               if m.split(".")[0] in ("tensorflow", "tensorflow_text", "keras", "keras_hub", "jax"))
print("IMPORTED:", heavy)
sys.exit(code)
"""


def _env(**overrides) -> dict:
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # as a user's shell has it
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(overrides)
    return env


def _run_listing_imports(argv, **env) -> subprocess.CompletedProcess:
    """`python -m argv...` from the repository root, as a user's shell runs it (with `env`
    set besides), its stdout ending in "IMPORTED: [the heavy frameworks it imported]"."""
    return subprocess.run(
        [sys.executable, "-c", _RUN_AND_LIST_IMPORTS, *argv],
        cwd=REPO_ROOT,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_answers_without_importing_tensorflow(command):
    done = _run_listing_imports([*command, "--help"])
    assert done.returncode == 0, done.stderr
    assert "usage: python -m " + command[0] in done.stdout
    assert "--verbose" in done.stdout or command == ("model.train",)
    assert "IMPORTED: []" in done.stdout, done.stdout[-500:]


MISSING = "/nonexistent-input"
MISSING_PATHS = [  # (command and arguments, what the one error line says)
    (["model.train", "pretrain", "--data", MISSING, "--output", "o", "--steps", "1"],
     f"{MISSING}: no record files match"),
    (["model.train", "finetune", "--task", "sst2", "--data", MISSING, "--init", ".",
      "--output", "o"], f"{MISSING}: no such file or directory"),
    (["model.train", "finetune", "--task", "sst2", "--data", ".", "--init", MISSING,
      "--output", "o"], f"{MISSING}: no such file or directory"),
    (["model.evaluate", "--task", "sst2", "--model", ".", "--data", MISSING],
     f"{MISSING}: no such file or directory"),
    (["model.evaluate", "--task", "sst2", "--model", ".", "--data", "tests"],
     "tests: a directory, where a file is expected"),
    (["model.data", "--input", MISSING, "--vocab", "v", "--output", "o"],
     f"{MISSING}: no such file"),
    (["model.data", "--input", "README.md", "--vocab", MISSING, "--output", "o"],
     f"{MISSING}: no such file or directory"),
    (["export", "--model", MISSING, "--out", "o"], f"{MISSING}: no such file or directory"),
    (["export", "--model", ".", "--out", "o", "--data", "tests"],
     "tests: a directory, where a file is expected"),
    (["export", "--model", ".", "--out", "tests"],
     "tests: exists and is not a bundle; refusing to replace it"),
    (["model.extract_features", "--model", MISSING, "--input", "README.md", "--output", "o"],
     f"{MISSING}: no such file or directory"),
    (["model.feature_tagger", "--model", ".", "--data", MISSING, "--output", "o"],
     f"{MISSING}: no such file or directory"),
]  # fmt: skip


@pytest.mark.parametrize("argv, message", MISSING_PATHS, ids=lambda a: " ".join(a[:2]))
def test_a_missing_input_path_fails_before_any_framework_is_imported(argv, message):
    """A mistyped path: exit status 1 and one line naming it, with nothing heavy imported
    (TensorFlow alone takes seconds), so it answers in well under a second."""
    done = _run_listing_imports(argv)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.strip() == f"error: {message}"
    assert "IMPORTED: []" in done.stdout, done.stdout[-500:]


OVERWRITING = [  # (command and arguments, what the one error line says): an output that is
    # an input (the probe's cases: each overwrote its input, with exit status 0)
    (["model.train", "finetune", "--task", "sst2", "--data", "README.md", "--init", "tests",
      "--output", "tests"], "--output tests would overwrite --init tests: choose another --output"),
    (["model.train", "finetune", "--task", "sst2", "--data", "tests/fixtures", "--init", ".",
      "--output", "tests"], "--output tests would overwrite --data tests/fixtures (it lies "
     "inside): choose another --output"),
    (["model.train", "pretrain", "--data", "tests/fixtures/*", "--output", "tests/fixtures",
      "--steps", "1"], "--output tests/fixtures would overwrite --data tests/fixtures"),
    (["model.evaluate", "--task", "sst2", "--model", ".", "--data", "README.md", "--output",
      "README.md"], "--output README.md would overwrite --data README.md"),
    (["export.report", "--model", ".", "--data", "README.md", "--output", "README.md"],
     "--output README.md would overwrite --data README.md"),
    (["model.tasks.squad", "make-v2-train", "--input", "README.md", "--output", "README.md"],
     "--output README.md would overwrite --input README.md"),
    (["model.tasks.squad", "split-dev", "--input", "README.md", "--tune", "a.json", "--report",
      "a.json"], "--report a.json would overwrite --tune a.json"),
    # a folder no run wrote (a fine-tuning wrote its model among a user's files, or over one)
    (["model.train", "finetune", "--task", "sst2", "--data", "README.md", "--init", ".",
      "--output", "docs"], "--output docs already holds other files ("),
    (["model.train", "pretrain", "--data", "tests/fixtures/*", "--output", "docs", "--steps",
      "1"], "--output docs already holds other files ("),
    (["model.data", "--input", "README.md", "--vocab", "tests/fixtures/bert-base-uncased-vocab.txt",
      "--output", "docs"], "docs: output exists and is not an empty directory"),  # 10 s
    # a bundle or a folder of no model as --init, text as records (found after TensorFlow, 12 s)
    (["model.train", "finetune", "--task", "sst2", "--data", "README.md", "--init",
      "assets/models/sst2", "--output", "o"], "assets/models/sst2: a LiteRT bundle (python -m "
     "export's output), which only runs: train, convert or export from the model directory"),
    (["model.train", "pretrain", "--data", "README.md", "--init-checkpoint", "docs", "--output",
      "o", "--steps", "1"], "docs: not a recognised model folder (expected config.json"),
    (["model.train", "pretrain", "--data", "README.md", "--output", "o", "--steps", "1"],
     "README.md: not a TFRecord file (no record header at its start); pre-training reads the "
     "records python -m model.data makes from text"),
    # a model of another task, a flag the task would pass over
    (["model.evaluate", "--task", "squad2", "--model", "assets/models/sst2", "--data",
      "README.md"], "assets/models/sst2: holds a 'classifier' model, but task squad2 needs a "),
    (["model.evaluate", "--task", "mlm", "--model", "assets/models/sst2", "--data", "README.md"],
     "assets/models/sst2: a 'classifier' bundle has no masked-LM head"),
    (["model.evaluate", "--task", "rtd", "--model", "assets/models/mlm", "--data", "README.md"],
     "assets/models/mlm: a 'pretraining' bundle has no replaced-token detection head"),
    (["model.evaluate", "--task", "sst2", "--model", "assets/models/sst2", "--data", "README.md",
      "--seed", "1"], "--seed: --task sst2 takes no such flag; leave it out"),
    # and values only the run noticed, after TensorFlow: a mistyped preset, a dropout of 1.5
    (["model.train", "pretrain", "--data", "d", "--output", "o", "--steps", "1", "--config",
      "tinny"], "--config tinny: neither a preset (tiny, mini,"),
    ([*"model.train finetune --task sst2 --data README.md --init . --output o".split(),
      "--dropout", "1.5"], "--dropout is a rate from 0 up to 1 (not included), not 1.5"),
]  # fmt: skip


@pytest.mark.parametrize("argv, message", OVERWRITING, ids=lambda a: " ".join(a[:2]))
def test_an_output_that_is_an_input_or_a_bad_value_is_refused_at_start(argv, message):
    done = _run_listing_imports(argv)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.strip().startswith(f"error: {message}"), done.stderr[-2000:]
    assert "IMPORTED: []" in done.stdout, done.stdout[-500:]
    assert not os.path.exists(os.path.join(REPO_ROOT, "a.json"))


NUMBERS = [  # (a flag's value, argparse's line): each was a traceback, a hang or a silent run
    (["--log-every", "0"], "argument --log-every: must be at least 1, not 0"),  # % 0
    (["--checkpoint-every", "0"], "argument --checkpoint-every: must be at least 1, not 0"),
    (["--shuffle-buffer", "0"], "argument --shuffle-buffer: must be at least 1, not 0"),
    (["--eval-steps", "-3"], "argument --eval-steps: must be at least 1, not -3"),  # hung
    (["--learning-rate=-1e-4"], "argument --learning-rate: must be positive, not -1e-4"),
    (["--warmup-steps", "-5"], "argument --warmup-steps: must be at least 0, not -5"),
    (["--max-predictions", "0"], "argument --max-predictions: must be at least 1, not 0"),
    (["--steps-per-call", "0"], "argument --steps-per-call: must be at least 1, not 0"),
]  # fmt: skip


@pytest.mark.parametrize("flags, message", NUMBERS, ids=lambda a: a[0])
def test_a_number_out_of_range_is_a_usage_error_naming_its_flag(flags, message, capsys):
    from model.train import parse_args

    with pytest.raises(SystemExit) as stop:
        parse_args(["pretrain", "--data", "d", "--output", "o", "--steps", "1", *flags])
    assert stop.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    "module, argv, message",
    [
        ("model.data", ["--input", "i", "--vocab", "v", "--output", "o", "--seq-len", "4"],
         "error: --seq-len must be at least 8, not 4"),  # said "max_seq_length", after reading
        ("model.convert", ["--from", "hf", "s", "--to", "keras", "d", "--num-labels", "0"],
         "argument --num-labels: must be at least 1, not 0"),  # "num_labels size(s) a new head"
        ("model.convert", ["--from", "hf", "s", "--to", "keras", "d", "--num-choices", "-2"],
         "argument --num-choices: must be at least 1, not -2"),
    ],
    ids=lambda a: a if isinstance(a, str) else None,
)  # fmt: skip
def test_other_commands_name_the_flag_out_of_range(module, argv, message, capsys):
    import importlib

    with pytest.raises(SystemExit) as stop:  # argparse's usage error, before any path is read
        importlib.import_module(module).main(argv)
    assert stop.value.code == 2 and message in capsys.readouterr().err


PRETRAIN = ["model.train", "pretrain", "--data", "README.md", "--output", "o", "--steps", "1"]
FINETUNE = ["model.train", "finetune", "--task", "sst2", "--data", "README.md", "--init", "tests",
            "--output", "o"]  # fmt: skip


@pytest.mark.parametrize(
    "argv, env, message",
    [
        ([*PRETRAIN, "--strategy", "multiworker"], {"TF_CONFIG": '"{}"'},  # quoted twice
         "TF_CONFIG is str JSON, not an object: {"),
        ([*PRETRAIN, "--strategy", "cpu", "--cpu-replicas", "2"], {},
         "--cpu-replicas needs --strategy mirrored"),
        ([*PRETRAIN, "--strategy", "mirrored", "--cpu-replicas", "0"], {},
         "--cpu-replicas must be positive"),
        ([*PRETRAIN, "--strategy", "data-parallel"], {},
         "--strategy data-parallel is for KERAS_BACKEND=jax"),
        ([*PRETRAIN, "--strategy", "mirrored"], {"KERAS_BACKEND": "jax"},
         "--strategy mirrored is a tf.distribute strategy; under KERAS_BACKEND=jax"),
        ([*FINETUNE, "--strategy", "gpu"], {"KERAS_BACKEND": "jax"},
         "--strategy gpu is a tf.distribute strategy; under KERAS_BACKEND=jax"),
        # the one-accelerator flags (found after TensorFlow's import, 11 s, before)
        ([*PRETRAIN, "--device-data"], {},
         "--device-data runs under KERAS_BACKEND=jax on one device"),
        ([*FINETUNE, "--steps-per-call", "5"], {"KERAS_BACKEND": "jax"},
         "--steps-per-call takes a positive number, with --device-data"),
        ([*FINETUNE, "--seeds", "1,2"], {}, "--seeds trains its seeds together"),
    ],
)  # fmt: skip
def test_a_strategy_the_backend_cannot_run_fails_before_any_framework_is_imported(
    argv, env, message
):
    done = _run_listing_imports(argv, **{"KERAS_BACKEND": "tensorflow", **env})
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.startswith(f"error: {message}"), done.stderr[-2000:]
    assert "IMPORTED: []" in done.stdout, done.stdout[-500:]


BAD_MODEL = "BAD"  # stands for a model directory whose config.json has num_layers "six"
BAD_CONFIG = [  # every command that reads a model directory, with it
    ["model.train", "finetune", "--task", "sst2", "--data", "README.md", "--init", BAD_MODEL,
     "--output", "o"],
    ["model.train", "pretrain", "--data", "README.md", "--init", BAD_MODEL, "--output", "o",
     "--steps", "1"],
    ["model.evaluate", "--task", "sst2", "--model", BAD_MODEL, "--data", "README.md"],
    ["export", "--model", BAD_MODEL, "--out", "o"],
    ["model.convert", "--from", "keras", BAD_MODEL, "--to", "hf", "o"],
    ["model.extract_features", "--model", BAD_MODEL, "--input", "README.md", "--output", "o"],
    ["model.feature_tagger", "--model", BAD_MODEL, "--data", "README.md", "--output", "o"],
]  # fmt: skip


@pytest.mark.parametrize("argv", BAD_CONFIG, ids=lambda a: " ".join(a[:2]))
def test_a_bad_model_config_fails_before_any_framework_is_imported(tmp_path, argv):
    """A model directory's config.json is checked before TensorFlow starts: one line naming
    the file and the field, in well under a second, where it took TensorFlow's start first."""
    model = tmp_path / "model"
    model.mkdir()
    encoder = {"num_layers": "six", "num_heads": 2, "hidden_dim": 8, "intermediate_dim": 16}
    (model / "config.json").write_text(
        f'{{"task": "classifier", "encoder": {json.dumps(encoder)}}}'
    )
    (model / "model.weights.h5").write_bytes(b"")
    done = _run_listing_imports([str(model) if a == BAD_MODEL else a for a in argv])
    assert done.returncode in (1, 2), done.stderr[-2000:]  # model.convert's usage errors exit 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.endswith(
        f"error: {model}/config.json: encoder: BertConfig.num_layers must be a positive integer, got 'six'"
    ), last
    assert "IMPORTED: []" in done.stdout, done.stdout[-500:]


def test_startup_pattern_knows_the_lines_tensorflow_prints():
    seen = [
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        "I0000 00:00:1795567728.442491    4722 port.cc:153] oneDNN custom operations are on.",
        "I0000 00:00:1795567728.442769    4722 cudart_stub.cc:31] Could not find cuda drivers on "
        "your machine, GPU will not be used.",
        "E0000 00:00:1795567730.697054    4722 cuda_platform.cc:52] failed call to cuInit: "
        "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
        "E0000 00:00:1795720853.992212   14968 util.cc:131] oneDNN supports DT_INT64 only on "
        "platforms with AVX-512. Falling back to the default Eigen-based implementation if present.",
    ]
    for line in seen:
        assert STARTUP_LINES.search(line), line
    for line in [
        "error: data/train.tsv: line 3: 2 fields, expected 2",
        "Epoch 1/3",
        "E0000 00:00:1.0 1 op_kernel.cc:1] OP_REQUIRES failed: a real error",
    ]:
        assert not STARTUP_LINES.search(line), line


@pytest.mark.slow
def test_training_runs_print_no_tensorflow_startup_lines(tmp_path):
    init = make_init(tmp_path)
    data = write_sst2(tmp_path / "sst2", train=8, dev=4)
    records = make_records(tmp_path, "records")
    argvs = {
        "finetune": lambda name: finetune_argv("sst2", data, init, tmp_path / name),
        "pretrain": lambda name: pretrain_argv(records, tmp_path / name, steps=2),
    }

    def run(command, name, *extra, **env):
        return subprocess.run(
            module_command("model.train", [*argvs[command](name), *extra]),
            cwd=REPO_ROOT,
            env=_env(**env),
            capture_output=True,
            text=True,
            timeout=300,
        )

    # A pre-training: besides the import's lines, a masked-LM model's int64 transpose
    # (Keras's take_along_axis) printed oneDNN's "supports DT_INT64 only on platforms
    # with AVX-512" mid-run.
    quiet = run("pretrain", "quiet")
    assert quiet.returncode == 0, quiet.stderr
    output = (quiet.stdout + quiet.stderr).splitlines()
    assert [line for line in output if STARTUP_LINES.search(line)] == []
    assert "oneDNN supports" not in quiet.stderr, quiet.stderr
    assert "saved" in quiet.stdout  # the project's own lines are still there

    # --verbose, or the user's own TF_CPP_MIN_LOG_LEVEL, brings them back.
    loud = (
        run("finetune", "verbose", "--verbose"),
        run("pretrain", "user", TF_CPP_MIN_LOG_LEVEL="0"),
    )
    for done in loud:
        assert done.returncode == 0, done.stderr
        assert any(STARTUP_LINES.search(line) for line in done.stderr.splitlines()), done.stderr
    assert "oneDNN supports DT_INT64" in loud[1].stderr  # what the quiet run spent


# (module, the flags before the one checked, canonical, older spelling, dest)
SPELLINGS = [
    ("model.train", ["pretrain", "--data", "d", "--output", "o", "--steps", "1"], "--init",
     "--init-checkpoint", "init_checkpoint"),
    ("model.train", ["finetune", "--task", "sst2", "--data", "d", "--output", "o"], "--init",
     "--init-checkpoint", "init"),
    ("model.evaluate", ["--task", "mlm", "--model", "m", "--data", "d"], "--output", "--out",
     "out"),
    ("model.evaluate", ["--task", "mlm", "--model", "m", "--data", "d"], "--seq-len",
     "--max-seq-length", "max_seq_length"),
    ("export", ["--model", "m"], "--output", "--out", "out"),
    ("export.report", ["--model", "m", "--data", "d"], "--output", "--out", "out"),
    ("model.data", ["--input", "i", "--vocab", "v", "--output", "o"], "--seq-len",
     "--max-seq-length", "max_seq_length"),
    ("model.extract_features", ["--model", "m", "--input", "i", "--output", "o"], "--seq-len",
     "--max-seq-length", "max_seq_length"),
    ("model.feature_tagger", ["--model", "m", "--data", "d", "--output", "o"], "--seq-len",
     "--max-seq-length", "max_seq_length"),
    ("model.convert", ["--from", "hf", "s", "--to", "keras-hub", "d"], "--seq-len",
     "--sequence-length", "sequence_length"),
]  # fmt: skip


def test_negatives_report_takes_output_as_every_command_does():
    from model.tasks import squad

    for flag in ("--output", "--out"):
        args = squad._parser().parse_args(["negatives-report", "--input", "i", flag, "x.json"])
        assert args.out == "x.json"


def test_evaluates_help_describes_every_task_it_accepts():
    """The Tasks section of `python -m model.evaluate --help` is written by hand: a task added
    to model.tasks (or an alias) must be named there too."""
    from model import evaluate
    from model.tasks import SPELLINGS  # sst-2 for sst2: other spellings, not other tasks

    section = evaluate.__doc__.split("Tasks:")[1].split("--model may also")[0]
    words = set(section.replace("(", " ").replace(")", " ").split())
    missing = [t for t in evaluate.TASKS if t not in words and t not in SPELLINGS]
    assert not missing, f"model/evaluate.py's docstring does not name {missing}"


@pytest.mark.parametrize("module, before, flag, older, dest", SPELLINGS)
def test_one_spelling_per_flag_and_the_older_one_still_works(module, before, flag, older, dest):
    import importlib

    parse = importlib.import_module(module if module != "export" else "export.__main__")
    parse = getattr(parse, "parse_args", None) or parse._parser().parse_args
    value = "16" if "seq" in flag else "x"
    new, old = (vars(parse([*before, f, value])) for f in (flag, older))
    assert new[dest] == old[dest] == (int(value) if "seq" in flag else value)


def test_the_projects_warnings_print_as_one_line(monkeypatch):
    """A command's ProjectWarnings (a Hugging Face tokenizer setting read otherwise, a
    checkpoint's notes) print as `warning: ...`; other warnings keep Python's form."""
    import warnings

    from model.io import native_logs

    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)
    native_logs.plain_warnings()
    text = warnings.formatwarning("cfg.json: x", native_logs.ProjectWarning, "/a/b.py", 3)
    assert text == "warning: cfg.json: x\n"
    theirs = warnings.formatwarning("deprecated", UserWarning, "/usr/lib/x.py", 3, line="x()")
    assert "UserWarning: deprecated" in theirs


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--mask-rate", "-0.1"], "--mask-rate must be in (0, 1], not -0.1"),
        (["--random-token-rate", "1.5"], "--random-token-rate must be in [0, 1], not 1.5"),
        (
            ["--mask-token-rate", "0.8", "--random-token-rate", "0.5"],
            "--mask-token-rate 0.8 and --random-token-rate 0.5 sum to more than 1",
        ),
    ],
)
def test_masking_rates_are_checked_before_any_framework_starts(flags, message, capsys):
    """Named as flags by both commands that take them (model.data said `mask_rate`, after
    TensorFlow had started)."""
    from model import data, train

    with pytest.raises(SystemExit):
        train.parse_args(["pretrain", "--data", "d", "--output", "o", "--steps", "5", *flags])
    assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        data.parse_args(["--input", "i", "--vocab", "v", "--output", "o", *flags])
    assert message in capsys.readouterr().err
