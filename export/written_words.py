"""Predicted WordPieces written back into a user's text, as the edge runtime answers with it:
`fill_mask`'s word at each [MASK] ("The capital of France is paris."), `corrupt`'s words
written anew from their changed pieces. No numpy: only the tokenizer's character classes
(`model.text.wordpiece`).
"""

from __future__ import annotations

from model.text import wordpiece


def rewrite(text: str, pieces: list, ids: list[int], vocabulary: list[str]) -> str:
    """`text` with every word one of whose pieces changed written anew from its pieces
    ("##" glued on; a word-start piece after the first starts a new word); the other
    words keep their own characters."""
    words: dict[int, list] = {}
    for (old, start, end, w), new in zip(pieces, ids):
        words.setdefault(w, []).append((old, new, start, end))
    out, cursor = [], 0
    for group in words.values():
        if all(old == new for old, new, _, _ in group):
            continue
        start, end = min(g[2] for g in group), max(g[3] for g in group)
        tokens = [vocabulary[new] for _, new, _, _ in group]
        spelled = "".join(
            t[2:] if t.startswith("##") else (" " if k else "") + t for k, t in enumerate(tokens)
        )
        out += [text[cursor:start], spelled]
        cursor = end
    return "".join(out) + text[cursor:]


def best_word(predictions: list[dict], special: set[int], starts_word: bool = True) -> int:
    """The index of the likeliest prediction that is a word (not [UNK], [SEP], ...; where
    the [MASK] starts a word, not a "##" piece, which only ends one): the one `fill_mask`
    writes into the text (the likeliest non-special one, else the first, when none is)."""
    words = [k for k, p in enumerate(predictions) if p["token_id"] not in special]
    starts = [k for k in words if not (starts_word and predictions[k]["token"].startswith("##"))]
    return (starts or words or [0])[0]


# Scripts written without spaces between words, beside CJK ideographs: hiragana, katakana
# (and its half-width forms), Thai, Lao, Myanmar, Khmer. Hangul is written with spaces.
UNSPACED = ((0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F), (0x0E00, 0x0EFF),
            (0x1000, 0x109F), (0x1780, 0x17FF))  # fmt: skip


def spaced_letter(char: str) -> bool:
    """A letter or digit of a script that puts spaces between words."""
    if not char.isalnum():  # "" too
        return False
    cp = ord(char)
    return not (wordpiece.is_cjk(char) or any(a <= cp <= b for a, b in UNSPACED))


def glued(before: str, k: int) -> bool:
    """Whether the `k`-th [MASK], after the text `before`, is glued to a word ("play[MASK]")
    or to another [MASK] ("The [MASK][MASK]"), so that a "##" piece may continue it; a CJK
    character is a word of its own (the tokenizer splits it off), kana or Thai are not."""
    last = before[-1:]
    return (last.isalnum() and not wordpiece.is_cjk(last)) or (not before and k > 0)


def written(token: str, is_glued: bool, before: str = "") -> str:
    """How a [MASK]'s word goes into the text after `before`: a "##" piece joined to what is
    before it, a word glued to a word or another [MASK] ("The [MASK][MASK]") after a space,
    but not where either is of a script written without spaces ("東京は" + "の")."""
    if token.startswith("##"):
        return token[2:]
    last = before[-1:]
    spaced = spaced_letter(token[:1]) and (not last or spaced_letter(last))
    return " " + token if is_glued and spaced else token
