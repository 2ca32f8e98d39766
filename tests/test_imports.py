"""Imports go one way (docs/architecture.md), read from the source: every `import` statement,
at module level or inside a function, of `model/`, `export/` and `app/`."""

from __future__ import annotations

import ast
import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The model's core, lowest first: a module imports its own rank or lower, never a wing
# (training, pretraining, checkpoints, objectives, experiments, recipes, the commands).
CORE = {"io": 0, "text": 1, "config": 1, "networks": 2, "heads": 3, "tasks": 4}
# The one command that crosses from `model` to `export`: it scores bundles too.
CROSSES_TO_EXPORT = "model/evaluate.py"


def imported(path: str) -> set[str]:
    """The absolute module names `path` imports, `from a.b import c` as both a.b and a.b.c."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def sources(package: str) -> list[str]:
    found = glob.glob(os.path.join(ROOT, package, "**", "*.py"), recursive=True)
    return sorted(os.path.relpath(p, ROOT).replace(os.sep, "/") for p in found)


def broken(rule) -> list[str]:
    """'file imports name' for every import of `model`, `export` and `app` that `rule`
    (file, top-level package, name) refuses."""
    return [
        f"{path} imports {name}"
        for package in ("model", "export", "app")
        for path in sources(package)
        for name in sorted(imported(os.path.join(ROOT, path)))
        if not rule(path, package, name)
    ]


def test_model_imports_neither_the_app_nor_the_export_but_for_evaluate():
    def rule(path, package, name):
        top = name.split(".")[0]
        return package != "model" or top != "app" and (top != "export" or path == CROSSES_TO_EXPORT)

    assert broken(rule) == []


def test_export_never_imports_the_app():
    assert (
        broken(lambda path, package, name: package != "export" or not name.startswith("app")) == []
    )


def _rank(path_or_name: str) -> int | None:
    parts = path_or_name.removesuffix(".py").replace("/", ".").split(".")
    return CORE.get(parts[1]) if parts[0] == "model" and len(parts) > 1 else None


def core_rule(path: str, package: str, name: str) -> bool:
    own = _rank(path)
    if own is None or not name.startswith("model."):
        return True
    theirs = _rank(name)
    return theirs is not None and theirs <= own


def test_the_core_imports_only_itself_and_lower():
    assert broken(core_rule) == []


def test_the_core_rule_sees_a_wing_imported_inside_a_function(tmp_path, monkeypatch):
    (tmp_path / "model" / "heads").mkdir(parents=True)
    (tmp_path / "model" / "heads" / "bad.py").write_text(
        "from model.networks import encoder\n\n\ndef f():\n    from model.training import x\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    assert broken(core_rule) == [
        "model/heads/bad.py imports model.training",
        "model/heads/bad.py imports model.training.x",
    ]


# Modules a process imports before it knows whether it needs a framework, or that run where
# there is none: the LiteRT-only runtime, the app's prediction code, and what the commands
# read and check before TensorFlow, Keras or JAX loads (a bad input is said in well under a
# second; a JAX run never loads TensorFlow).
LIGHT = (
    "export.runtime",
    "export.runtime_command",
    "export.written_words",
    "export.bundle",
    "app.predict",
    "model.data",
    "model.train",
    "model.evaluate",
    "model.tasks",
    "model.objectives",
    "model.training.pretrain_data",
    "model.training.layout",
    "model.training.finetune",
    "model.experiments.tables",
)
_HEAVY = """
import importlib, json, sys
heavy = ("tensorflow", "keras", "jax", "gradio", "torch")
loaded = {}
for name in sys.argv[1:]:
    importlib.import_module(name)
    loaded[name] = sorted({m.split(".")[0] for m in sys.modules} & set(heavy))
print(json.dumps(loaded))
"""


def test_light_modules_import_no_framework():
    import json
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _HEAVY, *LIGHT], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout)
    assert {name: heavy for name, heavy in loaded.items() if heavy} == {}
