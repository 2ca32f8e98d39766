"""`model.tasks.squad_negatives`: the kinds of unanswerable questions made from
SQuAD v1.1 (other-paragraph, answer-removed, entity-swap), `make-v2-train`'s
pinned default output, and `negatives-report`; on paragraphs cut from the real
train file and on hand-made edge cases.

    PYTHONPATH=. python -m pytest tests/test_squad_negatives.py
"""

from __future__ import annotations

import functools
import json
import os
import random
import re

import pytest

from model.io.files import write_json
from model.tasks import squad, squad_examples, squad_metric
from model.tasks.squad_negatives import (
    NEGATIVE_KINDS,
    build_v2_train,
    make_v2_train,
    parse_negatives,
    remove_answer_sentences,
    sentence_spans,
    swap_entity,
)
from tests.helpers import SHARED_DATA

TRAIN = os.path.join(SHARED_DATA, "squad", "train-v1.1.reconstructed.json")
ALL_KINDS = ",".join(NEGATIVE_KINDS)


@functools.cache
def _real_cut() -> dict:
    """Five paragraphs of each of four articles of the real train file."""
    with open(TRAIN, encoding="utf-8") as f:
        data = json.load(f)["data"]
    articles = [dict(data[i], paragraphs=data[i]["paragraphs"][:5]) for i in (0, 57, 211, 400)]
    return {"version": "1.1", "data": articles}


@pytest.fixture
def real():
    if not os.path.isfile(TRAIN):
        pytest.skip(f"{TRAIN} not found")
    return json.loads(json.dumps(_real_cut()))  # a fresh copy for each test


def _question(qid, question, context, *answers):
    return {
        "id": qid,
        "question": question,
        "answers": [{"text": a, "answer_start": context.index(a)} for a in answers],
    }


def _questions(dataset: dict) -> dict:
    """`{id: (qa, context)}` of every question of `dataset`."""
    return {
        qa["id"]: (qa, para["context"])
        for article in dataset["data"]
        for para in article["paragraphs"]
        for qa in para["qas"]
    }


def _source(qid: str) -> str:
    return re.sub(r"-unanswerable-.*$", "", qid)


# === answer-removed ===


def test_sentence_spans_by_hand():
    text = (
        'Dr. Smith met J. Doe in the U.S. Army. "It rained!" He left (at noon). then? No. 3 more.'
    )
    sentences = [text[s:e] for s, e in sentence_spans(text)]
    assert sentences == [
        "Dr. Smith met J. Doe in the U.S. Army.",
        '"It rained!"',
        "He left (at noon). then?",  # "then" is lower-case: no sentence starts there
        "No. 3 more.",  # "No." is an abbreviation (number)
    ]
    assert sentence_spans("  one sentence without an end  ") == [(2, 29)]
    assert sentence_spans("") == []


@pytest.mark.parametrize(
    "context, answers, expected",
    [
        # The answer's sentence goes, the rest stays.
        ("The cat sat. It was 1895. Birds flew.", ["1895"], "The cat sat. Birds flew."),
        # An abbreviation does not end the sentence: all of it goes.
        ("The U.S. Army won in 1776. Then peace came.", ["1776"], "Then peace came."),
        ("Dr. Smith came. He left at noon.", ["noon"], "Dr. Smith came."),
        # A span across a sentence boundary takes both sentences.
        ("He said Hi. There it is. Nothing else.", ["Hi. There"], "Nothing else."),
        # Several gold answers (as in dev files): every one's sentence goes.
        ("A is 1. B is 2. C is 3.", ["1", "3"], "B is 2."),
        # The answer said again elsewhere, in any case or as the metric
        # normalises it: no example.
        ("The cat sat. The cat ran.", ["cat"], None),
        ("Paris is big. We love PARIS.", ["Paris"], None),
        ("It was the 1990s. Music of 1990s.", ["the 1990s"], None),
        # Nothing left.
        ("Only one sentence here with 1895.", ["1895"], None),
    ],
)
def test_remove_answer_sentences_by_hand(context, answers, expected):
    spans = [{"text": a, "answer_start": context.index(a)} for a in answers]
    assert remove_answer_sentences(context, spans) == expected


def test_answer_removed_contexts_never_hold_a_gold_answer(real):
    out, made = build_v2_train(real, negatives={"answer-removed": 1.0})
    questions = _questions(real)
    negatives = {k: v for k, v in _questions(out).items() if v[0]["is_impossible"]}
    assert made["answer-removed"] == len(negatives) > 0.6 * len(questions)
    originals = {p["context"] for a in real["data"] for p in a["paragraphs"]}
    for qid, (qa, context) in negatives.items():
        assert qid.endswith("-unanswerable-removed")
        source, source_context = questions[_source(qid)]
        assert qa["question"] == source["question"] and qa["answers"] == []
        assert context not in originals and context.strip()
        for answer in source["answers"]:
            assert answer["text"].lower() not in context.lower(), qid
            text = squad_metric.normalize_answer(answer["text"])
            assert f" {text} " not in f" {squad_metric.normalize_answer(context)} "
        # What is left is whole sentences of the paragraph.
        kept = [source_context[s:e] for s, e in sentence_spans(source_context)]
        assert all(
            sentence in kept for sentence in [context[s:e] for s, e in sentence_spans(context)]
        )


# === entity-swap ===


def test_swap_entity_by_hand():
    context = "The war ended in 1895 when Napoleon met the Romeo army."
    rng = random.Random(0)
    pool = {"number:4": ["1895", "1902"], "name": ["Napoleon", "Rome", "Wellington"]}
    assert swap_entity("What happened in 1895?", context, pool, rng) == "What happened in 1902?"
    # Nothing of the kind fits: the paragraph has 1895, and "Rome" is inside "Romeo".
    assert swap_entity("What happened in 1895?", context, {"number:4": ["1895"]}, rng) is None
    assert swap_entity("Whom did Napoleon meet?", context, {"name": ["Rome"]}, rng) is None
    assert (
        swap_entity("Whom did Napoleon meet?", context, {"name": ["Rome", "Wellington"]}, rng)
        == "Whom did Wellington meet?"
    )
    # The first word of a question is capitalised anyway: never swapped; nor a
    # word the paragraph does not have.
    assert swap_entity("Napoleon met whom?", context, pool, rng) is None
    assert swap_entity("What did Caesar do?", context, pool, rng) is None
    # A Roman numeral is no acronym.
    assert (
        swap_entity("When did World War II end?", "World War II ended.", {"acronym": ["NATO"]}, rng)
        is None
    )
    assert (
        swap_entity("When did the USSR end?", "The USSR ended.", {"acronym": ["NATO"]}, rng)
        == "When did the NATO end?"
    )
    # A possessive keeps its "'s"; a part of a longer name swaps with parts only.
    assert (
        swap_entity("Was Napoleon's army big?", context, {"name": ["Nelson"]}, rng)
        == "Was Nelson's army big?"
    )
    text = "The Office of Western Medicine opened."
    assert swap_entity("Who ran the Office of Western Medicine?", text, {"name": ["X"]}, rng) in (
        "Who ran the X of Western Medicine?",
        None,
    )
    assert swap_entity(
        "Who ran the Office of Western Medicine?", text, {"name-part": ["Eastern"]}, rng
    ) in ("Who ran the Office of Eastern Medicine?", "Who ran the Office of Western Eastern?")


def test_entity_swap_never_introduces_a_word_of_the_paragraph(real):
    out, made = build_v2_train(real, negatives={"entity-swap": 1.0}, seed=3)
    questions = _questions(real)
    negatives = {k: v for k, v in _questions(out).items() if v[0]["is_impossible"]}
    assert made["entity-swap"] == len(negatives) > 0.2 * len(questions)
    for qid, (qa, context) in negatives.items():
        assert qid.endswith("-unanswerable-swap") and qa["answers"] == []
        source, source_context = questions[_source(qid)]
        assert context == source_context  # asked of its own paragraph
        old, new = source["question"].split(), qa["question"].split()
        changed = [k for k in range(len(old)) if old[k] != new[k]]
        assert len(old) == len(new) and len(changed) == 1, (source["question"], qa["question"])
        k = changed[0]
        assert k > 0  # never the first word
        word = re.sub(r"(['’]s)?[\"'”’)\].,;:!?]*$", "", new[k]).lstrip("\"'“‘([")
        removed = re.sub(r"(['’]s)?[\"'”’)\].,;:!?]*$", "", old[k]).lstrip("\"'“‘([")
        assert word and word.lower() not in context.lower(), (qid, word)
        assert word.lower() not in {w.lower() for w in re.findall(r"\w+", context)}
        assert removed in context  # the swapped-out word tied the question to the paragraph
        # The same kind: a number of as many digits, or a capitalised word.
        if removed.isdigit():
            assert word.isdigit() and len(word) == len(removed)
        else:
            assert word[0].isupper() and not word.isdigit()


# === Every kind ===


def test_ids_are_unique_and_never_an_original(real):
    out, made = build_v2_train(real, 3.0, seed=1, negatives=ALL_KINDS)
    originals = set(_questions(real))
    ids = [qa["id"] for a in out["data"] for p in a["paragraphs"] for qa in p["qas"]]
    assert len(ids) == len(set(ids)) == len(originals) + sum(made.values())
    assert all(made.values())
    new = set(ids) - originals
    assert all(_source(qid) in originals for qid in new)

    # An original id that looks like a made one: the made one gets a suffix.
    context = "The cat sat. It was 1895. Birds flew."
    data = {
        "data": [
            {
                "title": "T",
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            _question("q", "When was it?", context, "1895"),
                            _question("q-unanswerable-removed", "What flew?", context, "Birds"),
                        ],
                    }
                ],
            }
        ]
    }
    out = make_v2_train(data, 1.0, negatives="answer-removed")
    ids = list(_questions(out))
    assert sorted(ids) == sorted(
        [
            "q",
            "q-unanswerable-removed",
            "q-unanswerable-removed-2",
            "q-unanswerable-removed-unanswerable-removed",
        ]
    )


@pytest.mark.parametrize("kind", NEGATIVE_KINDS)
def test_each_kind_follows_the_seed(real, kind):
    before = json.dumps(real)
    one = make_v2_train(real, 0.3, seed=0, negatives=kind)
    assert json.dumps(real) == before  # the input is left alone
    assert json.dumps(one) == json.dumps(make_v2_train(real, 0.3, seed=0, negatives=kind))
    assert one != make_v2_train(real, 0.3, seed=1, negatives=kind)
    negatives = [qa for qa, _ in _questions(one).values() if qa["is_impossible"]]
    # Every article of the cut has several paragraphs: all its questions are candidates.
    assert len(negatives) == round(0.3 * len(_questions(real)))


def test_adding_a_kind_leaves_the_others_alone(real):
    def made_by(out, suffix):
        return {
            qid: (qa["question"], context)
            for qid, (qa, context) in _questions(out).items()
            if "-unanswerable-" + suffix in qid
        }

    alone = {kind: make_v2_train(real, 0.4, seed=2, negatives=kind) for kind in NEGATIVE_KINDS}
    mixed = make_v2_train(real, seed=2, negatives=",".join(f"{k}=0.4" for k in NEGATIVE_KINDS))
    for kind, suffix in zip(NEGATIVE_KINDS, ("p", "removed", "swap")):
        assert made_by(mixed, suffix) == made_by(alone[kind], suffix) != {}
    # The order of the kinds in the flag does not matter; an even split of the ratio.
    assert make_v2_train(real, 1.2, seed=2, negatives=",".join(reversed(NEGATIVE_KINDS))) == mixed


def test_parse_negatives():
    assert parse_negatives("other-paragraph") == {"other-paragraph": 0.5}
    assert parse_negatives(" entity-swap , other-paragraph ", 0.6) == {
        "other-paragraph": 0.3,
        "entity-swap": 0.3,
    }
    assert parse_negatives("answer-removed=0.2,entity-swap=0") == {
        "answer-removed": 0.2,
        "entity-swap": 0.0,
    }
    for spec, ratio, message in [
        ("nope", None, "unknown kind of negatives 'nope'"),
        ("", None, "no kind of negatives"),
        ("entity-swap,entity-swap", None, "named twice"),
        ("entity-swap=0.2,answer-removed", None, "to every kind or to none"),
        ("entity-swap=x", None, "must be a number"),
        ("entity-swap=-1", None, "must be >= 0"),
        ("entity-swap=0.2", 0.5, "leave out negative_ratio"),
        ("entity-swap", -0.5, "negative_ratio must be >= 0"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_negatives(spec, ratio)


def test_made_files_are_read_by_the_reader_and_the_metric(real, tmp_path, capsys):
    path = str(tmp_path / "train-v2.0.json")
    write_json(path, make_v2_train(real, 2.0, seed=0, negatives=ALL_KINDS))
    examples, skipped = squad_examples.read_squad(path, version_2=True)
    assert not skipped and sum(e.is_impossible for e in examples) > len(examples) / 2
    examples = squad.Squad2Task().read(path)
    gold = {e.qas_id: "" if e.is_impossible else e.answers[0]["text"] for e in examples}
    predictions = tmp_path / "predictions.json"
    predictions.write_text(json.dumps(gold))
    capsys.readouterr()
    assert squad_metric.main([path, str(predictions)]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["exact"] == 100.0 and metrics["total"] == len(examples)
    assert metrics["NoAns_total"] == sum(e.is_impossible for e in examples)


# === The command line ===


def _hand_made() -> dict:
    """Four one-article paragraphs and a one-paragraph article (no other paragraph)."""
    contexts = [
        "Cats sleep on warm mats all day. They purr.",
        "Dogs bark at the mailman. Rex barked in 1999.",
        "Birds fly south in winter.",
        "Fish swim in the cold sea. Nothing mentions warm mats here.",
    ]
    answers = ["warm mats", "the mailman", "south", "cold sea"]
    paragraphs = [
        {
            "context": c,
            "qas": [_question(f"{k}-{j}", f"Question {j} on {k}?", c, a) for j in range(3)],
        }
        for k, (c, a) in enumerate(zip(contexts, answers))
    ]
    alone = "One paragraph only."
    return {
        "version": "1.1",
        "data": [
            {"title": "Animals", "paragraphs": paragraphs},
            {
                "title": "Alone",
                "paragraphs": [
                    {"context": alone, "qas": [_question("z", "How many?", alone, "One")]}
                ],
            },
        ],
    }


def _make_v2_train_before(dataset: dict, negative_ratio: float = 0.5, seed: int = 0) -> dict:
    """`make_v2_train` as it was before the kinds of negatives: the reference."""
    if negative_ratio < 0:
        raise ValueError(f"negative_ratio must be >= 0, not {negative_ratio}")
    rng = random.Random(seed)
    articles = []
    candidates = []  # (article, paragraph, question) that have another paragraph
    for ai, article in enumerate(dataset["data"]):
        paragraphs = []
        for pi, para in enumerate(article["paragraphs"]):
            qas = [
                {
                    "question": qa["question"],
                    "id": qa["id"],
                    "answers": [dict(a) for a in qa["answers"]],
                    "is_impossible": bool(qa.get("is_impossible", False)),
                }
                for qa in para["qas"]
            ]
            paragraphs.append({"context": para["context"], "qas": qas})
            if len(article["paragraphs"]) > 1:
                candidates.extend(
                    (ai, pi, qi)
                    for qi, qa in enumerate(qas)
                    if not qa["is_impossible"] and qa["answers"]
                )
        articles.append({"title": article.get("title", ""), "paragraphs": paragraphs})

    wanted = round(negative_ratio * len(candidates))
    order = []
    while len(order) < wanted and candidates:  # ratio > 1: every question again, reshuffled
        batch = list(candidates)
        rng.shuffle(batch)
        order.extend(batch[: wanted - len(order)])
    normalized = {}  # (article, paragraph) -> normalised context, for the leak check
    used = set()
    for ai, pi, qi in order:
        qa = articles[ai]["paragraphs"][pi]["qas"][qi]
        answers = {squad_metric.normalize_answer(a["text"]) for a in qa["answers"]}
        others = [
            j
            for j in range(len(articles[ai]["paragraphs"]))
            if j != pi and (ai, j, qa["id"]) not in used
        ]
        rng.shuffle(others)
        for j in others:
            if (ai, j) not in normalized:
                normalized[ai, j] = (
                    " "
                    + squad_metric.normalize_answer(articles[ai]["paragraphs"][j]["context"])
                    + " "
                )
            # Leave out paragraphs where the answer appears: there the question
            # might well be answerable.
            if any(f" {a} " in normalized[ai, j] for a in answers if a):
                continue
            used.add((ai, j, qa["id"]))
            articles[ai]["paragraphs"][j]["qas"].append(
                {
                    "question": qa["question"],
                    "id": f"{qa['id']}-unanswerable-p{j}",
                    "answers": [],
                    "is_impossible": True,
                }
            )
            break
    return {"version": "v2.0", "data": articles}


@pytest.mark.parametrize("which", ["hand-made", "real"])
def test_default_output_is_unchanged(tmp_path, capsys, which):
    """Today's command writes, byte for byte, what the builder wrote before the
    kinds of negatives (a frozen copy above), and prints the same summary."""
    if which == "real":
        if not os.path.isfile(TRAIN):
            pytest.skip(f"{TRAIN} not found")
        data = json.loads(json.dumps(_real_cut()))
    else:
        data = _hand_made()
    source = str(tmp_path / "train-v1.1.json")
    write_json(source, data)
    for flags, ratio, seed in [
        ([], 0.5, 0),
        (["--negative-ratio", "0.5", "--seed", "0"], 0.5, 0),
        (["--negative-ratio", "1.7", "--seed", "5"], 1.7, 5),
        (["--negatives", "other-paragraph", "--negative-ratio", "0.2", "--seed", "3"], 0.2, 3),
    ]:
        output = str(tmp_path / f"out-{ratio}-{seed}.json")
        expected = str(tmp_path / f"expected-{ratio}-{seed}.json")
        write_json(expected, _make_v2_train_before(data, ratio, seed))
        capsys.readouterr()
        assert squad.main(["make-v2-train", "--input", source, "--output", output, *flags]) == 0
        with open(output, "rb") as f, open(expected, "rb") as g:
            assert f.read() == g.read(), flags
        summary = json.loads(capsys.readouterr().out)
        assert list(summary) == ["output", "answerable", "unanswerable", "seed", "negative_ratio"]
        assert (summary["seed"], summary["negative_ratio"]) == (seed, ratio)


def test_command_with_kinds(tmp_path, capsys):
    source = str(tmp_path / "train-v1.1.json")
    write_json(source, _hand_made())
    output = str(tmp_path / "made" / "train-v2.0.json")
    argv = ["make-v2-train", "--input", source, "--output", output, "--seed", "4"]
    assert squad.main([*argv, "--negatives", "answer-removed=0.5,other-paragraph=0.25"]) == 0
    summary = json.loads(capsys.readouterr().out)
    # 12 questions have another paragraph (not "z"): round(0.25 * 12); round(0.5 * 13).
    assert summary["negatives"] == {
        "other-paragraph": {"ratio": 0.25, "made": 3},
        "answer-removed": {"ratio": 0.5, "made": 6},
    }
    assert summary["unanswerable"] == sum(k["made"] for k in summary["negatives"].values())
    assert summary["negative_ratio"] == 0.75
    examples = squad.Squad2Task().read(output)
    assert sum(e.is_impossible for e in examples) == summary["unanswerable"]
    leftovers = [n for n in os.listdir(tmp_path / "made") if n.startswith(".")]
    assert not leftovers  # written atomically

    # At most one per question: the single-sentence paragraphs (2-*, z) make
    # none; questions on the same sentence share the new paragraph.
    out, made = build_v2_train(_hand_made(), seed=4, negatives={"answer-removed": 5.0})
    assert made == {"answer-removed": 9}
    added = out["data"][0]["paragraphs"][4:]
    assert [p["context"] for p in added] == [
        "Rex barked in 1999.",
        "Nothing mentions warm mats here.",
        "They purr.",
    ]
    assert all(len(p["qas"]) == 3 for p in added)


def test_malformed_input_names_the_file(tmp_path, capsys):
    good = str(tmp_path / "good.json")
    write_json(good, _hand_made())
    output = tmp_path / "out.json"
    bad_json = tmp_path / "broken.json"
    bad_json.write_text('{"data": [')
    mismatch = tmp_path / "mismatch.json"
    mismatch.write_text(
        json.dumps(
            {
                "data": [
                    {
                        "paragraphs": [
                            {
                                "context": "x y",
                                "qas": [
                                    {
                                        "id": "b",
                                        "question": "?",
                                        "answers": [{"text": "z", "answer_start": 0}],
                                    }
                                ],
                            }
                        ]
                    }
                ]
            }
        )
    )
    not_squad = tmp_path / "list.json"
    not_squad.write_text("[]")
    missing = tmp_path / "missing.json"
    for path, message in [
        (bad_json, "not valid JSON"),
        (mismatch, "mismatch"),
        (not_squad, 'the top level needs a "data" list'),
        (missing, "no such file"),
    ]:
        for argv in (
            ["make-v2-train", "--input", str(path), "--output", str(output)],
            ["make-v2-train", "--input", good, "--output", str(output), "--dev", str(path)],
            ["negatives-report", "--input", str(path)],
            ["negatives-report", "--input", good, "--dev", str(path)],
        ):
            if "--dev" in argv and path == mismatch:
                continue  # the dev file is read as v2.0, where "z" is still a mismatch
            capsys.readouterr()
            assert squad.main(argv) == 1, argv
            err = capsys.readouterr().err
            assert err.startswith(f"error: {path}") and message in err, (argv, err)
            assert not output.exists()
    for flags, message in [
        (["--negatives", "nope"], "unknown kind of negatives 'nope'"),
        (["--negatives", "entity-swap=0.2", "--negative-ratio", "0.5"], "leave out"),
    ]:
        capsys.readouterr()
        assert squad.main(["make-v2-train", "--input", good, "--output", str(output), *flags]) == 1
        assert message in capsys.readouterr().err and not output.exists()


def test_negatives_report(real, tmp_path, capsys):
    from model.tasks.squad_negatives import negatives_report

    dev = make_v2_train(real, 0.5, seed=0, negatives="entity-swap")
    rows = negatives_report(real, dev)
    assert list(rows) == [
        "train answerable",
        *NEGATIVE_KINDS,
        "dev-v2.0 answerable",
        "dev-v2.0 unanswerable",
    ]
    answerable = rows["train answerable"]
    assert answerable["questions"] == len(_questions(real)) == rows["entity-swap"]["answerable"]
    # A question moved to another paragraph finds few of its words there; one
    # with an entity swapped loses that one word.
    assert rows["other-paragraph"]["overlap_mean"] < rows["entity-swap"]["overlap_mean"]
    assert rows["entity-swap"]["overlap_mean"] < answerable["overlap_mean"]
    assert rows["dev-v2.0 answerable"] == answerable
    for row in rows.values():
        assert 0 <= row["overlap_below_half"] <= 100 and 0 <= row["sentence_overlap_mean"] <= 100

    source = str(tmp_path / "train.json")
    write_json(source, real)
    out = tmp_path / "report.json"
    capsys.readouterr()
    assert squad.main(["negatives-report", "--input", source, "--out", str(out), "--markdown"]) == 0
    table = capsys.readouterr().out
    assert table.startswith("| questions |") and "| entity-swap |" in table
    with open(out) as f:
        saved = json.load(f)
    assert saved["seed"] == 0 and saved["entity-swap"] == rows["entity-swap"]


def test_split_dev_deals_articles_alternately_and_counts_them(real, tmp_path, capsys):
    """`split-dev`: the 1st and 3rd articles to --tune, the 2nd and 4th to --report; the
    halves share no question and together hold every one, with the file's other fields."""
    source, tune, report = (str(tmp_path / n) for n in ("dev.json", "tune.json", "report.json"))
    write_json(source, real)
    assert squad.main(["split-dev", "--input", source, "--tune", tune, "--report", report]) == 0
    summary = json.loads(capsys.readouterr().out)
    halves = [json.loads(open(p, encoding="utf-8").read()) for p in (tune, report)]
    assert [a["title"] for a in halves[0]["data"]] == [a["title"] for a in real["data"][0::2]]
    assert [a["title"] for a in halves[1]["data"]] == [a["title"] for a in real["data"][1::2]]
    assert all(h["version"] == real["version"] for h in halves)
    ids = [set(_questions(h)) for h in halves]
    assert not ids[0] & ids[1] and ids[0] | ids[1] == set(_questions(real))
    assert summary["questions"] == len(_questions(real))
    assert [summary[k]["questions"] for k in ("tune", "report")] == [len(i) for i in ids]


def test_split_dev_names_a_malformed_question(tmp_path, capsys):
    source = str(tmp_path / "dev.json")
    write_json(source, {"version": "2.0", "data": [{"title": "t", "paragraphs": [{}]}]})
    argv = ["split-dev", "--input", source, "--tune", str(tmp_path / "a"), "--report", "b"]
    assert squad.main(argv) == 1
    assert source in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "a")


def test_split_dev_refuses_a_file_of_one_article(tmp_path, capsys):
    """It wrote an empty --report file, without a word."""
    source = str(tmp_path / "dev.json")
    write_json(source, {"version": "v2.0", "data": _real_v2()["data"][:1]})
    argv = ["split-dev", "--input", source, "--tune", str(tmp_path / "a"), "--report", "b"]
    assert squad.main(argv) == 1
    assert "1 article(s); a split needs two" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "a")


def _real_v2() -> dict:
    """Two articles of people's questions in v2.0 form: one answerable, one not, each."""
    articles = []
    for title, context in (("a", "Rex barked in 1999."), ("b", "Tom sat on the warm mat.")):
        word = context.split()[0]
        unanswerable = {"id": f"{title}-no", "question": f"When did {word} fly?", "answers": []}
        articles.append(
            {
                "title": title,
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            _question(f"{title}-yes", f"Who is {word}?", context, word),
                            {**unanswerable, "is_impossible": True},
                        ],
                    }
                ],
            }
        )
    return {"version": "v2.0", "data": articles}


def test_real_questions_join_the_made_ones_repeated(tmp_path, capsys):
    """`--real FILE --real-repeat 3`: FILE's articles stand three times after the made set,
    the copies with their own ids; the made questions are those of a run without it."""
    source, real, dev = (str(tmp_path / n) for n in ("train.json", "real.json", "dev.json"))
    write_json(source, _hand_made())
    write_json(real, _real_v2())
    write_json(dev, {"version": "v2.0", "data": _real_v2()["data"][1:]})
    plain, output = str(tmp_path / "plain.json"), str(tmp_path / "out" / "train-v2.0.json")
    assert squad.main(["make-v2-train", "--input", source, "--output", plain]) == 0
    argv = ["make-v2-train", "--input", source, "--output", output, "--real", real]
    assert squad.main([*argv, "--real-repeat", "3"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["real"] == {"path": real, "repeat": 3, "answerable": 2, "unanswerable": 2}
    with open(plain) as f, open(output) as g:
        made, written = json.load(f), json.load(g)
    assert written["data"][: len(made["data"])] == made["data"]
    added = _questions({"data": written["data"][len(made["data"]) :]})
    assert sorted(added) == sorted(
        f"{t}-{k}{c}" for t in "ab" for k in ("yes", "no") for c in ("", "-copy2", "-copy3")
    )
    examples = squad.Squad2Task().read(output)  # the reader takes it: ids unique
    assert sum(e.is_impossible for e in examples) == summary["unanswerable"] + 3 * 2

    # Sharing a paragraph with the tuning file is refused, and nothing is written.
    os.remove(output)
    assert squad.main([*argv, "--dev", dev]) == 1
    err = capsys.readouterr().err
    assert "shares 1 paragraph(s) with --dev" in err and "split-dev" in err
    assert not os.path.exists(output)
    assert squad.main([*argv, "--real-repeat", "0"]) == 1
    assert "--real-repeat must be at least 1" in capsys.readouterr().err
    assert squad.main([*argv[:-2], "--real-repeat", "2"]) == 1  # no --real to repeat
    assert "--real-repeat repeats --real's questions" in capsys.readouterr().err

    # A question id of the made set again in FILE is refused (predictions are keyed by id).
    clashing = _real_v2()
    clashing["data"][0]["paragraphs"][0]["qas"][0]["id"] = next(iter(_questions(made)))
    write_json(real, clashing)
    assert squad.main(argv) == 1
    assert "1 question id(s) also in --input's set" in capsys.readouterr().err
    assert not os.path.exists(output)
