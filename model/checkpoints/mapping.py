"""The strict copy between a checkpoint's named tensors and a Keras model.

Each format (`google.py`, `huggingface.py`, `electra.py`, `keras_hub_preset.py`)
lists one `Entry` per Keras variable: the tensor's name in that format and the
two layout changes (checkpoint -> Keras, Keras -> checkpoint); the BERT
formats take both from one table, `bert_names.py`. This module does the rest, the
same way for every format, and never silently:

- a missing encoder tensor, a mis-shaped tensor, or a tensor nobody asked
  for stops the load with its name;
- a *head* (a group of entries, e.g. `masked_lm_head`) wholly absent from the
  source is created fresh only with `allow_new_heads=True`, and reported;
- tensors of a known head that the chosen task does not use (a pre-training
  checkpoint read as a plain encoder) are dropped only when the task was
  chosen explicitly, and reported.

    (used by `python -m model.convert`; no command of its own)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

ENCODER = "encoder"


@dataclasses.dataclass
class Entry:
    """One Keras variable and its tensor in a checkpoint format."""

    name: str  # the tensor's name in the checkpoint
    variable: object  # the keras.Variable
    to_keras: Callable[[np.ndarray], np.ndarray] = lambda a: a
    from_keras: Callable[[np.ndarray], np.ndarray] = lambda a: a
    part: str = ENCODER  # "encoder" must be complete; any other part is a head

    def expected_shape(self) -> tuple:
        return tuple(self.from_keras(np.zeros(self.variable.shape, "float32")).shape)


def export(entries: list[Entry]) -> dict[str, np.ndarray]:
    """{checkpoint name: float32 array in the checkpoint's layout}."""
    return {
        e.name: np.ascontiguousarray(e.from_keras(np.asarray(e.variable.numpy(), "float32")))
        for e in entries
    }


def assign(
    entries: list[Entry],
    tensors: dict[str, np.ndarray],
    source: str,
    *,
    allow_new_heads: bool = False,
    droppable: Callable[[str], bool] = lambda n: False,
    drop_heads: bool = False,
    ignored: Callable[[str], bool] = lambda n: False,
) -> list[str]:
    """Copies `tensors` into the entries' variables; returns notes for the user.

    Args:
        entries: what the model needs.
        tensors: what the checkpoint has (name -> array, checkpoint layout).
        source: the file or folder, for messages.
        allow_new_heads: a head wholly absent from `tensors` keeps its fresh
            initialisation (and a note says so) instead of stopping the load.
        droppable: names belonging to heads this format knows but the model
            does not have (e.g. `cls/seq_relationship/*` for an encoder).
        drop_heads: the caller chose the task explicitly, so `droppable`
            tensors may be left out (and a note says so).
        ignored: tensors that are not weights (buffers, optimizer state),
            skipped and counted.
    """
    problems, notes = _missing(entries, tensors, source, allow_new_heads)
    problems += _wrong_shapes(entries, tensors)
    known = {e.name for e in entries}
    extra = sorted(n for n in tensors if n not in known and not ignored(n))
    dropped = [n for n in extra if drop_heads and droppable(n)]
    problems += [_unexpected(n, tensors[n], droppable(n)) for n in extra if n not in dropped]
    if problems:
        shown = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise ValueError(f"{source}: checkpoint does not match the model:\n  {shown}{more}")
    if dropped:
        notes.append(
            f"dropped {len(dropped)} tensors the chosen task does not use: {', '.join(dropped)}"
        )
    skipped = [n for n in tensors if ignored(n)]
    if skipped:
        notes.append(
            f"skipped {len(skipped)} non-weight tensors: {', '.join(sorted(skipped)[:5])}"
            + (" ..." if len(skipped) > 5 else "")
        )
    for e in entries:
        if e.name in tensors:
            value = e.to_keras(np.asarray(tensors[e.name], dtype="float32"))
            e.variable.assign(value.astype(e.variable.dtype))
    return notes


def _missing(
    entries: list[Entry], tensors: dict, source: str, allow_new_heads: bool
) -> tuple[list[str], list[str]]:
    """(problems, notes) of the entries `tensors` lacks: the encoder, or part of a
    head, is a problem; a whole head is one too, unless `allow_new_heads`."""
    problems, notes = [], []
    by_part: dict[str, list[Entry]] = {}
    for e in entries:
        by_part.setdefault(e.part, []).append(e)
    for part, group in by_part.items():
        missing = [e.name for e in group if e.name not in tensors]
        if not missing:
            continue
        if part == ENCODER or len(missing) < len(group):
            problems += [f"missing tensor {name!r} (needed by {part})" for name in missing]
        elif allow_new_heads:
            notes.append(
                f"{part}: not in {source} ({', '.join(missing)}); "
                f"created fresh with random initialisation"
            )
        else:
            problems.append(
                f"{part} is not in the source (missing {', '.join(repr(m) for m in missing)}); "
                f"pass --allow-new-heads (allow_new_heads=True) to create it fresh, or "
                f"choose a --task without it"
            )
    return problems, notes


def _wrong_shapes(entries: list[Entry], tensors: dict) -> list[str]:
    problems = []
    for e in entries:
        if e.name in tensors:
            shape = tuple(np.shape(tensors[e.name]))
            if shape != e.expected_shape():
                problems.append(
                    f"tensor {e.name!r} has shape {shape}; the config needs {e.expected_shape()}"
                )
    return problems


def _unexpected(name: str, tensor, droppable: bool) -> str:
    why = " (a head the chosen task does not use: choose that task with --task to drop it)"
    return f"unexpected tensor {name!r} {tuple(np.shape(tensor))}" + (why if droppable else "")


def same_values(a, b) -> bool:
    """Whether a weight read back holds what was written: equal shapes and values, a NaN
    equal to a NaN (it is stored as written)."""
    return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True))
