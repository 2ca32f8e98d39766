"""The command a training run records, and what differs between two of them.

A run writes the `python -m model.train ...` command that repeats it into its summary
(metrics.json's and train_summary.json's "command"): every flag it ran with, defaults included.
The same command on a finished run trains nothing, another command's run is refused by name
(`finetune`), and the experiments' runner says when a result it keeps was made by another
command (`model.recipes.runner`). Framework-free.
"""

from __future__ import annotations

import re
import shlex

# Flags that change how a run is watched or kept, not what it trains: a finished run is the
# same run with them changed (as a resumed run is).
NOT_TRAINED = ("--verbose", "--log-every", "--checkpoint-every", "--keep-checkpoints")
PATHS = ("--data", "--init", "--output")  # compared as written less "./" and a final "/"


def command_line(args) -> str:
    """The `python -m model.train COMMAND ...` command that repeats this run (`args.command`,
    then every flag set: a False or None one left out)."""
    words = ["python", "-m", "model.train", args.command]
    for key, value in vars(args).items():
        if key == "command" or value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        words += [flag] if value is True else [flag, str(value)]
    return shlex.join(words)


def difference(key: str, theirs, ours) -> str:
    """One difference as the error shows it: "--batch-size 4 (this command: 2)"."""

    def shown(value):
        return "unset" if value is None else str(value)

    return f"{key} {shown(theirs)} (this command: {shown(ours)})"


def flags_of(command: str) -> dict:
    """{flag: its value, or True for a switch} of a `command_line`, NOT_TRAINED left out; the
    PATHS' values as written less "./" and a final "/"."""
    words, found = shlex.split(command), {}
    for i, word in enumerate(words):
        if word.startswith("--") and word not in NOT_TRAINED:
            value = words[i + 1] if i + 1 < len(words) else None
            found[word] = True if value is None or value.startswith("--") else value

    def path(v):  # "run/" and "./run" are "run"; "a/link/.." is not "a" (a symlink)
        return re.sub(r"^(\./)+", "", v).rstrip("/") or v

    return {k: path(v) if k in PATHS else v for k, v in found.items()}


def commands_differ(theirs: str, ours: str, ignore=(), absent=None) -> list[str]:
    """What differs between two `command_line`s, each as `difference` words it ("--epochs 3
    (this command: 2)"), leaving out NOT_TRAINED and the flags in `ignore`; [] for the same
    run. `absent` ({flag: value}): a flag `theirs` lacks counts as that value (a run of a
    version before the flag ran as its default does)."""
    a, b = flags_of(theirs), flags_of(ours)
    a = {**{k: v for k, v in (absent or {}).items() if k in b and k not in a}, **a}
    return [
        difference(k, a.get(k), b.get(k))
        for k in sorted(set(a) | set(b))
        if k not in ignore and a.get(k) != b.get(k)
    ]
