"""A pytest plugin that measures how long the functions are that one function reaches.

    CALL_TREE=model/training/finetune.py:finetune PYTHONPATH=bench \\
        python -m pytest -q -n0 --runslow -p call_tree tests/test_finetune.py tests/test_squad.py

Every function of `model/`, `export/` and `app/` that runs while CALL_TREE's function is on
the stack is counted once; at the end the summary prints how many there were and the longest,
in source lines with signature, docstring and comments (`inspect.getsourcelines`). Module
bodies and comprehensions at module level are left out (`inspect` reports their whole block).
Run it with `-n0`: the hook sees only its own process (a test's child processes, such as the
JAX backend's, are not counted). A profiling hook slows the tests about twofold.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading

ROOT = os.getcwd() + os.sep
PACKAGES = ("model/", "export/", "app/")
TARGET = os.environ.get("CALL_TREE", "model/training/finetune.py:finetune")
SHOWN = 12
_seen: dict[tuple[str, int, str], int] = {}


def _beneath_target(frame) -> bool:
    file, name = TARGET.rsplit(":", 1)
    frame = frame.f_back
    while frame is not None:
        code = frame.f_code
        if code.co_name == name and code.co_filename.endswith(file):
            return True
        frame = frame.f_back
    return False


def _profile(frame, event, arg):
    if event != "call":
        return
    code = frame.f_code
    path = code.co_filename[len(ROOT) :] if code.co_filename.startswith(ROOT) else ""
    key = (path, code.co_firstlineno, code.co_qualname)
    if not path.startswith(PACKAGES) or key in _seen or code.co_name.startswith("<"):
        return
    if _beneath_target(frame):
        _seen[key] = len(inspect.getsourcelines(code)[0])


def pytest_configure(config):
    sys.setprofile(_profile)
    threading.setprofile(_profile)


def pytest_terminal_summary(terminalreporter):
    sys.setprofile(None)
    threading.setprofile(None)
    write = terminalreporter.write_line
    write(f"call tree of {TARGET}: {len(_seen)} functions of {', '.join(PACKAGES)} ran beneath it")
    for (path, line, name), length in sorted(_seen.items(), key=lambda kv: -kv[1])[:SHOWN]:
        write(f"  {length:4d} lines  {path}:{line} {name}")
