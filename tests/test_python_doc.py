"""docs/python.md's blocks, run as written: a renamed function or argument breaks the build.

The ```python blocks run in order in one process (as a notebook's cells), from a directory that
has the repository's `assets/` and the tour's `runs/tour/tiny` (a `tiny` encoder with random
weights and the bert-base-uncased vocabulary, which is what the tour's 20 steps leave as far as
these calls go); each `print(...)  # TEXT` line must print TEXT, in order.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT
from tests.test_readme_tour import blocks, environment, printed_comments

DOC = os.path.join(REPO_ROOT, "docs", "python.md")
VOCAB = os.path.join(REPO_ROOT, "tests", "fixtures", "bert-base-uncased-vocab.txt")


def tour_encoder(directory: str) -> None:
    from model.checkpoints import model_dir
    from model.networks.encoder import BertEncoder
    from model.text.wordpiece import load_vocabulary

    encoder = BertEncoder.from_preset("tiny", vocabulary_size=len(load_vocabulary(VOCAB)))
    model_dir.save(encoder, directory, VOCAB)


@pytest.mark.slow
def test_the_python_page_runs_as_written(tmp_path):
    if not os.path.isfile(os.path.join(REPO_ROOT, "assets", "models", "sst2", "model.tflite")):
        pytest.skip("assets/models holds no bundles: the page's first block reads one")
    with open(DOC, encoding="utf-8") as f:
        snippets = blocks(f.read(), "python")
    assert len(snippets) >= 5, "docs/python.md lost its blocks"
    os.symlink(os.path.join(REPO_ROOT, "assets"), tmp_path / "assets")
    tour_encoder(str(tmp_path / "runs" / "tour" / "tiny"))
    script = "\n".join(snippets)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    printed = [line.strip() for line in done.stdout.splitlines()]
    expected = printed_comments(script)
    assert len(expected) >= 8
    at = 0
    for comment in expected:  # each in order; the commands print more lines between them
        assert comment in printed[at:], f"the page says {comment!r}; printed:\n{done.stdout}"
        at = printed.index(comment, at) + 1
