"""The bundle directory `python -m export` writes: everything an edge app needs, nothing else.

    BUNDLE/model.tflite    the LiteRT model: signature "serving_default" (the task's
                           outputs) and, in pre-training and ELECTRA bundles, "encoder"
                           (the encoder's outputs, attention probabilities included); in
                           ELECTRA bundles exported from a pre-training run, "generator"
                           (the generator's masked-LM logits)
    BUNDLE/vocab.txt       the WordPiece vocabulary
    BUNDLE/bundle.json     task, max_seq_length, lowercase, quantization, id2label,
                           inputs/outputs shapes, what verification measured, the source,
                           the signatures and the runtime methods they serve, and
                           model.tflite's and vocab.txt's sizes and sha256 ("files")
    BUNDLE/label_map.json  {"id2label": {...}} when the task has named labels

(`export/README.md` is the contract.) A bundle is built in a hidden
temporary directory beside its final name and renamed into place only when
complete and verified (`staging`): a failed or interrupted export leaves
either the previous bundle or none, never a half-written one.

Imports only the standard library, `model.io.files`, `model.config` and
`model.text.wordpiece` (the edge runtime may use it).

    python -c "from export import bundle; print(bundle.read_info('bundles/sst2'))"
"""

from __future__ import annotations

import contextlib
import hashlib
import os

from model.config import stored
from model.io.files import read_json_object, staged_directory, write_json
from model.text.wordpiece import copy_vocabulary

FORMAT = 1
MODEL = "model.tflite"
VOCAB = "vocab.txt"
INFO = "bundle.json"
LABEL_MAP = "label_map.json"
BUNDLE_FILES = {MODEL, VOCAB, INFO, LABEL_MAP}  # all a bundle directory holds
# Longer windows than any position table this project makes (a hand-edited 10^9 made the
# runtime plan windows of a billion WordPieces: seconds and gigabytes for three words).
MAX_SEQ_LENGTH = 2**15

# The exportable tasks of model.checkpoints.model_info.TASKS (an "electra_pretraining" run
# exports as a "replaced_token_detection" bundle; the others have no LiteRT contract).
TASKS = (
    "encoder",
    "pretraining",
    "classifier",
    "token_classifier",
    "question_answerer",
    "multiple_choice",
    "replaced_token_detection",
    # Not a model directory's task: the contract of an ELECTRA bundle's "generator" signature.
    "generator",
)
QUANTIZATIONS = ("float32", "float16", "dynamic", "int8")
REQUIRED = ("format", "task", "max_seq_length", "lowercase", "quantization", "inputs", "outputs")
# The type of each field a runtime reads (None allowed where the field is optional).
FIELD_TYPES = {
    "max_seq_length": int,
    "lowercase": bool,
    "inputs": dict,
    "outputs": dict,
    "top_k": int,
    "null_threshold": (int, float),
    "id2label": dict,
    "source": dict,
    "files": dict,
}
FIELD_WORDS = {
    int: "a whole number",
    bool: "true or false",
    dict: "an object",
    (int, float): "a number",
}
# The signature with the bundle's own task's outputs (the one `model.evaluate` and
# verification read), and the extra one of a pre-training or ELECTRA bundle: its encoder's
# outputs (ELECTRA's: the discriminator's), as an "encoder" bundle's (named after the task
# whose contract it follows).
DEFAULT_SIGNATURE = "serving_default"
ENCODER_SIGNATURE = "encoder"
# An ELECTRA bundle's default signature is its discriminator ("replaced_token_detection",
# whichever of the two ELECTRA model directories it came from); exported from a pre-training
# run it also holds the generator, a small masked LM whose samples corrupt a text as in
# pre-training (`export/convert.py`).
REPLACED_TOKEN_TASK = "replaced_token_detection"
# The length a model directory that names none (an encoder, a pre-training run) is exported,
# served and evaluated at; fine-tuned ones store theirs (`max_seq_length`).
DEFAULT_SEQ_LEN = 128
ELECTRA_TASKS = ("electra_pretraining", REPLACED_TOKEN_TASK)  # the model directories' tasks
# The bundle tasks that carry an "encoder" signature unless exported without it.
ENCODER_SIGNATURE_TASKS = ("pretraining", REPLACED_TOKEN_TASK)
GENERATOR_SIGNATURE = "generator"
# bundle.json's record of the files as export wrote them: {name: {"bytes", "sha256"}}
# (bundles written before it have none, and are read without the check).
FILES = "files"
# The default signature's outputs of each task and their ranks, as export writes them
# (bundle.json "outputs"): a task edited into another's bundle is refused on reading.
OUTPUT_RANKS = {
    "encoder": {"sequence_output": 3, "pooled_output": 2},
    "pretraining": {"topk_ids": 3, "topk_probs": 3},
    "classifier": {"logits": 2},
    "multiple_choice": {"logits": 2},
    "token_classifier": {"logits": 3},
    "question_answerer": {"start_logits": 2, "end_logits": 2},
    REPLACED_TOKEN_TASK: {"rtd": 2},
}


def is_bundle(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, INFO))


def read_info(directory: str) -> dict:
    """bundle.json of `directory`, checked: format, task, quantization, and the files it needs."""
    path = os.path.join(directory, INFO)
    info = read_json_object(
        path, "bundle", f"; is {directory!r} a bundle written by python -m export?"
    )
    missing = [k for k in REQUIRED if k not in info]
    if missing:
        raise ValueError(f"{path}: missing keys {missing}")
    if info["format"] != FORMAT:
        raise ValueError(
            f"{path}: bundle format {info['format']!r}; this code reads format {FORMAT}"
        )
    if info["task"] not in TASKS:
        raise ValueError(f"{path}: unknown task {info['task']!r}; expected one of {TASKS}")
    if info["quantization"] not in QUANTIZATIONS:
        raise ValueError(f"{path}: unknown quantization {info['quantization']!r}")
    for key, kinds in FIELD_TYPES.items():
        value = info.get(key)
        if (value is not None or key in REQUIRED) and (
            isinstance(value, bool) != (kinds is bool) or not isinstance(value, kinds)
        ):
            raise ValueError(f"{path}: {key!r} must be {FIELD_WORDS[kinds]}, not {value!r}")
    if not 3 <= info["max_seq_length"] <= MAX_SEQ_LENGTH:
        raise ValueError(
            f"{path}: 'max_seq_length' must be from 3 to {MAX_SEQ_LENGTH}, "
            f"not {info['max_seq_length']}"
        )
    for name in (MODEL, VOCAB):
        if not os.path.isfile(os.path.join(directory, name)):
            raise FileNotFoundError(f"{os.path.join(directory, name)}: missing from the bundle")
    for key, signature in signatures(info, path).items():
        if not isinstance(signature, dict) or signature.get("task") not in TASKS:
            raise ValueError(
                f"{path}: signature {key!r} names no known task (expected "
                f'{{"task": one of {TASKS}, ...}}, got {str(signature)[:200]})'
            )
    _check_outputs(path, info)
    _check_files(directory, info)
    _check_source(directory, info)
    _check_label_map(directory, info)
    return info


def _check_outputs(path: str, info: dict) -> None:
    """The task's outputs are the ones bundle.json lists (a task edited into another's bundle)."""
    wanted = OUTPUT_RANKS.get(info["task"], {})
    have = {name: len(shape) for name, shape in info["outputs"].items() if isinstance(shape, list)}
    if any(have.get(name) != rank for name, rank in wanted.items()):
        raise ValueError(
            f"{path}: a {info['task']} bundle has outputs "
            f"{ {n: f'rank {r}' for n, r in wanted.items()} }, but 'outputs' lists "
            f"{info['outputs']}: was 'task' edited?"
        )


def file_record(directory: str) -> dict:
    """bundle.json's "files": the size and sha256 of model.tflite and vocab.txt."""
    record = {}
    for name in (MODEL, VOCAB):
        digest = hashlib.sha256()
        with open(os.path.join(directory, name), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        size = os.path.getsize(os.path.join(directory, name))
        record[name] = {"bytes": size, "sha256": digest.hexdigest()}
    return record


def _check_files(directory: str, info: dict) -> None:
    """model.tflite and vocab.txt are the files export wrote: the size and sha256 of each that
    the "files" record holds (other keys of an entry are a later exporter's, not compared)."""
    recorded = info.get(FILES)
    if recorded is None:
        return
    found = file_record(directory)
    for name in (MODEL, VOCAB):
        theirs, ours = recorded.get(name), found[name]
        if theirs is None:
            raise ValueError(f"{os.path.join(directory, INFO)}: 'files' has no {name!r} entry")
        if not (
            isinstance(theirs, dict)
            and isinstance(theirs.get("bytes"), int)
            and isinstance(theirs.get("sha256"), str)
        ):
            raise ValueError(
                f"{os.path.join(directory, INFO)}: 'files' entry {name!r} must be an object "
                f'{{"bytes": a whole number, "sha256": a hex string}}, not {str(theirs)[:200]}'
            )
        if (theirs["bytes"], theirs["sha256"]) != (ours["bytes"], ours["sha256"]):
            raise ValueError(
                f"{os.path.join(directory, name)}: {ours['bytes']:,} bytes, sha256 "
                f"{ours['sha256'][:12]}..., not the {theirs['bytes']:,} bytes, "
                f"{theirs['sha256'][:12]}... that bundle.json records: changed or damaged "
                "since export"
            )


def _check_source(directory: str, info: dict) -> None:
    """What the source model's encoder allows (bundle.json's "source"): max_seq_length within
    its position table, and a vocabulary of its token embedding's rows."""
    config = (info.get("source") or {}).get("config")
    encoder = config.get("encoder") if isinstance(config, dict) else None
    if not isinstance(encoder, dict):
        return
    positions = encoder.get("max_sequence_length")
    if isinstance(positions, int) and info["max_seq_length"] > positions:
        raise ValueError(
            f"{os.path.join(directory, INFO)}: 'max_seq_length' {info['max_seq_length']} is "
            f"more than the model's {positions} positions"
        )
    size = encoder.get("vocabulary_size")
    if isinstance(size, int):
        from model.text.wordpiece import check_vocabulary

        check_vocabulary(os.path.join(directory, VOCAB), size, "the model's (bundle.json's source)")


def _check_label_map(directory: str, info: dict) -> None:
    """label_map.json, where there is one, holds bundle.json's id2label."""
    label_map = os.path.join(directory, LABEL_MAP)
    if info.get("id2label") and os.path.isfile(label_map):
        theirs = read_json_object(label_map, "label map").get("id2label")
        if theirs != info["id2label"]:
            raise ValueError(
                f"{label_map}: id2label {theirs} is not bundle.json's {info['id2label']}"
            )


def signatures(info: dict, where: str = INFO) -> dict:
    """{signature key: {"task", "methods", "inputs", "outputs", ...}} of a bundle.json.
    Bundles written before signatures were recorded have one: the default, of their task."""
    listed = info.get("signatures")
    if listed is None:
        return {
            DEFAULT_SIGNATURE: {
                "task": info.get("task"),
                "inputs": info.get("inputs"),
                "outputs": info.get("outputs"),
            }
        }
    if not isinstance(listed, dict) or DEFAULT_SIGNATURE not in listed:
        raise ValueError(
            f'{where}: "signatures" must be an object with {DEFAULT_SIGNATURE!r}, got {listed!r}'
        )
    return listed


def model_path(directory: str) -> str:
    return os.path.join(directory, MODEL)


def vocab_path(directory: str) -> str:
    return os.path.join(directory, VOCAB)


@contextlib.contextmanager
def staging(directory: str):
    """Yields an empty temporary directory beside `directory`; on success it
    replaces `directory` (an old bundle is moved aside and deleted after: at every moment
    the real name holds a complete bundle or nothing), on any error it is deleted (and
    `directory` untouched). `model.io.files.staged_directory`, refusing to replace what is
    not a bundle."""
    with staged_directory(directory) as tmp:
        yield tmp
        check_output(directory)  # again at the end: it may have changed meanwhile


def check_output(directory: str) -> None:
    """FileExistsError unless `directory` can take a bundle: absent, empty, or a bundle and
    nothing else (it is replaced whole: a folder that also holds other files is not one to
    delete). Commands call it before converting, and `staging` again before it replaces."""
    if not os.path.exists(directory):
        return
    if not os.path.isdir(directory):
        raise FileExistsError(f"{directory}: exists and is not a directory")
    names = os.listdir(directory)
    if names and not is_bundle(directory):
        raise FileExistsError(f"{directory}: exists and is not a bundle; refusing to replace it")
    others = sorted(set(names) - BUNDLE_FILES)
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise FileExistsError(
            f"{directory}: holds files a bundle does not ({shown}); refusing to replace it"
        )


def describe(info: dict, task: str, seq_len: int, quantization: str | None, top_k: int) -> dict:
    """The fields of bundle.json that the model directory's config.json (`info`) gives: what
    a runtime reads to serve `task` (the bundle's; an ELECTRA run's is its discriminator's).
    The Keras backend of the app describes a model directory with them too."""
    described = {
        "format": FORMAT,
        "task": task,
        "finetuned_task": info.get("finetuned_task"),
        "max_seq_length": seq_len,
        "lowercase": bool(stored(info["encoder"], "lowercase")),
        "quantization": quantization,
        "id2label": info.get("id2label"),
        "null_threshold": info.get("null_threshold"),
    }
    if info.get("document_context"):
        described["document_context"] = True  # a CoNLL-2003 model fine-tuned on documents
    if task == "pretraining":
        described["top_k"] = top_k
    return described


def write_files(directory: str, vocab: str, info: dict) -> None:
    """vocab.txt (copied from `vocab`), bundle.json and, with labels, label_map.json."""
    copy_vocabulary(vocab, directory, VOCAB)
    info[FILES] = file_record(directory)  # model.tflite is in place by now
    if info.get("id2label"):
        write_json(os.path.join(directory, LABEL_MAP), {"id2label": info["id2label"]})
    write_json(os.path.join(directory, INFO), info)
