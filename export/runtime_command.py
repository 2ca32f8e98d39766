"""`python -m export.runtime BUNDLE METHOD ...`: one task method of a bundle on your text,
its answer printed as JSON, with numpy and LiteRT only (`export.runtime.main` runs this; the
examples are the runtime's docstring's). `--lines FILE` runs it on every line of a file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys

import numpy as np

from export import runtime
from model.io.files import HEAD_BYTES, utf16_error


def jsonable(value):
    """A method's answer as JSON prints it: an array as its shape, dtype and first 8 values, a
    float that is not finite as its name ("nan")."""
    if isinstance(value, np.ndarray):
        return {
            "shape": list(value.shape),
            "dtype": str(value.dtype),
            "first": value.reshape(-1)[:8].round(4).tolist(),
        }
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


# The command line's arguments of each method, in order: (name, type, required).
_TEXT = ("TEXT", str, True)
_SECOND = ("SECOND_TEXT", str, False)
COMMAND_LINE = {
    "fill_mask": (_TEXT, ("TOP_K", int, False)),
    "classify": (_TEXT, _SECOND),
    "answer": (("QUESTION", str, True), ("CONTEXT", str, True), ("N_BEST", int, False)),
    "tag": (_TEXT,),
    "attention": (_TEXT, _SECOND),
    "features": (_TEXT, _SECOND),
    "detect_replaced": (_TEXT,),
    "corrupt": (_TEXT, ("RATE", float, False), ("SEED", int, False)),
}


def _parser(lines: bool = False) -> argparse.ArgumentParser:
    """The command line; with `lines` (--lines given), METHOD's arguments come from the file."""
    parser = argparse.ArgumentParser(
        prog="python -m export.runtime",
        description="Runs one task method of a bundle on your text and prints its answer as "
        "JSON, with numpy and LiteRT only. A text that starts with '-' goes after '--'.",
        epilog="examples:\n" + runtime.__doc__.split("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("bundle", metavar="BUNDLE", help="a bundle directory (python -m export)")
    parser.add_argument(
        "--lines",
        metavar="FILE",
        help="(before METHOD) run METHOD on every line of FILE ('-': standard input) instead, "
        "its arguments separated by tabs (TEXT; TEXT<tab>SECOND_TEXT; QUESTION<tab>CONTEXT...; "
        "a tab inside a text would split it); prints one JSON object a line, in order, "
        '{"line": N, "error": ...} for a line that fails (an empty line too)',
    )
    methods = parser.add_subparsers(dest="method", metavar="METHOD", required=True)
    for method, arguments in COMMAND_LINE.items():
        summary = " ".join(getattr(runtime.EdgeModel, method).__doc__.split("\n\n")[0].split())
        sub = methods.add_parser(method, help=summary, description=summary)
        for name, kind, required in arguments:
            nargs = None if required and not lines else "?"
            sub.add_argument(name.lower(), metavar=name, type=kind, nargs=nargs)
    return parser


def main(argv=None) -> int:
    """`python -m export.runtime BUNDLE [--lines FILE] METHOD ARGS...`: 0, or 1 with the reason
    on standard error (a bad bundle, text or line), 2 for a usage error (argparse's)."""
    argv = sys.argv[1:] if argv is None else argv
    options = argv[: argv.index("--")] if "--" in argv else argv
    lines = any(a == "--lines" or a.startswith("--lines=") for a in options)
    parser = _parser(lines)
    args = parser.parse_args(argv)
    arguments = COMMAND_LINE[args.method]
    values = [getattr(args, name.lower()) for name, _, _ in arguments]
    if lines and any(v is not None for v in values):
        parser.error(f"with --lines, {args.method}'s arguments are the file's, not the command's")
    try:
        if lines:  # the file first: a wrong path costs no bundle load
            stream = (
                contextlib.nullcontext(sys.stdin.buffer)
                if args.lines == "-"
                else open(args.lines, "rb")
            )
            with stream as rows:
                model = runtime.load(args.bundle)
                model._require(args.method)  # a bundle of another task: said once
                where = "standard input" if args.lines == "-" else args.lines
                return run_lines(getattr(model, args.method), arguments, rows, where)
        model = runtime.load(args.bundle)
        result = getattr(model, args.method)(*[v for v in values if v is not None])
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(jsonable(result), indent=1, ensure_ascii=False))
    return 0


def run_lines(method, arguments: tuple, rows, where: str) -> int:
    """`method` on each line of the binary stream `rows`, one JSON line out per line in; 1
    when any line failed (each says why in its place, standard error which lines)."""
    failed, count, offset = [], 0, 0  # offset: the bytes before the line, until judged
    for count, raw in enumerate(rows, 1):
        if offset is not None and len(raw) >= 5:  # the first line long enough to tell by
            aligned = raw[offset % 2 :]  # from an even byte of the stream: its byte order
            if (utf16 := utf16_error(where, aligned[:HEAD_BYTES])) is not None:
                print(f"error: {utf16}", file=sys.stderr)  # no line of it would read
                return 1
            offset = None
        elif offset is not None:
            offset += len(raw)
        try:
            line = raw.decode("utf-8-sig" if count == 1 else "utf-8").rstrip("\r\n")
            out = jsonable(method(*_line_values(line.split("\t"), arguments)))
        except Exception as e:  # the next lines still get their answers, in their places
            failed.append(count)
            message = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
            out = {"line": count, "error": message}
        print(json.dumps(out, ensure_ascii=False))
    if failed:
        listed = ", ".join(map(str, failed[:10])) + (", ..." if len(failed) > 10 else "")
        print(f"error: {len(failed)} of {count} lines of {where} failed: {listed}", file=sys.stderr)
    return 1 if failed else 0


def _line_values(fields: list[str], arguments: tuple) -> list:
    """A --lines line's tab-separated fields as the method's arguments (empty trailing
    optional ones left out)."""
    if len(fields) > len(arguments):
        raise ValueError(
            f"{len(fields)} tab-separated fields; this method takes {_usage(arguments)}"
        )
    missing = [name for name, _, needed in arguments[len(fields) :] if needed]
    if missing:
        raise ValueError(f"no {', '.join(missing)}: the line needs {_usage(arguments)}")
    values = []
    for i, (field, (name, kind, needed)) in enumerate(zip(fields, arguments)):
        if field == "" and not needed:
            if any(fields[i + 1 :]):
                raise ValueError(
                    f"{name} is empty but a field after it is not: {_usage(arguments)}"
                )
            break
        try:
            values.append(kind(field))
        except ValueError:
            raise ValueError(f"{name} must be {kind.__name__}, not {field!r}") from None
    return values


def _usage(arguments: tuple) -> str:
    """A --lines line's fields in words: "QUESTION<tab>CONTEXT[<tab>N_BEST]"."""
    return "".join(
        (f"<tab>{name}" if needed else f"[<tab>{name}]") for name, _, needed in arguments
    ).removeprefix("<tab>")


if __name__ == "__main__":
    sys.exit(main())
