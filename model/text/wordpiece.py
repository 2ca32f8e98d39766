"""BERT's WordPiece tokenizer in pure Python (stdlib + numpy): the edge tokenizer.

`WordPieceTokenizer` needs no TensorFlow, so a phone or a Raspberry Pi runs
BERT with numpy and LiteRT only (`export/runtime.py`). `model.text.tokenizer`'s
TensorFlow class subclasses it and swaps only `encode` for tensorflow-text's
graph ops (for tf.data and large files); both give the same ids, which
`tests/test_wordpiece.py` checks on every line of SST-2 dev, a sample of SST-2
train, all of WikiText-2 valid and hand-picked odd Unicode.

The steps are `model.text.tokenizer.clean_text`'s (the reference BERT tokenizer's),
done character by character:

1. Unicode spaces (Zs, tab, CR, LF, U+2028, U+2029) separate words; control,
   format and private-use characters and U+FFFD are dropped, joining their
   neighbours ("a\\u200bb" is one word).
2. A CJK ideograph is a word of its own.
3. Uncased vocabularies: lower-case (a capital sigma always as "σ"), NFD,
   drop nonspacing marks (Mn): "Café" -> "cafe".
4. Punctuation (ASCII punctuation and Unicode category P) is a word of its own.
5. A word of more than `MAX_WORD_CHARS` characters becomes one [UNK]; the
   others are split greedily, longest vocabulary piece first.

As every character is normalised on its own, each word knows which characters
of the original text it came from: `words(text)` returns them with their
character spans, which the runtime uses to map answers and entities back to
the text. Results are cached per whitespace-separated chunk of text, so
repeated words (most of them, in real text) cost one dictionary lookup.

    python -m model.text.wordpiece VOCAB_TXT "Some text to tokenize."
"""

from __future__ import annotations

import codecs
import hashlib
import itertools
import os
import re
import sys
import unicodedata
from typing import NamedTuple

import numpy as np

from model.io.files import atomic_path, not_utf8

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# The reference's `max_input_chars_per_word`: Hugging Face's WordPiece (and the
# tokenizer.json of bert-base-uncased / all-MiniLM-L6-v2) use 100; Google's
# original tokenization.py used 200. Words longer than this become one [UNK].
MAX_WORD_CHARS = 100
# Chunks remembered by a tokenizer before its cache starts again (memory bound).
CACHE_SIZE = 200_000

# What separates words: tab, LF, CR, the line and paragraph separators and the
# Unicode spaces (category Zs). Python's str.split() would also split on the
# control characters U+000B, U+000C, U+001C-U+001F and U+0085, which the
# reference drops instead (so they join their neighbours).
_SPACES = "\t\n\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_CHUNK = re.compile(f"[^{_SPACES}]+")

# What a character does to the words around it.
_PART, _ALONE, _DROP, _MIXED = range(4)


def looks_cased(tokens: list[str]) -> bool:
    """Whether a vocabulary is cased: more than 1 % of its WordPieces (its [SPECIAL] tokens
    aside) hold an upper-case letter. bert-base-uncased's two ('ℝ', '##ℝ') do not make it so;
    bert-base-cased has thousands."""
    capitals = sum(
        any(c.isupper() for c in t) for t in tokens if not (t.startswith("[") and t.endswith("]"))
    )
    return capitals > len(tokens) / 100


def copy_vocabulary(path: str, directory: str, name: str = "vocab.txt") -> None:
    """`path` written as DIRECTORY/NAME (atomically; nothing when it is that file), less a
    byte-order mark: the readers here skip one, Hugging Face's and Google's read it as part of
    the first token."""
    target = os.path.join(directory, name)
    if os.path.abspath(path) == os.path.abspath(target):
        return
    with open(path, "rb") as f:
        data = f.read()
    with atomic_path(target) as tmp, open(tmp, "wb") as f:
        f.write(data.removeprefix(codecs.BOM_UTF8))


def vocabulary_sha256(path: str) -> str:
    """The SHA-256 of a vocabulary file, a byte-order mark left out: `copy_vocabulary`
    leaves it out of the copies it writes, the same vocabulary (records' vocab_sha256)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(3).removeprefix(codecs.BOM_UTF8))
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_vocabulary(path: str) -> list[str]:
    """One token per line, id = line number; errors name the file."""
    try:
        with open(path, encoding="utf-8-sig") as f:  # a byte-order mark is not a token
            tokens = [line.rstrip("\r\n") for line in f]
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: vocabulary file not found") from None
    except UnicodeDecodeError as e:
        raise not_utf8(path, e, "vocabulary is ") from None
    while tokens and not tokens[-1]:
        tokens.pop()
    if not tokens:
        raise ValueError(f"{path}: vocabulary is empty")
    seen = {}
    for line, token in enumerate(tokens, 1):
        if token in seen:
            raise ValueError(
                f"{path}:{line}: duplicate token {token!r} (first on line {seen[token]})"
            )
        seen[token] = line
    missing = [t for t in ("[UNK]", "[CLS]", "[SEP]", "[PAD]") if t not in seen]
    if missing:
        raise ValueError(f"{path}: vocabulary lacks the special tokens {missing}")
    return tokens


def check_vocabulary(path: str, rows: int, whose: str = "the model's") -> str:
    """`path`, refused (naming it) unless its tokens are the `rows` of the token embedding that
    reads their ids; `whose` says where the count comes from."""
    tokens = len(load_vocabulary(path))
    if tokens != rows:
        raise ValueError(
            f"{path}: vocabulary has {tokens} tokens but {whose} token embedding has {rows} rows"
        )
    return path


# === Characters ===


def is_punctuation(char: str) -> bool:
    """The reference's punctuation: ASCII punctuation (so "$", "+", "^" too) and Unicode P*."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def is_cjk(char: str) -> bool:
    """The code points the reference treats as CJK ideographs (tokenization.py `_is_chinese_char`)."""
    cp = ord(char)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def normalize_char(char: str, lowercase: bool) -> str:
    """What one (non-space) character becomes: "" when dropped, else its
    lower-cased, decomposed, mark-stripped form for uncased vocabularies."""
    if char == "\ufffd" or unicodedata.category(char) in ("Cc", "Cf", "Co"):
        return ""
    if not lowercase:
        return char
    # The reference lower-cases without context: a word-final capital sigma
    # becomes "σ", not Python's (and ICU's) final "ς".
    decomposed = unicodedata.normalize("NFD", "\u03c3" if char == "\u03a3" else char.lower())
    return "".join(c for c in decomposed if unicodedata.category(c) != "Mn")


def normalized_lengths(text: str, lowercase: bool) -> list[int]:
    """How many characters of the words' normalised text each character of `text` becomes:
    0 for one dropped or a space between words (a no-break space too), else its
    `normalize_char`'s length."""
    return [0 if _CHUNK.match(c) is None else len(normalize_char(c, lowercase)) for c in text]


def _classify(char: str, lowercase: bool) -> tuple[int, str]:
    norm = normalize_char(char, lowercase)
    if not norm:
        return _DROP, ""
    if is_cjk(char):
        return _ALONE, norm
    punct = [is_punctuation(c) for c in norm]
    if not any(punct):
        return _PART, norm
    return (_ALONE, norm) if len(norm) == 1 else (_MIXED, norm)


# Per character: (what it does, its normalised form); filled as characters are met.
_CHARS: dict[bool, dict[str, tuple[int, str]]] = {True: {}, False: {}}


def split_chunk(chunk: str, lowercase: bool) -> list[tuple[str, int, int]]:
    """The words of a run of non-space characters: (normalised word, start,
    end) with [start, end) the characters of `chunk` it came from."""
    if chunk.isascii() and chunk.isalnum():  # most real words
        return [(chunk.lower() if lowercase else chunk, 0, len(chunk))]
    table = _CHARS[lowercase]
    words, buf, start, end = [], [], 0, 0
    for i, char in enumerate(chunk):
        info = table.get(char)
        if info is None:
            info = table[char] = _classify(char, lowercase)
        kind, norm = info
        if kind == _PART:
            if not buf:
                start = i
            buf.append(norm)
            end = i + 1
        elif kind == _ALONE:
            if buf:
                words.append(("".join(buf), start, end))
                buf = []
            words.append((norm, i, i + 1))
        elif kind == _DROP and buf:  # a stripped accent or invisible character ending a word
            end = i + 1  # is still its character ("cafe\u0301": the whole "café")
        elif kind == _MIXED:  # e.g. a character that decomposes to letter + punctuation
            for c in norm:
                if is_punctuation(c):
                    if buf:
                        words.append(("".join(buf), start, end))
                        buf = []
                    words.append((c, i, i + 1))
                else:
                    if not buf:
                        start = i
                    buf.append(c)
                    end = i + 1
    if buf:
        words.append(("".join(buf), start, end))
    return words


def basic_tokenize(text: str, lowercase: bool = True) -> list[str]:
    """BERT's BasicTokenizer (everything before WordPiece): the normalised words of `text`."""
    return [w for chunk in _CHUNK.findall(text) for w, _, _ in split_chunk(chunk, lowercase)]


# === The tokenizer ===


class Flat(NamedTuple):
    """Rows of ids without Python lists: all ids in one array, and each row's length."""

    ids: np.ndarray  # int32 (total,)
    lengths: np.ndarray  # int64 (rows,)

    def rows(self) -> list[list[int]]:
        ids, ends = self.ids.tolist(), np.cumsum(self.lengths).tolist()
        return [ids[s:e] for s, e in zip([0] + ends[:-1], ends)]


class Word(NamedTuple):
    """One word of a text as the tokenizer sees it.

    text: the normalised word ("cafe" for "Café", "," for ",").
    start, end: the characters [start, end) of the original text it came from.
    ids: its WordPiece ids (one [UNK] for an unknown or too long word).
    chunk: the index of the whitespace-separated run of text it belongs to
        ("U.S." is four words of one chunk).
    """

    text: str
    start: int
    end: int
    ids: tuple[int, ...]
    chunk: int


class WordPieceTokenizer:
    """BERT's tokenizer for one `vocab.txt`, in pure Python.

    Args:
        vocab_path: the vocabulary, one token per line.
        lowercase: lower-case and strip accents (uncased vocabularies).

    Example:
    >>> tok = WordPieceTokenizer("vocab.txt")          # doctest: +SKIP
    >>> tok.encode(["Hello, world!"])                  # doctest: +SKIP
    [[7592, 1010, 2088, 999]]
    >>> tok.words("Café!")                             # doctest: +SKIP
    [Word(text='cafe', start=0, end=4, ids=(7668,), chunk=0),
     Word(text='!', start=4, end=5, ids=(999,), chunk=0)]
    """

    def __init__(self, vocab_path: str, lowercase: bool = True):
        self.vocab_path = vocab_path
        self.lowercase = lowercase
        self.vocabulary = load_vocabulary(vocab_path)
        self.token_to_id = {t: i for i, t in enumerate(self.vocabulary)}
        self.pad_id = self.token_to_id["[PAD]"]
        self.unk_id = self.token_to_id["[UNK]"]
        self.cls_id = self.token_to_id["[CLS]"]
        self.sep_id = self.token_to_id["[SEP]"]
        self.mask_id = self.token_to_id.get("[MASK]")
        self._longest_piece = max(len(t) for t in self.vocabulary)
        # chunk -> (((word, start, end, ids), ...), all ids of the chunk)
        self._cache: dict[str, tuple[tuple, list[int]]] = {}

    @property
    def vocabulary_size(self) -> int:
        return len(self.vocabulary)

    def special_ids(self) -> list[int]:
        return [self.token_to_id[t] for t in SPECIAL_TOKENS if t in self.token_to_id]

    # === WordPiece ===

    def wordpiece(self, word: str) -> list[int]:
        """Greedy longest-match-first pieces of one normalised word; one
        [UNK] when it is over MAX_WORD_CHARS characters or cannot be spelled."""
        n = len(word)
        if n > MAX_WORD_CHARS:
            return [self.unk_id]
        vocab, ids, start = self.token_to_id, [], 0
        while start < n:
            end = min(n, start + self._longest_piece)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = vocab.get(piece)
                if found is not None:
                    break
                end -= 1
            else:
                return [self.unk_id]
            ids.append(found)
            start = end
        return ids

    def _chunk(self, chunk: str) -> tuple[tuple, list[int]]:
        entry = self._cache.get(chunk)
        if entry is None:
            words = tuple(
                (w, s, e, tuple(self.wordpiece(w)))
                for w, s, e in split_chunk(chunk, self.lowercase)
            )
            entry = (words, [i for *_, ids in words for i in ids])
            if len(self._cache) >= CACHE_SIZE:
                self._cache.clear()
            self._cache[chunk] = entry
        return entry

    # === Python API ===

    def encode(self, texts: list[str]) -> list[list[int]]:
        """WordPiece ids for each text, without special tokens."""
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of strings; wrap a single text in a list")
        out = []
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"encode() takes strings, not {type(text).__name__}")
            ids = []
            for chunk in _CHUNK.findall(text):
                ids.extend(self._chunk(chunk)[1])
            out.append(ids)
        return out

    def encode_flat(self, texts: list[str]) -> Flat:
        """`encode` as one array of ids and the row lengths (what `pack_batch` takes)."""
        return _flatten(self.encode(texts))

    def tokenize(self, texts: list[str]) -> list[list[str]]:
        return [[self.vocabulary[i] for i in ids] for ids in self.encode(texts)]

    def words(self, text: str) -> list[Word]:
        """The words of one text with their character spans and WordPiece ids;
        their ids, concatenated, are `encode([text])[0]`."""
        if not isinstance(text, str):
            raise TypeError(f"words() takes a string, not {type(text).__name__}")
        out = []
        for k, match in enumerate(_CHUNK.finditer(text)):
            offset = match.start()
            for w, s, e, ids in self._chunk(match.group())[0]:
                out.append(Word(w, offset + s, offset + e, ids, k))
        return out

    def decode(self, ids) -> str:
        """Tokens joined back into text, `##` continuations glued on."""
        words = []
        for i in ids:
            token = self.vocabulary[int(i)]
            if token.startswith("##") and words:
                words[-1] += token[2:]
            else:
                words.append(token)
        return " ".join(words)

    def pack(
        self,
        first: list[int],
        second: list[int] | None = None,
        seq_len: int = 128,
        truncate: str = "longest_first",
    ):
        """`[CLS] A [SEP] (B [SEP])` padded to `seq_len`.

        Truncation cuts segments at the end, as Hugging Face's "longest_first"
        does for sentence pairs: if the shorter segment fits in half the room,
        only the longer one is cut; otherwise both get half, and an odd token
        goes to the segment that was longer (to B when they are equal).

        Returns:
            (token_ids, segment_ids, padding_mask), each an int32 array (seq_len,).
        """
        a, b = list(first), list(second) if second is not None else None
        budget = seq_len - (3 if b is not None else 2)
        if budget < (2 if b is not None else 1):
            raise ValueError(f"seq_len={seq_len} leaves no room for text")
        if b is None:
            a = a[:budget]
        else:
            if truncate != "longest_first":
                raise ValueError(f"unknown truncation {truncate!r}")
            if len(a) + len(b) > budget:
                short, long = sorted((len(a), len(b)))
                long = max(short, budget - short)
                if short + long > budget:
                    short, long = budget // 2, budget - budget // 2
                n_a, n_b = (long, short) if len(a) > len(b) else (short, long)
                a, b = a[:n_a], b[:n_b]
        ids = [self.cls_id] + a + [self.sep_id]
        segments = [0] * len(ids)
        if b is not None:
            ids += b + [self.sep_id]
            segments += [1] * (len(b) + 1)
        token_ids = np.full(seq_len, self.pad_id, dtype=np.int32)
        segment_ids = np.zeros(seq_len, dtype=np.int32)
        padding_mask = np.zeros(seq_len, dtype=np.int32)
        token_ids[: len(ids)] = ids
        segment_ids[: len(ids)] = segments
        padding_mask[: len(ids)] = 1
        return token_ids, segment_ids, padding_mask

    def pack_batch(
        self,
        firsts: list,
        seconds: list | None = None,
        seq_len: int = 128,
        truncate: str = "longest_first",
    ):
        """`pack` for many rows at once, in numpy (no Python work per token):
        row i is `pack(firsts[i], seconds[i] if seconds else None, seq_len)`.
        `firsts` and `seconds` are lists of rows of ids or `Flat` (`encode_flat`);
        a list of `seconds` may hold None for rows with one segment.

        Returns:
            (token_ids, segment_ids, padding_mask), each int32 (len(firsts), seq_len).
        """
        a_ids, a_len = _flatten(firsts)
        n = len(a_len)
        if seconds is None:
            seconds = Flat(np.zeros(0, np.int32), np.zeros(n, np.int64))
            has_b = np.zeros(n, bool)
        elif isinstance(seconds, Flat):
            has_b = np.ones(len(seconds.lengths), bool)
        else:
            has_b = np.fromiter((b is not None for b in seconds), dtype=bool, count=len(seconds))
            seconds = [() if b is None else b for b in seconds]
        if len(has_b) != n:
            raise ValueError(f"pack_batch: {n} first segments but {len(has_b)} second ones")
        if has_b.any() and truncate != "longest_first":
            raise ValueError(f"unknown truncation {truncate!r}")
        if seq_len - (3 if has_b.any() else 2) < (2 if has_b.any() else 1):
            raise ValueError(f"seq_len={seq_len} leaves no room for text")
        b_ids, b_len = _flatten(seconds)
        budget = np.where(has_b, seq_len - 3, seq_len - 2)
        # pack's longest_first, for every row at once (rows without B: b_len 0, always fit
        # after A is cut to the budget)
        short, long = np.minimum(a_len, b_len), np.maximum(a_len, b_len)
        long = np.maximum(short, budget - short)
        halves = short + long > budget
        short = np.where(halves, budget // 2, short)
        long = np.where(halves, budget - budget // 2, long)
        a_longer = a_len > b_len
        fits = (a_len + b_len <= budget) | ~has_b
        n_a = np.where(fits, np.minimum(a_len, budget), np.where(a_longer, long, short))
        n_b = np.where(fits, b_len, np.where(a_longer, short, long))

        rows = np.arange(n)
        token_ids = np.full((n, seq_len), self.pad_id, dtype=np.int32)
        token_ids[:, 0] = self.cls_id
        _scatter(token_ids, a_ids, a_len, n_a, column=np.ones(n, np.int64))
        token_ids[rows, n_a + 1] = self.sep_id
        b_start = n_a + 2
        _scatter(token_ids, b_ids, b_len, n_b, column=b_start)
        token_ids[rows[has_b], (b_start + n_b)[has_b]] = self.sep_id
        length = b_start + np.where(has_b, n_b + 1, 0)
        columns = np.arange(seq_len)
        padding_mask = (columns < length[:, None]).astype(np.int32)
        segment_ids = ((columns >= b_start[:, None]) & (columns < length[:, None])).astype(np.int32)
        return token_ids, segment_ids, padding_mask


def _flatten(rows) -> Flat:
    """Rows of ids (or a `Flat` already) -> `Flat`."""
    if isinstance(rows, Flat):
        return rows
    if isinstance(rows, str) or any(isinstance(row, str) for row in rows[:1]):
        raise TypeError("pack_batch() takes rows of ids (encode()'s output), not text")
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    ids = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int32, count=int(lengths.sum()))
    return Flat(ids, lengths)


def _scatter(
    out: np.ndarray, ids: np.ndarray, lengths: np.ndarray, keep: np.ndarray, column: np.ndarray
) -> None:
    """out[r, column[r] + j] = row r's j-th id (of `ids`, rows of `lengths`), j < keep[r]."""
    rows = np.repeat(np.arange(len(keep)), keep)
    j = np.arange(int(keep.sum())) - np.repeat(np.cumsum(keep) - keep, keep)
    out[rows, column[rows] + j] = ids[(np.cumsum(lengths) - lengths)[rows] + j]


def parse_command_line(argv, module: str):
    """`python -m MODULE VOCAB_TXT [--cased] TEXT...` (this module's and
    model.text.tokenizer's): (vocab path, lowercase, texts), or the exit code when
    the usage was printed instead."""
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(f"usage: python -m {module} VOCAB_TXT [--cased] TEXT...")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return argv[0], "--cased" not in argv, [a for a in argv[1:] if a != "--cased"]


def main(argv=None) -> int:
    parsed = parse_command_line(sys.argv[1:] if argv is None else argv, "model.text.wordpiece")
    if isinstance(parsed, int):
        return parsed
    vocab, lowercase, texts = parsed
    tok = WordPieceTokenizer(vocab, lowercase=lowercase)
    for text in texts:
        print(text)
        for word in tok.words(text):
            print(
                f"  {word.start:4d}-{word.end:<4d} {text[word.start : word.end]!r:20} "
                f"{[tok.vocabulary[i] for i in word.ids]} {list(word.ids)}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
