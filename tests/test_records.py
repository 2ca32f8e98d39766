"""model.pretraining.records: TFRecord framing, CRC-32C, tf.train.Example decoding and encoding
without TensorFlow.

    PYTHONPATH=. python -m pytest tests/test_records.py

Checked against TensorFlow itself: files written by `tf.io.TFRecordWriter`
and by `python -m model.data`, examples decoded by `tf.train.Example`; what
`RecordWriter` and `serialize_example` write is byte for byte TensorFlow's.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from model.pretraining.records import (
    RecordWriter,
    count_records,
    crc32c,
    masked_crc32c,
    parse_example,
    read_records,
    serialize_example,
)
from tests.helpers import make_records


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return make_records(tmp_path_factory.mktemp("data"), num_shards=3)


def test_crc32c_known_values():
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert crc32c(b"") == 0
    assert crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4: 32 bytes of zeros
    assert crc32c(b"\xff" * 32) == 0x62A8AB43  # RFC 3720 B.4: 32 bytes of 0xff
    assert masked_crc32c(b"") == 0xA282EAD8


def test_reads_what_tensorflow_writes_at_every_length(tmp_path):
    path = str(tmp_path / "raw.tfrecord")
    rng = np.random.default_rng(0)
    # lengths around the 4-byte register fold and the 1024-byte numpy chunk
    payloads = [
        rng.integers(0, 256, n).astype(np.uint8).tobytes()
        for n in (0, 1, 3, 4, 5, 1023, 1024, 1025, 2051, 5000)
    ]
    with tf.io.TFRecordWriter(path) as writer:
        for p in payloads:
            writer.write(p)
    assert [r for _, r in read_records(path)] == payloads
    assert count_records(path) == len(payloads)


def test_writes_what_tensorflow_writes(tmp_path):
    rng = np.random.default_rng(0)
    payloads = [rng.integers(0, 256, n).astype(np.uint8).tobytes() for n in (0, 1, 5, 1025)]
    ours, theirs = str(tmp_path / "ours.tfrecord"), str(tmp_path / "theirs.tfrecord")
    with RecordWriter(ours) as writer:
        for p in payloads:
            writer.write(p)
    with tf.io.TFRecordWriter(theirs) as writer:
        for p in payloads:
            writer.write(p)
    assert open(ours, "rb").read() == open(theirs, "rb").read()


def _tf_example(features: dict) -> bytes:
    feature = {}
    for name, value in features.items():
        if value.dtype.kind == "f":
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=value.tolist()))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=value.tolist()))
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)


@pytest.mark.parametrize("seed", range(20))
def test_examples_serialize_like_tensorflow(seed):
    """Every varint length (1 to 10 bytes: negative values take 10), float and empty lists,
    and names that are prefixes of each other (protobuf sorts "ab" before "a")."""
    rng = np.random.default_rng(seed)
    edges = [0, 127, 128, 16383, 16384, 2**31, 2**63 - 1, -1, -(2**63)]
    features = {
        "input_ids": rng.integers(0, 30522, int(rng.integers(0, 130))),
        "a": rng.choice(edges, int(rng.integers(1, 9))),
        "ab": rng.integers(-(2**62), 2**62, 3),
        "masked_lm_weights": rng.random(int(rng.integers(0, 21))).astype(np.float32),
        "empty": np.zeros(0, np.int64),
    }
    assert serialize_example(features) == _tf_example(features)
    assert serialize_example({"only_floats": np.array([1.5], np.float32)}) == _tf_example(
        {"only_floats": np.array([1.5], np.float32)}
    )


def test_examples_decode_like_tensorflow(records):
    files = sorted(f for f in os.listdir(records) if f.endswith(".tfrecord"))
    n = 0
    for name in files:
        path = os.path.join(records, name)
        theirs = [r.numpy() for r in tf.data.TFRecordDataset(path)]
        ours = list(read_records(path))
        assert [r for _, r in ours] == theirs
        for _, record in ours:
            expected = tf.train.Example.FromString(record).features.feature
            decoded = parse_example(record)
            assert set(decoded) == set(expected)
            for key, value in decoded.items():
                assert value.dtype == np.int64
                np.testing.assert_array_equal(value, np.array(expected[key].int64_list.value))
            n += 1
    assert n > 0


def test_every_feature_kind_and_encoding():
    example = tf.train.Example(
        features=tf.train.Features(
            feature={
                "ints": tf.train.Feature(
                    int64_list=tf.train.Int64List(
                        value=[0, 1, 127, 128, 300, -1, -5, 2**62, -(2**63)]
                    )
                ),
                "floats": tf.train.Feature(
                    float_list=tf.train.FloatList(value=[1.5, -2.25, 1e-30])
                ),
                "bytes": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"x", b"", b"yz"])),
                "empty": tf.train.Feature(int64_list=tf.train.Int64List()),
            }
        )
    ).SerializeToString()
    out = parse_example(example)
    np.testing.assert_array_equal(out["ints"], [0, 1, 127, 128, 300, -1, -5, 2**62, -(2**63)])
    np.testing.assert_array_equal(out["floats"], np.float32([1.5, -2.25, 1e-30]))
    assert out["bytes"] == [b"x", b"", b"yz"]
    assert out["empty"].shape == (0,)
    # Unpacked repeated fields (proto2 writers): Int64List field 1 as single
    # varints (wire type 0), FloatList as fixed32s (wire type 5).
    unpacked_ints = bytes([0x08, 0x05, 0x08, 0xAC, 0x02])  # 5, 300
    unpacked_floats = bytes([0x0D]) + np.float32(2.5).tobytes()
    feature_i = bytes([0x1A, len(unpacked_ints)]) + unpacked_ints  # Feature.int64_list = 3
    feature_f = bytes([0x12, len(unpacked_floats)]) + unpacked_floats  # Feature.float_list = 2

    def entry(key, feature):
        body = bytes([0x0A, len(key)]) + key + bytes([0x12, len(feature)]) + feature
        return bytes([0x0A, len(body)]) + body

    features = entry(b"i", feature_i) + entry(b"f", feature_f)
    out = parse_example(bytes([0x0A, len(features)]) + features)
    np.testing.assert_array_equal(out["i"], [5, 300])
    np.testing.assert_array_equal(out["f"], np.float32([2.5]))


def test_corrupt_and_truncated_files_name_the_file_and_offset(records, tmp_path):
    source = os.path.join(
        records, sorted(f for f in os.listdir(records) if f.endswith(".tfrecord"))[0]
    )
    data = bytearray(open(source, "rb").read())
    offsets = [o for o, _ in read_records(source)]
    assert len(offsets) >= 2
    bad = bytearray(data)
    bad[offsets[1] + 12 + 5] ^= 0xFF  # a byte inside the second record's data
    path = tmp_path / "corrupt.tfrecord"
    path.write_bytes(bytes(bad))
    with pytest.raises(
        ValueError,
        match=rf"corrupt\.tfrecord: corrupt record at byte offset "
        rf"{offsets[1]} \(data checksum",
    ):
        list(read_records(str(path)))
    path.write_bytes(bytes(data[:-3]))
    last = offsets[-1]
    with pytest.raises(
        ValueError,
        match=rf"corrupt\.tfrecord: truncated record at byte offset "
        rf"{last}",
    ):
        list(read_records(str(path)))
    bad = bytearray(data)
    bad[offsets[1] + 2] ^= 0xFF  # the second record's length
    path.write_bytes(bytes(bad))
    with pytest.raises(ValueError, match=rf"byte offset {offsets[1]} \(length checksum"):
        list(read_records(str(path)))
    path.write_bytes(b"not a tfrecord file at all")  # text given as records: said so
    with pytest.raises(ValueError, match=r"corrupt\.tfrecord: not a TFRecord file \(no record "):
        list(read_records(str(path)))


def test_find_records_reads_again_once_the_records_change(tmp_path):
    """A command reads its records' description at start and again to train (remembered,
    where records without a dataset.json are counted by reading them whole); a file written
    or replaced between is read again, and a caller's change to the description stays its own."""
    from model.pretraining.records import find_records

    path = str(tmp_path / "part-00000.tfrecord")

    def write(n: int) -> None:
        with RecordWriter(path) as writer:
            for i in range(n):
                writer.write(serialize_example({"input_ids": np.arange(8) + i}))

    write(3)
    files, info = find_records(str(tmp_path))
    assert files == [path] and info["num_instances"] == 3 and info["max_seq_length"] == 8
    info["num_instances"] = 99
    assert find_records(str(tmp_path))[1]["num_instances"] == 3
    write(5)
    os.utime(path, ns=(1, 1))  # a different stamp, whatever the clock's resolution
    assert find_records(str(tmp_path))[1]["num_instances"] == 5
