"""`model.tasks.squad`: the strict reader, sliding windows and their mapping
back to characters near window borders, the v2.0 null score and threshold,
the v2.0 train-set builder, a tiny model end to end, and the real dev file.

    PYTHONPATH=. python -m pytest tests/test_squad.py
"""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest

from model.tasks import squad, squad_answers
from model.tasks.squad import Squad1Task, Squad2Task
from model.tasks.squad_answers import (
    MAX_ANSWER_LENGTH,
    NO_SPAN_ODDS,
    SquadPredictions,
    final_char_span,
    postprocess,
)
from model.tasks.squad_examples import Paragraph, SquadExample
from model.tasks.squad_windows import doc_spans, improve_answer_span, max_context_mask
from tests.helpers import MINILM_DIR, SHARED_DATA

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = os.path.join(ROOT, "tests", "fixtures", "bert-base-uncased-vocab.txt")
VOCAB_SOURCE = os.path.join(MINILM_DIR, "vocab.txt")  # the same 30,522 tokens
SQUAD_DIRS = (os.path.join(SHARED_DATA, "squad"),)


@pytest.fixture(scope="module")
def tokenizer():
    from model.text.tokenizer import WordPieceTokenizer

    if not os.path.isfile(VOCAB):
        if not os.path.isfile(VOCAB_SOURCE):
            pytest.skip(f"no BERT vocabulary at {VOCAB}")
        shutil.copyfile(VOCAB_SOURCE, VOCAB)
    return WordPieceTokenizer(VOCAB)


def squad_file(name: str) -> str:
    for folder in SQUAD_DIRS:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    pytest.skip(f"{name} not found in {SQUAD_DIRS}")


def write_json(path, data) -> str:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)
    return str(path)


def qa(qid, question, context=None, answer=None, start=None, impossible=None):
    """One `qas` entry; `answer` found in `context` when `start` is not given."""
    entry = {"id": qid, "question": question, "answers": []}
    if answer is not None:
        entry["answers"] = [
            {"text": answer, "answer_start": context.index(answer) if start is None else start}
        ]
    if impossible is not None:
        entry["is_impossible"] = impossible
    return entry


def dataset(paragraphs, version="1.1", title="Cats"):
    """paragraphs: [(context, [qas])]."""
    return {
        "version": version,
        "data": [{"title": title, "paragraphs": [{"context": c, "qas": q} for c, q in paragraphs]}],
    }


CONTEXT = "The cat sat on the mat. It was happy there, in 1895 (or so)."


# === Reader ===


def test_paragraph_words_and_char_to_word():
    p = Paragraph("  Steve  Smith's\tbat\n\nbroke.")
    assert p.words == ["Steve", "Smith's", "bat", "broke."]
    assert p.starts == [2, 9, 17, 22]
    # Whitespace belongs to the word before it; leading whitespace to none.
    assert [p.char_to_word(c) for c in (0, 2, 6, 7, 9, 16, 21, 27)] == [-1, 0, 0, 0, 1, 1, 2, 3]


def test_read_valid_files(tmp_path):
    data = dataset(
        [(CONTEXT, [qa("q1", "Who sat?", CONTEXT, "The cat"), qa("q2", "When?", CONTEXT, "1895")])]
    )
    examples = Squad1Task().read(write_json(tmp_path / "v1.json", data))
    assert [e.qas_id for e in examples] == ["q1", "q2"]
    assert examples[0].paragraph is examples[1].paragraph  # tokenized once
    assert examples[1].answers == [{"text": "1895", "answer_start": CONTEXT.index("1895")}]
    assert examples[0].title == "Cats" and not examples[0].is_impossible

    data = dataset(
        [
            (
                CONTEXT,
                [
                    qa("q1", "Who?", CONTEXT, "The cat", impossible=False),
                    qa("q2", "Why?", impossible=True),
                    qa("q3", "How?"),
                ],
            )
        ],
        "v2.0",
    )  # no field and no answers: impossible
    examples = Squad2Task().read(write_json(tmp_path / "v2.json", data))
    assert [e.is_impossible for e in examples] == [False, True, True]


@pytest.mark.parametrize(
    "entry, v2, message",
    [
        (
            qa("bad", "Who?", CONTEXT, "The dog", start=0),
            False,
            "mismatch: the context at answer_start 0 reads 'The cat', not the answer text 'The dog'",
        ),
        (
            qa("bad", "Who?", CONTEXT, "so).", start=len(CONTEXT) - 2),
            False,
            f"answer_start {len(CONTEXT) - 2} is out of range",
        ),
        (qa("bad", "Who?", CONTEXT, "The", start=-1), False, "answer_start -1 is out of range"),
        (qa("bad", "Who?", CONTEXT, "The", start="0"), False, '"answer_start" must be an integer'),
        (qa("bad", "Who?"), False, "no answers"),
        (qa("bad", "", CONTEXT, "cat"), False, '"question" must be a non-empty string'),
        (qa("bad", "Who?", impossible=True), False, "unanswerable question (is_impossible)"),
        (qa("bad", "Who?", CONTEXT, "cat", impossible=True), True, "is_impossible is true but"),
        (qa("bad", "Who?", impossible=False), True, "no answers but is_impossible is false"),
        (qa("q1", "Again?", CONTEXT, "cat"), False, "duplicate question id (first at "),
    ],
)
def test_reader_rejects_with_location(tmp_path, entry, v2, message):
    data = dataset(
        [
            ("Another paragraph.", [qa("q0", "What?", "Another paragraph.", "Another")]),
            (CONTEXT, [qa("q1", "Who sat?", CONTEXT, "The cat"), entry]),
        ]
    )
    path = write_json(tmp_path / "bad.json", data)
    task = Squad2Task() if v2 else Squad1Task()
    with pytest.raises(ValueError) as e:
        task.read(path)
    where = f"{path}: data[0] (title 'Cats'), paragraphs[1], qas[1] (id {entry['id']!r}): "
    assert str(e.value).startswith(where) and message in str(e.value), str(e.value)

    # skip_invalid: the bad question is left out and counted.
    examples = (Squad2Task if v2 else Squad1Task)(skip_invalid=True).read(path)
    assert [x.qas_id for x in examples] == ["q0", "q1"]
    assert task.read(path, skip_invalid=True) and len(task.skipped) == 1
    assert task.skipped[0].startswith(where) and message in task.skipped[0]


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"data": [', ":1:11: not valid JSON"),
        ('{"version": "1.1"}', 'the top level needs a "data" list'),
        ('{"data": [{"title": "x"}]}', 'data[0]: an article needs a "paragraphs" list'),
        (
            '{"data": [{"paragraphs": [{"qas": []}]}]}',
            'paragraphs[0]: a paragraph needs a "context"',
        ),
    ],
)
def test_reader_rejects_malformed_structure(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=rf"^{path}.*{__import__('re').escape(message)}"):
        Squad1Task(skip_invalid=True).read(str(path))


def test_reader_takes_a_bom_an_empty_paragraph_and_a_second_answer_placed_wrong(tmp_path):
    """As the official scripts score: the gold answers are texts; only the first answer's
    place is read (training's span). A paragraph without text or questions is nothing."""
    entry = qa("q1", "Who sat?", CONTEXT, "The cat")
    entry["answers"].append({"text": "the cat", "answer_start": 1})  # off by one
    data = dataset([(CONTEXT, [entry]), (" ", [])])
    path = tmp_path / "v1.json"
    path.write_text("\ufeff" + json.dumps(data), encoding="utf-8")
    [example] = Squad1Task().read(str(path))
    assert [a["text"] for a in example.answers] == ["The cat", "the cat"]


def test_a_context_without_text_stops_its_questions_or_skips_them(tmp_path):
    data = dataset(
        [(CONTEXT, [qa("q1", "Who sat?", CONTEXT, "The cat")]), (" ", [qa("q2", "Who?")])]
    )
    path = write_json(tmp_path / "v1.json", data)
    with pytest.raises(ValueError, match="paragraphs\\[1\\]: the context has no text"):
        Squad1Task().read(path)
    task = Squad1Task(skip_invalid=True)
    assert [e.qas_id for e in task.read(path)] == ["q1"] and len(task.skipped) == 1


def test_files(tmp_path):
    for name in ("train-v1.1.json", "dev-v1.1.json", "dev-v2.0.json"):
        (tmp_path / name).write_text("{}")
    assert Squad1Task().files(str(tmp_path)) == (
        str(tmp_path / "train-v1.1.json"),
        str(tmp_path / "dev-v1.1.json"),
    )
    with pytest.raises(FileNotFoundError, match="make-v2-train"):
        Squad2Task().files(str(tmp_path))
    made = tmp_path / "mine.json"
    made.write_text("{}")
    assert Squad2Task().files(str(made)) == (str(made), str(tmp_path / "dev-v2.0.json"))


# === Windows ===


def test_doc_spans_by_hand():
    assert doc_spans(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]  # the last ends at 10
    assert doc_spans(10, 4, 5) == [(0, 4), (4, 4), (8, 2)]  # stride capped at length
    assert doc_spans(11, 4, 3) == [(0, 4), (3, 4), (6, 4), (9, 2)]
    assert doc_spans(3, 4, 2) == [(0, 3)]
    with pytest.raises(ValueError, match="no room"):
        doc_spans(3, 0, 2)


def test_max_context_mask_by_hand():
    spans = [(0, 4), (3, 4), (6, 4)]
    # Score = min(left, right context) + 0.01 * span length.
    # Token 3: span 0 min(3, 0) + .04, span 1 min(0, 3) + .04: a tie, the first wins.
    # Tokens 4, 5: only span 1 covers them.
    # Token 6: span 1 min(3, 0) + .04, span 2 min(0, 3) + .04: the first, span 1.
    # Tokens 7-9: only span 2.
    expected = [
        [1, 1, 1, 1, 0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 1, 1, 1, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 1, 1, 1],
    ]
    np.testing.assert_array_equal(max_context_mask(spans, 10), np.array(expected, bool))
    # The longer span breaks an equal context: token 2 scores min(2, 1) + .04
    # in (0, 4) and min(1, 3) + .05 in (1, 5), so span 1 owns it.
    np.testing.assert_array_equal(
        max_context_mask([(0, 4), (1, 5)], 6),
        np.array([[1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 1]], bool),
    )


def test_improve_answer_span():
    doc = [7, 1, 8, 9, 2, 3]  # e.g. ( 1895 - 1943 ) .
    assert improve_answer_span(doc, 0, 5, [8]) == (2, 2)
    assert improve_answer_span(doc, 0, 5, [8, 9, 2]) == (2, 4)
    assert improve_answer_span(doc, 1, 3, [5]) == (1, 3)  # not there: unchanged


@pytest.mark.parametrize(
    "words, pred, expected",
    [
        ("Steve Smith's", "steve smith", "Steve Smith"),
        ("(1895-1943).", "1895", "1895"),
        ("Café, bar", "cafe", "Café"),
        ("the U.S.", "u . s", "U.S"),
        ("Steve Smith's", "[UNK]", "Steve Smith's"),  # not found: the whole words
        # characters the tokenizer drops, where google's answer is the whole words
        ("Anton Schuster\u200b.", "anton schuster", "Anton Schuster"),
        ("Mu\u0308nchen, Bavaria", "munchen", "Mu\u0308nchen"),
        ("by Mu\u0308,", "by mu", "by Mu\u0308"),
        ("Eif\u00adfel, a", "eiffel", "Eif\u00adfel"),
        ("10\u00a0km away", "10", "10"),  # a no-break space: one word to google
    ],
)
def test_final_char_span(words, pred, expected):
    context = "Said: " + words.replace(" ", "  ") + " yes"
    p = Paragraph(context)
    first, last = 1, len(p.words) - 2
    begin, end = final_char_span(pred, p, first, last, lowercase=True)
    assert context[begin:end] == expected.replace(" ", "  ")


def google_final_char_span(pred_text, paragraph, first_word, last_word, lowercase):
    """google's `get_final_text` as run_squad.py writes it (character maps built for each
    call), on a Paragraph's words: the reference `final_char_span` is held equal to."""
    from model.text.wordpiece import basic_tokenize

    def strip_spaces(text):
        ns_chars, ns_to_s_map = [], {}
        for i, c in enumerate(text):
            if c != " ":
                ns_to_s_map[len(ns_chars)] = i
                ns_chars.append(c)
        return "".join(ns_chars), ns_to_s_map

    words = paragraph.words[first_word : last_word + 1]
    whole = (paragraph.starts[first_word], paragraph.word_end(last_word))
    orig_text = " ".join(words)
    to_context = []
    for k, word in enumerate(words):
        if k:
            to_context.append(-1)
        begin = paragraph.starts[first_word + k]
        to_context.extend(range(begin, begin + len(word)))
    tok_text = " ".join(basic_tokenize(orig_text, lowercase))
    start_position = tok_text.find(pred_text)
    if start_position == -1 or not pred_text:
        return whole
    end_position = start_position + len(pred_text) - 1
    orig_ns_text, orig_ns_to_s_map = strip_spaces(orig_text)
    tok_ns_text, tok_ns_to_s_map = strip_spaces(tok_text)
    if len(orig_ns_text) != len(tok_ns_text):
        return whole
    tok_s_to_ns_map = {v: k for k, v in tok_ns_to_s_map.items()}
    orig_start = orig_ns_to_s_map.get(tok_s_to_ns_map.get(start_position, -1))
    orig_end = orig_ns_to_s_map.get(tok_s_to_ns_map.get(end_position, -1))
    if orig_start is None or orig_end is None:
        return whole
    return to_context[orig_start], to_context[orig_end] + 1


@pytest.mark.parametrize(
    "context",
    [
        "Said: Steve  Smith's (1895-1943). the U.S. yes",
        "na\u0131\u0308ve cafe\u0301 Caf\u00e9, ok",  # decomposed accents: fewer characters
        "Tokyo \u6771\u4eac\u90fd\u5e81 is big",  # CJK: a word each
        "a\u00a0b c\x0bd e\u200bf -- g",  # spaces the tokenizer splits on, dropped characters
        "\u00bd \ufb01ne \u2163 x",  # NFKC would change these; BERT's normalisation does not
        "Mu\u0308nchen\u200b, x",  # an accent written apart; a prediction ending at its letter
        "\u0915\u093f\u200c\u0924\u093e\u092c x",  # Devanagari: vowel signs are kept
        "10\u00a0km away",  # a no-break space: inside google's word, a space to the tokenizer
    ],
)
@pytest.mark.parametrize("lowercase", [True, False])
def test_final_char_span_is_googles(context, lowercase):
    """Every span of words, with every run of tokens of their basic tokenization (and one
    that is not there) as the prediction: the same characters as google's maps give where
    they line up; where normalisation changed the number of characters (google's answer is
    then the whole words), the characters the prediction was normalised from, no invisible
    one at either end."""
    from model.text.wordpiece import basic_tokenize, normalize_char

    p = Paragraph(context)
    memo = {}
    for first in range(len(p.words)):
        for last in range(first, len(p.words)):
            words = p.words[first : last + 1]
            tokens = basic_tokenize(" ".join(words), lowercase)
            googles_maps_line_up = len("".join(words)) == len("".join(tokens))
            # runs of whole tokens, and of characters (a WordPiece ends mid-word: "mun")
            text = " ".join(tokens)
            preds = {"[UNK]", ""} | {
                text[i:j]
                for i in range(len(text))
                for j in range(i + 1, len(text) + 1)
                if " " not in (text[i], text[j - 1])
            }
            for pred in preds:
                case = (context, first, last, pred)
                expected = google_final_char_span(pred, p, first, last, lowercase)
                begin, end = final_char_span(pred, p, first, last, lowercase, memo)
                if googles_maps_line_up or (begin, end) == expected:
                    assert (begin, end) == expected, case
                    continue
                assert expected[0] <= begin < end <= expected[1], case
                answer = context[begin:end]
                assert " ".join(basic_tokenize(answer, lowercase)) == pred, case
                # the accents the uncased tokenizer strips from its last letter kept
                visible = answer.rstrip("\u0301\u0308") if lowercase else answer
                assert normalize_char(answer[0], lowercase) != "", case
                assert normalize_char(visible[-1], lowercase) != "", case


def border_paragraph(tokenizer):
    """A context of 40 one-token words (every 7th with a comma, every 5th
    capitalised, some double spaces and newlines), and an answer for every
    span of 1 to 3 words, the final comma left out of the answer."""
    vocab = tokenizer.vocabulary
    words = [t for t in vocab[3000:4000] if t.isalpha() and t.isascii() and len(t) > 3][:40]
    assert len(set(words)) == 40
    parts = []
    for k, word in enumerate(words):
        word = word.capitalize() if k % 5 == 0 else word
        parts.append(word + ("," if k % 7 == 3 else ""))
        parts.append("\n" if k % 11 == 10 else "  " if k % 6 == 5 else " ")
    context = "".join(parts).strip()
    p = Paragraph(context)
    qas = []
    for a in range(len(p.words)):
        for n in (1, 2, 3):
            if a + n > len(p.words):
                continue
            start, end = p.starts[a], p.word_end(a + n - 1)
            text = context[start:end].rstrip(",")
            qas.append(qa(f"q{a}-{n}", "What is it?", context, text, start=start))
    return context, qas


@pytest.mark.parametrize("doc_stride", [3, 8])
def test_windows_map_answers_near_borders_back_to_characters(tmp_path, tokenizer, doc_stride):
    context, qas = border_paragraph(tokenizer)
    examples = Squad1Task().read(write_json(tmp_path / "d.json", dataset([(context, qas)])))
    task = Squad1Task(doc_stride=doc_stride)
    seq_len = 24  # "what is it ?" leaves 17 context tokens a window; ~46 context tokens
    train = task.encode(examples, tokenizer, seq_len, training=True)
    dev = task.encode(examples, tokenizer, seq_len)
    np.testing.assert_array_equal(train.x["token_ids"], dev.x["token_ids"])
    windows = dev.meta
    assert len(train) > 4 * len(examples)  # several windows per question

    starts, ends = train.y["start_logits"], train.y["end_logits"]
    answers = [tokenizer.encode([e.answers[0]["text"]])[0] for e in examples]
    for f, i in enumerate(windows.example_index):
        ids = dev.x["token_ids"][f]
        context_positions = np.flatnonzero(windows.token_to_word[f] >= 0)
        lo, hi = context_positions[0], context_positions[-1]
        assert ids[lo - 1] == tokenizer.sep_id and ids[hi + 1] == tokenizer.sep_id
        assert (dev.x["segment_ids"][f, lo : hi + 2] == 1).all()
        if starts[f]:
            assert lo <= starts[f] <= ends[f] <= hi
            assert ids[starts[f] : ends[f] + 1].tolist() == answers[i]
        else:
            # No label: the answer really is not entirely inside this window.
            window = ids[lo : hi + 1].tolist()
            n = len(answers[i])
            assert not any(window[k : k + n] == answers[i] for k in range(len(window) - n + 1))

    # Every context token is "max context" in exactly one window of its question.
    for i in range(len(examples)):
        rows = windows.example_index == i
        covered = windows.max_context[rows].sum()
        assert covered == len(tokenizer.encode([context])[0])

    # Oracle logits at the labels: the answer comes back as the exact characters.
    start_logits = np.zeros(dev.x["token_ids"].shape, np.float32)
    end_logits = np.zeros_like(start_logits)
    rows = np.arange(len(dev))
    start_logits[rows, starts] += 10.0
    end_logits[rows, ends] += 10.0
    out = postprocess(
        examples,
        windows,
        dev.x["token_ids"],
        start_logits,
        end_logits,
        tokenizer.vocabulary,
        tokenizer.lowercase,
    )
    for e in examples:
        assert out.predictions[e.qas_id] == e.answers[0]["text"], e.qas_id
        assert out.nbest[e.qas_id][0]["answer_start"] == e.answers[0]["answer_start"]


def test_question_is_cut_to_max_query_length(tmp_path, tokenizer):
    question = "why " * 100 + "?"
    data = dataset([(CONTEXT, [qa("q", question, CONTEXT, "cat")])])
    examples = Squad1Task().read(write_json(tmp_path / "d.json", data))
    enc = Squad1Task(max_query_length=10).encode(examples, tokenizer, 32)
    seps = np.flatnonzero(enc.x["token_ids"][0] == tokenizer.sep_id)
    assert seps[0] == 11  # [CLS] + 10 question tokens
    assert (enc.x["segment_ids"][0, :12] == 0).all()


def test_v2_training_labels(tmp_path, tokenizer):
    data = dataset(
        [(CONTEXT, [qa("a", "When?", CONTEXT, "1895"), qa("n", "Why?", impossible=True)])], "v2.0"
    )
    examples = Squad2Task().read(write_json(tmp_path / "d.json", data))
    enc = Squad2Task(doc_stride=4).encode(examples, tokenizer, 16, training=True)
    index = enc.meta.example_index
    labels = enc.y["start_logits"]
    # The unanswerable question: [CLS] in every window.
    assert (labels[index == 1] == 0).all() and (enc.y["end_logits"][index == 1] == 0).all()
    # The answerable one: [CLS] only in windows without "1895"; "1895" is one token.
    one = tokenizer.token_to_id["1895"]
    for f in np.flatnonzero(index == 0):
        has = one in enc.x["token_ids"][f].tolist()
        assert (labels[f] > 0) == has
        if has:
            assert (
                enc.x["token_ids"][f, labels[f]]
                == one
                == enc.x["token_ids"][f, enc.y["end_logits"][f]]
            )


def test_training_leaves_out_answers_not_in_the_words(tmp_path, tokenizer, capsys):
    # google's "Could not find answer": the file's answer matches its characters, but a
    # no-break space is no word separator, so "New\u00a0York" is one word, while the
    # answer's own whitespace-split text is "New York".
    context = "They flew to New\u00a0York in 1895."
    data = dataset(
        [
            (
                context,
                [qa("ny", "Where?", context, "New\u00a0York"), qa("y", "When?", context, "1895")],
            )
        ]
    )
    examples = Squad1Task().read(write_json(tmp_path / "d.json", data))
    enc = Squad1Task().encode(examples, tokenizer, 32, training=True)
    assert enc.meta.skipped == 1
    assert (enc.meta.example_index == 1).all() and len(enc.meta.example_index) >= 1
    assert enc.x["token_ids"][0, enc.y["start_logits"][0]] == tokenizer.token_to_id["1895"]
    assert "1 training question(s) left out" in capsys.readouterr().err
    assert Squad1Task().encode(examples, tokenizer, 32).meta.skipped == 0  # only training


# === Null score and threshold (v2.0) ===


def _two_windows(tmp_path, tokenizer):
    context = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    data = dataset([(context, [qa("q", "Which?", context, "gamma")])], "v2.0")
    examples = Squad2Task().read(write_json(tmp_path / "d.json", data))
    enc = Squad2Task(doc_stride=4).encode(examples, tokenizer, 12)
    return examples, enc


def test_null_score_is_the_smallest_cls_score(tmp_path, tokenizer):
    examples, enc = _two_windows(tmp_path, tokenizer)
    w = enc.meta
    assert len(enc) >= 2
    start = np.full(enc.x["token_ids"].shape, -10.0, np.float32)
    end = np.full_like(start, -10.0)
    start[0, 0], end[0, 0] = 1.0, 1.0  # window 0: null 2.0 (the smallest)
    start[1, 0], end[1, 0] = 3.0, 0.5  # window 1: null 3.5
    p = int(np.flatnonzero(w.max_context[1])[0])  # a token window 1 owns
    start[1, p], end[1, p] = 2.5, 2.0  # the best span: 4.5
    word = examples[0].paragraph.words[w.token_to_word[1, p]]

    def run(threshold):
        return postprocess(
            examples,
            w,
            enc.x["token_ids"],
            start,
            end,
            tokenizer.vocabulary,
            True,
            version_2=True,
            null_threshold=threshold,
        )

    out = run(0.0)
    assert out.null_odds["q"] == pytest.approx(2.0 - 4.5)
    assert out.predictions["q"] == word == out.best_non_null["q"]
    nbest = out.nbest["q"]
    assert nbest[0]["text"] == word and nbest[0]["start_logit"] == 2.5
    null = [n for n in nbest if n["text"] == ""]
    assert len(null) == 1 and (null[0]["start_logit"], null[0]["end_logit"]) == (1.0, 1.0)
    assert sum(n["probability"] for n in nbest) == pytest.approx(1.0)
    assert run(-2.49).predictions["q"] == word  # odds -2.5 not above -2.49: the span
    assert run(-2.51).predictions["q"] == ""  # odds -2.5 above -2.51: no answer


def test_no_valid_span(tmp_path, tokenizer):
    context = "alpha beta"
    data = dataset([(context, [qa("q", "Which?", context, "beta")])], "v2.0")
    examples = Squad2Task().read(write_json(tmp_path / "d.json", data))
    enc = Squad2Task().encode(examples, tokenizer, 40)
    start = np.where(enc.meta.token_to_word >= 0, -100.0, 0.0)  # 20 best: none in the context
    v2 = postprocess(
        examples, enc.meta, enc.x["token_ids"], start, start, tokenizer.vocabulary, version_2=True
    )
    assert v2.predictions["q"] == "" and v2.null_odds["q"] == NO_SPAN_ODDS
    assert [n["text"] for n in v2.nbest["q"]] == [""]
    v1 = postprocess(examples, enc.meta, enc.x["token_ids"], start, start, tokenizer.vocabulary)
    assert v1.predictions["q"] == "empty"  # google-research's placeholder


def test_v2_best_threshold_is_searched_on_non_null_answers():
    p = Paragraph("x")
    examples = [
        SquadExample(qid, "?", p, [{"text": t, "answer_start": 0}] if t else [])
        for qid, t in (("q1", "cat"), ("q2", "dog"), ("q3", ""), ("q4", ""))
    ]
    best = {"q1": "cat", "q2": "dog", "q3": "fish", "q4": "cow"}
    odds = {"q1": -1.0, "q2": 0.5, "q3": 2.0, "q4": 0.8}

    def score(threshold):
        preds = {q: "" if odds[q] > threshold else best[q] for q in best}
        return Squad2Task(null_threshold=threshold).score(
            examples, SquadPredictions(preds, {}, odds, best)
        )

    at_zero = score(0.0)
    # At 0: q1 right, q2 "" (wrong), q3 and q4 "" (right).
    assert at_zero["exact"] == at_zero["f1"] == 75.0
    assert at_zero["HasAns_exact"] == 50.0 and at_zero["NoAns_exact"] == 100.0
    # Sweep from "all no answer" (2 right): q1 +1, q2 +1 (best: 4, at 0.5), q4 -1, q3 -1.
    assert at_zero["best_f1"] == 100.0 and at_zero["best_f1_thresh"] == 0.5
    assert at_zero["best_exact"] == 100.0 and at_zero["best_exact_thresh"] == 0.5
    assert at_zero["always_no_answer_exact"] == at_zero["always_no_answer_f1"] == 50.0
    assert at_zero["null_threshold"] == 0.0
    # The tuned threshold gives the best score.
    assert score(at_zero["best_f1_thresh"])["f1"] == at_zero["best_f1"]
    # Every answer wrong: "no answer everywhere" is best, at a threshold below all the odds
    # (the official sweep's 0.0, which q3's odds -0.5 are not above, scored 25.0).
    best.update(q1="mouse", q2="cat")
    odds["q3"] = -0.5
    wrong = score(0.0)
    assert wrong["best_f1"] == 50.0 and wrong["best_f1_thresh"] == wrong["best_exact_thresh"]
    assert score(wrong["best_f1_thresh"])["f1"] == 50.0 == wrong["always_no_answer_f1"]


# === SQuAD v2.0 training set from v1.1 ===


def _v1_articles():
    contexts = [
        "Cats sleep on warm mats all day.",
        "Dogs bark at the mailman.",
        "Birds fly south in winter.",
        "Fish swim in the cold sea.",
    ]
    answers = ["warm mats", "the mailman", "south", "cold sea"]
    paragraphs = [
        (c, [qa(f"{k}-{j}", f"Question {j} about {k}?", c, a) for j in range(3)])
        for k, (c, a) in enumerate(zip(contexts, answers))
    ]
    paragraphs.append(
        (
            "Nothing mentions warm mats here.",
            [qa("x", "Where?", "Nothing mentions warm mats here.", "here")],
        )
    )
    data = dataset(paragraphs)
    data["data"].append(
        {
            "title": "Alone",
            "paragraphs": [
                {
                    "context": "One paragraph only.",
                    "qas": [qa("z", "How many?", "One paragraph only.", "One")],
                }
            ],
        }
    )
    return data


def test_make_v2_train():
    data = _v1_articles()
    before = json.dumps(data)
    out = squad.make_v2_train(data, negative_ratio=0.5, seed=0)
    assert json.dumps(data) == before  # the input is left alone
    assert out == squad.make_v2_train(data, negative_ratio=0.5, seed=0)
    assert out != squad.make_v2_train(data, negative_ratio=0.5, seed=1)
    assert out["version"] == "v2.0"
    qas = {
        q["id"]: (ai, pi, q)
        for ai, a in enumerate(out["data"])
        for pi, p in enumerate(a["paragraphs"])
        for q in p["qas"]
    }
    originals = {
        q["id"]: (ai, pi, q)
        for ai, a in enumerate(data["data"])
        for pi, p in enumerate(a["paragraphs"])
        for q in p["qas"]
    }
    negatives = {k: v for k, v in qas.items() if v[2]["is_impossible"]}
    # 13 questions in articles with several paragraphs (not "z"): round(6.5) = 6.
    assert len(negatives) == 6
    for qid, (ai, pi, q) in negatives.items():
        source_id = qid.split("-unanswerable-")[0]
        sai, spi, source = originals[source_id]
        assert q["answers"] == [] and q["question"] == source["question"]
        assert ai == sai and pi != spi  # another paragraph of the same article
        context = out["data"][ai]["paragraphs"][pi]["context"]
        assert source["answers"][0]["text"] not in context  # no leaked answer
        assert source_id != "z"
    assert all(not v[2]["is_impossible"] for k, v in qas.items() if k not in negatives)
    assert len(qas) - len(negatives) == len(originals)
    assert len(squad.make_v2_train(data, negative_ratio=2.0)["data"][0]["paragraphs"][0]["qas"]) > 3


def test_make_v2_train_command(tmp_path, capsys):
    source = write_json(tmp_path / "train-v1.1.json", _v1_articles())
    dev = write_json(
        tmp_path / "some-dev.json",
        dataset(
            [(CONTEXT, [qa("d1", "Who?", CONTEXT, "The cat"), qa("d2", "Why?", impossible=True)])],
            "v2.0",
        ),
    )
    output = str(tmp_path / "made" / "train-v2.0.json")
    assert (
        squad.main(
            [
                "make-v2-train",
                "--input",
                source,
                "--output",
                output,
                "--negative-ratio",
                "0.5",
                "--seed",
                "0",
                "--dev",
                dev,
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["answerable"] == 14 and summary["unanswerable"] == 6
    examples = Squad2Task().read(output)
    assert sum(e.is_impossible for e in examples) == 6 and len(examples) == 20
    # The folder is a complete --data for squad2.
    assert Squad2Task().files(str(tmp_path / "made")) == (
        output,
        str(tmp_path / "made" / "dev-v2.0.json"),
    )
    bad = write_json(
        tmp_path / "bad.json",
        {"data": [{"paragraphs": [{"context": "x", "qas": [qa("b", "?", "x", "y", start=0)]}]}]},
    )
    assert squad.main(["make-v2-train", "--input", bad, "--output", output]) == 1
    assert "mismatch" in capsys.readouterr().err


def test_a_file_only_scored_keeps_a_question_whose_answer_start_is_off(tmp_path):
    """The official scripts score answers by text and never read `answer_start`: a dev or
    evaluated file (`read_gold`) keeps a question whose offset is off by one, which a
    training file (`read`) refuses, its span unknown."""
    context = "Normandy is a region in France."
    off = qa("q1", "What is Normandy?", context, "a region in France", start=13)
    path = write_json(tmp_path / "dev.json", dataset([(context, [off])]))
    with pytest.raises(ValueError, match="mismatch: the context at answer_start 13"):
        Squad1Task().read(path)
    (example,) = Squad1Task().read_gold(path)
    assert example.answers == [{"text": "a region in France", "answer_start": 13}]
    assert Squad2Task().read_gold(path)[0].qas_id == "q1"


# === A tiny model end to end ===


def _tiny_squad(path, version_2: bool) -> str:
    sentences = [
        "The cat sat on the mat near the door.",
        "It was a very happy cat in 1895.",
        "Later the dog ran over the hill to the river.",
        "Birds flew over the sea.",
        "The old man saw the bird and smiled at it.",
    ]
    contexts = [" ".join(sentences[i:] + sentences[:i]) for i in range(3)]
    answers = [
        ("Who sat on the mat?", "The cat"),
        ("When?", "1895"),
        ("Where did the dog run?", "over the hill"),
        ("What flew?", "Birds"),
    ]
    paragraphs = []
    for k, c in enumerate(contexts):
        entries = [qa(f"p{k}q{j}", q, c, a) for j, (q, a) in enumerate(answers)]
        if version_2:
            entries += [qa(f"p{k}n", "Who won the war?", impossible=True)]
        paragraphs.append((c, entries))
    return write_json(path, dataset(paragraphs, "v2.0" if version_2 else "1.1"))


def test_tiny_model_end_to_end(tmp_path, tokenizer):
    import keras

    from model.checkpoints import model_dir
    from model.networks.encoder import BertEncoder

    seq_len = 48
    v1_file = _tiny_squad(tmp_path / "v1.json", False)
    v2_file = _tiny_squad(tmp_path / "v2.json", True)
    v1, v2 = Squad1Task(doc_stride=16), Squad2Task(doc_stride=16)
    train = v2.encode(v2.read(v2_file), tokenizer, seq_len, training=True)
    assert (train.y["start_logits"] == 0).any() and (train.y["start_logits"] > 0).any()

    keras.utils.set_random_seed(0)
    encoder = BertEncoder.from_preset("tiny", vocabulary_size=tokenizer.vocabulary_size)
    model = v2.build_model(encoder)
    from model.training.finetune import freeze_unused_pooler
    from model.training.optimizer import create_optimizer_variables

    freeze_unused_pooler(v2, encoder)  # QA does not read the pooler: no gradient warning
    model.compile(optimizer=keras.optimizers.Adam(1e-4), loss=v2.loss())
    create_optimizer_variables(model)
    history = model.fit(
        {k: v[:8] for k, v in train.x.items()},
        {k: v[:8] for k, v in train.y.items()},
        batch_size=4,
        epochs=1,
        verbose=0,
    )
    # Near-uniform logits at the start: (start + end cross-entropy) / 2 ~ log(seq_len).
    assert abs(history.history["loss"][0] - math.log(seq_len)) < 0.5

    for task, path in ((v1, v1_file), (v2, v2_file)):
        out = tmp_path / task.name
        examples = task.read(path)
        metrics = task.evaluate(
            model.predict_on_batch, examples, tokenizer, seq_len, batch_size=8, output_dir=str(out)
        )
        keys = (
            {"exact_match", "f1", "total"}
            if task is v1
            else {
                "exact",
                "f1",
                "total",
                "HasAns_exact",
                "HasAns_f1",
                "HasAns_total",
                "NoAns_exact",
                "NoAns_f1",
                "NoAns_total",
                "best_exact",
                "best_exact_thresh",
                "best_f1",
                "best_f1_thresh",
                "null_threshold",
                "always_no_answer_exact",
                "always_no_answer_f1",
            }
        )
        assert set(metrics) == keys
        for k, v in metrics.items():
            assert isinstance(v, (int, float)) and math.isfinite(v), k
            if k.endswith(("exact", "exact_match", "f1")):
                assert 0.0 <= v <= 100.0, k
        assert metrics["total"] == len(examples)
        ids = {e.qas_id for e in examples}
        with open(out / "predictions.json") as f:
            predictions = json.load(f)
        assert set(predictions) == ids
        with open(out / "nbest_predictions.json") as f:
            nbest = json.load(f)
        # v2.0 may add the null answer to 20 others, as google-research does.
        assert set(nbest) == ids and all(1 <= len(v) <= 21 for v in nbest.values())
        if task is v1:
            assert predictions == {q: v[0]["text"] for q, v in nbest.items()}
        else:  # the best non-null answer, or "" where the null score wins
            for q, entries in nbest.items():
                assert predictions[q] in ("", next(e["text"] for e in entries if e["text"])), q
        if task is v2:
            with open(out / "null_odds.json") as f:
                assert set(json.load(f)) == ids
            assert metrics["NoAns_total"] == 3
            assert metrics["always_no_answer_exact"] == pytest.approx(100 * 3 / 15)
        else:
            assert not (out / "null_odds.json").exists()
        # Every predicted answer is a piece of its context.
        contexts = {e.qas_id: e.context for e in examples}
        assert all(text in contexts[q] for q, text in predictions.items())

    # `python -m model.evaluate` on the saved model gives the same numbers.
    from model.evaluate import main as evaluate_main

    directory = str(tmp_path / "model")
    export = model_dir.build_model(model_dir.describe(model))  # without the optimizer's state
    export.set_weights(model.get_weights())
    model_dir.save(export, directory, VOCAB, extra={"max_seq_length": seq_len})
    default = Squad1Task()  # what the registry makes: doc_stride 128
    v1_metrics = default.evaluate(model.predict_on_batch, default.read(v1_file), tokenizer, seq_len)
    report = tmp_path / "metrics.json"
    assert (
        evaluate_main(
            ["--task", "squad1", "--model", directory, "--data", v1_file, "--out", str(report)]
        )
        == 0
    )
    with open(report) as f:
        saved = json.load(f)
    assert saved["f1"] == pytest.approx(v1_metrics["f1"])
    assert saved["exact_match"] == pytest.approx(v1_metrics["exact_match"])


# === The real dev set ===


def test_real_dev_v1(tokenizer):
    task = Squad1Task()
    examples = task.read(squad_file("dev-v1.1.json"))
    assert len(examples) == 10570 and not task.skipped
    gold = {e.qas_id: e.answers[0]["text"] for e in examples}
    assert task.score(examples, SquadPredictions(gold, {}, {}, gold)) == {
        "exact_match": 100.0,
        "f1": 100.0,
        "total": 10570,
    }

    # Oracle logits through windows and back for the first 300 questions: every
    # answer comes back unless it is part of a token (a "8" of "20–18") or longer
    # than max_answer_length tokens, which no window can return.
    some = examples[:300]
    train = task.encode(some, tokenizer, 384, training=True)
    dev = task.encode(some, tokenizer, 384)
    start = np.zeros(dev.x["token_ids"].shape, np.float32)
    end = np.zeros_like(start)
    rows = np.arange(len(dev))
    start[rows, train.y["start_logits"]] = 10.0
    end[rows, train.y["end_logits"]] = 10.0
    out = postprocess(some, dev.meta, dev.x["token_ids"], start, end, tokenizer.vocabulary)
    misses = 0
    for e in some:
        predicted, answer = out.predictions[e.qas_id], e.answers[0]["text"]
        if predicted != answer:
            misses += 1
            assert answer in predicted or len(tokenizer.encode([answer])[0]) > MAX_ANSWER_LENGTH, (
                e.qas_id
            )
    assert misses <= 10

    # Random logits for 1,000 questions: every n-best answer's characters are google's.
    calls = []

    def both(pred_text, paragraph, first, last, lowercase, memo=None):
        found = final_char_span(pred_text, paragraph, first, last, lowercase, memo)
        calls.append(found == google_final_char_span(pred_text, paragraph, first, last, lowercase))
        return found

    some = examples[:1000]
    dev = task.encode(some, tokenizer, 384)
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, *dev.x["token_ids"].shape)).astype(np.float32)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(squad_answers, "final_char_span", both)
        postprocess(some, dev.meta, dev.x["token_ids"], *logits, tokenizer.vocabulary)
    assert len(calls) > 5_000
    assert all(calls)


# === Fine-tuning and `python -m model.evaluate` on a tiny SQuAD v2.0 ===


def test_finetune_skips_a_misplaced_training_answer_only_when_asked(tmp_path, capsys):
    """One answer_start off by one in a training file stops `finetune`, naming the question
    and the flag that skips it; with --skip-invalid the run trains on the rest and says so.
    A task that reads strictly refuses the flag."""
    from tests.helpers import finetune_argv, make_init, run_train

    data = tmp_path / "data"
    data.mkdir()
    with open(_tiny_squad(tmp_path / "clean.json", False)) as f:
        bad = json.load(f)
    bad["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 1
    write_json(data / "train-v1.1.json", bad)
    init = make_init(tmp_path)

    def finetune(output: str, *extra: str) -> int:
        capsys.readouterr()
        return run_train(
            finetune_argv("squad1", data, init, tmp_path / output, seq_len=48, extra=extra)
        )

    assert finetune("strict") == 1
    err = capsys.readouterr().err
    assert "qas[0] (id 'p0q0')" in err and "mismatch" in err
    assert "(--skip-invalid skips such questions)" in err
    assert not (tmp_path / "strict").exists()
    assert finetune("skipping", "--skip-invalid") == 0
    assert "skipped 1 invalid question(s)" in capsys.readouterr().err
    with open(tmp_path / "skipping" / "metrics.json") as f:
        assert json.load(f)["train_examples"] == 11
    sst2 = run_train(finetune_argv("sst2", data, init, tmp_path / "sst2", extra=["--skip-invalid"]))
    assert sst2 == 1
    assert "--skip-invalid: task sst2 reads its files strictly" in capsys.readouterr().err


def test_finetune_squad2_keeps_threshold_predictions_and_pooler(tmp_path, capsys):
    """`model.train finetune --task squad2` with a tiny encoder: the prediction
    files of the kept epoch, the dev-tuned null threshold stored for
    `model.evaluate`, the pooler untouched (and no gradient warning); then
    `model.evaluate`'s --predictions-dir, --null-threshold and --skip-invalid."""
    import warnings

    from model.checkpoints import model_dir
    from model.evaluate import main as evaluate_main
    from model.training.finetune import SCRATCH_PREFIX
    from tests.helpers import finetune_argv, make_init, run_train

    data = tmp_path / "data"
    data.mkdir()
    train_file = _tiny_squad(data / "train-v2.0.json", True)
    shutil.copyfile(train_file, data / "dev-v2.0.json")
    init = make_init(tmp_path)
    output = tmp_path / "run"
    argv = finetune_argv(
        "squad2",
        data,
        init,
        output,
        epochs="2",
        batch_size=8,
        seq_len=48,
        learning_rate="1e-3",
        extra=["--warmup-steps", "0"],
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run_train(argv) == 0
    assert not [w for w in caught if "Gradients do not exist" in str(w.message)]

    names = set(os.listdir(output))
    assert {"predictions.json", "nbest_predictions.json", "null_odds.json"} <= names
    assert not [n for n in names if n.startswith(SCRATCH_PREFIX)]
    with open(output / "metrics.json") as f:
        metrics = json.load(f)
    info = model_dir.read_info(str(output))
    assert info["null_threshold"] == metrics["null_threshold"] == metrics["dev"]["best_f1_thresh"]
    assert metrics["pooler_frozen"] is True

    # The pooler is --init's, bit for bit; the rest of the encoder trained.
    before, after = model_dir.load(init), model_dir.load(str(output)).encoder
    for a, b in zip(after.pooled_dense.get_weights(), before.pooled_dense.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(after.get_weights()[0], before.get_weights()[0])

    def evaluate(*flags) -> dict:
        capsys.readouterr()
        rc = evaluate_main(
            [
                "--task",
                "squad2",
                "--model",
                str(output),
                "--batch-size",
                "16",
                "--data",
                str(data / "dev-v2.0.json"),
                *flags,
            ]
        )
        assert rc == 0, capsys.readouterr().err
        return json.loads(capsys.readouterr().out)

    # Default: the stored threshold. At 0, as fine-tuning scored it: the kept
    # epoch's numbers and answers.
    assert evaluate()["null_threshold"] == pytest.approx(info["null_threshold"])
    again = evaluate("--null-threshold", "0", "--predictions-dir", str(tmp_path / "dev"))
    assert again["null_threshold"] == 0.0
    assert again["f1"] == pytest.approx(metrics["dev"]["f1"])
    for name in ("predictions.json", "null_odds.json"):
        with open(output / name) as f, open(tmp_path / "dev" / name) as g:
            assert json.load(f) == json.load(g), name
    # Raising the threshold only turns "" into spans: answerable questions can only gain.
    with open(output / "null_odds.json") as f:
        top = max(json.load(f).values())
    high = evaluate("--null-threshold", str(top + 1))
    assert high["null_threshold"] == pytest.approx(top + 1)
    assert high["HasAns_f1"] >= again["HasAns_f1"]

    # --skip-invalid: a malformed question stops the strict reader, or is counted.
    with open(data / "dev-v2.0.json") as f:
        bad = json.load(f)
    bad["data"][0]["paragraphs"][0]["qas"].append(qa("bad", " ", "x", "dog", start=0))
    write_json(tmp_path / "bad.json", bad)
    capsys.readouterr()
    assert (
        evaluate_main(
            ["--task", "squad2", "--model", str(output), "--data", str(tmp_path / "bad.json")]
        )
        == 1
    )
    assert '"question" must be a non-empty string' in capsys.readouterr().err
    skipped = evaluate("--skip-invalid")
    assert skipped["skipped"] == 0
    capsys.readouterr()
    assert (
        evaluate_main(
            [
                "--task",
                "squad2",
                "--model",
                str(output),
                "--skip-invalid",
                "--data",
                str(tmp_path / "bad.json"),
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["skipped"] == 1 and result["total"] == 15
    # squad1 has no null answer.
    assert (
        evaluate_main(
            [
                "--task",
                "squad1",
                "--model",
                str(output),
                "--null-threshold",
                "1",
                "--data",
                str(data / "dev-v2.0.json"),
            ]
        )
        == 1
    )
    assert "has no null answer" in capsys.readouterr().err
