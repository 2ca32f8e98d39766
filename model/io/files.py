"""Atomic file output: write under a temporary name, then rename.

A crash (or `kill -9`) at any moment leaves either the old file or the new
one under the real name, never a truncated one.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import zlib
from collections.abc import Callable

INTERRUPTED = 130  # Ctrl-C: the shell's status of a command stopped by SIGINT
TERMINATED = 143  # a SIGTERM (exit_on_sigterm's SystemExit)


@contextlib.contextmanager
def atomic_path(path: str):
    """Yields a temporary path next to `path`; renames it over `path` on success.

    Works for files and for directories written by a library that wants a
    path (e.g. `model.save_weights`). On error the temporary is removed.
    """
    directory = os.path.dirname(os.path.abspath(path))
    made = _missing_folders(directory)
    os.makedirs(directory, exist_ok=True)
    base = os.path.basename(path)
    suffix = ".weights.h5" if base.endswith(".weights.h5") else os.path.splitext(base)[1]
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=f".tmp{suffix}", dir=directory)
    os.close(fd)
    os.remove(tmp)  # libraries that refuse to overwrite get a fresh name
    try:
        yield tmp
        if os.path.isfile(tmp):
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
        elif os.path.exists(tmp):
            os.remove(tmp)
        _remove_empty(made)
        raise


def _missing_folders(folder: str) -> list[str]:
    """`folder` and its parents that do not exist yet, innermost first."""
    made = []
    while not os.path.exists(folder):
        made.append(folder)
        folder = os.path.dirname(folder)
    return made


def check_stageable(path: str) -> None:
    """ValueError, at start, when `staged_directory(path)` could not build its output: the
    nearest existing folder above `path` is a file, cannot be written, or is on a full disk
    (export and model.convert found out after their work, with a traceback)."""
    parent = os.path.dirname(os.path.abspath(path))
    missing = _missing_folders(parent)
    existing = os.path.dirname(missing[-1]) if missing else parent
    if not os.path.isdir(existing):
        raise ValueError(f"{path}: cannot be made, {existing} is a file, not a folder")
    try:
        free = _probe(existing)
    except OSError as e:
        raise ValueError(f"{path}: cannot be written, {existing}: {e.strerror}") from None
    if free < MIN_FREE_BYTES:
        raise ValueError(
            f"{path}: cannot be written, {existing}: the disk is full ({free / 2**20:.1f} MiB free)"
        )


def _probe(folder: str) -> int:
    """The free bytes of `folder`'s disk, after writing 4 KiB to a temporary file there
    (OSError where it cannot: a full disk may still make an empty file)."""
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-") as f:
        f.write(b"\0" * 4096)
        f.flush()
        os.fsync(f.fileno())
    return shutil.disk_usage(folder).free


def _remove_empty(folders: list[str]) -> None:
    """Removes `_missing_folders`' list after a failed write, innermost first, as far as they
    are empty (another writer may have put something there meanwhile)."""
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:
            break


def staging_dir(parent: str, prefix: str) -> str:
    """A new empty directory in `parent` for output that is renamed into place when finished,
    with a directory's usual permissions (mkdtemp's own are private, 0700)."""
    tmp = tempfile.mkdtemp(prefix=prefix, dir=parent)
    umask = os.umask(0o022)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    return tmp


@contextlib.contextmanager
def staged_directory(path: str):
    """Yields an empty directory beside `path` (`staging_dir`); when the block succeeds it
    replaces `path` whole (`replace_dir`), on any error (a SIGTERM too, with
    `exit_on_sigterm`) it is deleted and `path` is untouched."""
    directory = os.path.abspath(path)
    parent, name = os.path.split(directory)
    made = _missing_folders(parent)  # a failure removes them too
    os.makedirs(parent, exist_ok=True)
    tmp = staging_dir(parent, f".{name}.tmp-")
    try:
        yield tmp
        replace_dir(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_empty(made)
        raise


def replace_dir(tmp: str, directory: str) -> None:
    """Renames the finished directory `tmp` to `directory`, replacing what is there (a file,
    or a directory whose old files would otherwise stay beside the new ones). A directory
    cannot be renamed over a non-empty one, so the old one is moved aside to a hidden name
    first and deleted after: at every moment the real name holds a whole output or nothing."""
    if os.path.isdir(directory):
        parent, name = os.path.split(os.path.abspath(directory))
        old = tempfile.mkdtemp(prefix=f".{name}.old-", dir=parent)
        os.rmdir(old)
        os.rename(directory, old)
        os.rename(tmp, directory)
        shutil.rmtree(old, ignore_errors=True)
        return
    if os.path.lexists(directory):
        os.remove(directory)
    os.rename(tmp, directory)


def check_output(output: str, inputs=(), what: str = "--output", in_place: bool = False) -> None:
    """ValueError, before any work, where `output` (`what`: the flag of a file or folder a
    command writes) is one of `inputs` ((flag, path or None) pairs) or holds one (a
    fine-tuning's --output equal to its --init overwrote the encoder, an evaluation's --output
    equal to --data the dev file), or cannot be written: built beside and renamed into place
    (`check_stageable`), or, `in_place`, a folder written into (a training run's)."""
    for flag, path in inputs:
        if path and held_by(output, {flag: path}):
            inside = os.path.realpath(output) != os.path.realpath(path)
            raise ValueError(
                f"{what} {output} would overwrite {flag} {path}"
                + (" (it lies inside)" if inside else "")
                + f": choose another {what}"
            )
    if not (in_place and os.path.isdir(output)):
        check_stageable(output)  # a new folder needs its parent too
        return
    try:
        _probe(output)
    except OSError as e:
        raise ValueError(f"{output}: cannot be written ({e.strerror})") from None


def held_by(output: str, paths: dict, may_be: str | None = None) -> str | None:
    """The name of the first of `paths` ({name: path}) that lies inside `output`, a folder an
    output replaces whole (its old contents deleted), or None; the path named `may_be` may be
    `output` itself (a source read before it is replaced), not inside it."""
    outer = os.path.realpath(output)
    for name, path in paths.items():
        inner = os.path.realpath(path)
        if os.path.commonpath([outer, inner]) == outer and (inner != outer or name != may_be):
            return name
    return None


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w", encoding: str | None = "utf-8"):
    """`open()` for writing that only publishes the file when the block succeeds."""
    if "b" in mode:
        encoding = None
    with atomic_path(path) as tmp:
        with open(tmp, mode, encoding=encoding) as f:
            yield f


def write_json(path: str, data) -> None:
    with atomic_open(path) as f:
        json.dump(data, f, indent=2, sort_keys=False)
        f.write("\n")


@contextlib.contextmanager
def reading(path: str):
    """Turns the errors of opening and decoding `path` into messages that name it, and
    refuses UTF-16 text first (without a byte-order mark, mostly-ASCII UTF-16 decodes as
    UTF-8 text with a NUL between letters: a reader would blame a field, not the encoding)."""
    utf16 = utf16_error(path, _head(path))
    if utf16 is not None:
        raise utf16
    try:
        yield
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except UnicodeDecodeError as e:
        raise not_utf8(path, e) from None


UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
HEAD_BYTES = 4096  # what `utf16_error` looks at


def utf16_error(path: str, head: bytes) -> ValueError | None:
    """The error for a file whose first bytes `head` are UTF-16 (Windows' "Unicode" text,
    which a UTF-8 reader meets as bad bytes or NULs), or None: a byte-order mark, or without
    one, text mostly of Latin letters, where every other byte is NUL (the odd ones in
    little-endian, the even ones in big-endian) and the others are not."""
    if head[:2] in UTF16_BOMS:
        return ValueError(f"{path}: UTF-16 text, not UTF-8; save it as UTF-8")
    pairs = len(head) // 2
    even, odd = head[: 2 * pairs : 2], head[1 : 2 * pairs : 2]
    for nuls, others, order in ((odd, even, "little"), (even, odd, "big")):
        if pairs >= 2 and nuls.count(0) >= pairs / 2 and others.count(0) <= pairs / 10:
            return ValueError(
                f"{path}: UTF-16 text ({order}-endian, without a byte-order mark), "
                f"not UTF-8; save it as UTF-8"
            )
    return None


def _head(path: str) -> bytes:
    """The first HEAD_BYTES of `path` (gzip's decompressed), or b"" where it cannot be read
    (the reader's own open then says why)."""
    if not os.path.isfile(path):  # a pipe's bytes are the reader's to read
        return b""
    try:
        with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
            return f.read(HEAD_BYTES)
    except (OSError, EOFError, zlib.error):
        return b""


def line_end(path: str) -> str:
    """What ends a line of `path` (gzip too): "\n", or "\r" where its first 64 KiB have no
    "\n" but do have a "\r" (old Mac line ends; elsewhere a carriage return inside a text is
    not a line end)."""
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        head = f.read(2**16)
    return "\r" if b"\r" in head and b"\n" not in head else "\n"


def not_utf8(path: str, error: UnicodeDecodeError, what: str = "") -> ValueError:
    """The error for `path` (gzip too) naming its first line that is not UTF-8: a text reader
    decodes blocks ahead of the lines it hands out, so `error`'s own position says little."""
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as raw:
        utf16 = utf16_error(path, raw.read(HEAD_BYTES))
        if utf16 is not None:
            return utf16
        raw.seek(0)
        # Lines as the readers count them: at "\n", or at "\r" in a file of old Mac line ends.
        lines = raw if line_end(path) == "\n" else (x for b in raw for x in b.split(b"\r"))
        for number, line in enumerate(lines, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                return ValueError(
                    f"{path}:{number}: {what}not UTF-8 text (byte {e.start + 1} of the line: "
                    f"{e.reason})"
                )
    return ValueError(f"{path}: {what}not UTF-8 text ({error.reason})")


MAX_LINE_CHARS = 16 * 2**20  # a longer line is a corrupt or binary file, not data
MAX_JSON_BYTES = 2**30  # SQuAD's train file is 40 MB


def limited_lines(f, path: str, limit: int = MAX_LINE_CHARS):
    """The lines of text file `f`, refusing one longer than `limit` characters
    without reading it whole (a 2 GB line would otherwise end up in memory)."""
    number = 0
    while True:
        line = f.readline(limit + 1)
        if not line:
            return
        number += 1
        if len(line) > limit and not line.endswith("\n"):
            raise ValueError(
                f"{path}:{number}: a line longer than {limit} characters "
                f"(a corrupt or binary file?)"
            )
        yield line


def check_paths(*paths: str | None, files: tuple = ()) -> None:
    """Each of `paths` exists and each of `files` is a file (None is skipped), else
    FileNotFoundError naming the first that is not. Commands call it before they import
    TensorFlow, so that a mistyped path fails in well under a second."""
    for path, file in [*((p, False) for p in paths), *((p, True) for p in files)]:
        if path is None:
            continue
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such file or directory")
        if file and not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: a directory, where a file is expected")


def check_size(path: str, limit: int = MAX_JSON_BYTES) -> None:
    """Refuses a file too big to be what it should (before reading it into memory)."""
    size = os.path.getsize(path)
    if size > limit:
        raise ValueError(f"{path}: {size} bytes, over the limit of {limit} (a corrupt file?)")


def load_json(path: str):
    """The JSON in `path` (a data file: any value), bounded by `check_size` and read past a
    byte-order mark; errors name the file, and its line and column where it is not JSON."""
    with reading(path):
        try:
            check_size(path)
            with open(path, encoding="utf-8-sig") as f:  # a byte-order mark is not JSON
                return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None
        except RecursionError:
            raise ValueError(f"{path}: JSON nested too deeply to read") from None


MAX_OBJECT_BYTES = 64 * 2**20  # a config, bundle.json or run summary: kilobytes


def read_json_object(path: str, what: str = "config", hint: str = "") -> dict:
    """The JSON object in `path`, a regular file of at most MAX_OBJECT_BYTES (a link to
    /dev/zero would otherwise be read until memory runs out); every error names the file
    (`hint` says what it should be)."""
    try:
        if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
            raise ValueError(f"{path}: not a regular file, where a {what} file is expected")
        with open(path, "rb") as f:
            raw = f.read(MAX_OBJECT_BYTES + 1)
        if len(raw) > MAX_OBJECT_BYTES:
            raise ValueError(f"{path}: over {MAX_OBJECT_BYTES} bytes, not a {what} file")
        data = json.loads(raw.decode("utf-8-sig"))  # a byte-order mark is not JSON
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: {what} file not found{hint}") from None
    except UnicodeDecodeError as e:
        raise not_utf8(path, e) from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not a JSON {what} ({e})") from None
    except RecursionError:
        raise ValueError(f"{path}: not a JSON {what} (nested too deeply)") from None
    except OSError as e:  # a folder, a file it may not read
        raise ValueError(f"{path}: cannot read the {what} file ({e.strerror})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a {what} must be a JSON object")
    return data


MIN_FREE_BYTES = 16 * 2**20  # less than this left on the output's disk: refuse to start


def check_writable_dir(path: str) -> None:
    """Fails at start, not after an hour, when `path` cannot be written or its disk is full."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise SystemExit(f"error: output directory {path!r} is a file, not a directory")
    try:
        os.makedirs(path, exist_ok=True)
        free = _probe(path)
    except OSError as e:
        raise SystemExit(
            f"error: output directory {path!r} is not writable: {e.strerror}"
        ) from None
    if free < MIN_FREE_BYTES:
        raise SystemExit(
            f"error: output directory {path!r}: the disk is full ({free / 2**20:.1f} MiB free)"
        )


def exit_on_sigterm() -> Callable[[], None]:
    """Makes a SIGTERM (a `kill PID`, `timeout`, a container stopping) raise SystemExit(143),
    so that the command cleans up as on any error: a half-written output's temporary is
    removed, a recipe stops its children. Returns what puts the previous handler back.
    Signals are the main thread's: elsewhere this changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def exit_143(signum, frame):
        raise SystemExit(TERMINATED)

    previous = signal.signal(signal.SIGTERM, exit_143)
    return lambda: signal.signal(signal.SIGTERM, previous)


def exit_with(rc: int) -> None:
    """Exits with status `rc`; a command stopped by Ctrl-C or a SIGTERM (INTERRUPTED,
    TERMINATED) dies of that signal again once cleaned up, as the shell expects of it: a
    shell loop over commands then stops too, instead of going on to the next (bash goes
    on after an exit status 130)."""
    stopped_by = {INTERRUPTED: signal.SIGINT, TERMINATED: signal.SIGTERM}.get(rc)
    if stopped_by is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(stopped_by, signal.SIG_DFL)
        os.kill(os.getpid(), stopped_by)
    sys.exit(rc)
