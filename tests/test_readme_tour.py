"""The README's set-up and tour, run as written, so that a renamed command or flag breaks the build.

    PYTHONPATH=. python -m pytest -q tests/test_readme_tour.py

The commands are read from README.md, never restated here: the fenced blocks of "Set up and run"
and of "A tour". The tour's `bash` blocks run in order as one script (as a user pastes them into
one shell) from the repository root, with the virtual environment's `python` first on PATH and
`$RUNS` pointing into a temporary directory; its `python` blocks run against `python -m app`
(the README's own command, on a free port), and each `print(...)  # TEXT` line of them must print
TEXT. The tour reads the real data in `../shared/data` beside the repository; without it, the
parts that need it are skipped, saying so.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT
from tests.test_app import app_process

README = os.path.join(REPO_ROOT, "README.md")
DATA = os.path.join(os.path.dirname(REPO_ROOT), "shared", "data")
APP_URL = "http://127.0.0.1:7860/"  # where the README's client snippet expects the app


def section(heading: str) -> str:
    """The README's text under `## heading`, up to the next `## ` heading."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README.md has no '## {heading}' section"
    return match.group(1)


def blocks(text: str, language: str) -> list[str]:
    """The bodies of the ```language fenced blocks of `text`, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.M | re.S)


def printed_comments(code: str) -> list[str]:
    """TEXT of each `print(...)  # TEXT` line of `code`: what that line must print."""
    return re.findall(r"^\s*print\(.*\)\s*#\s*(.+?)\s*$", code, re.M)


def environment(**extra: str) -> dict:
    """The child environment: this interpreter's `python` first on PATH, the repository on
    PYTHONPATH, offline, TensorFlow quiet; the README's variables left to their defaults."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATA", "RUNS")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(
        TF_CPP_MIN_LOG_LEVEL="3",
        GRADIO_ANALYTICS_ENABLED="False",
        HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


def test_setup_commands_are_the_ones_ci_runs():
    setup, test_command = blocks(section("Set up and run"), "bash")
    assert "python3 -m venv .venv" in setup and "pip install -r requirements.txt" in setup
    assert setup.strip().splitlines()[-1] == "python -m app"
    with open(os.path.join(REPO_ROOT, ".ci", "run"), encoding="utf-8") as f:
        ci_lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    assert test_command.strip() in ci_lines, "the README's test command is not one .ci/run runs"


def test_tour_client_against_the_app(tmp_path):
    if not os.path.isfile(os.path.join(REPO_ROOT, "assets", "models", "mlm", "model.tflite")):
        pytest.skip("assets/models holds no bundles: the tour's app part needs the default models")
    run_app = blocks(section("Set up and run"), "bash")[0].strip().splitlines()[-1]
    assert run_app.startswith("python -m app")
    snippets = blocks(section("A tour"), "python")
    assert snippets, "the tour has no python block"
    # The README's command, on a free loopback port (its default models are assets/models).
    with app_process(*shlex.split(run_app)[3:]) as (url, _):
        for snippet in snippets:
            assert APP_URL in snippet, f"the client snippet no longer calls {APP_URL}"
            script = tmp_path / "snippet.py"
            script.write_text(snippet.replace(APP_URL, url), encoding="utf-8")
            done = subprocess.run(
                [sys.executable, str(script)],
                cwd=tmp_path,
                env=environment(),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            printed = done.stdout.splitlines()
            expected = printed_comments(snippet)
            assert len(printed) >= len(expected), done.stdout
            for line, comment in zip(printed, expected):
                assert line.strip() == comment, f"printed {line!r}, the README says {comment!r}"


@pytest.mark.slow
def test_tour_commands(tmp_path):
    if not os.path.isdir(DATA):
        pytest.skip(
            f"no {os.path.relpath(DATA, REPO_ROOT)} beside the repository: the tour "
            "pre-trains and fine-tunes on the real data there (see README.md)"
        )
    script = "\n".join(blocks(section("A tour"), "bash"))
    assert "python -m model.train pretrain" in script and "python -m export " in script
    runs = tmp_path / "runs"
    done = subprocess.run(
        ["bash", "-euxo", "pipefail", "-c", script],
        cwd=REPO_ROOT,
        env=environment(RUNS=str(runs)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    # What each step promises: the shared variables took effect, every step left its output.
    for path in (
        "tour/records/dataset.json",
        "tour/tiny/model.weights.h5",
        "tour/sst2/metrics.json",
        "tour/sst2-bundle/model.tflite",
    ):
        assert (runs / path).exists(), f"the tour wrote no $RUNS/{path}\n{output[-3000:]}"
    assert '"text": "William Shakespeare"' in done.stdout
    assert '"label": ' in done.stdout and '"accuracy": ' in done.stdout
