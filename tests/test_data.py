"""model.data (text -> TFRecord shards) and model.pretraining.dataset (shards -> batches).

Tiny vocabularies and corpora in temporary folders; every build takes well
under a second. The CLI is run through `main([...])` (and once as a real
`python -m model.data` process) to check exit codes and messages.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from model import data
from model.pretraining import build
from model.pretraining.dataset import find_records, pretraining_dataset
from model.pretraining.instances import InstanceConfig, SentencePacker
from model.pretraining.masking import Masker, MaskingConfig
from model.text.tokenizer import WordPieceTokenizer
from tests.helpers import WORDS, leftovers, write_corpus, write_vocab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ_LEN = 32
BATCH = 8


def build_args(corpus, vocab, output, *extra) -> list[str]:
    return [
        "--input",
        str(corpus),
        "--vocab",
        str(vocab),
        "--output",
        str(output),
        "--max-seq-length",
        str(SEQ_LEN),
        "--num-shards",
        "3",
        "--seed",
        "1",
        *extra,
    ]


def read_records(directory) -> list[dict]:
    """Every record of the shards in `directory`, shard by shard, as numpy arrays."""
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "*.tfrecord"))):
        for raw in tf.data.TFRecordDataset(path):
            feats = tf.train.Example.FromString(raw.numpy()).features.feature
            out.append(
                {k: np.array(v.float_list.value or v.int64_list.value) for k, v in feats.items()}
            )
    return out


def shard_bytes(directory) -> dict[str, bytes]:
    return {
        os.path.basename(p): open(p, "rb").read()
        for p in sorted(glob.glob(os.path.join(directory, "*.tfrecord")))
    }


def batches(dataset, n: int) -> list:
    """The first `n` batches as numpy (x, y, sample_weight) triples."""
    return [tf.nest.map_structure(lambda t: t.numpy(), b) for b in dataset.take(n)]


def assert_same_batch(a, b):
    tf.nest.assert_same_structure(a, b)
    for u, v in zip(tf.nest.flatten(a), tf.nest.flatten(b)):
        np.testing.assert_array_equal(u, v)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    return {
        "vocab": write_vocab(d / "vocab.txt"),
        "corpus": write_corpus(d / "corpus.txt", num_documents=30, seed=0),
    }


@pytest.fixture(scope="module")
def tokenizer(files):
    return WordPieceTokenizer(files["vocab"])


@pytest.fixture(scope="module")
def masker(tokenizer):
    return Masker(tokenizer.vocabulary, MaskingConfig(max_predictions=5))


@pytest.fixture(scope="module")
def dynamic(files, tmp_path_factory):
    """Dynamically masked records (111 instances, 3 shards)."""
    out = str(tmp_path_factory.mktemp("built") / "dynamic")
    assert data.main(build_args(files["corpus"], files["vocab"], out)) == 0
    return out


# === model.data: building ===


def test_build_writes_shards_dataset_json_and_vocab(files, tmp_path, capsys):
    out = tmp_path / "wiki32"
    assert data.main(build_args(files["corpus"], files["vocab"], out)) == 0
    info = json.loads((out / "dataset.json").read_text())
    assert capsys.readouterr().out.startswith(f"wrote {info['num_instances']} instances from 30 ")
    assert sorted(os.listdir(out)) == [
        "dataset.json",
        "part-00000-of-00003.tfrecord",
        "part-00001-of-00003.tfrecord",
        "part-00002-of-00003.tfrecord",
        "vocab.txt",
    ]
    assert leftovers(tmp_path, "wiki32") == ["wiki32"]
    assert (out / "vocab.txt").read_bytes() == open(files["vocab"], "rb").read()
    records = read_records(out)
    assert len(records) == info["num_instances"] == sum(info["shards"].values())
    assert info["num_documents"] == 30 and info["masking"] == "dynamic"
    for r in records:
        assert set(r) == {"input_ids", "input_mask", "segment_ids", "next_sentence_labels"}
        assert len(r["input_ids"]) == SEQ_LEN
        n = int(r["input_mask"].sum())
        assert r["input_mask"][:n].all() and not r["input_mask"][n:].any()  # truncated, padded
    labels = [int(r["next_sentence_labels"][0]) for r in records]
    assert 0 < np.mean(labels) < 1


def test_documents_stay_whole(tokenizer, tmp_path):
    # Each document repeats its own word, so an IsNext pair must hold one word only.
    corpus = write_corpus(
        tmp_path / "c.txt", num_documents=12, sentences=(3, 8), document_words=True
    )
    with open(corpus, encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    expected_tokens = sum(len(ids) for ids in tokenizer.encode(sentences))
    info = build.build(
        [corpus],
        tokenizer,
        str(tmp_path / "out"),
        InstanceConfig(max_seq_length=64),
        show_progress=False,
    )
    assert info["num_documents"] == 12 and info["num_tokens"] == expected_tokens
    period = tokenizer.token_to_id["."]
    words = {tokenizer.token_to_id[w] for w in WORDS[:12]}
    instances = list(build.generate_instances([corpus], tokenizer, InstanceConfig(64), seed=5))
    for inst in instances:
        first, second = set(inst.first) - {period}, set(inst.second) - {period}
        assert len(first) == 1 and first <= words
        assert (first == second) != inst.is_random_next


def test_same_seed_same_bytes_other_seed_other_bytes(files, dynamic, tmp_path):
    again, other = tmp_path / "again", tmp_path / "other"
    assert data.main(build_args(files["corpus"], files["vocab"], again)) == 0
    args = build_args(files["corpus"], files["vocab"], other)
    args[args.index("--seed") + 1] = "2"
    assert data.main(args) == 0
    assert shard_bytes(again) == shard_bytes(dynamic)
    assert shard_bytes(other) != shard_bytes(dynamic)


def test_static_masking_is_deterministic(files, tmp_path):
    outs = []
    for name in ("a", "b"):
        outs.append(tmp_path / name)
        assert (
            data.main(
                build_args(
                    files["corpus"],
                    files["vocab"],
                    outs[-1],
                    "--masking",
                    "static",
                    "--dupe-factor",
                    "2",
                )
            )
            == 0
        )
    assert shard_bytes(outs[0]) == shard_bytes(outs[1])


def test_static_masking_realises_the_mask_rate(files, tmp_path):
    """Static masks at --mask-rate 0.15, 0.30, 0.40: the slots are sized from the rate at the
    sequence length (they stayed at 20 whatever the rate, so 0.30 masked about 16 %)."""
    for rate in (0.15, 0.30, 0.40):
        out = tmp_path / f"static-{rate}"
        args = ["--masking", "static", "--mask-rate", str(rate), "--inputs", "segments"]
        argv = build_args(files["corpus"], files["vocab"], out, *args)
        argv[argv.index("--max-seq-length") + 1] = "128"  # 20 slots are 62 % of 32, 16 % of 128
        assert data.main(argv) == 0
        records = read_records(out)
        chosen = sum(float((r["masked_lm_weights"] > 0).sum()) for r in records)
        text = sum(float(r["input_mask"].sum()) - 2 for r in records)  # less [CLS], [SEP]
        assert abs(chosen / text - rate) < 0.03, (rate, chosen / text)


# === model.data: bad input stops cleanly ===


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--num-shards", "0", "--num-shards: must be at least 1, not 0"),  # a ZeroDivisionError
        ("--dupe-factor", "0", "--dupe-factor: must be at least 1"),  # "the input has no text"
        ("--short-seq-prob", "1.5", "--short-seq-prob is a probability, from 0 to 1"),
        ("--short-seq-prob", "-1", "--short-seq-prob is a probability"),  # taken as it was
    ],
)
def test_numbers_out_of_range_are_usage_errors(files, tmp_path, capsys, flag, value, message):
    with pytest.raises(SystemExit):
        data.parse_args(build_args(files["corpus"], files["vocab"], tmp_path / "o", flag, value))
    assert message in capsys.readouterr().err


def _bad_inputs(d, files):
    """name -> (argv changes, the path the message must name, a phrase of the message)."""
    (d / "empty.txt").write_text("")
    (d / "blank.txt").write_text("\n \n\n")
    (d / "model.bin").write_bytes(b"\x89HDF\r\n\x1a\n\x00\x00\x00\x00binary weights")
    (d / "latin1.txt").write_bytes("Le caf\u00e9 est bon.\n".encode("latin-1"))
    no_mask = write_vocab(d / "no_mask_vocab.txt", mask=False)
    return {
        "missing input": ({"--input": str(d / "missing.txt")}, d / "missing.txt", "no such file"),
        "empty corpus": ({"--input": str(d / "empty.txt")}, d / "empty.txt", "no instances"),
        "blank corpus": ({"--input": str(d / "blank.txt")}, d / "blank.txt", "no instances"),
        "binary file": ({"--input": str(d / "model.bin")}, d / "model.bin", "binary"),
        "not UTF-8": ({"--input": str(d / "latin1.txt")}, d / "latin1.txt", ":1: not UTF-8"),
        "not UTF-8, text": (
            {"--input": str(d / "latin1.txt"), "--format": "text"},
            d / "latin1.txt",
            ":1: not UTF-8",
        ),
        "vocab without [MASK]": ({"--vocab": no_mask}, no_mask, "no [MASK] token"),
        "missing vocab": ({"--vocab": str(d / "nope.txt")}, d / "nope.txt", "no such file"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing input",
        "empty corpus",
        "blank corpus",
        "binary file",
        "not UTF-8",
        "not UTF-8, text",
        "vocab without [MASK]",
        "missing vocab",
    ],
)
def test_bad_input_stops_with_a_message_and_no_output(case, files, tmp_path, capsys):
    changes, named, phrase = _bad_inputs(tmp_path, files)[case]
    args = build_args(files["corpus"], files["vocab"], tmp_path / "out")
    for flag, value in changes.items():
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    assert data.main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(named) in err and phrase in err, err
    assert leftovers(tmp_path, "out") == []


def test_error_after_writing_began_leaves_nothing(files, tmp_path, capsys):
    # The good corpus comes first, so shards are half written when the bad file is met.
    bad = tmp_path / "z_bad.txt"
    bad.write_bytes(b"A good line.\n" * 10 + b"\xff\xfe broken\n")
    args = build_args(files["corpus"], files["vocab"], tmp_path / "out") + [
        "--input",
        str(bad),
        "--pool-tokens",
        "100",
    ]
    assert data.main(args) == 1
    assert f"error: {bad}:11: not UTF-8" in capsys.readouterr().err
    assert leftovers(tmp_path, "out") == []


def test_existing_output_is_refused(files, dynamic, tmp_path, capsys):
    before = shard_bytes(dynamic)
    assert data.main(build_args(files["corpus"], files["vocab"], dynamic)) == 1
    assert "exists" in capsys.readouterr().err
    assert shard_bytes(dynamic) == before
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert data.main(build_args(files["corpus"], files["vocab"], a_file)) == 1
    assert f"error: {a_file}: output exists" in capsys.readouterr().err


def test_cli_process_exit_code_and_message(files, tmp_path):
    missing = tmp_path / "missing.txt"
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, "-m", "model.data", *build_args(missing, files["vocab"], tmp_path / "o")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert f"error: {missing}: no such file" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert leftovers(tmp_path, "o") == []


# === model.pretraining.dataset ===


def test_batches_have_the_model_shapes_and_dtypes(dynamic, masker):
    ((x, y, sw),) = batches(pretraining_dataset(dynamic, BATCH, masker, seed=0), 1)
    p = masker.config.max_predictions
    expected = {
        "x": {
            "token_ids": ((BATCH, SEQ_LEN), np.int32),
            "segment_ids": ((BATCH, SEQ_LEN), np.int32),
            "padding_mask": ((BATCH, SEQ_LEN), np.int32),
            "mask_positions": ((BATCH, p), np.int32),
        },
        "y": {"mlm": ((BATCH, p), np.int32), "nsp": ((BATCH, 1), np.int32)},
        "sw": {"mlm": ((BATCH, p), np.float32), "nsp": ((BATCH,), np.float32)},
    }
    for name, got in (("x", x), ("y", y), ("sw", sw)):
        assert {k: (v.shape, v.dtype) for k, v in got.items()} == expected[name]
    assert set(np.unique(y["nsp"])) <= {0, 1}
    # [CLS] first, masked positions inside the real tokens.
    assert (x["padding_mask"][:, 0] == 1).all()
    for b in range(BATCH):
        real = sw["mlm"][b] > 0
        assert (x["padding_mask"][b, x["mask_positions"][b, real]] == 1).all()


def test_mlm_weights_are_scaled_to_a_mean_over_real_predictions(dynamic, masker):
    # Keras divides a weighted loss by batch * P; the weights are scaled by
    # (batch * P) / (real predictions) so the loss is the mean over real ones.
    p = masker.config.max_predictions
    for _x, _y, sw in batches(pretraining_dataset(dynamic, BATCH, masker, seed=0), 5):
        real = sw["mlm"] > 0
        assert sw["mlm"].sum() == pytest.approx(BATCH * p, rel=1e-5)
        np.testing.assert_allclose(sw["mlm"][real], BATCH * p / real.sum(), rtol=1e-6)
        np.testing.assert_array_equal(sw["nsp"], np.ones(BATCH))


def test_several_folders_count_their_own_records_and_must_be_alike(files, dynamic, tmp_path):
    """--data A,B: each folder's own shard counts, summed (B's files were counted by A's
    dataset.json, where shards of the same name stood); folders made otherwise (another
    length, casing, vocabulary, masking) are refused, naming both."""
    other = tmp_path / "other"
    corpus = write_corpus(tmp_path / "more.txt", num_documents=12, seed=3)
    assert data.main(build_args(corpus, files["vocab"], other)) == 0
    own = {str(d): find_records(str(d))[1]["num_instances"] for d in (dynamic, other)}
    assert own[str(other)] != own[dynamic]
    assert find_records(f"{dynamic},{other}")[1]["num_instances"] == sum(own.values())
    longer = tmp_path / "longer"
    args = build_args(corpus, files["vocab"], longer)
    args[args.index("--max-seq-length") + 1] = "64"
    assert data.main(args) == 0
    with pytest.raises(ValueError, match=f"{longer}: records with max_seq_length 64, unlike"):
        find_records(f"{dynamic},{longer}")
    # Static masks of another rate have other slots: each folder is parsed with the first's.
    statics = []
    for rate in ("0.15", "0.5"):
        statics.append(tmp_path / f"static-{rate}")
        args = build_args(corpus, files["vocab"], statics[-1], "--masking", "static")
        assert data.main([*args, "--mask-rate", rate]) == 0
    with pytest.raises(ValueError, match="records with max_predictions 16, unlike"):
        find_records(",".join(map(str, statics)))


def test_start_step_resumes_at_exactly_that_batch(dynamic, masker):
    num = find_records(dynamic)[1]["num_instances"]
    assert num % BATCH  # so some batches straddle two epochs
    fresh = batches(pretraining_dataset(dynamic, BATCH, masker, seed=4), 3 * num // BATCH)
    straddles = [num // BATCH, 2 * num // BATCH]  # epoch 0 -> 1 and 1 -> 2
    for k in [0, 1] + straddles + [straddles[0] + 1]:
        (resumed,) = batches(pretraining_dataset(dynamic, BATCH, masker, seed=4, start_step=k), 1)
        assert_same_batch(resumed, fresh[k])


def _unmasked_stream(dynamic, masker, seed, n):
    """(position, original token ids, mask positions) of the first n*BATCH examples."""
    out = []
    for step, (x, y, sw) in enumerate(
        batches(pretraining_dataset(dynamic, BATCH, masker, seed), n)
    ):
        for b in range(BATCH):
            real = sw["mlm"][b] > 0
            ids = x["token_ids"][b].copy()
            ids[x["mask_positions"][b, real]] = y["mlm"][b, real]
            out.append(
                (
                    step * BATCH + b,
                    ids.tobytes() + x["segment_ids"][b].tobytes(),
                    tuple(x["mask_positions"][b, real]),
                )
            )
    return out


def test_dynamic_masks_are_fresh_each_epoch_and_fixed_per_position(dynamic, masker):
    num = find_records(dynamic)[1]["num_instances"]
    stream = _unmasked_stream(dynamic, masker, seed=4, n=-(-2 * num // BATCH))
    epoch0 = {key: masks for pos, key, masks in stream if pos < num}
    epoch1 = {key: masks for pos, key, masks in stream if num <= pos < 2 * num}
    # Every example once per epoch, in another order ...
    assert len(epoch0) == len(epoch1) == num and epoch0.keys() == epoch1.keys()
    assert [k for _, k, _ in stream[:num]] != [k for _, k, _ in stream[num : 2 * num]]
    # ... with other masks.
    same = np.mean([epoch0[k] == epoch1[k] for k in epoch0])
    assert same < 0.2, same
    # The same (seed, position) gives the same masks; another seed, others.
    assert _unmasked_stream(dynamic, masker, seed=4, n=3) == stream[: 3 * BATCH]
    assert _unmasked_stream(dynamic, masker, seed=5, n=3) != stream[: 3 * BATCH]


def test_static_records_are_used_as_they_are(files, tmp_path):
    out = tmp_path / "static"
    assert (
        data.main(
            build_args(
                files["corpus"],
                files["vocab"],
                out,
                "--masking",
                "static",
                "--num-shards",
                "1",
                "--max-predictions",
                "6",
            )
        )
        == 0
    )
    records = read_records(out)
    ds = pretraining_dataset(str(out), 4, masker=None, seed=0, shuffle_buffer=1)
    for step, (x, y, sw) in enumerate(batches(ds, 3)):
        for b in range(4):
            r = records[step * 4 + b]
            np.testing.assert_array_equal(x["token_ids"][b], r["input_ids"])
            np.testing.assert_array_equal(x["mask_positions"][b], r["masked_lm_positions"])
            np.testing.assert_array_equal(y["mlm"][b], r["masked_lm_ids"])
            np.testing.assert_array_equal(y["nsp"][b], r["next_sentence_labels"])
            assert ((sw["mlm"][b] > 0) == (r["masked_lm_weights"] > 0)).all()
        assert sw["mlm"].sum() == pytest.approx(4 * 6, rel=1e-5)


def test_records_need_a_masker_or_matching_nsp(files, dynamic, masker, tmp_path):
    with pytest.raises(ValueError, match="not masked"):
        pretraining_dataset(dynamic, BATCH, masker=None)
    out = tmp_path / "no_nsp"
    assert data.main(build_args(files["corpus"], files["vocab"], out, "--no-nsp")) == 0
    with pytest.raises(ValueError, match="--no-nsp"):
        pretraining_dataset(str(out), BATCH, masker)
    ((x, y, sw),) = batches(pretraining_dataset(str(out), BATCH, masker, next_sentence=False), 1)
    assert set(y) == set(sw) == {"mlm"}
    assert not x["segment_ids"].any()


def test_find_records_with_and_without_dataset_json(dynamic, tmp_path):
    files_, info = find_records(dynamic)
    assert len(files_) == 3 and info["num_instances"] == sum(info["shards"].values())
    assert find_records(os.path.join(dynamic, "part-0000[01]-*"))[1]["num_instances"] == sum(
        list(info["shards"].values())[:2]
    )
    # Several globs joined by commas: their union, each counted once.
    both = f"{dynamic}/part-00000-*,{dynamic}/part-0000[02]-*"
    picked, picked_info = find_records(both)
    assert [os.path.basename(f)[:10] for f in picked] == ["part-00000", "part-00002"]
    assert (
        picked_info["num_instances"]
        == info["shards"][os.path.basename(picked[0])] + info["shards"][os.path.basename(picked[1])]
    )
    with pytest.raises(FileNotFoundError, match="part-9"):
        find_records(f"{dynamic}/part-00000-*,{dynamic}/part-9*")
    # Records from elsewhere (no dataset.json) are inspected.
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in files_:
        shutil.copy(f, bare)
    _, seen = find_records(str(bare))
    assert (seen["num_instances"], seen["max_seq_length"], seen["masking"]) == (
        info["num_instances"],
        SEQ_LEN,
        "dynamic",
    )
    with pytest.raises(FileNotFoundError, match="no record files"):
        find_records(str(tmp_path / "nothing"))


def test_a_global_seed_of_0_works_and_resumes(dynamic, masker):
    """`--seed 0` sets TensorFlow's global seed to 0, where tf.data's seed
    logic used to fail on the per-epoch shuffle seed inside flat_map."""
    num = find_records(dynamic)[1]["num_instances"]
    tf.random.set_seed(0)
    try:
        fresh = batches(pretraining_dataset(dynamic, BATCH, masker, seed=4), 2 * num // BATCH + 1)
        k = num // BATCH  # straddles epochs 0 and 1
        (resumed,) = batches(pretraining_dataset(dynamic, BATCH, masker, seed=4, start_step=k), 1)
        assert_same_batch(resumed, fresh[k])
    finally:
        tf.random.set_seed(None)


# === model.data --inputs: the formats RoBERTa compares ===

PACKED = ("full-sentences", "doc-sentences")


@pytest.fixture(scope="module")
def word_corpus(tmp_path_factory):
    """30 short documents, each repeating its own word (so a token tells its document)."""
    d = tmp_path_factory.mktemp("words")
    return write_corpus(d / "c.txt", num_documents=30, sentences=(1, 6), document_words=True)


def content(record, tokenizer) -> list[int]:
    """The ids between [CLS] and the final [SEP]; checks the frame and the segment ids."""
    n = int(record["input_mask"].sum())
    ids = record["input_ids"][:n].tolist()
    assert ids[0] == tokenizer.cls_id and ids[-1] == tokenizer.sep_id
    assert not record["segment_ids"].any()
    return ids[1:-1]


def split_at(ids: list[int], separator: int) -> list[list[int]]:
    parts = [[]]
    for t in ids:
        if t == separator:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


def test_full_sentences_records_fill_the_length_across_documents(word_corpus, tokenizer, tmp_path):
    # A pool of about 60 tokens holds a few documents: the input being filled
    # at a pool's end must carry over, or every pool would end with a short one.
    out = tmp_path / "full"
    args = build_args(word_corpus, tokenizer.vocab_path, out, "--inputs", "full-sentences")
    assert data.main([*args, "--pool-tokens", "60"]) == 0
    info = json.loads((out / "dataset.json").read_text())
    assert (info["input_format"], info["next_sentence"], info["short_seq_prob"]) == (
        "full-sentences",
        False,
        0.0,
    )
    assert info["inputs"] == [word_corpus]
    period, sep = tokenizer.token_to_id["."], tokenizer.sep_id
    records = read_records(out)
    lengths, crossings, text_tokens = [], 0, 0
    for r in records:
        assert set(r) == {"input_ids", "input_mask", "segment_ids"}  # no NSP label
        ids = content(r, tokenizer)
        assert 0 < len(ids) <= SEQ_LEN - 2
        lengths.append(len(ids))
        parts = split_at(ids, sep)
        crossings += len(parts) - 1
        text_tokens += len(ids) - (len(parts) - 1)
        words = [set(p) - {period} for p in parts]
        # [SEP] exactly where one document ends and the next begins: one word a
        # part, whole sentences (each part ends with a period), neighbours differ.
        assert all(len(w) == 1 and p[0] != period and p[-1] == period for w, p in zip(words, parts))
        assert all(a != b for a, b in zip(words, words[1:]))
    assert crossings >= 10
    assert text_tokens == info["num_tokens"]  # no sentence here is cut: nothing lost
    # A sentence is at most 7 tokens (6 words and a period), with its [SEP] 8:
    # an input ends only when that did not fit, so all but the last hold >= 23.
    assert sorted(lengths)[1] >= SEQ_LEN - 2 - 8 + 1, sorted(lengths)[:5]


def test_full_sentences_pools_are_the_stream_packed_then_shuffled(word_corpus, tokenizer):
    config = InstanceConfig(SEQ_LEN, inputs="full-sentences")
    packer = SentencePacker(config, tokenizer.sep_id)
    documents = list(build.tokenized_documents([word_corpus], "auto", tokenizer))
    whole = [inst.first for doc in documents for inst in packer.add(doc)] + [
        inst.first for inst in packer.finish()
    ]
    streamed = [
        inst.first
        for inst in build.generate_instances(
            [word_corpus], tokenizer, config, seed=3, pool_tokens=60, dupe_factor=2
        )
    ]
    assert sorted(streamed) == sorted(whole * 2)  # the same inputs, twice each ...
    assert streamed[: len(whole)] != whole  # ... shuffled


def test_doc_sentences_records_never_cross_a_document(word_corpus, tokenizer, tmp_path):
    out = tmp_path / "doc"
    args = build_args(word_corpus, tokenizer.vocab_path, out, "--inputs", "doc-sentences")
    assert data.main(args) == 0
    info = json.loads((out / "dataset.json").read_text())
    assert (info["input_format"], info["next_sentence"]) == ("doc-sentences", False)
    period, sep = tokenizer.token_to_id["."], tokenizer.sep_id
    records = read_records(out)
    assert len(records) >= info["num_documents"] == 30
    for r in records:
        assert set(r) == {"input_ids", "input_mask", "segment_ids"}
        ids = content(r, tokenizer)
        assert sep not in ids and len(set(ids) - {period}) == 1
        assert ids[0] != period and ids[-1] == period


def test_segment_pairs_records_are_two_segments_of_one_document(word_corpus, tokenizer, tmp_path):
    """ELECTRA's format: [CLS] A [SEP] B [SEP] of one document's sentences, segment ids 0 then 1
    (B's [SEP] included), no next-sentence label; some A alone; short_seq_prob 0.05."""
    out = tmp_path / "segment-pairs"
    args = build_args(word_corpus, tokenizer.vocab_path, out, "--inputs", "segment-pairs")
    assert data.main(args) == 0
    info = json.loads((out / "dataset.json").read_text())
    assert (info["input_format"], info["next_sentence"], info["short_seq_prob"]) == (
        "segment-pairs",
        False,
        0.05,
    )
    period, sep = tokenizer.token_to_id["."], tokenizer.sep_id
    pairs = 0
    for r in read_records(out):
        assert set(r) == {"input_ids", "input_mask", "segment_ids"}  # no NSP label
        n = int(r["input_mask"].sum())
        ids, segments = r["input_ids"][:n].tolist(), r["segment_ids"][:n].tolist()
        assert ids[0] == tokenizer.cls_id and ids[-1] == sep and not any(r["segment_ids"][n:])
        parts = split_at(ids[1:-1], sep)
        assert len(parts) in (1, 2) and len({t for p in parts for t in p} - {period}) == 1
        a = len(parts[0]) + 2  # [CLS] A [SEP]
        assert segments == [0] * a + [1] * (n - a)
        pairs += len(parts) == 2
    assert 0 < pairs < len(read_records(out))


def test_segment_pairs_records_without_dataset_json_are_known_by_their_segments(
    word_corpus, tokenizer, tmp_path
):
    """Records of two segments and no next-sentence label, their dataset.json lost (or made by
    google-research/electra's own script), are still segment-pairs: SpanBERT refuses them."""
    from model import objectives
    from model.pretraining.records import find_records

    out = tmp_path / "pairs"
    args = build_args(word_corpus, tokenizer.vocab_path, out, "--inputs", "segment-pairs")
    assert data.main(args) == 0
    (out / "dataset.json").unlink()
    info = find_records(str(out))[1]
    assert info["input_format"] == "segment-pairs" and not info["next_sentence"]
    spanbert = objectives.get("spanbert")([], objectives.ObjectiveOptions(seq_len=SEQ_LEN))
    with pytest.raises(ValueError, match="records of segment-pairs inputs"):
        spanbert.check_records(str(out), info)
    single = tmp_path / "single"  # unlabelled single segments: as before, no format said
    args = build_args(word_corpus, tokenizer.vocab_path, single, "--inputs", "doc-sentences")
    assert data.main(args) == 0
    (single / "dataset.json").unlink()
    assert "input_format" not in find_records(str(single))[1]


@pytest.mark.parametrize("inputs", ["segments", *PACKED])
def test_static_masking_with_every_inputs_format(files, masker, inputs, tmp_path):
    dynamic, static = tmp_path / "dynamic", tmp_path / "static"
    assert data.main(build_args(files["corpus"], files["vocab"], dynamic, "--inputs", inputs)) == 0
    args = [
        "--inputs",
        inputs,
        "--masking",
        "static",
        "--dupe-factor",
        "2",
        "--max-predictions",
        "5",
    ]
    assert data.main(build_args(files["corpus"], files["vocab"], static, *args)) == 0
    unmasked = sorted(tuple(r["input_ids"]) for r in read_records(dynamic))
    restored, masks = [], set()
    for r in read_records(static):
        ids = r["input_ids"].copy()
        real = r["masked_lm_weights"] > 0
        ids[r["masked_lm_positions"][real]] = r["masked_lm_ids"][real]
        restored.append(tuple(ids))
        masks.add((tuple(ids), tuple(r["masked_lm_positions"][real])))
    if inputs in PACKED:
        # Packing has no randomness: every input twice, masked two ways.
        assert sorted(restored) == sorted(unmasked * 2)
        assert len(masks) > 0.9 * len(restored)
    else:
        # Segments are made again for each copy (short_seq_prob draws anew).
        assert 1.5 * len(unmasked) < len(restored) < 2.5 * len(unmasked)
    info = json.loads((static / "dataset.json").read_text())
    assert (info["input_format"], info["num_instances"]) == (inputs, len(restored))
    with pytest.raises(ValueError, match="without next-sentence labels"):
        pretraining_dataset(str(static), BATCH, None)
    ((x, y, sw),) = batches(pretraining_dataset(str(static), BATCH, None, next_sentence=False), 1)
    assert set(y) == {"mlm"} and not x["segment_ids"].any()


def test_no_nsp_is_inputs_segments(files, tmp_path):
    outs = {}
    for name, flags in {
        "no_nsp": ["--no-nsp"],
        "segments": ["--inputs", "segments"],
        "both": ["--no-nsp", "--inputs", "segments"],
    }.items():
        outs[name] = tmp_path / name
        assert data.main(build_args(files["corpus"], files["vocab"], outs[name], *flags)) == 0
    assert shard_bytes(outs["no_nsp"]) == shard_bytes(outs["segments"]) == shard_bytes(outs["both"])
    info = json.loads((outs["no_nsp"] / "dataset.json").read_text())
    assert (info["input_format"], info["next_sentence"], info["short_seq_prob"]) == (
        "segments",
        False,
        0.1,
    )
    # As before --inputs: one segment, the all-zero label kept (the same bytes).
    for r in read_records(outs["no_nsp"]):
        assert set(r) == {"input_ids", "input_mask", "segment_ids", "next_sentence_labels"}
        assert not r["segment_ids"].any() and r["next_sentence_labels"].tolist() == [0]


def test_default_inputs_are_sentence_pairs(files, dynamic, tmp_path):
    info = json.loads(open(os.path.join(dynamic, "dataset.json")).read())
    assert (info["input_format"], info["next_sentence"]) == ("sentence-pairs", True)
    explicit = tmp_path / "pairs"
    args = build_args(files["corpus"], files["vocab"], explicit, "--inputs", "sentence-pairs")
    assert data.main(args) == 0
    assert shard_bytes(explicit) == shard_bytes(dynamic)


@pytest.mark.parametrize("inputs", PACKED)
def test_packed_formats_are_deterministic(files, inputs, tmp_path):
    made = {}
    for name, seed in (("a", "1"), ("b", "1"), ("c", "2")):
        made[name] = tmp_path / name
        args = build_args(files["corpus"], files["vocab"], made[name], "--inputs", inputs)
        args[args.index("--seed") + 1] = seed
        assert data.main(args) == 0
    assert shard_bytes(made["a"]) == shard_bytes(made["b"]) != shard_bytes(made["c"])


@pytest.mark.parametrize(
    "flags, phrase",
    [
        (["--no-nsp", "--inputs", "full-sentences"], "--no-nsp means --inputs segments"),
        (["--no-nsp", "--inputs", "sentence-pairs"], "--no-nsp means --inputs segments"),
        (["--inputs", "full-sentences", "--short-seq-prob", "0.2"], "--short-seq-prob does not"),
        (["--inputs", "doc-sentences", "--short-seq-prob", "0.1"], "--short-seq-prob does not"),
        (["--inputs", "sentences"], "invalid choice: 'sentences'"),
    ],
)
def test_contradictory_inputs_flags_are_refused(files, flags, phrase, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        data.main(build_args(files["corpus"], files["vocab"], tmp_path / "out", *flags))
    assert exit_.value.code == 2
    assert phrase in capsys.readouterr().err
    assert leftovers(tmp_path, "out") == []


# === a tokenized corpus (--write-ids): tokenise once, make records without TensorFlow ===


@pytest.fixture(scope="module")
def ids_file(files, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ids") / "corpus.ids.npz.xz")
    args = ["--write-ids", "--input", str(files["corpus"]), "--vocab", str(files["vocab"])]
    assert data.main([*args, "--output", out]) == 0
    return out


@pytest.mark.parametrize("inputs", ["sentence-pairs", "segments", "segment-pairs", *PACKED])
def test_records_from_ids_are_the_records_from_text(files, ids_file, inputs, tmp_path):
    from_text, from_ids = tmp_path / "text", tmp_path / "ids"
    flags = ("--inputs", inputs, "--masking", "static", "--dupe-factor", "2")
    assert data.main(build_args(files["corpus"], files["vocab"], from_text, *flags)) == 0
    assert data.main(build_args(ids_file, files["vocab"], from_ids, *flags)) == 0
    assert shard_bytes(from_ids) == shard_bytes(from_text)
    text_info, ids_info = (json.load(open(d / "dataset.json")) for d in (from_text, from_ids))
    assert ids_info.pop("inputs") == [ids_file]
    text_info.pop("inputs")
    assert ids_info == text_info  # documents, tokens, vocabulary, casing


def test_a_tokenized_corpus_holds_the_documents_sentences_as_ids(files, tokenizer, ids_file):
    from model.pretraining import tokenized
    from model.text.wordpiece import vocabulary_sha256

    documents = list(build.tokenized_documents([str(files["corpus"])], "auto", tokenizer))
    sha = vocabulary_sha256(str(files["vocab"]))
    again = list(tokenized.read_documents(ids_file, sha, lowercase=True))
    assert [[s.tolist() for s in d] for d in again] == [[s.tolist() for s in d] for d in documents]
    assert os.stat(ids_file).st_mode & 0o777 == 0o644


def test_a_tokenized_corpus_is_refused_with_another_vocabulary_or_casing(
    files, ids_file, tmp_path, capsys
):
    other = write_vocab(tmp_path / "other.txt", extra=3)
    assert data.main(build_args(ids_file, other, tmp_path / "a")) == 1
    assert f"{ids_file}: tokenised with another vocabulary" in capsys.readouterr().err
    assert data.main(build_args(ids_file, files["vocab"], tmp_path / "b", "--cased")) == 1
    assert "tokenised with the other casing; leave out --cased" in capsys.readouterr().err
    broken = tmp_path / "broken.ids.npz.xz"
    broken.write_bytes(b"not xz")
    assert data.main(build_args(broken, files["vocab"], tmp_path / "c")) == 1
    assert f"{broken}: not a tokenized corpus" in capsys.readouterr().err
    assert leftovers(tmp_path, "a") == leftovers(tmp_path, "b") == leftovers(tmp_path, "c") == []


def test_write_ids_needs_the_suffix_and_a_new_file(files, ids_file, tmp_path, capsys):
    args = ["--write-ids", "--input", str(files["corpus"]), "--vocab", str(files["vocab"])]
    with pytest.raises(SystemExit):
        data.main([*args, "--output", str(tmp_path / "corpus.npz")])
    assert "--write-ids writes one file named NAME.ids.npz.xz" in capsys.readouterr().err
    assert data.main([*args, "--output", ids_file]) == 1
    assert "output exists" in capsys.readouterr().err


@pytest.mark.parametrize("inputs", ["sentence-pairs", "full-sentences"])
def test_any_number_of_workers_gives_the_same_bytes(files, ids_file, inputs, tmp_path):
    """Several pools (--pool-tokens 300), made here and by two spawned processes."""
    made = {}
    for workers in ("1", "2"):
        made[workers] = tmp_path / workers
        flags = ("--inputs", inputs, "--pool-tokens", "300", "--workers", workers)
        flags += ("--masking", "static", "--dupe-factor", "2")
        assert data.main(build_args(ids_file, files["vocab"], made[workers], *flags)) == 0
    assert shard_bytes(made["1"]) == shard_bytes(made["2"])
    info = json.load(open(made["2"] / "dataset.json"))
    assert info["num_instances"] > 100


def test_a_casing_the_vocabulary_contradicts_is_warned(tmp_path, capsys):
    """--cased on bert-base-uncased's vocabulary (every capitalised word an [UNK]), or a
    cased vocabulary without it (its capitalised WordPieces never used): one warning line."""
    from model.text.wordpiece import looks_cased

    uncased = os.path.join(os.path.dirname(__file__), "fixtures", "bert-base-uncased-vocab.txt")
    cased = tmp_path / "cased.txt"
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "The", "Paris", "paris", "##is"]
    cased.write_text("\n".join(words) + "\n")
    assert not looks_cased(open(uncased, encoding="utf-8").read().split("\n"))  # 'ℝ' aside
    assert looks_cased(words)
    for vocab, flag, said in (
        (uncased, True, "has no upper-case WordPieces (uncased): --cased turns"),
        (str(cased), False, "is cased: without --cased the text is lowercased"),
    ):
        data.warn_of_casing(vocab, flag)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err and vocab in err
        data.warn_of_casing(vocab, not flag)
        assert capsys.readouterr().err == ""
