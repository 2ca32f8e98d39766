"""Bad input files for every task reader: non-UTF-8 bytes, empty files, missing columns,
unknown tags, answers outside the context, and a 2 GB single line, each refused with the
file and line (never a traceback from deep inside TensorFlow, never read whole into memory).

    PYTHONPATH=. python -m pytest tests/test_bad_input.py

The 2 GB files are sparse (a header, then `truncate`): they take no disk space, and the
readers must stop at their line limit (model/io/files.py MAX_LINE_CHARS, MAX_JSON_BYTES) instead
of reading 2 GB.
"""

from __future__ import annotations

import json
import resource
import time

import pytest

from model import tasks
from model.io.files import MAX_LINE_CHARS
from tests.helpers import two_question_squad

TWO_GB = 2 * 2**30


def sparse(path, head: bytes, size: int = TWO_GB) -> str:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)  # zeros to 2 GB without a newline: one 2 GB line
    return str(path)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize(
    "task, head, line",
    [
        ("sst2", b"sentence\tlabel\na good film\t1\n", 3),
        ("conll2003", b"EU NNP B-NP B-ORG\n", 2),
    ],
)
def test_a_2gb_line_is_refused_at_the_limit_not_read(tmp_path, task, head, line):
    path = sparse(tmp_path / "huge.txt", head)
    before, started = peak_rss_mb(), time.time()
    with pytest.raises(
        ValueError,
        match=rf"huge.txt:{line}: a line longer than {MAX_LINE_CHARS} "
        r"characters",
    ):
        tasks.get(task).read(path)
    # Only the limit's worth was read (16 M characters), not 2 GB.
    assert peak_rss_mb() - before < 512 and time.time() - started < 30


def test_a_2gb_squad_file_is_refused_before_parsing(tmp_path):
    path = sparse(tmp_path / "huge.json", b'{"data": [')
    with pytest.raises(ValueError, match=r"huge.json: 2147483648 bytes, over the limit"):
        tasks.get("squad1").read(path)


def test_a_long_line_under_the_limit_is_still_read(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\n" + "word " * 200_000 + "\t1\nshort\t0\n", encoding="utf-8")
    examples = tasks.get("sst2").read(str(path))
    assert [e.label for e in examples] == ["1", "0"]
    assert examples[0].text_a == "word " * 200_000 and examples[1].text_a == "short"


BAD_UTF8 = b"\xff\xfe\x80 bad"


@pytest.mark.parametrize(
    "task, name, content, message",
    [
        (
            "sst2",
            "train.tsv",
            b"sentence\tlabel\n" + BAD_UTF8 + b"\t1\n",
            r"train.tsv:2: not UTF-8 text \(byte 1 of the line",
        ),
        (
            "conll2003",
            "train.txt",
            b"EU NNP B-NP B-ORG\n" + BAD_UTF8 + b" O\n",
            r"train.txt:2: not UTF-8 text",
        ),
        (
            "squad1",
            "train.json",
            b'{"data": "' + BAD_UTF8 + b'"}',
            r"train.json:1: not UTF-8 text \(byte 11 ",
        ),
        ("swag", "train.csv", b"," + BAD_UTF8 + b"\n", r"train.csv:1: not UTF-8 text"),
        # Past the reader's first block of text: the line, not a byte of that block.
        (
            "sst2",
            "train.tsv",
            b"sentence\tlabel\n" + b"a good film\t1\n" * 1000 + b"x" + BAD_UTF8 + b"\t1\n",
            r"train.tsv:1002: not UTF-8 text \(byte 2 of the line",
        ),
        # Old Mac line ends (\r alone): the line a text reader counts, not the file's first.
        (
            "sst2",
            "train.tsv",
            b"sentence\tlabel\r" + b"a good film\t1\r" * 5 + BAD_UTF8 + b"\t1\r",
            r"train.tsv:7: not UTF-8 text \(byte 1 of the line",
        ),
        # A carriage return inside a text is no line end where lines end at \n.
        (
            "sst2",
            "train.tsv",
            b"sentence\tlabel\na good\rfilm\t1\nx" + BAD_UTF8 + b"\t1\n",
            r"train.tsv:3: not UTF-8 text \(byte 2 of the line",
        ),
        # Windows' "Unicode" text: said so, not a byte of it.
        (
            "sst2",
            "train.tsv",
            "sentence\tlabel\na good film\t1\n".encode("utf-16"),
            r"train.tsv: UTF-16 text, not UTF-8; save it as UTF-8",
        ),
        ("squad1", "train.json", '{"data": []}'.encode("utf-16"), r"train.json: UTF-16 text"),
        # Malformed rows and lines: the file and line.
        ("sst2", "train.tsv", b"sentence\tlabel\na good film\n", r"train.tsv:2: expected 2 "),
        ("sst2", "train.tsv", b"sentence\tlabel\na\t1\textra\n", r"train.tsv:2: expected 2 "),
        (
            "conll2003",
            "train.txt",
            b"EU NNP B-NP B-ORG\nrejects VBZ\n",
            r"train.txt:2: 2 columns \(separated by spaces or tabs\), but line 1, the first word.s, has 4",
        ),
        (
            "conll2003",
            "train.txt",
            b"EU NNP B-NP B-ORG\nx VBZ B-VP B-WHAT\n",
            r"train.txt:2: tag 'B-WHAT' is not one of",
        ),
        ("squad1", "train.json", b'{"data": [', r"train.json:1:\d+: not valid JSON"),
        ("squad1", "train.json", b"", r"train.json:1:1: not valid JSON"),
    ],
)
def test_bad_files_name_the_file_and_line(tmp_path, task, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        tasks.get(task).read(str(path))


@pytest.mark.parametrize(
    "task, name", [("sst2", "train.tsv"), ("conll2003", "train.txt"), ("swag", "train.csv")]
)
def test_an_empty_file_has_no_examples_and_finetune_says_so(tmp_path, task, name, capsys):
    path = tmp_path / name
    path.write_bytes(b"")
    assert tasks.get(task).read(str(path)) == []


def test_finetune_on_an_empty_train_file_stops_with_its_name(tmp_path, capsys):
    from tests.helpers import finetune_argv, make_init, run_train

    data = tmp_path / "SST-2"
    data.mkdir()
    (data / "train.tsv").write_bytes(b"")
    (data / "dev.tsv").write_text("sentence\tlabel\na\t1\n")
    init = make_init(tmp_path)
    rc = run_train(finetune_argv("sst2", data, init, tmp_path / "out"))
    err = capsys.readouterr().err
    assert rc == 1 and "train.tsv: no training examples" in err and "Traceback" not in err


def test_finetune_with_an_empty_dev_file_stops_before_training(tmp_path, capsys):
    from tests.helpers import finetune_argv, make_init, run_train

    data = tmp_path / "SST-2"
    data.mkdir()
    (data / "train.tsv").write_text("sentence\tlabel\na\t1\n")
    (data / "dev.tsv").write_text("sentence\tlabel\n")
    init = make_init(tmp_path)
    rc = run_train(finetune_argv("sst2", data, init, tmp_path / "out"))
    err = capsys.readouterr().err
    assert rc == 1 and "dev.tsv: no dev examples" in err and "Traceback" not in err
    (data / "dev.tsv").write_text("index\tsentence\n0\ta\n")  # a test.tsv: no labels
    rc = run_train(finetune_argv("sst2", data, init, tmp_path / "out"))
    err = capsys.readouterr().err
    assert rc == 1 and "dev.tsv:2: no label: this file is unlabelled" in err


@pytest.mark.parametrize("answer, start", [("mat", 400), ("mat", -3), ("dog", 4)])
def test_squad_answers_outside_the_context_are_refused_or_skipped_with_a_count(
    tmp_path, answer, start
):
    path = tmp_path / "train.json"
    path.write_text(json.dumps(two_question_squad("the cat sat on the mat", answer, start)))
    task = tasks.get("squad1")
    with pytest.raises(ValueError, match=r"train.json: .*q1"):
        task.read(str(path), skip_invalid=False)
    examples = task.read(str(path), skip_invalid=True)  # the user asked: skip, and count
    assert [e.qas_id for e in examples] == ["q2"]


def test_a_byte_order_mark_is_read_past_and_utf16_text_is_named(tmp_path):
    """A Windows editor's save: UTF-8 with a byte-order mark reads as the same vocabulary
    (it made "[PAD]" look missing); UTF-16 (NULs to a UTF-8 reader) is named as such."""
    from model.pretraining.corpus import open_text
    from model.text.wordpiece import load_vocabulary

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the"]
    plain, marked = tmp_path / "plain.txt", tmp_path / "marked.txt"
    plain.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    marked.write_text("\n".join(tokens) + "\r\n", encoding="utf-8-sig")
    assert load_vocabulary(str(marked)) == load_vocabulary(str(plain)) == tokens
    wide = tmp_path / "corpus.txt"
    wide.write_text("A sentence.\nAnother one.\n", encoding="utf-16")
    with pytest.raises(ValueError, match=r"corpus.txt: UTF-16 text, not UTF-8"):
        open_text(str(wide))
    with pytest.raises(ValueError, match=r"plain16.txt: UTF-16 text"):
        (tmp_path / "plain16.txt").write_text("\n".join(tokens), encoding="utf-16")
        load_vocabulary(str(tmp_path / "plain16.txt"))


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_text_without_a_byte_order_mark_is_named(tmp_path, encoding):
    """UTF-16 without a byte-order mark (what some tools write) decodes as UTF-8 wherever it
    is ASCII, a NUL between letters: readers blamed a line's bytes or a tag "\x00O\x00"."""
    from model.io.files import utf16_error
    from model.pretraining.corpus import open_text
    from model.tasks import glue, ner

    order = "little" if encoding.endswith("le") else "big"
    named = rf"UTF-16 text \({order}-endian, without a byte-order mark\), not UTF-8"
    tsv = tmp_path / "train.tsv"
    tsv.write_text("sentence\tlabel\na fine film \u00e9t\u00e9\t1\n", encoding=encoding)
    conll = tmp_path / "train.txt"
    conll.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\n", encoding=encoding)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("A sentence.\nAnother one.\n", encoding=encoding)
    readers = [(glue.TASKS["sst2"]().read, tsv), (ner.TASKS["conll2003"]().read, conll)]
    for read, path in readers + [(open_text, corpus)]:
        with pytest.raises(ValueError, match=rf"{path.name}: {named}"):
            read(str(path))
    # UTF-8 is never taken for it: Latin, other scripts, one character, an empty file
    for text in ("plain text\n", "\u4e2d\u6587\u6587\u672c\n", "x", ""):
        assert utf16_error("f", text.encode("utf-8")) is None


def test_a_vocabulary_is_passed_on_without_its_byte_order_mark(tmp_path):
    """A model directory, and so each bundle and conversion made from it, holds vocab.txt as
    Hugging Face's and Google's readers take it: their first token read "\ufeff[PAD]"."""
    from model.checkpoints import model_dir
    from model.networks.encoder import BertEncoder

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the"]
    marked = tmp_path / "marked.txt"
    marked.write_text("\n".join(tokens) + "\r\n", encoding="utf-8-sig")
    encoder = BertEncoder.from_preset("tiny", vocabulary_size=len(tokens))
    model_dir.save(encoder, str(tmp_path / "run"), str(marked))
    written = (tmp_path / "run" / "vocab.txt").read_bytes()
    assert written == marked.read_bytes()[3:] and written.startswith(b"[PAD]\n")
    # the same vocabulary to records' vocab_sha256 (records made with the marked file are
    # trained with the copy)
    from model.text.wordpiece import vocabulary_sha256

    assert vocabulary_sha256(str(marked)) == vocabulary_sha256(str(tmp_path / "run" / "vocab.txt"))


@pytest.mark.parametrize(
    "field, value", [("num_layers", 10**6), ("hidden_dim", 10**9), ("vocabulary_size", 2 * 10**7)]
)
def test_a_config_far_bigger_than_its_weights_is_refused_before_building(tmp_path, field, value):
    """config.json's sizes against the numbers model.weights.h5 holds, before the model is
    built (a hidden size of 10^9 was built first: TensorFlow's out-of-memory error, naming
    nothing; 2 x 10^7 words took 32 s and 14 GB to be refused)."""
    import os

    from model.checkpoints import model_dir
    from tests.helpers import make_init

    directory = make_init(tmp_path)
    model_dir.load(directory)  # as written: fine
    path = os.path.join(directory, "config.json")
    with open(path, encoding="utf-8") as f:
        info = json.load(f)
    info["encoder"][field] = value
    if field == "hidden_dim":
        info["encoder"]["num_heads"] = 1
    with open(path, "w", encoding="utf-8") as f:
        json.dump(info, f)
    with pytest.raises(ValueError, match=r"model.weights.h5: holds [\d,]+ numbers, and the model"):
        model_dir.load(directory)
