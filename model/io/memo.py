"""What a process has read or made from files, remembered while the files are unchanged.

A command checks its inputs at start and reads them again to run; `model.experiments
--in-process` runs many fine-tunings in one process, each reading and encoding the same task
file. A `Memo` keeps the last few results by a key that holds each file's `stamp`, so a
rewritten file is read again. Never mutate what it returns.
"""

from __future__ import annotations

import collections
import contextlib
import io
import os
import sys


def stamp(path) -> tuple:
    """A file as part of a key: its path and what changes when it is rewritten (None for a
    missing file)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return (os.path.abspath(path), None)
    return (os.path.abspath(path), info.st_mtime_ns, info.st_size)


class Memo:
    """The `entries` most recently used results of `get(key, make, *args)`."""

    def __init__(self, entries: int):
        self.entries = entries
        self.made: collections.OrderedDict = collections.OrderedDict()

    def get(self, key: tuple, make, *args):
        """make(*args), or what it made before under `key`; the warnings its making printed
        (a file's skipped rows) are printed as they come, and again each time it is
        remembered, as a fresh read would print them."""
        if key in self.made:
            self.made.move_to_end(key)
            made, printed = self.made[key]
            sys.stderr.write(printed)
            return made
        printed = _Tee(sys.stderr)
        with contextlib.redirect_stderr(printed):
            made = make(*args)
        self.made[key] = made, printed.getvalue()
        while len(self.made) > self.entries:
            self.made.popitem(last=False)
        return made


class _Tee(io.StringIO):
    """A copy of what is written to `through`."""

    def __init__(self, through):
        super().__init__()
        self.through = through

    def write(self, text: str) -> int:
        self.through.write(text)
        return super().write(text)
