"""BERT's WordPiece tokenizer on tensorflow-text's fast ops, plus `[CLS] A [SEP] B [SEP]` packing.

The reference tokenizer (Hugging Face `BertTokenizer`, i.e. the `tokenizers`
pipeline BertNormalizer -> BertPreTokenizer -> WordPiece that bert-base-uncased's
`tokenizer.json` describes; google-research/bert `tokenization.py` differs only
in rare corners: 200-character words, Greek final sigma, unassigned code
points) first *cleans* text: it drops control and format
characters (Cc, Cf), private-use characters, NUL and U+FFFD, and maps every
Unicode space (tab, no-break space, U+2028, ...) to " ". Then it spaces out CJK
characters, strips accents and lower-cases (uncased vocabularies only), splits
on whitespace and punctuation, and runs greedy longest-match-first WordPiece
with one `[UNK]` for a word over 100 characters. tensorflow-text's
`FastBertTokenizer` does the splitting and WordPiece; the rest are regex passes
here, in the same TensorFlow graph. `tests/tokenizer_parity.py` measures the
agreement on real text: 100 % of the lines of WikiText-2 (valid), SST-2 and
100 shards of English Wikipedia (381,620 lines).

    python -m model.tokenizer VOCAB_TXT "Some text to tokenize."
"""

from __future__ import annotations

import os
import sys

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# The reference's `max_input_chars_per_word`: Hugging Face's WordPiece (and the
# tokenizer.json of bert-base-uncased / all-MiniLM-L6-v2) use 100; Google's
# original tokenization.py used 200. Words longer than this become one [UNK].
MAX_WORD_CHARS = 100
# Stands for a too-long word after cleaning (which removes all private-use
# characters, so it cannot come from the text); not in any BERT vocabulary, so
# WordPiece turns it into exactly one [UNK].
_LONG_WORD = "\ue000"
# What the reference maps to " ": tab, newline, CR, the Unicode spaces (Zs:
# U+00A0, U+1680, U+2000-U+200A, U+202F, U+205F, U+3000) and the line and
# paragraph separators. " " itself is left out: replacing every plain space by
# a space made this the slowest pass of clean_text.
_SPACES = r"[\t\n\r\x{A0}\x{1680}\x{2000}-\x{200A}\x{202F}\x{205F}\x{3000}\x{2028}\x{2029}]"
# The reference's punctuation: ASCII punctuation and Unicode category P.
_PUNCT = "\\p{P}!-/:-@\\[-`{-~"

# Characters the reference treats as CJK ideographs (tokenization.py `_is_chinese_char`).
_CJK = ("\\x{4E00}-\\x{9FFF}\\x{3400}-\\x{4DBF}\\x{20000}-\\x{2A6DF}\\x{2A700}-\\x{2B73F}"
        "\\x{2B740}-\\x{2B81F}\\x{2B820}-\\x{2CEAF}\\x{F900}-\\x{FAFF}\\x{2F800}-\\x{2FA1F}")


def load_vocabulary(path: str) -> list[str]:
    """One token per line, id = line number; errors name the file."""
    try:
        with open(path, encoding="utf-8") as f:
            tokens = [line.rstrip("\r\n") for line in f]
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: vocabulary file not found") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: vocabulary is not UTF-8 text (byte {e.start})") from None
    while tokens and not tokens[-1]:
        tokens.pop()
    if not tokens:
        raise ValueError(f"{path}: vocabulary is empty")
    seen = {}
    for line, token in enumerate(tokens, 1):
        if token in seen:
            raise ValueError(f"{path}:{line}: duplicate token {token!r} (first on line {seen[token]})")
        seen[token] = line
    missing = [t for t in ("[UNK]", "[CLS]", "[SEP]", "[PAD]") if t not in seen]
    if missing:
        raise ValueError(f"{path}: vocabulary lacks the special tokens {missing}")
    return tokens


def clean_text(strings: tf.Tensor, lowercase: bool) -> tf.Tensor:
    """The reference's text cleaning, CJK spacing and, for uncased vocabularies,
    accent stripping and lower-casing, plus its word-length limit, as graph ops.

    tensorflow-text's own `lower_case_nfd_strip_accents` case-folds with NFKC
    ("…" becomes "...", "²" becomes "2"); the reference only decomposes with
    NFD, drops nonspacing marks (Mn) and lower-cases character by character, so
    that is done here instead. Words (runs between spaces and punctuation) over
    `MAX_WORD_CHARS` characters are replaced by `_LONG_WORD`, which becomes one
    [UNK] as in the reference; FastBertTokenizer's own limit is in bytes.
    """
    x = tf.strings.regex_replace(strings, _SPACES, " ")
    x = tf.strings.regex_replace(x, r"[\p{Cc}\p{Cf}\p{Co}\x{FFFD}]", "")
    x = tf.strings.regex_replace(x, f"([{_CJK}])", r" \1 ")
    if lowercase:
        # The reference lower-cases without context, so a word-final capital
        # sigma becomes "σ", not ICU's final "ς".
        x = tf.strings.regex_replace(x, "\u03a3", "\u03c3")
        x = tf_text.normalize_utf8(tf.strings.lower(x, encoding="utf-8"), "NFD")
        x = tf.strings.regex_replace(x, r"\p{Mn}", "")
    return _replace_long_words(x)


def _replace_long_words(x: tf.Tensor) -> tf.Tensor:
    """Words of more than MAX_WORD_CHARS characters -> `_LONG_WORD`.

    Only strings with a run of more than MAX_WORD_CHARS non-spaces (rare) go
    through the costlier pass that first spaces out punctuation (which does not
    change the tokens) so a word is simply a run of non-spaces.
    """
    shape = tf.shape(x)
    flat = tf.reshape(x, [-1])
    run = f"[^ ]{{{MAX_WORD_CHARS + 1},}}"
    long = tf.where(tf.strings.regex_full_match(flat, f"(?s).*{run}.*"))
    candidates = tf.gather_nd(flat, long)
    candidates = tf.strings.regex_replace(candidates, f"([{_PUNCT}])", r" \1 ")
    candidates = tf.strings.regex_replace(candidates, run, _LONG_WORD)
    out = tf.reshape(tf.tensor_scatter_nd_update(flat, long, candidates), shape)
    out.set_shape(x.shape)  # keep the static shape for graph tracing
    return out


class WordPieceTokenizer:
    """BERT's tokenizer for one `vocab.txt`.

    Args:
        vocab_path: the vocabulary, one token per line.
        lowercase: lower-case and strip accents (uncased vocabularies).

    Example:
    >>> tok = WordPieceTokenizer("vocab.txt")          # doctest: +SKIP
    >>> tok.encode(["Hello, world!"])                  # doctest: +SKIP
    [[7592, 1010, 2088, 999]]
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
        self._fast = tf_text.FastBertTokenizer(
            vocab=self.vocabulary,
            token_out_type=tf.int32,
            unknown_token="[UNK]",
            # clean_text already turned longer words into one [UNK]; this
            # byte limit (4 UTF-8 bytes a character) must not cut in earlier.
            max_bytes_per_word=4 * MAX_WORD_CHARS,
        )

    @property
    def vocabulary_size(self) -> int:
        return len(self.vocabulary)

    def special_ids(self) -> list[int]:
        return [self.token_to_id[t] for t in SPECIAL_TOKENS if t in self.token_to_id]

    # === Graph ops (for tf.data) ===

    def encode_tf(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """(batch,) strings -> (batch, None) int32 ids, no special tokens."""
        return self._fast.tokenize(clean_text(strings, self.lowercase))

    # === Python API ===

    def encode(self, texts: list[str]) -> list[list[int]]:
        """WordPiece ids for each text, without special tokens."""
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of strings; wrap a single text in a list")
        if not texts:
            return []
        ragged = self.encode_tf(tf.constant(list(texts), dtype=tf.string))
        values = ragged.flat_values.numpy()
        splits = ragged.row_splits.numpy()
        return [values[splits[i]:splits[i + 1]].tolist() for i in range(len(texts))]

    def tokenize(self, texts: list[str]) -> list[list[str]]:
        return [[self.vocabulary[i] for i in ids] for ids in self.encode(texts)]

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

    def pack(self, first: list[int], second: list[int] | None = None,
             seq_len: int = 128, truncate: str = "longest_first"):
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
        token_ids[:len(ids)] = ids
        segment_ids[:len(ids)] = segments
        padding_mask[:len(ids)] = 1
        return token_ids, segment_ids, padding_mask


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print("usage: python -m model.tokenizer VOCAB_TXT [--cased] TEXT...")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    lowercase = "--cased" not in argv
    texts = [a for a in argv[1:] if a != "--cased"]
    tok = WordPieceTokenizer(argv[0], lowercase=lowercase)
    for text, tokens, ids in zip(texts, tok.tokenize(texts), tok.encode(texts)):
        print(text)
        print("  tokens:", tokens)
        print("  ids:   ", ids)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
