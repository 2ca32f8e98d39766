"""TFRecord files of `tf.train.Example`s, read and written without TensorFlow (numpy only).

    from model.pretraining.records import read_records, parse_example
    for offset, record in read_records("data/wiki128/part-00000-of-00008.tfrecord"):
        features = parse_example(record)  # {"input_ids": int64 array, ...}

    with RecordWriter("out.tfrecord") as w:
        w.write(serialize_example({"input_ids": np.array([101, 7592, 102])}))

The JAX backend trains on machines that have no TensorFlow (the GPU
machines carry only small wheels), so the pre-training input pipeline reads
the shards written by `model.data` itself. A TFRecord is

    uint64 length | uint32 masked crc32c(length) | data | uint32 masked crc32c(data)

(little-endian), and both checksums are verified: a truncated or corrupted
file raises `ValueError` naming the file and the byte offset of the record.
`parse_example` decodes the protobuf wire format of `tf.train.Example`
(`Features` = map<string, Feature>; `Feature` = one of bytes_list,
float_list, int64_list; packed and unpacked repeated fields) by hand, so
neither TensorFlow nor the protobuf package is needed. `serialize_example`
writes the bytes TensorFlow's deterministic serialization writes (map entries
in protobuf's order; tests/test_records.py holds them equal), so `model.data`
writes the same records with or without TensorFlow.

`find_records(pattern)` resolves a `--data` (a glob, a folder, several joined by commas) to
its files and their `dataset.json` (what `model.data` wrote: sequence length, casing,
vocabulary, masking, counts), so a command checks its flags against the records before any
framework loads.
"""

from __future__ import annotations

import copy
import glob
import json
import os
import struct

import numpy as np

from model.io.memo import Memo, stamp

# === CRC-32C (Castagnoli), as TFRecord checksums use it ===

_POLY = 0x82F63B78  # reflected Castagnoli polynomial
_CHUNK = 1024  # bytes folded per numpy step; the position table is 256 x _CHUNK uint32 (1 MiB)


def _byte_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1).astype(np.uint32)
    return table


_TABLE = _byte_table()
_POSITION = None  # (_CHUNK, 256): [k, b] = CRC register after byte b then k zero bytes


def _position_table() -> np.ndarray:
    global _POSITION
    if _POSITION is None:
        rows = np.empty((_CHUNK, 256), dtype=np.uint32)
        rows[0] = _TABLE
        for k in range(1, _CHUNK):
            rows[k] = _TABLE[rows[k - 1] & 0xFF] ^ (rows[k - 1] >> 8)
        _POSITION = rows
    return _POSITION


def crc32c(data: bytes) -> int:
    """CRC-32C of `data` (crc32c(b"123456789") == 0xE3069283).

    The CRC register is linear in the bytes: starting from 0, the register
    after n bytes is the XOR over i of [byte i followed by n-1-i zero bytes],
    a table lookup, so a chunk costs one numpy gather and one XOR-reduce
    instead of a Python step per byte. The initial register (0xFFFFFFFF) and
    the register carried from one chunk to the next act exactly like XORing
    it into the chunk's first four bytes.
    """
    buf = np.frombuffer(bytes(data), dtype=np.uint8)
    reg = 0xFFFFFFFF
    if len(buf) < 4:  # too short to fold the register into; byte by byte
        for b in buf.tolist():
            reg = int(_TABLE[(reg ^ b) & 0xFF]) ^ (reg >> 8)
        return reg ^ 0xFFFFFFFF
    position = _position_table()
    start = 0
    while start < len(buf):
        chunk = buf[start : start + _CHUNK].copy()
        if len(chunk) < 4:  # a short tail: step the register over it
            for b in chunk.tolist():
                reg = int(_TABLE[(reg ^ b) & 0xFF]) ^ (reg >> 8)
            break
        chunk[:4] ^= np.frombuffer(struct.pack("<I", reg), dtype=np.uint8)
        n = len(chunk)
        reg = int(np.bitwise_xor.reduce(position[np.arange(n - 1, -1, -1), chunk]))
        start += n
    return reg ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The checksum TFRecord stores: crc32c rotated right by 15 plus a constant."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


# === TFRecord framing ===


def read_records(path: str, check_crc: bool = True):
    """Yields `(offset, record bytes)` of every record of the TFRecord file `path`.

    Raises ValueError naming `path` and the record's byte offset when a
    record is truncated or a checksum does not match.
    """
    with open(path, "rb") as f:
        offset = 0
        while True:
            header = f.read(12)
            if not header:
                return
            if len(header) < 12:
                raise ValueError(f"{path}: truncated record header at byte offset {offset}")
            length, length_crc = struct.unpack("<QI", header)
            if check_crc and masked_crc32c(header[:8]) != length_crc:
                if offset == 0:
                    raise ValueError(
                        f"{path}: not a TFRecord file (no record header at its start); "
                        f"pre-training reads the records python -m model.data makes from text"
                    )
                raise ValueError(
                    f"{path}: corrupt record at byte offset {offset} "
                    f"(length checksum mismatch); not a TFRecord file?"
                )
            body = f.read(length + 4)
            if len(body) < length + 4:
                raise ValueError(
                    f"{path}: truncated record at byte offset {offset} "
                    f"({len(body)} of {length + 4} bytes)"
                )
            data = body[:length]
            if check_crc and masked_crc32c(data) != struct.unpack("<I", body[length:])[0]:
                raise ValueError(
                    f"{path}: corrupt record at byte offset {offset} (data checksum mismatch)"
                )
            yield offset, data
            offset += 12 + length + 4


def frame(data: bytes) -> bytes:
    """`data` as one TFRecord: its length, the length's checksum, the data, its checksum."""
    header = struct.pack("<Q", len(data))
    return b"".join(
        (
            header,
            struct.pack("<I", masked_crc32c(header)),
            data,
            struct.pack("<I", masked_crc32c(data)),
        )
    )


class RecordWriter:
    """Writes records to the TFRecord file `path` (the framing `read_records` reads)."""

    def __init__(self, path: str):
        self.file = open(path, "wb")

    def write(self, data: bytes) -> None:
        self.file.write(frame(data))

    def write_framed(self, framed: bytes) -> None:
        """A record already framed by `frame` (made in another process, say)."""
        self.file.write(framed)

    def close(self) -> None:
        self.file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def count_records(path: str) -> int:
    """Records in `path`, checksums verified."""
    return sum(1 for _ in read_records(path))


# === tf.train.Example wire format ===


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint longer than 10 bytes")


def _fields(buf: bytes):
    """Yields (field number, wire type, value) of a message; LEN values as bytes."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire} (field {number})")
        if pos > len(buf):
            raise ValueError(f"truncated field {number}")
        yield number, wire, value


def _packed_varints(buf: bytes) -> np.ndarray:
    """Packed varints as int64 (two's complement, as int64 fields are), vectorised."""
    b = np.frombuffer(buf, dtype=np.uint8)
    if len(b) == 0:
        return np.zeros(0, dtype=np.int64)
    if b[-1] >= 0x80:
        raise ValueError("truncated packed varint")
    last = b < 0x80
    starts = np.concatenate([[0], np.flatnonzero(last)[:-1] + 1])
    value_of_byte = np.concatenate([[0], np.cumsum(last)[:-1]])
    k = np.arange(len(b)) - starts[value_of_byte]  # byte index within its varint
    if k.max() > 9:
        raise ValueError("varint longer than 10 bytes")
    parts = (b & 0x7F).astype(np.uint64) << (np.uint64(7) * k.astype(np.uint64))
    return np.add.reduceat(parts, starts).view(np.int64)


def _to_int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _feature(buf: bytes):
    """A `Feature` message: bytes_list (1), float_list (2) or int64_list (3)."""
    for number, _, value in _fields(buf):
        if number == 1:  # BytesList { repeated bytes value = 1; }
            return [v for n, w, v in _fields(value) if n == 1 and w == 2]
        if number == 2:  # FloatList { repeated float value = 1 [packed]; }
            out = []
            for n, w, v in _fields(value):
                if n == 1 and w in (2, 5):  # packed run or one fixed32
                    out.append(np.frombuffer(v, dtype="<f4"))
            return (np.concatenate(out) if out else np.zeros(0, "<f4")).astype(np.float32)
        if number == 3:  # Int64List { repeated int64 value = 1 [packed]; }
            out = []
            for n, w, v in _fields(value):
                if n == 1 and w == 2:
                    out.append(_packed_varints(v))
                elif n == 1 and w == 0:
                    out.append(np.array([_to_int64(v)], dtype=np.int64))
            return np.concatenate(out) if out else np.zeros(0, np.int64)
    return None  # an empty Feature (no kind set)


def _encode_varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varints of int64 `values` (a negative one as its 64-bit two's complement, 10 bytes),
    vectorised: (the bytes of all, the byte count of each). A value's bytes are its 7-bit
    groups up to its highest non-zero one, all but the last with the continuation bit."""
    v = np.asarray(values, dtype=np.int64).view(np.uint64)
    groups = (v[:, None] >> _SHIFTS) & np.uint64(0x7F)  # (n, 10)
    sizes = 1 + (groups > 0).cumsum(axis=1).argmax(axis=1)
    groups[_GROUP < sizes[:, None] - 1] |= np.uint64(0x80)
    return groups.astype(np.uint8)[_GROUP < sizes[:, None]], sizes


_SHIFTS = np.uint64(7) * np.arange(10, dtype=np.uint64)
_GROUP = np.arange(10)[None, :]


def _varint_bytes(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _varint_bytes(number << 3 | 2) + _varint_bytes(len(payload)) + payload


def serialize_example(features: dict) -> bytes:
    """A `tf.train.Example` of `features` ({name: 1-D array}; float arrays as a FloatList,
    integer ones as an Int64List), byte for byte what TensorFlow's
    `SerializeToString(deterministic=True)` gives."""
    # protobuf's (upb's) deterministic map order: byte order, a name before its own prefix
    names = sorted(features, key=lambda n: n.encode("utf-8") + b"\xff")
    values = [np.asarray(features[n]).reshape(-1) for n in names]
    # every integer value's varint at once, then each feature's slice of them
    ints = [v for v in values if v.dtype.kind != "f"]
    encoded, sizes = _encode_varints(np.concatenate(ints) if ints else np.zeros(0, np.int64))
    ends = np.cumsum(sizes)
    entries, value_at = [], 0
    for name, value in zip(names, values):
        if value.dtype.kind == "f":  # FloatList { repeated float value = 1 [packed] }
            kind, packed = 2, value.astype("<f4").tobytes()
        else:  # Int64List { repeated int64 value = 1 [packed] }
            start = int(ends[value_at - 1]) if value_at else 0
            value_at += len(value)
            kind, packed = 3, encoded[start : int(ends[value_at - 1]) if value_at else 0].tobytes()
        listed = _length_delimited(1, packed) if len(value) else b""
        entry = _length_delimited(1, name.encode("utf-8"))
        entry += _length_delimited(2, _length_delimited(kind, listed))
        entries.append(_length_delimited(1, entry))
    return _length_delimited(1, b"".join(entries))


def parse_example(record: bytes) -> dict:
    """`{name: value}` of a serialized `tf.train.Example`: int64 features as
    int64 arrays, float features as float32 arrays, bytes features as lists
    of bytes. Raises ValueError for a malformed message."""
    features = {}
    for number, wire, value in _fields(record):
        if number != 1 or wire != 2:  # Example { Features features = 1; }
            continue
        for n, w, entry in _fields(value):  # Features { map<string, Feature> feature = 1; }
            if n != 1 or w != 2:
                continue
            name, feature = b"", b""
            for en, ew, ev in _fields(entry):  # map entry { key = 1; value = 2; }
                if en == 1 and ew == 2:
                    name = ev
                elif en == 2 and ew == 2:
                    feature = ev
            features[name.decode("utf-8")] = _feature(feature)
    return features


def parse_record(path: str, offset: int, record: bytes) -> dict:
    """The features of one record; a malformed one is named by file and byte offset."""
    try:
        return parse_example(record)
    except ValueError as e:
        raise ValueError(
            f"{path}: malformed tf.train.Example at byte offset {offset}: {e}"
        ) from None


def check_features(ex: dict, want: dict, path: str, offset: int) -> dict:
    """`ex` if it has each feature of `want` (name: length), else a ValueError naming
    the file, the record's byte offset and the feature."""
    for name, length in want.items():
        value = ex.get(name)
        if value is None or len(value) != length:
            raise ValueError(
                f"{path}: record at byte offset {offset}: feature {name!r} "
                f"should have {length} values, has {'none' if value is None else len(value)}"
            )
    return ex


def read_columns(path: str, want: dict) -> dict:
    """Every record of the file `path` as columns, {name: (records, length) array} for each
    feature of `want` (name: length; int32, float32 for float features); a malformed record
    is named by file, byte offset and feature. Light (numpy only), so that a pool of
    processes reads a directory's shards side by side."""
    columns = {name: [] for name in want}
    for offset, record in read_records(path):
        ex = check_features(parse_record(path, offset, record), want, path, offset)
        for name in want:
            columns[name].append(ex[name])
    out = {}
    for name, rows in columns.items():
        values = np.asarray(rows).reshape(len(rows), want[name])
        out[name] = values.astype(np.float32 if values.dtype.kind == "f" else np.int32)
    return out


def record_files(pattern: str) -> list[str]:
    """The record files a `--data` pattern names, sorted: a glob, a directory (its
    *.tfrecord), or several of them joined by commas; FileNotFoundError for a part that
    matches none. Light (no TensorFlow, no Keras), so a command checks it first."""
    files = set()
    for part in pattern.split(","):
        if os.path.isdir(part):
            part = os.path.join(part, "*.tfrecord")
        found = glob.glob(part)
        if not found:
            raise FileNotFoundError(f"{part}: no record files match")
        files.update(found)
    return sorted(files)


# === A --data of record files and their dataset.json ===

INFO = "dataset.json"

# What the folders of one --data must agree on to be read as one set of records.
SAME_ACROSS_FOLDERS = (
    "max_seq_length", "lowercase", "vocab_sha256", "masking", "input_format", "next_sentence",
)  # fmt: skip


def find_records(pattern: str) -> tuple[list[str], dict]:
    """The record files matched by `pattern` (a glob, a directory, or several of them joined
    by commas: a subset of one directory's shards, or several directories) and their
    dataset.json: each folder's own counts, summed; folders that differ in what
    `SAME_ACROSS_FOLDERS` names are refused, naming both. Remembered while the files and
    dataset.json are unchanged: a command checks them at start and reads them again to train
    (records without a dataset.json are read whole to be counted)."""
    files = record_files(pattern)
    folders = sorted({os.path.dirname(p) for p in files})
    stamps = [stamp(p) for p in files + [os.path.join(f, INFO) for f in folders]]
    found, info = _FOUND.get((pattern, tuple(stamps)), _find, files)
    return list(found), copy.deepcopy(info)


_FOUND = Memo(4)  # a --data and its held-out records, and the odd other


def _find(files: list[str]) -> tuple[list[str], dict]:
    """`find_records` of `files`, read."""
    by_folder: dict[str, list[str]] = {}
    for path in files:
        by_folder.setdefault(os.path.dirname(path), []).append(path)
    (first, info), *others = [(d, _folder_info(d, paths)) for d, paths in by_folder.items()]
    for folder, other in others:
        # Static masks' slots too: every folder is parsed with the first one's.
        differs = made_otherwise(info, other, (*SAME_ACROSS_FOLDERS, "max_predictions"))
        if differs:
            key, mine, theirs = differs
            raise ValueError(
                f"{folder}: records with {key} {theirs!r}, unlike those of {first} "
                f"({mine!r}); one --data takes records made alike"
            )
        info["num_instances"] += other["num_instances"]
    return files, info


def made_otherwise(info: dict, other: dict, keys) -> tuple | None:
    """(key, `info`'s value, `other`'s) of the first of `keys` two records' dataset.json
    state differently ("max_predictions": static masks' slots), or None: alike where both
    say."""
    for key in keys:
        mine, theirs = _stated(info, key), _stated(other, key)
        if mine is not None and theirs is not None and mine != theirs:
            return key, mine, theirs
    return None


def _stated(info: dict, key: str):
    if key == "max_predictions":  # static masks' slots
        return (info.get("masking_config") or {}).get(key)
    return info.get(key)


def _folder_info(folder: str, files: list[str]) -> dict:
    """dataset.json of `folder`, with `num_instances` those of `files`."""
    info_path = os.path.join(folder, INFO)
    info = {}
    if os.path.isfile(info_path):
        with open(info_path, encoding="utf-8") as f:
            info = json.load(f)
    shards = info.get("shards", {})
    if all(os.path.basename(p) in shards for p in files):
        info["num_instances"] = sum(shards[os.path.basename(p)] for p in files)
    else:  # records from elsewhere: look at them once
        info.update(_inspect(files))
    return info


def _second_segments(path: str, look_at: int = 64) -> bool:
    """Whether any of the first `look_at` records of `path` has a segment id 1: records of two
    segments without next-sentence labels (some of them are one segment alone)."""
    for i, (_, record) in enumerate(read_records(path)):
        if i == look_at:
            return False
        if any(parse_example(record).get("segment_ids", ())):
            return True
    return False


def _inspect(files: list[str]) -> dict:
    count = sum(count_records(path) for path in files)  # ValueError names a corrupt file
    first_record = next((r for _, r in read_records(files[0])), None)
    feats = parse_example(first_record) if first_record is not None else {}
    if "input_ids" not in feats:
        raise ValueError(f"{files[0]}: not a pre-training record (no 'input_ids' feature)")
    static = "masked_lm_positions" in feats
    info = {
        "num_instances": count,
        "max_seq_length": len(feats["input_ids"]),
        "masking": "static" if static else "dynamic",
        "next_sentence": "next_sentence_labels" in feats,
    }
    if not info["next_sentence"] and _second_segments(files[0]):
        info["input_format"] = "segment-pairs"  # ELECTRA's (google-research/electra's too)
    if static:
        info["masking_config"] = {"max_predictions": len(feats["masked_lm_positions"])}
    return info
