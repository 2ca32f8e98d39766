"""The fine-tuning tasks by name: `get(name) -> Task`.

    from model import tasks
    task = tasks.get("mrpc")          # or "ner" for "conll2003"
    train_file, dev_file = task.files("../shared/data/glue/MRPC")

Each task module is imported only when one of its tasks is asked for, so the
registry is cheap to import. A module lists its tasks in a `TASKS` dict
(name -> `Task` subclass).
"""

from __future__ import annotations

import importlib

# name -> the module that defines it
_MODULES = {
    "cola": "model.tasks.glue",
    "sst2": "model.tasks.glue",
    "mrpc": "model.tasks.glue",
    "stsb": "model.tasks.glue",
    "qqp": "model.tasks.glue",
    "mnli": "model.tasks.glue",
    "qnli": "model.tasks.glue",
    "rte": "model.tasks.glue",
    "wnli": "model.tasks.glue",
    "conll2003": "model.tasks.ner",
    "swag": "model.tasks.swag",
    "squad1": "model.tasks.squad",
    "squad2": "model.tasks.squad",
}
SPELLINGS = {"sst-2": "sst2", "sts-b": "stsb"}  # GLUE's and Hugging Face's names
ALIASES = {"ner": "conll2003", **SPELLINGS}
TASKS = tuple(_MODULES)


def get(name: str):
    """A new `Task` for `name` (case-insensitive; aliases: ner, sst-2, sts-b)."""
    key = ALIASES.get(name.lower(), name.lower())
    if key not in _MODULES:
        raise ValueError(
            f"unknown task {name!r}; choose from {', '.join(TASKS)} (aliases: {', '.join(ALIASES)})"
        )
    module = importlib.import_module(_MODULES[key])
    from model.tasks.base import Task

    found = getattr(module, "TASKS", {}).get(key)
    if found is None:
        raise ValueError(f"{_MODULES[key]} defines no task {key!r}")
    return found if isinstance(found, Task) else found()  # a class or a factory
