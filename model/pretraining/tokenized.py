"""A corpus as WordPiece ids: tokenised once, made into records anywhere without TensorFlow.

    python -m model.data --write-ids --input 'wiki/*.gz' --vocab vocab.txt --output wiki.ids.npz.xz
    python -m model.data --input wiki.ids.npz.xz --vocab vocab.txt --output data/wiki128

The first command tokenises (tensorflow-text: fast) and keeps the documents'
sentences as ids; the second makes records of any `--inputs` format from them
without tokenising, so it needs neither TensorFlow nor the time the tokenizer
takes. This is how `python -m model.experiments --prepare` carries a whole
corpus to a GPU machine: the Wikipedia and Gutenberg samples' 48 M WordPieces
are about 46 MB.

The file (suffix `.ids.npz.xz`) is an uncompressed `.npz` inside an xz stream:

    ids            every sentence's WordPiece ids end to end (uint16; uint32 for a
                   vocabulary of more than 65,536 pieces)
    sentence_ends  int64: where each sentence ends in `ids`
    document_ends  int64: where each document ends in the sentences
    vocab_sha256   the vocabulary's SHA-256 (text): records are only made with that vocabulary
    lowercase      bool: whether the text was lower-cased
"""

from __future__ import annotations

import io
import lzma
from collections.abc import Iterable, Iterator

import numpy as np

from model.io.files import atomic_path

SUFFIX = ".ids.npz.xz"
FIELDS = ("ids", "sentence_ends", "document_ends", "vocab_sha256", "lowercase")


def is_tokenized(path: str) -> bool:
    return path.endswith(SUFFIX)


def write(path: str, documents: Iterable[list], vocab_sha256: str, lowercase: bool) -> dict:
    """Writes `documents` (each a list of sentences' id arrays; empty sentences and
    documents are left out) to `path` (appears only when complete); returns the counts."""
    if not is_tokenized(path):
        raise ValueError(f"{path}: a tokenized corpus is named NAME{SUFFIX}")
    chunks, sentence_lengths, document_ends = [], [], []
    for doc in documents:
        doc = [np.asarray(s) for s in doc if len(s)]
        if not doc:
            continue
        chunks.extend(doc)
        sentence_lengths.extend(len(s) for s in doc)
        document_ends.append(len(sentence_lengths))
    if not chunks:
        raise ValueError(f"{path}: no text to write")
    ids = np.concatenate(chunks)
    dtype = np.uint16 if ids.max() < 2**16 else np.uint32
    arrays = {
        "ids": ids.astype(dtype),
        "sentence_ends": np.cumsum(sentence_lengths, dtype=np.int64),
        "document_ends": np.asarray(document_ends, dtype=np.int64),
        "vocab_sha256": np.array(vocab_sha256),
        "lowercase": np.array(bool(lowercase)),
    }
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(lzma.compress(buffer.getvalue(), preset=6))
    return {"num_documents": len(document_ends), "num_tokens": int(len(ids))}


def read(path: str) -> dict:
    """The arrays of `path` (FIELDS); ValueError naming the file when it is not one."""
    try:
        with lzma.open(path) as f:
            data = np.load(io.BytesIO(f.read()), allow_pickle=False)
            arrays = {k: data[k] for k in data.files}
    except (lzma.LZMAError, OSError, ValueError, EOFError) as e:
        raise ValueError(f"{path}: not a tokenized corpus ({e})") from None
    missing = [k for k in FIELDS if k not in arrays]
    if missing:
        raise ValueError(f"{path}: not a tokenized corpus (no {', '.join(missing)})")
    return arrays


def read_documents(path: str, vocab_sha256: str, lowercase: bool) -> Iterator[list[np.ndarray]]:
    """Yields the documents of `path` as lists of int32 id arrays, after checking that it
    was tokenised with this vocabulary and casing."""
    arrays = read(path)
    if str(arrays["vocab_sha256"]) != vocab_sha256:
        raise ValueError(
            f"{path}: tokenised with another vocabulary (SHA-256 {str(arrays['vocab_sha256'])[:12]}"
            f"..., --vocab's is {vocab_sha256[:12]}...)"
        )
    if bool(arrays["lowercase"]) != lowercase:
        fix = "leave out --cased" if arrays["lowercase"] else "pass --cased"
        raise ValueError(f"{path}: tokenised with the other casing; {fix}")
    ids = arrays["ids"].astype(np.int32)
    sentences = np.split(ids, arrays["sentence_ends"][:-1])
    start = 0
    for end in arrays["document_ends"].tolist():
        yield sentences[start:end]
        start = end
