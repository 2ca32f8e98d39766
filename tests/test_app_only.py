"""The app in an environment of app/requirements.txt alone: numpy, LiteRT, Gradio.

    BERT_APP_VENV=/tmp/app-venv PYTHONPATH=. python -m pytest -q --runslow tests/test_app_only.py

A user who only wants the app on the shipped bundles installs app/requirements.txt (about
430 MB against the full install's 3.5 GB). Here `python -m app` runs in such an environment, in
a child process on the real bundles of assets/models, says it imported no TensorFlow, and
answers through its named endpoints as a user's script would call them (gradio_client, from
this process). The environment is $BERT_APP_VENV when that names a non-empty directory (.ci/run
builds it), else one is built in pytest's temporary directory (~30 s with a warm pip cache);
the test fails, never skips, when it cannot be built.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.helpers import REPO_ROOT, free_ports, isolated_python
from tests.test_app import client_for  # noqa: F401 (sets the offline environment)

REQUIREMENTS = os.path.join(REPO_ROOT, "app", "requirements.txt")
ASSETS = os.path.join(REPO_ROOT, "assets", "models")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def app_python(tmp_path_factory):
    return isolated_python(
        "BERT_APP_VENV", REQUIREMENTS, tmp_path_factory, imports=("numpy", "gradio")
    )


@pytest.fixture(scope="module")
def app_url(app_python, tmp_path_factory):
    port = free_ports(1)[0]
    log = tmp_path_factory.mktemp("app_log") / "app.log"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")} | {
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": REPO_ROOT,
    }
    with open(log, "w") as out:
        child = subprocess.Popen(
            [app_python, "-m", "app", "--models", ASSETS, "--port", str(port)],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.time() + 120
            while "Running on" not in log.read_text() and time.time() < deadline:
                assert child.poll() is None, log.read_text()[-3000:]
                time.sleep(0.5)
            started = log.read_text()
            assert "Running on" in started, started[-3000:]
            yield f"http://127.0.0.1:{port}/", started
        finally:
            child.terminate()
            child.wait(timeout=30)


def test_the_app_runs_on_the_shipped_bundles_without_tensorflow(app_url):
    url, started = app_url
    assert "tensorflow imported: no" in started
    for view in ("fill_mask", "sentiment", "answer", "entities"):
        assert "assets/models" in started.split(view, 1)[1].split("\n", 1)[0], view
    client = client_for(url)
    status, label, raw = client.predict("A warm, funny and moving film.", api_name="/sentiment")
    assert status.startswith("**positive**"), status
    context = "The Eiffel Tower was completed in 1889 for the World's Fair in Paris."
    out = client.predict("When was the Eiffel Tower completed?", context, 3, api_name="/answer")
    assert "1889" in out[0], out[0]
