"""Reads and writes `.safetensors` files with numpy alone (no new dependency).

The format is small enough to implement in full:

    8 bytes      little-endian uint64 N, the header length
    N bytes      JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
                       "__metadata__": {str: str}}  (optional)
    the rest     raw little-endian tensor bytes; offsets are relative to here

Unlike `pytorch_model.bin` (a pickle, which runs code while loading), nothing
here can execute anything. Every offset is checked against the file size, so a
truncated download stops with the file and tensor named instead of loading
garbage.

    python -m model.checkpoints.safetensors_io FILE.safetensors     # lists names, dtypes, shapes
"""

from __future__ import annotations

import json
import os
import struct
import sys

import numpy as np

from model.io.files import atomic_open

_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
    # numpy has no bfloat16: read as uint16 and widened to float32 below.
    "BF16": np.dtype("<u2"),
}
_NAMES = {v: k for k, v in _DTYPES.items() if k != "BF16"}
_MAX_HEADER = 100 * 1024 * 1024  # the reference implementation's own limit


def read_header(path: str) -> tuple[dict, int]:
    """(header without `__metadata__`, byte offset where the data starts)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise ValueError(f"{path}: truncated safetensors file ({size} bytes, no header)")
        (n,) = struct.unpack("<Q", raw)
        if n > _MAX_HEADER or 8 + n > size:
            raise ValueError(
                f"{path}: truncated or not a safetensors file (header of {n} bytes, "
                f"file of {size} bytes)"
            )
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: corrupt safetensors header ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: corrupt safetensors header (not a JSON object)")
    header.pop("__metadata__", None)
    start = 8 + n
    for name, entry in header.items():
        try:
            dtype, shape, (begin, end) = (
                _DTYPES[entry["dtype"]],
                entry["shape"],
                entry["data_offsets"],
            )
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"{path}: tensor {name!r} has a malformed or unsupported header entry {entry!r}"
            ) from None
        if end - begin != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize or begin > end:
            raise ValueError(
                f"{path}: tensor {name!r}: data_offsets {begin}..{end} do not "
                f"fit shape {shape} of {entry['dtype']}"
            )
        if start + end > size:
            raise ValueError(
                f"{path}: truncated file: tensor {name!r} ends at byte "
                f"{start + end} but the file has {size} bytes"
            )
    return header, start


def read(path: str) -> dict[str, np.ndarray]:
    """All tensors of a file, by name, as numpy arrays (bfloat16 widened to float32)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: safetensors file not found")
    header, start = read_header(path)
    tensors = {}
    with open(path, "rb") as f:
        for name, entry in header.items():
            begin, end = entry["data_offsets"]
            f.seek(start + begin)
            buf = f.read(end - begin)
            array = np.frombuffer(buf, dtype=_DTYPES[entry["dtype"]]).reshape(entry["shape"])
            if entry["dtype"] == "BF16":
                array = (array.astype(np.uint32) << 16).view(np.float32)
            tensors[name] = array.astype(array.dtype.newbyteorder("="), copy=True)
    return tensors


def write(path: str, tensors: dict[str, np.ndarray], metadata: dict | None = None) -> None:
    """Writes `tensors` (name -> numpy array) atomically, in name order."""
    header, offset, arrays = {}, 0, []
    for name in sorted(tensors):
        array = np.ascontiguousarray(tensors[name])
        dtype = array.dtype.newbyteorder("<") if array.dtype.itemsize > 1 else array.dtype
        if dtype not in _NAMES:
            raise TypeError(f"{path}: tensor {name!r} has unsupported dtype {array.dtype}")
        data = array.astype(dtype, copy=False).tobytes()
        header[name] = {
            "dtype": _NAMES[dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        arrays.append(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # the reference pads to 8 so the data is aligned
    with atomic_open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for data in arrays:
            f.write(data)


if __name__ == "__main__":
    header, _ = read_header(sys.argv[1])
    for name in sorted(header):
        print(name, header[name]["dtype"], header[name]["shape"])
