"""Raw text corpora as documents of sentences.

Formats (`--format`, `auto` looks at the file):

- `text`: google-research/bert's format, one sentence per line and a blank
  line between documents (a line of spaces is blank too). Longer lines
  (paragraphs) are split into sentences, so any plain text file works. A WikiText
  file (its first lines hold a ` = Title = ` line and ` ` lines between
  paragraphs, never an empty one) is read as WikiText: each title starts a
  document, ` = = Section = = ` lines are dropped, and ` ` lines are paragraph
  gaps inside an article.
- `lines`: one document per line (a dump of reviews, posts or a dataset's
  text column); each line is split into sentences. A `text` file that reads
  as one document of many lines says so, and names this format.
- `wiki`: WikiExtractor output, `<doc id=.. title=..>` ... `</doc>` blocks;
  each block is a document, its first line (the title) is dropped.
- `gutenberg`: a Project Gutenberg book; the licence header and footer
  (outside `*** START OF` / `*** END OF`) are dropped, wrapped lines are joined
  into paragraphs, and the book is one document.

Files may be gzip-compressed (`.gz`). Errors name the file and line.
"""

from __future__ import annotations

import gzip
import io
import itertools
import os
import re
import warnings
from collections.abc import Iterator

from model.io.files import not_utf8, utf16_error
from model.io.native_logs import ProjectWarning

FORMATS = ("auto", "text", "lines", "wiki", "gutenberg")

# A `text` file read as one document of at least this many lines gets a warning (`lines`).
ONE_DOCUMENT_LINES = 1000

# A sentence ends at . ! or ? (plus closing quotes/brackets) followed by space
# and something that can start a sentence (`_starts_sentence`: a capital of any
# script, a digit, or a letter of a script without case), or at a CJK full stop,
# which needs no space. Titles and initials ("Mr. Smith", "J. R. R.") are not
# ends; the rest of the errors are harmless for NSP.
_SENTENCE_END = re.compile(
    r"""[.!?]["'”’»)\]]*(\s+)(?=["'“‘«(\[]?(\w))|[。！？]+[”’」』）)]*(\s*)"""
)
# Titles; initials ("J.", "А.") are `_initial`'s.
_NOT_AN_END = re.compile(
    r"(?:\b(?:Mr|Mrs|Ms|Dr|St|Mt|Jr|Sr|Prof|Gen|Col|Capt|Lt|Sgt|Rev|Hon|vs|etc|No|Vol|"
    r"pp|Fig|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec|e\.g|i\.e|U\.S|U\.K)\.)$"
)
_HEADING = re.compile(r"^\s*(=+)\s.*\s\1\s*$")
# Only a top-level heading (" = Title = ") starts a WikiText article; " = = Section = = "
# lines are headings inside it.
_TOP_HEADING = re.compile(r"^\s*=\s[^=].*\s=\s*$")
# A WikiText file is told by its first lines (`_is_wikitext`): ordinary text keeps a line
# like "= 2 + 2 =", and any line of spaces ends its documents.
_WIKITEXT_TITLE = re.compile(r"^ = [^=].* = \n?$")
_WIKITEXT_LOOKAHEAD = 200
# Project Gutenberg's markers. Books from before ~2002 ("Etexts") have no START line: their
# licence ("the small print") comes first and ends at a line like
# "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*".
_PG_START = re.compile(r"^\*{3} ?START OF")
_PG_END = re.compile(
    r"^(?:\*{3} ?END OF|End (?:of )?(?:the |this )?(?:Project Gutenb[eu]rg|Etext))", re.IGNORECASE
)
_PG_OLD_LICENCE = re.compile(r"^\*.*SMALL PRINT", re.IGNORECASE)


def _initial(text: str) -> bool:
    """Whether `text` ends with an initial, a capital of any script and a period ("J.",
    "А. С."), which ends no sentence."""
    return (
        len(text) >= 2
        and text[-1] == "."
        and text[-2].isupper()
        and (len(text) == 2 or not text[-3].isalnum())
    )


def _starts_sentence(c: str) -> bool:
    """A capital (Latin, Cyrillic, Greek, ...), a digit, or a letter of a script without
    case (Arabic, Hebrew, Devanagari, ...)."""
    return c.isdigit() or c.isupper() or (c.isalpha() and not c.islower())


def split_sentences(paragraph: str) -> list[str]:
    paragraph = paragraph.strip()
    if not paragraph:
        return []
    sentences, start = [], 0
    for m in _SENTENCE_END.finditer(paragraph):
        if m.group(3) is not None:  # a CJK full stop: the sentence keeps it
            sentences.append(paragraph[start : m.start(3)].strip())
            start = m.end(3)
            continue
        candidate = paragraph[start : m.start(1)]
        tail = candidate.rstrip("\"'”’»)]")
        if not _starts_sentence(m.group(2)) or _NOT_AN_END.search(tail) or _initial(tail):
            continue
        sentences.append(candidate.strip())
        start = m.end(1)
    sentences.append(paragraph[start:].strip())
    return [s for s in sentences if s]


def open_text(path: str) -> io.TextIOBase:
    """Opens plain or gzip text strictly as UTF-8; refuses binary files."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    raw = gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")
    try:
        head = raw.read(8192)
    except (OSError, EOFError) as e:
        raw.close()
        raise ValueError(f"{path}: cannot read ({e})") from None
    if b"\x00" in head:
        raw.close()
        raise utf16_error(path, head) or ValueError(
            f"{path}: looks like a binary file (NUL bytes), not UTF-8 text"
        )
    raw.seek(0)
    # utf-8-sig: a byte-order mark is not text (nor hides a WikiExtractor file's first "<doc").
    return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="strict", newline=None)


def detect_format(path: str) -> str:
    with open_text(path) as f:
        try:
            head = f.read(65536)
        except UnicodeDecodeError as e:
            raise not_utf8(path, e) from None
    if head.lstrip().startswith("<doc "):
        return "wiki"
    if _is_gutenberg(head):
        return "gutenberg"
    return "text"


def _is_gutenberg(head: str) -> bool:
    """A line that starts the book; or, in a file that names the project (books from before
    ~2002), one of its licence's "small print" lines. A text about Project Gutenberg, or
    one with a "* ... small print" bullet, is plain text."""
    lines = head.splitlines()
    if any(_PG_START.match(line) for line in lines):
        return True
    names = "Project Gutenberg" in head or "Etext" in head
    return names and any(_PG_OLD_LICENCE.match(line) for line in lines)


def iter_documents(path: str, fmt: str = "auto") -> Iterator[list[str]]:
    """Yields each document of `path` as a list of sentences (strings)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown corpus format {fmt!r}; choose from {FORMATS}")
    if fmt == "auto":
        fmt = detect_format(path)
    reader = {
        "text": _text_documents,
        "lines": _line_documents,
        "wiki": _wiki_documents,
        "gutenberg": _gutenberg_documents,
    }[fmt]
    line_no = 0

    def numbered(f):
        nonlocal line_no
        for line_no, line in enumerate(f, 1):  # noqa: B007 (read through nonlocal, in errors)
            yield line

    with open_text(path) as f:
        try:
            yield from reader(numbered(f), path)
        except UnicodeDecodeError as e:
            raise not_utf8(path, e) from None
        except (OSError, EOFError) as e:  # e.g. a truncated .gz
            raise ValueError(f"{path}:{line_no + 1}: cannot read ({e})") from None


def _text_documents(lines, path):
    head = list(itertools.islice(lines, _WIKITEXT_LOOKAHEAD))
    wikitext = _is_wikitext(head)
    doc, doc_lines, sizes = [], 0, []  # sizes: each document's non-blank lines
    for line in itertools.chain(head, lines):
        if wikitext and _HEADING.match(line):
            if _TOP_HEADING.match(line):
                if doc:
                    yield doc
                    sizes.append(doc_lines)
                doc, doc_lines = [], 0
        elif line.strip():
            doc.extend(split_sentences(line))
            doc_lines += 1
        elif doc and not (wikitext and line == " \n"):  # WikiText's paragraph gap
            yield doc
            sizes.append(doc_lines)
            doc, doc_lines = [], 0
    if doc:
        yield doc
        sizes.append(doc_lines)
    if len(sizes) == 1 and sizes[0] >= ONE_DOCUMENT_LINES:  # said once the file is read
        warnings.warn(
            f"{path}: read as one document of {sizes[0]:,} lines (no blank line between "
            "documents); if each line is a document, use --format lines",
            ProjectWarning,
            stacklevel=2,
        )


def _line_documents(lines, path):
    for line in lines:
        if line.strip():
            yield split_sentences(line)


def _is_wikitext(head: list[str]) -> bool:
    """Whether a file's first lines are WikiText's (Merity et al.): a ` = Title = ` line, and
    ` ` lines between paragraphs where plain text has empty ones."""
    return any(map(_WIKITEXT_TITLE.match, head)) and " \n" in head and "\n" not in head


def _wiki_documents(lines, path):
    doc, inside, title_pending = [], False, False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("<doc ") or stripped == "<doc>":
            doc, inside, title_pending = [], True, True
        elif stripped == "</doc>":
            if doc:
                yield doc
            inside = False
        elif inside and stripped:
            if title_pending:
                title_pending = False
                continue
            doc.extend(split_sentences(stripped))
    if inside and doc:
        yield doc


def _gutenberg_documents(lines, path):
    lines = list(lines)
    start = next((i + 1 for i, line in enumerate(lines) if _PG_START.match(line)), None)
    if start is None:
        footer = next((i for i, line in enumerate(lines) if _PG_END.match(line)), len(lines))
        licence = [i for i, line in enumerate(lines[:footer]) if _PG_OLD_LICENCE.match(line)]
        start = licence[-1] + 1 if licence else None
        # Lines right after its last line still belong to it ("[Portions of this header ...]").
        while start is not None and start < footer and lines[start].strip():
            start += 1
    if start is None:
        raise ValueError(
            f"{path}: no '*** START OF' line; is it a Project Gutenberg file? "
            "(use --format text for plain text)"
        )
    end = next((i for i in range(start, len(lines)) if _PG_END.match(lines[i])), len(lines))
    doc, paragraph = [], []
    for line in lines[start:end] + ["\n"]:
        if line.strip():
            paragraph.append(line.strip())
        elif paragraph:
            text = " ".join(paragraph)
            # The Complete Shakespeare repeats a <<copyright notice>> between its plays.
            if not (text.startswith("<<") and text.endswith(">>")):
                doc.extend(split_sentences(text))
            paragraph = []
    if doc:
        yield doc
