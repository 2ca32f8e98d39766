"""Every `--flag` that the README files, docs/, the model card and the code's docstrings and
messages, the GPU calls' scripts and CI write in a `python -m MODULE ...` or
`python bench/SCRIPT.py ...` command is one that the command line accepts (a flag renamed in
the code and not in the docs fails here).

Each command's parser is the one its `main` builds: `main(["--help"])` runs with argparse's
`parse_args` replaced by one that hands the parser back instead of parsing.
"""

from __future__ import annotations

import argparse
import ast
import functools
import glob
import importlib
import os
import re

import pytest

from tests.helpers import REPO_ROOT

PAGES = [
    *sorted(glob.glob(f"{REPO_ROOT}/**/README.md", recursive=True)),
    *sorted(glob.glob(f"{REPO_ROOT}/docs/*.md")),
    os.path.join(REPO_ROOT, "assets", "MODEL_CARD.md"),
    # the commands the GPU calls and CI run ($PY -m ..., $PY $REPO/bench/gpu.py ...)
    *sorted(glob.glob(f"{REPO_ROOT}/bench/*.sh")),
    os.path.join(REPO_ROOT, ".ci", "run"),
    # the code's own docstrings and messages (a module's docstring is its --help)
    *sorted(
        p
        for d in ("model", "export", "app", "bench")
        for p in glob.glob(f"{REPO_ROOT}/{d}/**/*.py", recursive=True)
    ),
]
PAGES = [p for p in PAGES if "/." not in os.path.relpath(p, REPO_ROOT)]  # not .venv's
# python -m MODULE [SUBCOMMAND] ...: the module, and the text up to the end of the command
# (a closing backtick, a pipe, `&&`, `;` or the end of the line, continuation lines joined);
# not a module named in prose ("model.feature_tagger's").
COMMAND = re.compile(
    r"(?:python3?|\$PY|\$py) (?:-m |(?:\$REPO/)?bench/)((?:model|export|app)(?:\.\w+)*|\w+\.py)(?=[\s`]|$)"
    r"((?:[^`|;&\n]|&(?!&))*)"
)
FLAG = re.compile(r"^(--[a-z][a-z0-9-]*)")
PACKAGES = {"export", "app", "model.experiments"}  # run as python -m PACKAGE: its __main__


@functools.cache
def commands() -> dict[tuple[str, str], dict[str, str]]:
    """{(module, subcommand or ""): {flags}, ...} of every command written in the pages, each
    flag with the first page that writes it."""
    found: dict[tuple[str, str], dict[str, str]] = {}
    for page in PAGES:
        for module, rest in COMMAND.findall(page_text(page)):
            words = rest.split()
            sub = words[0] if words and re.fullmatch(r"[a-z][a-z0-9-]*", words[0]) else ""
            flags = {FLAG.match(w).group(1) for w in words if FLAG.match(w)}
            for flag in flags:
                found.setdefault((module, sub), {}).setdefault(flag, os.path.basename(page))
    return found


def page_text(path: str) -> str:
    """The text commands are read from: a Python file's strings (implicit concatenation
    joined, an f-string's fields as X), a page's text with an inline code span that wraps
    onto the next line joined; shell continuation lines joined in both."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".py"):
        strings = []
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.append(node.value)
            elif isinstance(node, ast.JoinedStr):
                parts = node.values
                strings.append(
                    "".join(v.value if isinstance(v, ast.Constant) else "X" for v in parts)
                )
        text = "\n".join(strings)
    else:  # fenced blocks as they are; elsewhere, `code spans` on one line
        blocks = re.split(r"(^```.*?^```)", text, flags=re.M | re.S)
        text = "".join(
            b if b.startswith("```") else re.sub(r"`[^`]+`", lambda m: m[0].replace("\n", " "), b)
            for b in blocks
        )
    return re.sub(r"\\\n\s*", " ", text)


class _Parser(Exception):
    def __init__(self, parser):
        self.parser = parser


def accepted(module: str, sub: str, monkeypatch) -> set[str]:
    """The option strings of `python -m module [sub]`'s parser (the subcommand's, if it has
    subcommands and `sub` is one of them)."""

    def hand_back(self, *args, **kwargs):
        raise _Parser(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", hand_back)
    name = f"{module}.__main__" if module in PACKAGES else module
    if module.endswith(".py"):  # a bench script: bench/ on sys.path, as when it is run
        monkeypatch.syspath_prepend(os.path.join(REPO_ROOT, "bench"))
        name = module.removesuffix(".py")
    with pytest.raises(_Parser) as caught:
        importlib.import_module(name).main(["--help"])
    monkeypatch.undo()
    parser = caught.value.parser
    options = {o for a in parser._actions for o in a.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and sub in action.choices:
            options |= {o for a in action.choices[sub]._actions for o in a.option_strings}
    return options


def test_the_pages_write_commands():
    found = commands()
    assert ("model.train", "pretrain") in found and ("model.evaluate", "") in found
    assert "--task" in found[("model.evaluate", "")]
    assert "--presets" in found[("pretrain_step.py", "")]
    assert "--json" in found[("gpu.py", "")]  # written in bench/gpu_call.sh only


@pytest.mark.parametrize("module, sub", sorted(commands()), ids=lambda v: v or "-")
def test_every_flag_in_the_docs_is_accepted(module, sub, monkeypatch):
    written = commands()[(module, sub)]
    unknown = sorted(f"{flag} ({page})" for flag, page in written.items())
    unknown = [u for u in unknown if u.split()[0] not in accepted(module, sub, monkeypatch)]
    assert not unknown, f"python -m {module} {sub}: flags it does not accept: {unknown}"
