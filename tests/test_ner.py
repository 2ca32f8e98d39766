"""CoNLL-2003 NER (`model/tasks/ner.py`): the reader, conlleval's scores
(checked against seqeval), WordPiece label alignment, and a few training steps."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

from model import tasks
from model.tasks.ner import CONLL2003_LABELS, IGNORE, chunks, conll_metrics, encode_sentences
from tests.helpers import (
    SHARED_DATA,
    WORDS,
    finetune_argv,
    make_init,
    run_evaluate,
    run_train,
    write_sst2,
    write_task_vocab,
)

CONLL_DIR = os.path.join(SHARED_DATA, "conll2003")
TYPES = ("PER", "ORG", "LOC", "MISC")


def random_tags(rng: random.Random, n: int, valid: bool = True) -> list[str]:
    """IOB2 tags (`valid`) or any mix of O/B-/I- tags (stray I-, type switches)."""
    tags, prev = [], "O"
    for _ in range(n):
        r = rng.random()
        if r < 0.4:
            tag = "O"
        elif valid and prev != "O" and r < 0.7:
            tag = "I-" + prev[2:]
        else:
            tag = rng.choice("BI" if not valid else "B") + "-" + rng.choice(TYPES)
        tags.append(tag)
        prev = tag
    return tags


def write_conll(path, sentences: list[tuple[list[str], list[str]]], docstart: bool = True) -> str:
    """CoNLL-2003's format: `word POS chunk tag`, blank lines between sentences."""
    lines = ["-DOCSTART- -X- -X- O", ""] if docstart else []
    for words, tags in sentences:
        lines += [f"{w} NN I-NP {t}" for w, t in zip(words, tags)] + [""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return str(path)


def random_sentences(n: int, seed: int = 0, length=(2, 9)):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(*length)
        out.append(([rng.choice(WORDS) for _ in range(k)], random_tags(rng, k)))
    return out


# === conlleval, against seqeval ===


def test_chunks_follow_conlleval():
    assert chunks(["B-PER", "I-PER", "O", "B-LOC"]) == {(0, 1, "PER"), (3, 3, "LOC")}
    assert chunks(["I-PER", "I-PER"]) == {(0, 1, "PER")}  # IOB1: I- starts a chunk
    assert chunks(["B-PER", "I-LOC"]) == {(0, 0, "PER"), (1, 1, "LOC")}
    assert chunks(["B-PER", "B-PER"]) == {(0, 0, "PER"), (1, 1, "PER")}
    assert chunks(["O", "O"]) == set() and chunks([]) == set()


EDGE_CASES = [
    ([["O", "O"]], [["O", "O"]]),
    ([["B-PER", "I-PER"]], [["O", "O"]]),
    ([["O", "O"]], [["B-PER", "I-PER"]]),
    ([["B-PER", "I-PER", "O"]], [["I-PER", "I-PER", "O"]]),
    ([["B-PER", "I-PER"]], [["B-PER", "I-LOC"]]),
    ([["B-PER", "I-PER", "B-PER"]], [["B-PER", "I-PER", "I-PER"]]),
    ([["B-ORG"], ["I-ORG", "B-LOC"]], [["B-ORG"], ["B-ORG", "I-LOC"]]),
    ([["I-MISC", "B-MISC", "I-MISC"]], [["I-MISC", "I-MISC", "I-MISC"]]),
]


@pytest.mark.parametrize("gold,predicted", EDGE_CASES)
def test_metrics_equal_seqeval_on_edge_cases(gold, predicted):
    _check_against_seqeval(gold, predicted)


@pytest.mark.parametrize("valid", [True, False])
def test_metrics_equal_seqeval_on_random_tags(valid):
    rng = random.Random(1 if valid else 2)
    for _ in range(30):
        lengths = [rng.randint(0, 12) for _ in range(rng.randint(1, 8))]
        gold = [random_tags(rng, n, valid) for n in lengths]
        # Predictions: gold with some tags changed, or fully random.
        predicted = [
            [t if rng.random() < 0.7 else random_tags(rng, 1, valid)[0] for t in g] for g in gold
        ]
        _check_against_seqeval(gold, predicted)


def _check_against_seqeval(gold, predicted):
    import warnings

    from seqeval.metrics import (
        accuracy_score,
        classification_report,
        f1_score,
        precision_score,
        recall_score,
    )

    ours = conll_metrics(gold, predicted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seqeval warns where a score is undefined (0)
        assert ours["precision"] == pytest.approx(precision_score(gold, predicted))
        assert ours["recall"] == pytest.approx(recall_score(gold, predicted))
        assert ours["f1"] == pytest.approx(f1_score(gold, predicted))
        if any(gold):
            assert ours["accuracy"] == pytest.approx(accuracy_score(gold, predicted))
        report = classification_report(gold, predicted, output_dict=True)
    for kind, scores in ours["per_type"].items():
        if kind in report:
            assert scores["f1"] == pytest.approx(report[kind]["f1-score"])


# === Reader ===


def test_reader_reads_conll_2003(tmp_path):
    path = write_conll(
        tmp_path / "train.txt",
        [
            (["EU", "rejects", "German"], ["B-ORG", "O", "B-MISC"]),
            (["Peter", "Blackburn"], ["B-PER", "I-PER"]),
        ],
    )
    sentences = tasks.get("ner").read(path)
    assert [s.words for s in sentences] == [["EU", "rejects", "German"], ["Peter", "Blackburn"]]
    assert sentences[1].tags == ["B-PER", "I-PER"]
    assert sentences[0].source == f"{path}:3" and sentences[1].source == f"{path}:7"


def test_reader_rejects_malformed_lines_with_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP B-FOO\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.txt:2: tag 'B-FOO' is not one of"):
        tasks.get("ner").read(str(path))
    path.write_text("EU NNP B-NP B-ORG\n\nrejects O\n", encoding="utf-8")
    with pytest.raises(
        ValueError,
        match=r"bad.txt:3: 2 columns \(separated by spaces or tabs\), but line 1, the first word's, has 4",
    ):
        tasks.get("ner").read(str(path))


def test_a_non_breaking_space_is_part_of_a_word_not_a_column(tmp_path):
    """CoNLL columns are split at spaces and tabs only (str.split() also splits at U+00A0,
    which then blamed the next, well-formed line)."""
    path = tmp_path / "train.txt"
    text = "EU\u00a0x NNP B-NP B-ORG\nrejects\tVBZ  B-VP O \n\u00a0\nPeter NNP B-NP B-PER\n"
    path.write_text(text, encoding="utf-8")
    first, second = tasks.get("ner").read(str(path))  # a line of whitespace ends a sentence
    assert first.words == ["EU\u00a0x", "rejects"] and first.tags == ["B-ORG", "O"]
    assert second.words == ["Peter"]


def test_unlabelled_file_is_read_but_not_evaluated(tmp_path):
    path = tmp_path / "test.txt"
    path.write_text("-DOCSTART-\n\nEU\nrejects\n\nPeter\n", encoding="utf-8")
    sentences = tasks.get("ner").read(str(path))
    assert [s.words for s in sentences] == [["EU", "rejects"], ["Peter"]]
    assert all(s.tags is None for s in sentences)
    with pytest.raises(ValueError, match="test.txt:3: no tags.*--predictions-dir DIR writes"):
        tasks.get("ner").evaluate(None, sentences, None, 16)


# === WordPiece alignment ===


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from model.text.tokenizer import WordPieceTokenizer

    return WordPieceTokenizer(write_task_vocab(tmp_path_factory.mktemp("ner") / "vocab.txt"))


def test_labels_sit_on_first_pieces(tokenizer):
    # "cats" is two pieces (cat ##s); "\u200b" cleans to nothing and becomes [UNK].
    words, tags = ["the", "cats", "\u200b", "sang"], ["O", "B-PER", "O", "B-LOC"]
    index = {t: i for i, t in enumerate(CONLL2003_LABELS)}
    x, y, fmap = encode_sentences([words], [[index[t] for t in tags]], tokenizer, 12)
    tokens = [tokenizer.vocabulary[i] for i in x["token_ids"][0][:7]]
    assert tokens == ["[CLS]", "the", "cat", "##s", "[UNK]", "sang", "[SEP]"]
    assert fmap.positions == [[1, 2, 4, 5]]
    assert (
        y[0].tolist()
        == [IGNORE, index["O"], index["B-PER"], IGNORE, index["O"], index["B-LOC"]] + [IGNORE] * 6
    )
    assert x["padding_mask"][0].tolist() == [1] * 7 + [0] * 5


def replay(labels: np.ndarray, x: dict):
    """A "model" whose logits are the given per-piece labels of the features
    `x`, one-hot. Batches may come in any order and cut to their longest row
    (as `predict_in_batches` sends them): each row is found by its tokens
    (identical rows in their original order)."""
    rows_of = {}
    for i, (ids, mask) in enumerate(zip(x["token_ids"], x["padding_mask"])):
        rows_of.setdefault(tuple(ids[mask == 1]), []).append(i)
    taken = {key: 0 for key in rows_of}

    def predict(batch):
        rows = []
        for ids, mask in zip(batch["token_ids"], batch["padding_mask"]):
            key = tuple(ids[mask == 1])
            rows.append(rows_of[key][taken[key]])
            taken[key] += 1
        width = batch["token_ids"].shape[1]
        return np.eye(len(CONLL2003_LABELS))[np.maximum(labels[rows, :width], 0)]

    return predict


@pytest.mark.parametrize("seq_len", [6, 9, 64])
def test_alignment_round_trips_words_and_tags(tokenizer, tmp_path, seq_len):
    """Tags -> first-piece labels -> per-word predictions give the tags back,
    also for sentences split over several features and words cut short."""
    rng = random.Random(seq_len)
    vocabulary = WORDS + ["stones", "rivers", "songbirds", "xyzzyplugh"]  # several pieces
    sentences = []
    for _ in range(20):
        words = [rng.choice(vocabulary) for _ in range(rng.randint(1, 14))]
        sentences.append((words, random_tags(rng, len(words))))
    index = {t: i for i, t in enumerate(CONLL2003_LABELS)}
    words = [w for w, _ in sentences]
    ids = [[index[t] for t in tags] for _, tags in sentences]
    x, y, fmap = encode_sentences(words, ids, tokenizer, seq_len)
    assert x["token_ids"].shape[1] == seq_len
    if seq_len < 64:
        assert len(fmap.sentence) > len(sentences)  # some sentences needed several features
    back = fmap.to_words(y, [len(w) for w in words])
    assert [b.tolist() for b in back] == ids
    # Through the task: a file, its features, predictions mapped back to words.
    task = tasks.get("ner")
    examples = task.read(write_conll(tmp_path / "round.txt", sentences))
    encoded = task.encode(examples, tokenizer, seq_len)
    np.testing.assert_array_equal(encoded.y, y)
    expected = [t for _, t in sentences]
    assert task.predict_tags(replay(y, x), examples, tokenizer, seq_len) == expected
    assert task.evaluate(replay(y, x), examples, tokenizer, seq_len)["f1"] == 1.0


def test_predictions_file_is_conllevals_input(tokenizer, tmp_path, capsys):
    """--predictions-dir: `word gold predicted` lines, a blank line after each sentence,
    -DOCSTART- where the file has it; an unlabelled file gets `word predicted` and no
    metrics. The file's tags score as the metrics printed beside it."""
    from model.tasks.ner import conll_metrics

    sentences = random_sentences(6, seed=3)
    task = tasks.get("ner")
    examples = task.read(write_conll(tmp_path / "dev.txt", sentences))
    encoded = task.encode(examples, tokenizer, 64)
    wrong = np.where(encoded.y > 0, 0, encoded.y)  # every entity missed
    for y, f1 in ((encoded.y, 1.0), (wrong, 0.0)):
        out = tmp_path / f"out{f1}"
        metrics = task.evaluate(replay(y, encoded.x), examples, tokenizer, 64, output_dir=str(out))
        assert metrics["f1"] == f1
        blocks = (out / "predictions.txt").read_text(encoding="utf-8").split("\n\n")
        assert blocks[0] == "-DOCSTART- O O" and blocks[-1] == ""
        rows = [[line.split() for line in b.splitlines()] for b in blocks[1:-1]]
        assert [[r[0] for r in b] for b in rows] == [w for w, _ in sentences]
        assert [[r[1] for r in b] for b in rows] == [t for _, t in sentences]
        scored = conll_metrics([[r[1] for r in b] for b in rows], [[r[2] for r in b] for b in rows])
        assert scored["f1"] == metrics["f1"]
    unlabelled = tmp_path / "test.txt"
    unlabelled.write_text("-DOCSTART-\n\nEU\nrejects\n\nPeter\n", encoding="utf-8")
    examples = task.read(str(unlabelled))
    encoded = task.encode(examples, tokenizer, 64)
    y = np.where(encoded.x["padding_mask"] > 0, 1, 0)  # B-PER everywhere
    metrics = task.evaluate(replay(y, encoded.x), examples, tokenizer, 64, output_dir=str(tmp_path))
    assert metrics == {"labelled": False, "sentences": 2}
    written = (tmp_path / "predictions.txt").read_text(encoding="utf-8")
    assert written == "-DOCSTART- O\n\nEU B-PER\nrejects B-PER\n\nPeter B-PER\n\n"
    assert "replacing" not in capsys.readouterr().err  # a new file
    task.evaluate(replay(y, encoded.x), examples, tokenizer, 64, output_dir=str(tmp_path))
    assert f"note: replacing {tmp_path / 'predictions.txt'}" in capsys.readouterr().err


# === The paper's document context (section 5.3) ===


def write_documents(path, documents: list[list[tuple[list[str], list[str]]]]) -> str:
    """Documents of sentences, each document after a -DOCSTART- line."""
    lines = []
    for sentences in documents:
        lines += ["-DOCSTART- -X- -X- O", ""]
        for words, tags in sentences:
            lines += [f"{w} NN I-NP {t}" for w, t in zip(words, tags)] + [""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return str(path)


def test_reader_reads_past_a_byte_order_mark(tmp_path):
    plain = write_documents(tmp_path / "plain.txt", [random_sentences(2, seed=1)])
    with open(plain, encoding="utf-8") as f:
        (tmp_path / "bom.txt").write_text("\ufeff" + f.read(), encoding="utf-8")
    task = tasks.get("ner")
    bom, expected = task.read(str(tmp_path / "bom.txt")), task.read(plain)
    assert [(s.words, s.tags, s.document) for s in bom] == [
        (s.words, s.tags, s.document) for s in expected
    ]


def test_reader_numbers_the_documents(tmp_path):
    documents = [random_sentences(2, seed=1), random_sentences(1, seed=2)]
    sentences = tasks.get("ner").read(write_documents(tmp_path / "d.txt", documents))
    assert [s.document for s in sentences] == [1, 1, 2]


@pytest.mark.parametrize("seq_len", [9, 24, 64])
def test_document_context_fills_each_feature_from_its_own_document(tokenizer, tmp_path, seq_len):
    rng = random.Random(seq_len)
    vocabulary = WORDS + ["stones", "rivers", "songbirds"]  # several pieces

    def sentence():
        words = [rng.choice(vocabulary) for _ in range(rng.randint(1, 12))]
        return words, random_tags(rng, len(words))

    documents = [[sentence() for _ in range(rng.randint(1, 6))] for _ in range(5)]
    task = tasks.get("ner")
    examples = task.read(write_documents(tmp_path / "docs.txt", documents))
    plain = task.encode(examples, tokenizer, seq_len)
    task.document_context = True
    read = task.encode(examples, tokenizer, seq_len)
    # The same features, each with the same words at its first pieces.
    assert (read.meta.sentence, read.meta.start) == (plain.meta.sentence, plain.meta.start)
    budget, doc_of = seq_len - 2, [examples[s].document for s in plain.meta.sentence]
    own = [
        ids[1 : mask.sum() - 1].tolist()
        for ids, mask in zip(plain.x["token_ids"], plain.x["padding_mask"])
    ]
    streams = {}  # a document's pieces, its features' in order
    for f, pieces in enumerate(own):
        streams.setdefault(doc_of[f], []).extend(pieces)
    at = {d: 0 for d in streams}
    for f, pieces in enumerate(own):
        stream, length = streams[doc_of[f]], read.x["padding_mask"][f].sum() - 2
        ids = read.x["token_ids"][f, 1 : length + 1].tolist()
        before = read.meta.positions[f][0] - plain.meta.positions[f][0]
        after = length - before - len(pieces)
        start = at[doc_of[f]]
        # Its own pieces in the middle, the document's next to them, as many as fit.
        assert ids == stream[start - before : start + len(pieces) + after]
        assert length == min(budget, len(stream))
        # Half on each side, unless a side has run out.
        if before > after + 1:
            assert start + len(pieces) + after == len(stream)
        if after > before + 1:
            assert before == start
        assert [read.x["token_ids"][f, p] for p in read.meta.positions[f]] == [
            plain.x["token_ids"][f, p] for p in plain.meta.positions[f]
        ]
        labelled = np.flatnonzero(read.y[f] != IGNORE).tolist()
        assert labelled == read.meta.positions[f]  # the context is never labelled
        at[doc_of[f]] += len(pieces)
    # Every word is predicted once, from its own feature.
    tags = [t for sentences in documents for _, t in sentences]
    assert task.predict_tags(replay(read.y, read.x), examples, tokenizer, seq_len) == tags


# === A few training steps, then model.evaluate on a file ===


def test_ner_trains_and_evaluates(tmp_path, tmp_path_factory, capsys):
    data = tmp_path / "conll2003"
    data.mkdir()
    write_conll(data / "train.txt", random_sentences(8, seed=1))
    write_conll(data / "valid.txt", random_sentences(6, seed=2))
    other = write_conll(tmp_path / "other.txt", random_sentences(5, seed=3), docstart=False)
    init = make_init(tmp_path_factory.getbasetemp())
    output = tmp_path / "run"
    assert run_train(finetune_argv("ner", data, init, output, batch_size=4, seq_len=16)) == 0
    with open(os.path.join(output, "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["task"] == "conll2003" and metrics["main_metric"] == "f1"
    assert {"precision", "recall", "f1", "accuracy"} <= set(metrics["dev"])
    with open(os.path.join(output, "config.json")) as f:
        info = json.load(f)
    assert info["task"] == "token_classifier"
    assert list(info["id2label"].values()) == list(CONLL2003_LABELS)
    capsys.readouterr()
    assert (
        run_evaluate(
            [
                "--task",
                "conll2003",
                "--model",
                str(output),
                "--data",
                os.path.join(data, "valid.txt"),
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["f1"] == pytest.approx(metrics["dev"]["f1"])
    assert run_evaluate(["--task", "ner", "--model", str(output), "--data", other]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"] == 5

    # --document-context: recorded in config.json, and model.evaluate reads as it was trained.
    output = tmp_path / "documents"
    argv = finetune_argv("ner", data, init, output, seq_len=16, extra=["--document-context"])
    assert run_train(argv) == 0
    with open(os.path.join(output, "config.json")) as f:
        assert json.load(f)["document_context"] is True
    with open(os.path.join(output, "metrics.json")) as f:
        dev_f1 = json.load(f)["dev"]["f1"]
    capsys.readouterr()
    valid = os.path.join(data, "valid.txt")
    assert run_evaluate(["--task", "ner", "--model", str(output), "--data", valid]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["document_context"] is True and scored["f1"] == pytest.approx(dev_f1)
    sst2 = write_sst2(tmp_path / "sst2", train=4, dev=2)
    argv = finetune_argv("sst2", sst2, init, tmp_path / "no", extra=["--document-context"])
    assert run_train(argv) == 1
    assert "--document-context: task sst2 has no documents" in capsys.readouterr().err


# === The real files (skipped where shared/data is absent) ===


def test_real_conll_2003_files():
    if not os.path.isdir(CONLL_DIR):
        pytest.skip(f"{CONLL_DIR} not present")
    task = tasks.get("conll2003")
    train, dev = task.files(CONLL_DIR)
    train_set, dev_set = task.read(train), task.read(dev)
    # The published sizes of the English CoNLL-2003 train and dev sets.
    assert len(train_set) == 14041 and len(dev_set) == 3250
    assert sum(len(s.words) for s in dev_set) == 51362
    # Gold against itself: every entity found.
    gold = [s.tags for s in dev_set]
    assert conll_metrics(gold, gold)["f1"] == 1.0


def test_the_original_releases_file_names_are_found(tmp_path):
    """The original CoNLL-2003 release names its files eng.train / eng.testa / eng.testb:
    a folder of those (or eng.train given) finds eng.testa as the dev file, never eng.testb;
    train.txt, where there is one, wins."""
    task = tasks.get("conll2003")
    sentences = random_sentences(3, seed=1)
    for name in ("eng.train", "eng.testa", "eng.testb"):
        write_conll(tmp_path / name, sentences)
    expected = (str(tmp_path / "eng.train"), str(tmp_path / "eng.testa"))
    assert task.files(str(tmp_path)) == expected
    assert task.files(str(tmp_path / "eng.train")) == expected
    os.remove(tmp_path / "eng.testa")
    assert task.files(str(tmp_path)) == (expected[0], None)
    write_conll(tmp_path / "train.txt", sentences)
    assert task.files(str(tmp_path)) == (str(tmp_path / "train.txt"), None)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no training file"):
        task.files(str(tmp_path / "empty"))
