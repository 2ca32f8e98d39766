"""BERT's WordPiece tokenizer on tensorflow-text's fast ops, plus `[CLS] A [SEP] B [SEP]` packing.

The class extends the pure-Python `model.text.wordpiece.WordPieceTokenizer` (the
edge runtime's tokenizer, which also owns the vocabulary, `pack`, `decode` and
the word/character alignment) with graph ops: `encode_tf` for tf.data, and an
`encode` that runs them. Both classes give the same ids
(`tests/test_wordpiece.py`).

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

    python -m model.text.tokenizer VOCAB_TXT "Some text to tokenize."
"""

from __future__ import annotations

import os
import sys

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from model.text import wordpiece

# Re-exported: the vocabulary helpers live with the pure-Python tokenizer.
from model.text.wordpiece import MAX_WORD_CHARS, SPECIAL_TOKENS, load_vocabulary  # noqa: F401

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
_CJK = (
    "\\x{4E00}-\\x{9FFF}\\x{3400}-\\x{4DBF}\\x{20000}-\\x{2A6DF}\\x{2A700}-\\x{2B73F}"
    "\\x{2B740}-\\x{2B81F}\\x{2B820}-\\x{2CEAF}\\x{F900}-\\x{FAFF}\\x{2F800}-\\x{2FA1F}"
)


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
    x = strings
    for _, stage in cleaning_stages(lowercase):
        x = stage(x)
    return x


def cleaning_stages(lowercase: bool) -> list:
    """[(name, op)]: the graph ops of `clean_text`, in its order, each applied to the
    previous one's output (bench/tokenizer_stages.py times them one by one)."""
    stages = [
        ("spaces -> ' '", lambda x: tf.strings.regex_replace(x, _SPACES, " ")),
        (
            "drop controls",
            lambda x: tf.strings.regex_replace(x, r"[\p{Cc}\p{Cf}\p{Co}\x{FFFD}]", ""),
        ),
        ("space out CJK", lambda x: tf.strings.regex_replace(x, f"([{_CJK}])", r" \1 ")),
    ]
    if lowercase:
        stages += [
            # The reference lower-cases without context, so a word-final capital
            # sigma becomes "σ", not ICU's final "ς".
            ("capital sigma", lambda x: tf.strings.regex_replace(x, "\u03a3", "\u03c3")),
            ("lower (UTF-8)", lambda x: tf.strings.lower(x, encoding="utf-8")),
            ("NFD", lambda x: tf_text.normalize_utf8(x, "NFD")),
            ("drop Mn", lambda x: tf.strings.regex_replace(x, r"\p{Mn}", "")),
        ]
    return stages + [("long words", _replace_long_words)]


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


class WordPieceTokenizer(wordpiece.WordPieceTokenizer):
    """BERT's tokenizer for one `vocab.txt`, encoding with tensorflow-text.

    Everything but `encode`/`encode_flat` (vocabulary, special ids, `words`,
    `decode`, `pack`, `pack_batch`) is the pure-Python
    `model.text.wordpiece.WordPieceTokenizer`'s; this class adds the graph op
    `encode_tf` for tf.data pipelines and makes `encode` and `encode_flat` use it
    (the same ids; faster on large batches of mostly distinct words).
    Arguments and example: the parent class.
    """

    def __init__(self, vocab_path: str, lowercase: bool = True):
        super().__init__(vocab_path, lowercase)
        self._fast = tf_text.FastBertTokenizer(
            vocab=self.vocabulary,
            token_out_type=tf.int32,
            unknown_token="[UNK]",
            # clean_text already turned longer words into one [UNK]; this
            # byte limit (4 UTF-8 bytes a character) must not cut in earlier.
            max_bytes_per_word=4 * MAX_WORD_CHARS,
        )
        self._graphs = {}  # shard count -> tf.function of encode_flat

    # === Graph ops (for tf.data) ===

    def encode_tf(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """(batch,) strings -> (batch, None) int32 ids, no special tokens."""
        return self._fast.tokenize(clean_text(strings, self.lowercase))

    # === Python API ===

    def encode(self, texts: list[str]) -> list[list[int]]:
        """WordPiece ids for each text, without special tokens."""
        return self.encode_flat(texts).rows()

    def encode_flat(self, texts: list[str]) -> wordpiece.Flat:
        """All texts' ids in one array and each text's length (`pack_batch` takes it as is).

        One graph call: large lists are cut into one contiguous shard per CPU thread
        (TensorFlow's intra-op setting, else the cores this process may use), which
        TensorFlow's executor tokenizes in parallel (the string ops are single-threaded).
        """
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of strings; wrap a single text in a list")
        texts = list(texts)
        if not texts:
            return wordpiece.Flat(np.zeros(0, np.int32), np.zeros(0, np.int64))
        shards = max(1, min(_threads(), len(texts) // PARALLEL_MIN_TEXTS))
        if shards not in self._graphs:
            self._graphs[shards] = self._sharded_graph(shards)
        ragged = self._graphs[shards](tf.constant(texts, dtype=tf.string))
        return wordpiece.Flat(ragged.flat_values.numpy(), ragged.row_lengths().numpy())

    def _sharded_graph(self, shards: int):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def encode(strings):
            n = tf.shape(strings)[0]
            bounds = [n * i // shards for i in range(shards + 1)]
            return tf.concat(
                [self.encode_tf(strings[bounds[i] : bounds[i + 1]]) for i in range(shards)], axis=0
            )

        return encode


# encode() tokenizes in parallel shards of at least this many texts.
PARALLEL_MIN_TEXTS = 256


def _threads() -> int:
    """The CPU threads TensorFlow was told to use, else the cores this process may run on."""
    if tf.config.threading.get_intra_op_parallelism_threads():
        return tf.config.threading.get_intra_op_parallelism_threads()
    if hasattr(os, "sched_getaffinity"):  # Linux
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def main(argv=None) -> int:
    parsed = wordpiece.parse_command_line(
        sys.argv[1:] if argv is None else argv, "model.text.tokenizer"
    )
    if isinstance(parsed, int):
        return parsed
    vocab, lowercase, texts = parsed
    tok = WordPieceTokenizer(vocab, lowercase=lowercase)
    for text, tokens, ids in zip(texts, tok.tokenize(texts), tok.encode(texts)):
        print(text)
        print("  tokens:", tokens)
        print("  ids:   ", ids)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
