"""`python -m model.recipes.defaults`: the plan, --dry-run, --only, skipping and resuming (seconds;
nothing is trained).

    PYTHONPATH=. TF_CPP_MIN_LOG_LEVEL=3 python -m pytest -q tests/test_recipes.py
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest

from model.recipes import defaults
from tests.helpers import SHARED_DATA

LINE = re.compile(r"^\[(\d+)/(\d+) (\w+)\] (skip, (\S+) exists: )?(python -m .*)$")


def dry_run(tmp_path, capsys, *extra) -> tuple[list, str]:
    """[(step, skipped, argv)] of the commands a dry run prints, and its stderr."""
    rc = defaults.main(
        [
            "--dry-run",
            "--minilm",
            str(tmp_path / "hf"),
            "--work",
            str(tmp_path / "w"),
            "--assets",
            str(tmp_path / "a"),
            "--data",
            str(tmp_path / "d"),
            *extra,
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0
    commands = []
    for line in captured.out.splitlines():
        m = LINE.match(line)
        if m:
            commands.append((m.group(3), bool(m.group(4)), shlex.split(m.group(6))))
    return commands, captured.err


def flags(argv: list, name: str):
    """The value after `name` in argv (all of them for a repeated flag)."""
    values = [argv[i + 1] for i, a in enumerate(argv) if a == name]
    return values[0] if len(values) == 1 else values


def test_dry_run_prints_every_command_in_order_and_runs_nothing(tmp_path, capsys):
    commands, _ = dry_run(tmp_path, capsys)
    w, a, d = (str(tmp_path / n) for n in "wad")
    modules = [
        (step, argv[2] + (f" {argv[3]}" if argv[2] == "model.train" else ""))
        for step, _, argv in commands
    ]
    assert modules == [
        ("convert", "model.convert"),
        ("mlm", "model.data"),
        ("mlm", "model.train pretrain"),
        ("mlm", "model.evaluate"),
        ("mlm", "export"),
        ("mlm", "model.evaluate"),
        ("sst2", "model.train finetune"),
        ("sst2", "export"),
        ("sst2", "model.evaluate"),
        ("conll2003", "model.train finetune"),
        ("conll2003", "export"),
        ("conll2003", "model.evaluate"),
        ("squad1", "model.train finetune"),
        ("squad1", "export"),
        ("squad1", "model.evaluate"),
        ("electra", "model.data"),
        ("electra", "model.data"),
        ("electra", "model.train pretrain"),
        ("electra", "export"),
        ("electra", "export.report"),
    ]
    assert not any(skipped for _, skipped, _ in commands)
    argv = {(step, i): c for i, (step, _, c) in enumerate(commands)}
    assert argv["convert", 0][3:] == [
        "--from",
        "hf",
        str(tmp_path / "hf"),
        "--to",
        "keras",
        f"{w}/minilm",
        "--overwrite",
    ]
    records = argv["mlm", 1]
    assert flags(records, "--input") == [
        f"{d}/pretrain/enwiki-2015/AA/*.gz",
        f"{d}/pretrain/gutenberg/books/00[0-9]*.txt.gz",
    ]
    assert flags(records, "--vocab") == f"{w}/minilm/vocab.txt"
    assert flags(records, "--seq-len") == "128" and flags(records, "--num-shards") == "64"
    keys = (
        "--config",
        "--data",
        "--init",
        "--steps",
        "--warmup-steps",
        "--batch-size",
        "--learning-rate",
        "--mask-rate",
        "--max-predictions",
        "--seed",
        "--output",
        "--checkpoint-every",
        "--mixed-precision",
    )
    # One run from MiniLM on the first 26 of the 64 shards; its model is the one exported.
    shards = ("part-0000?-*", "part-0001?-*", "part-0002[0-5]-*")
    assert {k: flags(argv["mlm", 2], k) for k in keys} == {
        "--config": "minilm-l6",
        "--data": ",".join(f"{w}/pretrain_records/{s}" for s in shards),
        "--batch-size": "256",
        "--mask-rate": "0.2",
        "--max-predictions": "26",
        "--checkpoint-every": "950",
        "--mixed-precision": "mixed_bfloat16",
        "--init": f"{w}/minilm",
        "--output": f"{w}/mlm",
        "--steps": "3800",
        "--warmup-steps": "228",
        "--learning-rate": "5e-4",
        "--seed": "12345",
    }
    assert "--dropout" not in argv["mlm", 2]
    sst2 = argv["sst2", 6]
    assert sst2[3:] == [
        "finetune",
        "--task",
        "sst2",
        "--data",
        f"{d}/glue/SST-2",
        "--init",
        f"{w}/minilm",
        "--output",
        f"{w}/sst2",
        "--group-by-length",
        "--seq-len",
        "64",
        "--learning-rate",
        "5e-5",
        "--epochs",
        "2",
    ]
    conll = argv["conll2003", 9]
    assert (
        flags(conll, "--data"),
        flags(conll, "--learning-rate"),
        flags(conll, "--epochs"),
        "--group-by-length" in conll,
    ) == (f"{d}/conll2003", "8e-5", "4", True)
    squad = argv["squad1", 12]
    assert {
        k: flags(squad, k)
        for k in (
            "--data",
            "--learning-rate",
            "--epochs",
            "--batch-size",
            "--mixed-precision",
            "--checkpoint-every",
        )
    } == {
        "--data": f"{d}/squad/train-v1.1.reconstructed.json",
        "--learning-rate": "1e-4",
        "--epochs": "0.8",
        "--batch-size": "32",
        "--mixed-precision": "mixed_bfloat16",
        "--checkpoint-every": "100",
    }
    assert "--group-by-length" in squad
    electra_records, held_out, electra, electra_export, card = (
        argv["electra", i] for i in range(15, 20)
    )
    assert flags(electra_records, "--input") == [
        f"{d}/pretrain/enwiki-2015/AA/wiki_0*.gz",
        f"{d}/pretrain/gutenberg/books/00[0-2]*.txt.gz",
    ]
    assert flags(held_out, "--input") == f"{d}/wikitext-2-raw/wiki.valid.raw"
    for records in (electra_records, held_out):
        assert flags(records, "--vocab") == f"{w}/minilm/vocab.txt"
        assert flags(records, "--inputs") == "segment-pairs"
    assert {
        k: flags(electra, k)
        for k in (
            "--data",
            "--eval-data",
            "--output",
            "--objective",
            "--config",
            "--steps",
            "--seed",
        )
    } == {
        "--data": f"{w}/electra_records",
        "--eval-data": f"{w}/electra_held_out",
        "--output": f"{w}/electra",
        "--objective": "electra",
        "--config": "mini",
        "--steps": "1032",
        "--seed": "1",
    }
    assert "--init" not in electra  # from scratch
    assert (flags(card, "--model"), flags(card, "--output")) == (
        f"{w}/electra",
        f"{w}/electra.card.md",
    )
    exports = {step: c for (step, _), c in argv.items() if c[2] == "export"}
    assert sorted(exports) == ["conll2003", "electra", "mlm", "squad1", "sst2"]  # no encoder
    for step, folder, model, dev, extra in (
        ("mlm", "mlm", "mlm", "wikitext-2-raw/wiki.valid.raw", ["--encoder-signature"]),
        ("sst2", "sst2", "sst2", "glue/SST-2/dev.tsv", []),
        ("conll2003", "conll2003", "conll2003", "conll2003/valid.txt", []),
        ("squad1", "squad", "squad1", "squad/dev-v1.1.json", []),
        ("electra", "electra", "electra", "wikitext-2-raw/wiki.valid.raw", []),
    ):
        assert exports[step][3:] == [
            "--model",
            f"{w}/{model}",
            "--quantize",
            "dynamic",
            "--output",
            f"{a}/{folder}",
            "--data",
            f"{d}/{dev}",
            *extra,
        ], step
    evaluations = [(step, c) for (step, _), c in argv.items() if c[2] == "model.evaluate"]
    assert [
        (s, flags(c, "--task"), flags(c, "--model"), flags(c, "--output")) for s, c in evaluations
    ] == [
        ("mlm", "mlm", f"{w}/mlm", f"{w}/mlm.metrics.json"),
        ("mlm", "mlm", f"{a}/mlm", f"{w}/mlm.bundle-metrics.json"),
        ("sst2", "sst2", f"{a}/sst2", f"{w}/sst2.bundle-metrics.json"),
        ("conll2003", "conll2003", f"{a}/conll2003", f"{w}/conll2003.bundle-metrics.json"),
        ("squad1", "squad1", f"{a}/squad", f"{w}/squad1.bundle-metrics.json"),
    ]
    assert os.listdir(tmp_path) == []  # a dry run writes nothing


def test_every_flag_exists_in_the_program_it_is_given_to(tmp_path, capsys):
    """Each command parses with its own module's argument parser (model.convert's parser lives
    inside its main(): checked by name)."""
    from export.__main__ import parse_args as export_args
    from export.report import parse_args as report_args
    from model.data import parse_args as data_args
    from model.evaluate import parse_args as evaluate_args
    from model.train import parse_args as train_args

    parsers = {
        "export": export_args,
        "export.report": report_args,
        "model.data": data_args,
        "model.evaluate": evaluate_args,
        "model.train": train_args,
    }
    commands, _ = dry_run(tmp_path, capsys)
    for _step, _, argv in commands:
        if argv[2] == "model.convert":
            assert set(a for a in argv[3:] if a.startswith("--")) <= {
                "--from",
                "--to",
                "--overwrite",
            }
            continue
        parsers[argv[2]](argv[3:])  # SystemExit (2) on an unknown flag


def test_only_selects_steps_in_recipe_order(tmp_path, capsys):
    commands, err = dry_run(tmp_path, capsys, "--only", "sst2, mlm")
    assert [step for step, _, _ in commands] == ["mlm"] * 5 + ["sst2"] * 3
    # They read WORK/minilm, which neither makes: a dry run says so, a real run refuses.
    assert "step mlm needs step convert's output" in err and "add convert to --only" in err
    rc = defaults.main(
        [
            "--only",
            "sst2",
            "--work",
            str(tmp_path / "w"),
            "--assets",
            str(tmp_path / "a"),
            "--data",
            str(tmp_path / "d"),
        ]
    )
    assert rc == 1
    assert "error: step sst2 needs step convert's output" in capsys.readouterr().err


def test_unknown_step_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        defaults.main(["--dry-run", "--only", "mlm,sst-2"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--only: unknown step 'sst-2'" in err
    assert "convert, mlm, sst2, conll2003, squad1" in err
    with pytest.raises(SystemExit):
        defaults.main(["--dry-run", "--only", ","])


def test_convert_needs_the_minilm_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(defaults.MINILM_ENV, raising=False)
    rc = defaults.main(["--only", "convert", "--work", str(tmp_path / "w")])
    assert rc == 1
    assert "pass --minilm DIR or set BERT_MINILM_DIR" in capsys.readouterr().err
    rc = defaults.main(
        ["--only", "convert", "--minilm", str(tmp_path / "none"), "--work", str(tmp_path / "w")]
    )
    assert rc == 1 and "no such directory" in capsys.readouterr().err


def test_a_command_whose_output_exists_is_skipped(tmp_path, capsys):
    w, a = tmp_path / "w", tmp_path / "a"
    for path in (w / "minilm" / "config.json", w / "sst2" / "metrics.json"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    bundle = a / "sst2" / "bundle.json"
    bundle.parent.mkdir(parents=True)
    bundle.write_text(json.dumps({"source": {"model_dir": str(w / "sst2")}}))
    commands, err = dry_run(tmp_path, capsys, "--only", "sst2")
    assert [(skipped, argv[2]) for _, skipped, argv in commands] == [
        (True, "model.train"),
        (True, "export"),
        (False, "model.evaluate"),
    ]
    assert err == ""  # convert's output exists: nothing missing


def test_a_shipped_bundle_of_another_model_is_exported_over(tmp_path, capsys):
    """A fresh clone's assets/models holds bundles made elsewhere: the recipe's own models
    replace them (an export is done only when the bundle was made from this run's model)."""
    w, a = tmp_path / "w", tmp_path / "a"
    (w / "sst2").mkdir(parents=True)
    (w / "sst2" / "metrics.json").write_text("{}")
    (a / "sst2").mkdir(parents=True)
    for bundle in ({"source": {"model_dir": "/elsewhere/runs/ft/sst2"}}, {}):
        (a / "sst2" / "bundle.json").write_text(json.dumps(bundle))
        commands, _ = dry_run(tmp_path, capsys, "--only", "sst2")
        assert [(skipped, argv[2]) for _, skipped, argv in commands] == [
            (True, "model.train"),
            (False, "export"),
            (False, "model.evaluate"),
        ]


def test_run_runs_times_skips_and_stops_at_a_failure(tmp_path):
    """Real child processes (`python -m json.tool`): the first run writes, the second skips, a
    failing command stops the run with its exit status."""
    source = tmp_path / "in.json"
    source.write_text('{"a": 1}')
    out, never = str(tmp_path / "out.json"), str(tmp_path / "never.json")
    step = defaults.Step("demo", (defaults.Command("json.tool", (str(source), out), out),))
    lines = []
    assert defaults.run([step], log=lines.append) == 0
    assert os.path.isfile(out)
    assert lines[1] == f"[1/1 demo] python -m json.tool {source} {out}"
    assert re.fullmatch(r"\[1/1 demo\] done in \d+\.\d s \(\d+\.\d min\)", lines[2])
    lines.clear()
    assert defaults.run([step], log=lines.append) == 0
    assert lines[1].startswith(f"[1/1 demo] skip, {out} exists") and "warning" not in lines[2]
    with open(out, "a") as f:
        f.write("{")  # cut short, or edited: skipped still, but said
    lines.clear()
    assert defaults.run([step], log=lines.append) == 0
    assert (
        lines[2]
        == f"[1/1 demo] warning: {out} is not valid JSON: delete it to run the command again"
    )
    broken = defaults.Step(
        "broken",
        (
            defaults.Command("json.tool", (str(tmp_path / "missing.json"), never), never),
            defaults.Command("json.tool", (str(source), never), never),
        ),
    )
    lines.clear()
    rc = defaults.run([broken], log=lines.append)
    assert rc != 0 and not os.path.exists(never)
    assert "failed with exit status" in lines[-1] and "[2/2" not in "".join(lines)


def test_an_output_made_by_another_command_stops_the_run(tmp_path):
    """Records or a pre-training made from another input format (ELECTRA's read `segments`
    until 2026-11-29) are not taken for this command's: the run stops naming what to delete;
    the same format, or a file written before the field was recorded, is skipped as done."""
    out = tmp_path / "electra_records" / "dataset.json"
    out.parent.mkdir()
    after = str(tmp_path / "after.json")
    made_with = (("input_format", "segment-pairs"),)
    step = defaults.Step(
        "demo",
        (
            defaults.Command("json.tool", ("-",), str(out), made_with=made_with),
            defaults.Command("json.tool", (str(out), after), after),
        ),
    )
    for held, stops in (({"input_format": "segments"}, True), ({"input_format": "segment-pairs"},
                        False), ({}, False)):  # fmt: skip
        out.write_text(json.dumps(held))
        lines = []
        assert defaults.run([step], log=lines.append) == int(stops)
        if stops:
            assert lines[-1] == (
                f"[1/2 demo] error: {out} says input_format 'segments', where this command "
                f"makes 'segment-pairs': delete {out.parent} and what was made from it (or "
                "choose another work folder) to make them again"
            )
            assert not os.path.exists(after)  # nothing built on it
            lines.clear()
            assert defaults.run([step], dry_run=True, log=lines.append) == 0
            assert lines[1].startswith("[1/2 demo] would stop here: ")
        else:
            assert lines[1].startswith("[1/2 demo] skip, ") and os.path.isfile(after)
            os.remove(after)
    # Where the recipe and the experiments use it: every records and pre-training command.
    from model.experiments.experiment import steps
    from model.experiments.plan import Work
    from model.experiments.scales import SCALES
    from model.experiments.tables import TABLES

    recipe = defaults.plan(defaults.Paths("M", "W", "A", "D"))
    formats = {
        (c.argv[0] if c.module == "model.train" else c.module, c.made_with)
        for step in recipe
        for c in step.commands
        if c.module == "model.data" or c.argv[0] == "pretrain"
    }
    assert formats == {
        ("model.data", (("input_format", "sentence-pairs"),)),
        ("model.data", (("input_format", "segment-pairs"),)),
        ("pretrain", (("input_format", "sentence-pairs"),)),
        ("pretrain", (("input_format", "segment-pairs"),)),
    }
    work = Work("W", "D", SCALES["cpu"])
    runs = [c for s in steps(TABLES["beyond-bert"](work), work) for c in s.commands]
    made = {c.output.split("/")[-2]: c.made_with for c in runs if c.argv[0] == "pretrain"}
    assert made["electra-mini-seed1"] == (("input_format", "segment-pairs"),)
    assert made["spanbert-mini-seed1"] == (("input_format", "segments"),)


def test_a_time_limit_stops_the_run_between_two_commands(tmp_path):
    from model.recipes.runner import STOPPED

    source = tmp_path / "in.json"
    source.write_text('{"a": 1}')
    first, second = str(tmp_path / "first.json"), str(tmp_path / "second.json")
    step = defaults.Step(
        "demo",
        (
            defaults.Command("json.tool", (str(source), first), first),
            defaults.Command("json.tool", (str(source), second), second),
        ),
    )
    lines = []
    assert defaults.run([step], log=lines.append, time_limit=-1) == STOPPED
    assert not os.path.exists(first)
    assert "[1/2 demo] not started: the -1 s time limit has passed (0 of 2" in lines[-1]
    assert "the same command line goes on from here" in lines[-1]
    assert defaults.run([step], log=lines.append, time_limit=3600) == 0  # then goes on
    assert os.path.isfile(first) and os.path.isfile(second)


MEET = """
import os, sys, time
mine, other, out, patience = sys.argv[1:5]
open(mine, "w").close()
deadline = time.time() + float(patience)
while not os.path.exists(other):
    if time.time() > deadline:
        sys.exit(4)
    time.sleep(0.05)
print("met", other)
open(out, "w").write("{}")
"""


def test_concurrent_commands_run_side_by_side_and_the_next_one_waits_for_them(
    tmp_path, monkeypatch
):
    """`jobs=2`: two concurrent commands that each wait for the other to start both finish
    (one after the other, the first would wait in vain and fail); the command after them,
    not concurrent, reads both outputs; each one's output is printed whole and kept."""
    (tmp_path / "meet.py").write_text(MEET)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    a, b, c = (str(tmp_path / f"{x}.json") for x in "abc")
    marks = [str(tmp_path / f"{x}.mark") for x in "ab"]
    meet = [
        defaults.Command("meet", (marks[0], marks[1], a, "60"), a, concurrent=True),
        defaults.Command("meet", (marks[1], marks[0], b, "60"), b, concurrent=True),
    ]
    after = defaults.Command("json.tool", (b, c), c)  # reads what the second one wrote
    lines = []
    logs = str(tmp_path / "logs")
    timings = str(tmp_path / "timings.json")
    step = defaults.Step("demo", (*meet, after))
    assert defaults.run([step], log=lines.append, jobs=2, log_dir=logs, timings=timings) == 0
    assert os.path.isfile(c)
    text = "\n".join(lines)
    assert "[2/3 demo] started beside 1 other(s)" in text
    assert f"met {marks[1]}" in text and f"met {marks[0]}" in text
    assert text.index("[1/3 demo] done in") < text.index("[3/3 demo] python -m json.tool")
    assert text.index("[2/3 demo] done in") < text.index("[3/3 demo] python -m json.tool")
    folder = os.path.basename(tmp_path)
    assert sorted(os.listdir(logs)) == [f"demo-{folder}-a.log", f"demo-{folder}-b.log"]
    # keyed relative to the timings' folder (WORK): a WORK moved or merged keeps its times
    from model.recipes import runner

    assert set(json.load(open(timings))) == {"a.json", "b.json", "c.json"}
    moved = tmp_path / "moved"
    moved.mkdir()
    legacy = {os.path.join("/elsewhere/w", "a.json"): 1.5}  # an absolute key, as before
    (moved / "timings.json").write_text(json.dumps(legacy))
    assert runner.time_of(str(moved / "timings.json"), str(moved / "a.json")) == 1.5
    assert runner.time_of(str(moved / "timings.json"), str(moved / "b.json")) is None
    assert runner.time_of(timings, c) == json.load(open(timings))["c.json"]


def test_a_failed_concurrent_command_stops_the_run_once_the_others_end(tmp_path, monkeypatch):
    (tmp_path / "meet.py").write_text(MEET)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    a, b, never = (str(tmp_path / f"{x}.json") for x in ("a", "b", "never"))
    step = defaults.Step(
        "demo",
        (
            # waits 0.5 s for a mark nobody writes: exit status 4
            defaults.Command(
                "meet", ("x.mark", str(tmp_path / "nobody"), a, "0.5"), a, concurrent=True
            ),
            defaults.Command("json.tool", (str(tmp_path / "missing.json"), b), b, concurrent=True),
            defaults.Command("json.tool", (str(tmp_path / "missing.json"), never), never),
        ),
    )
    monkeypatch.chdir(tmp_path)
    lines = []
    rc = defaults.run([step], log=lines.append, jobs=2, log_dir=str(tmp_path / "logs"))
    assert rc != 0
    text = "\n".join(lines)
    assert "[1/3 demo] failed with exit status 4" in text  # both ended and were reported
    assert "[2/3 demo] failed with exit status" in text
    assert "[3/3" not in text and not os.path.exists(never)


def test_a_time_limit_waits_for_the_running_children_then_stops(tmp_path, monkeypatch):
    """The limit passes while a concurrent command runs: it finishes (its output kept), no
    later command starts, and the status says the run stopped."""
    from model.recipes.runner import STOPPED

    (tmp_path / "slow.py").write_text(
        "import sys, time\ntime.sleep(1.5)\nopen(sys.argv[1], 'w').write('{}')\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    a, never = str(tmp_path / "a.json"), str(tmp_path / "never.json")
    step = defaults.Step(
        "demo",
        (
            defaults.Command("slow", (a,), a, concurrent=True),
            defaults.Command("slow", (never,), never),  # due after the 1 s limit
        ),
    )
    lines = []
    rc = defaults.run([step], log=lines.append, jobs=2, time_limit=1, log_dir=str(tmp_path))
    assert rc == STOPPED and os.path.isfile(a) and not os.path.exists(never)
    assert "[1/2 demo] done in" in "\n".join(lines)


def test_an_interrupted_run_stops_its_children_and_shows_their_output(tmp_path, monkeypatch):
    from model.recipes import runner

    (tmp_path / "meet.py").write_text(MEET)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    waits = defaults.Command(  # waits a minute for a mark nobody writes
        "meet",
        (str(tmp_path / "x"), str(tmp_path / "nobody"), str(tmp_path / "a.json"), "60"),
        str(tmp_path / "a.json"),
        concurrent=True,
    )
    started = []

    def interrupt(self, below):  # the parent is stopped while its child runs
        if self.running:
            started.extend(p for _, _, p, _, _ in self.running)
            raise KeyboardInterrupt
        return 0

    monkeypatch.setattr(runner.Children, "wait", interrupt)
    lines = []
    second = defaults.Command("json.tool", ("x", "y"), str(tmp_path / "y.json"), concurrent=True)
    status = defaults.run([defaults.Step("demo", (waits, second))], log=lines.append, jobs=2)
    assert status == runner.INTERRUPTED  # one line, not a traceback
    assert started and all(p.poll() is not None for p in started)  # none left running
    assert any(line.startswith("[1/2 demo] (stopped) output:") for line in lines)
    assert "# stopped by a signal; the same command line goes on from here" in lines


def _parent_once_its_child_runs(tmp_path, argv: list, mark) -> subprocess.Popen:
    """tmp_path/parent.py ARGV as a real process, once its child has written `mark`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.getcwd()]))
    parent = subprocess.Popen(
        [sys.executable, str(tmp_path / "parent.py"), *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.time() + 60
    while not mark.exists():  # the child has started and waits
        if parent.poll() is not None:
            pytest.fail(f"the parent ended first:\n{parent.stdout.read()}")
        assert time.time() < deadline, "no child started in 60 s"
        time.sleep(0.05)
    return parent


TERMINATED = """
import sys
from model.recipes import runner
marks, out = sys.argv[1:3]
waits = runner.Command(  # marks that it started, then waits a minute for a mark nobody writes
    "meet", (marks + "/child", marks + "/nobody", out, "60"), out, concurrent=True
)
sys.exit(runner.run([runner.Step("demo", (waits,))], jobs=2, log_dir=marks + "/logs"))
"""


def test_a_sigterm_to_the_parent_alone_stops_its_children(tmp_path):
    """`kill PID` of an experiments run (not `timeout`, which signals the whole group): the
    parent exits 143 and its concurrent child is stopped, not left running."""
    (tmp_path / "meet.py").write_text(MEET + "\n")
    (tmp_path / "parent.py").write_text(TERMINATED)
    parent = _parent_once_its_child_runs(
        tmp_path, [str(tmp_path), str(tmp_path / "a.json")], tmp_path / "child"
    )
    parent.send_signal(signal.SIGTERM)
    output = parent.communicate(timeout=30)[0]
    assert parent.returncode == 143, output
    assert "[1/1 demo] (stopped) output:" in output
    pids = subprocess.run(["pgrep", "-f", str(tmp_path / "nobody")], capture_output=True)
    assert pids.stdout.strip() == b"", "the child still runs"


def test_a_stopped_command_line_dies_of_its_signal_so_a_shell_loop_stops(tmp_path):
    """Ctrl-C (SIGINT) or `kill` (SIGTERM) of an experiments or recipe command line: once its
    children are stopped it dies of that signal (exit_with), as the shell expects: bash goes
    on to a loop's next command after an exit status of 130, not after a death by SIGINT."""
    (tmp_path / "meet.py").write_text(MEET + "\n")
    script = TERMINATED.replace("sys.exit(runner.run(", "files.exit_with(runner.run(")
    script = script.replace("import runner", "import runner\nfrom model.io import files")
    (tmp_path / "parent.py").write_text(script)
    for number, sent in enumerate((signal.SIGINT, signal.SIGTERM)):
        mark, out = tmp_path / f"m{number}", tmp_path / f"a{number}.json"
        mark.mkdir()
        parent = _parent_once_its_child_runs(tmp_path, [str(mark), str(out)], mark / "child")
        parent.send_signal(sent)
        output = parent.communicate(timeout=30)[0]
        assert parent.returncode == -sent, output
        assert "# stopped by a signal; the same command line goes on from here" in output


SAVER = """
import sys, time
mark, out = sys.argv[1:3]
open(mark, "w").close()
try:
    time.sleep(60)
except KeyboardInterrupt:  # a training saves its checkpoint here
    time.sleep(1)
    open(out + ".saved", "w").close()
    sys.exit(130)
"""

SERIAL = """
import sys
from model.recipes import runner
mark, out = sys.argv[1:3]
sys.exit(runner.run([runner.Step("demo", (runner.Command("saver", (mark, out), out),))]))
"""


def test_a_sigterm_to_the_parent_gives_its_one_child_time_to_save(tmp_path):
    """`kill PID` of a run of one command at a time (the default `--jobs 1`): the child gets
    an interrupt and time to save (it was killed at once), and the parent says it stopped."""
    (tmp_path / "saver.py").write_text(SAVER)
    (tmp_path / "parent.py").write_text(SERIAL)
    mark = tmp_path / "started"
    parent = _parent_once_its_child_runs(tmp_path, [str(mark), str(tmp_path / "a.json")], mark)
    parent.send_signal(signal.SIGTERM)
    output = parent.communicate(timeout=30)[0]
    assert parent.returncode == 143, output
    assert (tmp_path / "a.json.saved").exists(), "the child was killed before it saved"
    assert "# stopped by a signal; the same command line goes on from here" in output


def test_bundle_folders_are_the_ones_the_app_looks_for():
    """Every view gets a bundle: its own folder's, or (Attention) the mlm bundle's encoder
    signature through the view's fallback."""
    from app.models import OPTIONAL_VIEWS, VIEW, VIEWS
    from model import tasks

    folders = {v.folder: v.task for v in VIEWS + OPTIONAL_VIEWS}
    assert set(defaults.ASSET_FOLDERS.values()) == set(folders) - {"encoder"}
    made = {
        "mlm": "pretraining",
        "electra": "replaced_token_detection",  # the bundle's task, from the pre-training run
        **{t: tasks.get(t).head for t in defaults.FINETUNE},
    }
    for step, folder in defaults.ASSET_FOLDERS.items():
        assert folders[folder] == made[step], step
    attention = VIEW["attention"]
    assert attention.folder not in defaults.ASSET_FOLDERS.values()
    assert "pretraining" in attention.fallback and attention.method == "attention"


def test_table_reads_keras_and_bundle_metrics(tmp_path):
    import json

    p = defaults.Paths(None, str(tmp_path / "w"), str(tmp_path / "a"), str(tmp_path / "d"))
    (tmp_path / "w" / "sst2").mkdir(parents=True)
    (tmp_path / "w" / "sst2" / "metrics.json").write_text(json.dumps({"dev": {"accuracy": 0.89}}))
    (tmp_path / "w" / "sst2.bundle-metrics.json").write_text(json.dumps({"accuracy": 0.8876}))
    (tmp_path / "a" / "sst2").mkdir(parents=True)
    (tmp_path / "a" / "sst2" / "model.tflite").write_bytes(b"x" * 2_500_000)
    rows = defaults.table(p)
    assert f"| sst2 | {tmp_path}/a/sst2 | 2.5 | accuracy | 0.8900 | 0.8876 |" in rows
    assert any(r.startswith("| squad1 ") and r.endswith("| f1 | - | - |") for r in rows)


@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="no ../shared/data")
def test_every_data_path_exists_in_the_shared_data(tmp_path, capsys):
    commands, _ = dry_run(tmp_path, capsys)
    given = str(tmp_path / "d")
    data = {flags(argv, "--data") for _, _, argv in commands if "--data" in argv}
    data = {p.replace(given, SHARED_DATA) for p in data if p.startswith(given)}
    assert len(data) == 7
    for path in data:
        assert os.path.exists(path), path
    wiki, books = (glob.glob(os.path.join(SHARED_DATA, p)) for p in defaults.PRETRAIN_INPUTS)
    assert (len(wiki), len(books)) == (100, 100)


def test_the_electra_default_is_the_cpu_experiments_run():
    """The shipped ELECTRA bundle comes from the cpu-scale `electra-mini-seed1` run of the
    experiments (docs/pretraining.md reports its curve): the recipe's commands are that run's,
    with the steps its calibration gave pinned, and its records are made the same way."""
    from model.experiments.experiment import steps
    from model.experiments.plan import Work
    from model.experiments.scales import SCALES
    from model.experiments.tables import TABLES

    def settings(argv, paths):
        """{flag: value} of a command whose flags all take one value, `paths` left out;
        numbers compared as numbers (5e-4 is 0.0005)."""
        argv = [str(a) for a in argv]
        out = {}
        for flag, value in zip(argv[::2], argv[1::2]):
            assert flag.startswith("--"), argv
            if flag not in paths:
                try:
                    out[flag] = float(value)
                except ValueError:
                    out[flag] = value
        return out

    work = Work("W", "D", SCALES["cpu"])
    (electra,) = [
        s for s in steps(TABLES["beyond-bert"](work), work) if s.name == "electra-mini-seed1"
    ]
    (run,) = [c for c in electra.commands if c.argv[0] == "pretrain" and "/runs/" in c.output]
    paths = ("--data", "--eval-data", "--output", "--steps", "--checkpoint-every")
    recipe = defaults.ELECTRA_PRETRAIN_FLAGS
    assert settings(recipe, paths) == settings(run.argv[1:], paths)
    assert int(flags(list(recipe), "--steps")) == SCALES["cpu"].checkpoints * int(
        flags(list(recipe), "--checkpoint-every")
    )
    held_out, train = work.make_records("segment-pairs")
    assert flags(list(held_out.argv), "--input") == work.in_data(defaults.ELECTRA_HELD_OUT)
    assert flags(list(train.argv), "--input") == [work.in_data(p) for p in defaults.ELECTRA_INPUTS]
    paths = ("--input", "--vocab", "--output")
    for records in (held_out, train):
        assert settings(records.argv, paths) == settings(defaults.ELECTRA_RECORDS_FLAGS, paths)


def test_a_sigterm_in_an_in_process_command_stops_the_run_as_a_signal(tmp_path, monkeypatch):
    """`--in-process` (the GPU calls' mode): a SIGTERM inside a command's main
    (exit_on_sigterm's SystemExit 143) stops the run as a signal does, not as a command that
    failed and wants fixing; another exit status is still a failure."""
    from model.recipes import runner

    (tmp_path / "stopped_main.py").write_text(
        "def main(argv):\n    raise SystemExit(int(argv[0]))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for code, status, said in ((143, runner.TERMINATED, "stopped by a signal"), (2, 2, "failed")):
        out = str(tmp_path / f"never-{code}")
        step = runner.Step("demo", (runner.Command("stopped_main", (str(code),), out),))
        lines = []
        assert runner.run([step], log=lines.append, in_process=True) == status
        assert any(said in line for line in lines), lines


def test_a_second_signal_within_the_grace_leaves_no_child_running(tmp_path, monkeypatch):
    """Ctrl-C, then Ctrl-C again while the child has its grace to save: the child is killed
    before the second interrupt goes on up (it was left running)."""
    from model.recipes import runner

    (tmp_path / "deaf.py").write_text(
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    real_wait, calls, started = subprocess.Popen.wait, [], []

    def wait(self, timeout=None):
        calls.append(timeout)
        started.append(self)
        if len(calls) <= 2:  # the first interrupt, then the second within the grace
            raise KeyboardInterrupt
        return real_wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", wait)
    with pytest.raises(KeyboardInterrupt):
        runner._run_here("deaf", [], in_process=False)
    assert started[0].poll() is not None, "the child still runs"


def test_a_kept_result_of_another_command_is_said_and_reported_as_that_commands(tmp_path):
    """An output a `model.train` run wrote records its command (every flag, defaults filled
    in). Where it is not this plan's command (a result of an earlier version, with other
    flags), the runner still skips it (a GPU call's results are kept), but says so, and the
    report shows the command that made it; paths (a GPU call's /tmp/w) and arguments computed
    at run time are not compared; a summary without a command (older) is not either."""
    from model.experiments.plan import Work
    from model.experiments.report import command_lines
    from model.experiments.scales import SCALES
    from model.recipes.runner import Command, Deferred, as_recorded

    work, data = tmp_path / "w", tmp_path / "d"
    init = Deferred("<a checkpoint>", lambda: str(work / "ckpt"))
    argv = ("finetune", "--task", "sst2", "--data", str(data), "--init", init, "--output",
            str(work / "s{seed}"), "--seeds", "1,2", "--batch-size", "8", "--epochs", "2")  # fmt: skip
    out = work / "s2" / "metrics.json"
    out.parent.mkdir(parents=True)
    command = Command("model.train", argv, str(out))
    (one, two) = as_recorded(["1" if a is init else str(a) for a in argv])
    assert "--seed 2" in two and "--learning-rate 2e-05" in two  # the task's default, filled in
    elsewhere = two.replace(str(tmp_path), "/tmp/gpu")
    for recorded, differs in (
        (elsewhere, None),  # made on a GPU machine: the same command
        (elsewhere.replace("--batch-size 8", "--batch-size 32"), ["--batch-size 32 (this command: 8)"]),
        (elsewhere.replace("--learning-rate 2e-05", "--learning-rate 3e-05"),
         ["--learning-rate 3e-05 (this command: 2e-05)"]),
        (one, ["--seed 1 (this command: 2)"]),
        # a version before --dropout ran as its default does
        (elsewhere.replace(" --dropout 0.1", ""), None),
    ):  # fmt: skip
        out.write_text(json.dumps({"command": recorded}))
        assert command.ran_otherwise() == ((recorded, differs) if differs else None)
        lines = []
        assert defaults.run([defaults.Step("demo", (command,))], log=lines.append) == 0
        said = [line for line in lines if "warning" in line]
        assert said == ([f"[1/1 demo] warning: {out} was made by another command "
                         f"({differs[0]}); it is kept, and reported as that command's: delete "
                         "it to run this one"] if differs else [])  # fmt: skip
        shown = command_lines(Work(str(work), str(data), SCALES["smoke"]), [command])
        assert shown[-1].strip() == (recorded if differs else command.shell())
    out.write_text(json.dumps({"dev": {"accuracy": 0.5}}))  # written before commands were
    assert command.ran_otherwise() is None
    assert as_recorded(["finetune", "--no-such-flag"]) == []
    # A pre-training: its --config a file in WORK (a path), its steps computed as it starts
    steps = Deferred("<budget>", lambda: "100")
    argv = ("pretrain", "--config", str(work / "configs" / "tiny.json"), "--data", str(data),
            "--output", str(work / "r"), "--steps", steps, "--eval-steps", "2")  # fmt: skip
    out = work / "r" / "train_summary.json"
    out.parent.mkdir()
    (ours,) = as_recorded(["1" if a is steps else str(a) for a in argv])
    pretrain = Command("model.train", argv, str(out))
    theirs = ours.replace(str(work), "/tmp/w").replace("--steps 1", "--steps 731")
    out.write_text(json.dumps({"command": theirs}))
    assert pretrain.ran_otherwise() is None
    out.write_text(json.dumps({"command": theirs.replace("--eval-steps 2", "--eval-steps 20")}))
    assert pretrain.ran_otherwise()[1] == ["--eval-steps 20 (this command: 2)"]
