"""model.text.wordpiece (pure Python) gives the TensorFlow tokenizer's ids, and knows its characters.

    PYTHONPATH=. python -m pytest -q tests/test_wordpiece.py

Parity is checked on real text (every SST-2 dev sentence, every 20th SST-2
train sentence, every line of WikiText-2 valid), on the hand-picked hard
cases of `tests/tokenizer_parity.py` plus more odd Unicode, and on a sweep
of code points, cased and uncased. The one known difference: characters
that Python 3.11's Unicode 14 tables do not know yet (category Cn there) but
TensorFlow's newer ICU/RE2 tables do (78 code points of Unicode 15 and 16
when uncased, 43 cased; e.g. Kawi, U+11F00-U+11F5F); the sweep covers
assigned characters only.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import unicodedata

import pytest

from model.text import wordpiece
from model.text.wordpiece import MAX_WORD_CHARS, WordPieceTokenizer

TESTS = os.path.dirname(os.path.abspath(__file__))
VOCAB = os.path.join(TESTS, "fixtures", "bert-base-uncased-vocab.txt")
DATA = os.path.abspath(os.path.join(TESTS, "..", "..", "shared", "data"))

# More odd text than tokenizer_parity.HARD_CASES: right-to-left scripts and
# their marks, emoji sequences, controls between letters, long words.
ODD = [
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645\u061f \u200f(\u0661\u0662\u0663)",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd! \u202bembedded \u202cend \u2067isolate\u2069",
    "\u0627\u0644\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u064e\u0651\u0629 with harakat",
    "emoji \U0001f9d1\U0001f3fd\u200d\U0001f4bb \U0001f3f3\ufe0f\u200d\U0001f308 #\ufe0f\u20e3 \U0001f600!!",
    "ctrl\x01a\x02b\x03 \x1cfile\x1dgroup\x1erecord\x1funit \x85next \x0bvt\x0cff",
    "ΣΊΣΥΦΟΣ ΟΔΥΣΣΕΥΣ ὈΔΥΣΣΕΎΣ ﬃ ß ẞ ǅ İstanbul ıi",
    "x" * (MAX_WORD_CHARS - 1) + "é " + "x" * MAX_WORD_CHARS + "é " + "ab" * 300,
    "(" + "δ" * 101 + ")" + "\u0301" * 5 + " a" + "\u0301" * 200,
    "\u4e00\u4e8c\u4e09abc\u56db\uf900\U0002f800 \u3042\u3044\u3046",
    "¿Qué? ¡Sí! «Ça va?» — „Jа“ “quotes” ‹x› ‼ ⁇ ․ ‥ … ⸮ ⁂",
    "Zalgo: t\u0336\u0317e\u0334\u031ds\u0335\u0320t\u0337\u0359",
    "nbsp\u00a0narrow\u202fideo\u3000ogham\u1680thin\u2009hair\u200a",
    "\ufeffBOM at start, soft\u00adhyphen, zw\u200bsp, wj\u2060j",
    "[MASK] [mask] [CLS]x[SEP] ##ing ## #",
    "",
    "   \t\n ",
]


def _load_parity_module():
    spec = importlib.util.spec_from_file_location(
        "tokenizer_parity", os.path.join(TESTS, "tokenizer_parity.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HARD = [text for _, text in _load_parity_module().HARD_CASES] + ODD


def _sst2(split: str, every: int = 1) -> list[str]:
    path = os.path.join(DATA, "glue", "SST-2", f"{split}.tsv")
    if not os.path.isfile(path):
        pytest.skip(f"{path}: SST-2 not found")
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    column = lines[0].split("\t").index("sentence")
    rows = [line.split("\t")[column] for line in lines[1:] if line.strip()]
    return rows[::every]


def _wikitext() -> list[str]:
    path = os.path.join(DATA, "wikitext-2-raw", "wiki.valid.raw")
    if not os.path.isfile(path):
        pytest.skip(f"{path}: WikiText-2 not found")
    with open(path, encoding="utf-8") as f:
        return [line for line in f.read().split("\n") if line.strip()]


REAL = {
    "sst2_dev": lambda: _sst2("dev"),
    "sst2_train_every_20th": lambda: _sst2("train", 20),
    "wikitext2_valid": _wikitext,
}


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def pair(request):
    """(pure-Python tokenizer, TensorFlow tokenizer) on the bert-base-uncased vocabulary."""
    from model.text.tokenizer import WordPieceTokenizer as TfTokenizer

    return WordPieceTokenizer(VOCAB, request.param), TfTokenizer(VOCAB, request.param)


@pytest.fixture(scope="module")
def tok():
    return WordPieceTokenizer(VOCAB)


def _mismatches(texts, ours, theirs, vocab) -> list[str]:
    out = []
    for text, a, b in zip(texts, ours, theirs):
        if a != b:
            out.append(
                f"{text[:60]!r}: python {[vocab[i] for i in a][:12]} vs "
                f"tensorflow {[vocab[i] for i in b][:12]}"
            )
    return out


# === Same ids as the TensorFlow tokenizer ===


@pytest.mark.parametrize("source", sorted(REAL))
def test_same_ids_on_real_text(pair, source):
    py, tf_tok = pair
    texts = REAL[source]()
    assert len(texts) > 800
    bad = _mismatches(texts, py.encode(texts), tf_tok.encode(texts), py.vocabulary)
    assert not bad, f"{len(bad)} of {len(texts)} lines differ, e.g. {bad[:3]}"


def test_same_ids_on_odd_unicode(pair):
    py, tf_tok = pair
    bad = _mismatches(HARD, py.encode(HARD), tf_tok.encode(HARD), py.vocabulary)
    assert not bad, bad


def test_same_ids_on_a_sweep_of_code_points(pair):
    """Every code point below U+2500 (Latin to math symbols) and every 13th
    above, alone and between letters: each one's cleaning, splitting, case
    and accent rules."""
    py, tf_tok = pair
    points = [
        c
        for c in list(range(0x2500)) + list(range(0x2500, 0x110000, 13))
        if not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c)) != "Cn"
    ]
    texts = [f"a{chr(c)}b {chr(c)} x{chr(c)}{chr(c)}" for c in points]
    bad = _mismatches(texts, py.encode(texts), tf_tok.encode(texts), py.vocabulary)
    assert not bad, f"{len(bad)} of {len(texts)} code points differ, e.g. {bad[:5]}"


# === Words and their characters ===


def test_words_map_back_to_the_original_characters(tok):
    text = "  Café,\u200bnaïve  U.S.\u00a0Σ東京!"
    words = tok.words(text)
    assert [(w.text, text[w.start : w.end], w.chunk) for w in words] == [
        ("cafe", "Café", 0),
        (",", ",", 0),
        ("naive", "naïve", 0),
        ("u", "U", 1),
        (".", ".", 1),
        ("s", "S", 1),
        (".", ".", 1),
        ("σ", "Σ", 2),
        ("東", "東", 2),
        ("京", "京", 2),
        ("!", "!", 2),
    ]
    # A dropped character inside a word joins its neighbours and belongs to it.
    [word] = tok.words("a\u200bb\x07c")
    assert (word.text, word.start, word.end) == ("abc", 0, 5)
    # So does a stripped combining accent that ends a word (a decomposed "café").
    first, comma = tok.words("cafe\u0301, ")
    assert (first.text, first.start, first.end) == ("cafe", 0, 5) and comma.start == 5
    assert tok.words("") == [] and tok.words(" \t\u3000") == []


def test_words_concatenate_to_encode_and_reencode_alone(tok):
    texts = REAL["sst2_dev"]()[:300] + HARD
    for text in texts:
        words = tok.words(text)
        assert [i for w in words for i in w.ids] == tok.encode([text])[0], repr(text)
        alone = tok.encode([text[w.start : w.end] for w in words])
        assert [list(w.ids) for w in words] == alone, repr(text)
        assert all(0 <= w.start < w.end <= len(text) for w in words)
        assert [w.start for w in words] == sorted(w.start for w in words)


def test_long_words_become_one_unk(tok):
    unk, y = tok.unk_id, tok.token_to_id["y"]
    assert tok.encode(["y" * MAX_WORD_CHARS]) == [[y] + [tok.token_to_id["##y"]] * 99]
    assert tok.encode(["y" * (MAX_WORD_CHARS + 1), "(" + "é" * 101 + ")"]) == [
        [unk],
        [tok.token_to_id["("], unk, tok.token_to_id[")"]],
    ]
    # The limit counts normalised characters: 101 accents are dropped, not counted.
    assert tok.encode(["y" * 100 + "\u0301" * 101]) == tok.encode(["y" * 100])


def test_tensorflow_tokenizer_shares_this_class():
    from model.text import tokenizer

    assert issubclass(tokenizer.WordPieceTokenizer, WordPieceTokenizer)
    assert tokenizer.load_vocabulary is wordpiece.load_vocabulary
    assert tokenizer.SPECIAL_TOKENS == wordpiece.SPECIAL_TOKENS
    for name in ("pack", "decode", "words", "tokenize", "special_ids"):
        assert getattr(tokenizer.WordPieceTokenizer, name) is getattr(WordPieceTokenizer, name)


def test_interface(tok):
    assert tok.vocabulary_size == 30522
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 100, 101, 102, 103)
    assert tok.special_ids() == [0, 100, 101, 102, 103]
    ids = tok.encode(["Hello, World! The unaffable café."])[0]
    assert ids == [7592, 1010, 2088, 999, 1996, 14477, 20961, 3468, 7668, 1012]
    assert tok.tokenize(["unaffable"]) == [["una", "##ffa", "##ble"]]
    assert tok.decode(ids) == "hello , world ! the unaffable cafe ."
    token_ids, segments, mask = tok.pack(ids[:3], ids[3:5], seq_len=9)
    assert token_ids.tolist() == [101, 7592, 1010, 2088, 102, 999, 1996, 102, 0]
    assert segments.tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 0]
    assert mask.tolist() == [1] * 8 + [0]
    assert tok.encode([]) == []


def test_bad_input_and_vocabularies(tok, tmp_path):
    with pytest.raises(TypeError, match="list of strings"):
        tok.encode("hello")
    with pytest.raises(TypeError, match="not bytes"):
        tok.encode([b"hello"])
    with pytest.raises(TypeError, match="not int"):
        tok.words(3)
    for texts in ("abc", ["abc"]):  # text where encode()'s ids go
        with pytest.raises(TypeError, match=r"pack_batch\(\) takes rows of ids"):
            tok.pack_batch(texts, seq_len=8)
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        WordPieceTokenizer(str(tmp_path / "nope.txt"))
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\na\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"lacks the special tokens \['\[SEP\]'\]"):
        WordPieceTokenizer(str(path))


def test_a_full_cache_starts_again(monkeypatch):
    monkeypatch.setattr(wordpiece, "CACHE_SIZE", 3)
    small = WordPieceTokenizer(VOCAB)
    texts = ["one two three four five six", "six five four three two one"]
    assert small.encode(texts) == WordPieceTokenizer(VOCAB).encode(texts)
    assert len(small._cache) <= 3


def test_imports_no_tensorflow():
    code = (
        "import sys, model.text.wordpiece; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')]; "
        "assert not bad, bad"
    )
    env = dict(os.environ, PYTHONPATH=os.path.dirname(TESTS))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_command_line(capsys):
    assert wordpiece.main([VOCAB, "Café!"]) == 0
    out = capsys.readouterr().out
    assert "'Café'" in out and "['cafe'] [7668]" in out
    assert wordpiece.main([]) == 2
