"""model.pretraining.corpus: sentence splitting, strict file reading and the corpus formats.

Tiny files in `tmp_path` cover each format and each way a file can be bad;
the real corpora under ../shared/data are read when present (skipped otherwise).
"""

from __future__ import annotations

import csv
import gzip
import os
import re
import warnings

import pytest

from model.io.native_logs import ProjectWarning
from model.pretraining.corpus import (
    ONE_DOCUMENT_LINES,
    detect_format,
    iter_documents,
    open_text,
    split_sentences,
)
from tests.helpers import SHARED_DATA, gutenberg_text

GUTENBERG = os.path.join(SHARED_DATA, "pretrain", "gutenberg")
ENWIKI = os.path.join(SHARED_DATA, "pretrain", "enwiki-2015")
WIKITEXT = os.path.join(SHARED_DATA, "wikitext-2-raw", "wiki.valid.raw")
# Phrases of Project Gutenberg's licence, header and footer; none may reach a document.
LICENCE = re.compile(
    r"(?i:gutenberg-tm|gutenberg licen|small print!|use of anyone anywhere|"
    r"free of all fees|literary archive)|START OF TH|END OF TH|"
    r"THIS ELECTRONIC VERSION"
)


def write(path, text: str, newline: str = "\n") -> str:
    data = text.replace("\n", newline).encode("utf-8")
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


# === split_sentences ===


def test_split_sentences_at_ends_not_at_titles_or_initials():
    text = 'Mr. Smith met Dr. J. R. Jones at 5 p.m. on the hill. "Hello!" he said. Why? Because.'
    assert split_sentences(text) == [
        "Mr. Smith met Dr. J. R. Jones at 5 p.m. on the hill.",
        '"Hello!" he said.',
        "Why?",
        "Because.",
    ]


@pytest.mark.parametrize(
    "text, sentences",
    [
        (
            "Это первое. Это второе! А «третье»? Да.",
            ["Это первое.", "Это второе!", "А «третье»?", "Да."],
        ),
        ("这是第一句。这是第二句！第三句？", ["这是第一句。", "这是第二句！", "第三句？"]),
        ("مرحبا بالعالم. هذه جملة ثانية.", ["مرحبا بالعالم.", "هذه جملة ثانية."]),
        # Initials of any script end no sentence; closing quotes stay with theirs; ？！ is one.
        ("Поэт А. С. Пушкин родился. Он писал.", ["Поэт А. С. Пушкин родился.", "Он писал."]),
        (
            "他说：“好。”然后走了。真的？！是的。",
            ["他说：“好。”", "然后走了。", "真的？！", "是的。"],
        ),
        ("Über alles. the end. «Oui.» É fin.", ["Über alles. the end.", "«Oui.»", "É fin."]),
    ],
)
def test_split_sentences_in_other_scripts(text, sentences):
    """A capital of any script, a caseless script's letter or a CJK full stop ends a sentence
    (only A-Z and 0-9 did: a Russian or Chinese text was one sentence, and made no pairs)."""
    assert split_sentences(text) == sentences


def test_split_sentences_empty_and_unterminated():
    assert split_sentences("   ") == []
    assert split_sentences("no end here") == ["no end here"]
    # A lower-case word after a period does not start a sentence.
    text = "It costs 3.5 dollars, e.g. a lot."
    assert split_sentences(text) == [text]


# === text (google-research) format ===


def test_google_format_blank_line_between_documents(tmp_path):
    path = write(
        tmp_path / "c.txt",
        "First one.\nSecond one.\n\nThird one.\n\n\nA paragraph line. It holds two sentences.\n",
    )
    assert detect_format(path) == "text"
    assert list(iter_documents(path)) == [
        ["First one.", "Second one."],
        ["Third one."],
        ["A paragraph line.", "It holds two sentences."],
    ]


def test_one_document_per_line_format(tmp_path):
    """`lines`: each non-empty line is a document, split into its sentences."""
    path = write(tmp_path / "c.txt", "Great film. Loved it.\n\nDull.\nNot bad at all!\n")
    assert list(iter_documents(path, "lines")) == [
        ["Great film.", "Loved it."],
        ["Dull."],
        ["Not bad at all!"],
    ]


def test_a_text_file_read_as_one_long_document_says_so(tmp_path):
    """Many lines and no blank line is likely one document per line: a warning names the
    file and the `lines` format; a blank line anywhere, or a short file, warns of nothing."""
    many = "\n".join(f"Review {i} is short." for i in range(ONE_DOCUMENT_LINES)) + "\n"
    path = write(tmp_path / "many.txt", many)
    with pytest.warns(ProjectWarning, match=r"many.txt: read as one document of 1,000 lines"):
        assert len(list(iter_documents(path))) == 1
    ended = write(tmp_path / "ended.txt", many + "\n")  # a blank line only at the end
    with pytest.warns(ProjectWarning, match=r"ended.txt: read as one document of 1,000 lines"):
        assert len(list(iter_documents(ended))) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(list(iter_documents(path, "lines"))) == ONE_DOCUMENT_LINES
        split = write(tmp_path / "split.txt", many.replace("Review 5 ", "\nReview 5 ", 1))
        assert len(list(iter_documents(split))) == 2
        short = write(tmp_path / "short.txt", many.split("Review 999")[0])
        assert len(list(iter_documents(short))) == 1


def test_text_about_project_gutenberg_is_plain_text(tmp_path):
    path = write(
        tmp_path / "pg.txt", "The Project Gutenberg is a volunteer effort.\nIt digitises books.\n"
    )
    assert detect_format(path) == "text"
    assert list(iter_documents(path)) == [
        ["The Project Gutenberg is a volunteer effort.", "It digitises books."]
    ]
    bullets = write(tmp_path / "notes.md", "Before you sign:\n* Read the SMALL PRINT! twice.\n")
    assert detect_format(bullets) == "text"


def test_a_byte_order_mark_is_not_text(tmp_path):
    wiki = '\ufeff<doc id="1" url="u" title="T">\nT\n\nThe cat sat.\n</doc>\n'
    path = write(tmp_path / "wiki_00", wiki)
    assert detect_format(path) == "wiki"
    assert list(iter_documents(path)) == [["The cat sat."]]


def test_wikitext_top_level_headings_start_articles(tmp_path):
    # WikiText: " \n" lines separate paragraphs of one article; only " = Title = "
    # starts a new one, " = = Section = = " lines are dropped.
    text = (
        " \n = Alpha = \n \n Alpha is first . It is one .\n \n = = History = = \n \n"
        " Alpha had a history .\n \n = Beta = \n \n Beta is second .\n"
    )
    path = write(tmp_path / "wiki.train.raw", text)
    assert list(iter_documents(path, "text")) == [
        ["Alpha is first .", "It is one .", "Alpha had a history ."],
        ["Beta is second ."],
    ]


# === wiki (WikiExtractor) format ===


def test_wikiextractor_blocks_drop_the_title(tmp_path):
    text = (
        '<doc id="1" url="u1" title="Anarchism">\nAnarchism\n\n'
        "Anarchism is a philosophy. It has many currents.\nA second paragraph.\n</doc>\n"
        '<doc id="2" url="u2" title="Empty">\nEmpty\n\n</doc>\n'
        '<doc id="3" url="u3" title="Autism">\nAutism\nAutism is a disorder.\n</doc>\n'
    )
    path = write(tmp_path / "wiki_00.gz", text)
    assert detect_format(path) == "wiki"
    assert list(iter_documents(path)) == [
        ["Anarchism is a philosophy.", "It has many currents.", "A second paragraph."],
        ["Autism is a disorder."],
    ]


# === gutenberg format ===


def test_gutenberg_gzip_crlf_header_and_footer_stripped(tmp_path):
    body = (
        "CHAPTER I.\n\nIt was a dark and stormy\nnight. The rain fell in\n"
        "torrents.\n\n\nThe end came soon.\n"
    )
    path = write(tmp_path / "book.txt.gz", gutenberg_text(body), newline="\r\n")
    with open(path, "rb") as f:
        assert gzip.decompress(f.read()).count(b"\r\n") > 5
    assert detect_format(path) == "gutenberg"
    docs = list(iter_documents(path))
    # One book, one document; wrapped lines are joined into sentences.
    assert docs == [
        [
            "CHAPTER I.",
            "It was a dark and stormy night.",
            "The rain fell in torrents.",
            "The end came soon.",
        ]
    ]
    assert not any("\r" in s or LICENCE.search(s) or "Gutenberg" in s for s in docs[0])


def test_gutenberg_old_etext_small_print_header(tmp_path):
    # Books from before ~2002 have no "*** START OF" line: the licence comes first.
    text = (
        "***The Project Gutenberg Etext of Old Book***\n\nSome header talk.\n\n"
        "***START**THE SMALL PRINT!**FOR PUBLIC DOMAIN ETEXTS**START***\n"
        'Why is this "Small Print!" statement here?  You know: lawyers.\n\n'
        "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n"
        "[Portions of this header are copyright (C) 2001 by Michael S. Hart\n"
        "and may be reprinted only when these Etexts are free of all fees.]\n\n\n"
        "OLD BOOK\n\nOnce upon a time there was\na book.\n\n"
        "End of The Project Gutenburg Etext of Old Book\n"
    )
    path = write(tmp_path / "old.txt", text, newline="\r\n")
    assert detect_format(path) == "gutenberg"
    assert list(iter_documents(path)) == [["OLD BOOK", "Once upon a time there was a book."]]


def test_gutenberg_without_markers_is_an_error_naming_the_file(tmp_path):
    path = write(tmp_path / "plain.txt", "Just some text.\n")
    with pytest.raises(ValueError, match=re.escape(path) + ".*START OF"):
        list(iter_documents(path, "gutenberg"))


# === bad files ===


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.txt")
    with pytest.raises(FileNotFoundError, match=re.escape(path)):
        list(iter_documents(path))


def test_binary_file_with_nul_bytes_refused(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"PK\x03\x04\x00\x00\x00binary")
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*binary"):
        open_text(str(path))
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*binary"):
        list(iter_documents(str(path), "text"))


def test_non_utf8_file_refused_with_line_number(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("Good line.\n\nCaf\u00e9 au lait.\n".encode("latin-1"))
    with pytest.raises(ValueError, match=re.escape(str(path)) + r":3: not UTF-8"):
        list(iter_documents(str(path), "text"))
    with pytest.raises(ValueError, match=re.escape(str(path)) + r":3: not UTF-8"):
        detect_format(str(path))


def test_truncated_gzip_refused(tmp_path):
    data = gzip.compress(("A sentence here.\n" * 5000).encode(), mtime=0)
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*cannot read"):
        list(iter_documents(str(path), "text"))


def test_unknown_format():
    with pytest.raises(ValueError, match="unknown corpus format"):
        list(iter_documents("x.txt", "pdf"))


# === the real corpora (../shared/data), when present ===


def _gutenberg_books(without_start_marker: bool) -> list[str]:
    index = os.path.join(GUTENBERG, "index.tsv")
    if not os.path.isfile(index):
        return []
    with open(index, encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return [r["file"] for r in rows if (r["has_pg_start_marker"] == "no") == without_start_marker]


@pytest.mark.skipif(not os.path.isdir(GUTENBERG), reason="no ../shared/data/pretrain/gutenberg")
@pytest.mark.parametrize("book", ["books/0233.txt"] + _gutenberg_books(without_start_marker=True))
def test_real_gutenberg_book_is_one_document_without_licence(book):
    path = os.path.join(GUTENBERG, book + ".gz")
    assert detect_format(path) == "gutenberg"
    docs = list(iter_documents(path))
    assert len(docs) == 1
    assert len(docs[0]) > 30
    assert [s for s in docs[0] if LICENCE.search(s)] == []


@pytest.mark.skipif(not os.path.isdir(ENWIKI), reason="no ../shared/data/pretrain/enwiki-2015")
def test_real_wikiextractor_shard_has_its_indexed_articles():
    with open(os.path.join(ENWIKI, "index.tsv"), encoding="utf-8") as f:
        expected = {r["file"]: int(r["docs"]) for r in csv.DictReader(f, delimiter="\t")}
    path = os.path.join(ENWIKI, "AA", "wiki_00.gz")
    docs = list(iter_documents(path))
    assert len(docs) == expected["AA/wiki_00"]
    assert docs[0][0].startswith("Anarchism is a political philosophy")  # title line dropped


def test_plain_text_is_not_read_as_wikitext(tmp_path):
    """Outside a WikiText file, a line of spaces ends a document as an empty line does
    (google-research/bert strips every line), and a line like "= 2 + 2 =" is text."""
    text = "The cat sat.\n \nA dog barked.\n= 2 + 2 =\n\t\nIt rained.\n"
    path = write(tmp_path / "notes.txt", text)
    assert list(iter_documents(path)) == [
        ["The cat sat."],
        ["A dog barked.", "= 2 + 2 ="],
        ["It rained."],
    ]


@pytest.mark.skipif(not os.path.isfile(WIKITEXT), reason="no ../shared/data/wikitext-2-raw")
def test_real_wikitext_articles():
    docs = list(iter_documents(WIKITEXT))
    assert len(docs) == 60  # WikiText-2's validation split has 60 articles
    assert docs[0][0].startswith("Homarus gammarus , known as the European lobster")
    assert not any(s.startswith("=") for doc in docs for s in doc)
