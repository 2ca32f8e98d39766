"""A model directory's config.json, read and checked without Keras or TensorFlow.

`model.checkpoints.model_dir` builds and loads the model it describes; the commands call
`check_model_dir` on their model argument before they import TensorFlow, so that a bad field
fails in well under a second, named.
"""

from __future__ import annotations

import os

from model.checkpoints.detect import detect_format, other_format
from model.config import BertConfig, is_number
from model.io.files import read_json_object

CONFIG = "config.json"
VOCAB = "vocab.txt"
WEIGHTS = "model.weights.h5"

TASKS = (
    "encoder",
    "pretraining",
    "span_pretraining",
    "causal_lm",
    "electra_pretraining",
    "replaced_token_detection",
    "classifier",
    "token_classifier",
    "question_answerer",
    "multiple_choice",
)


def read_info(directory: str) -> dict:
    """A model directory's config.json, checked: an object with a known task and an encoder of
    valid BertConfig fields (a bare BertConfig reads as an encoder); errors name the file."""
    path = os.path.join(directory, CONFIG)
    if not os.path.exists(path) and os.path.isfile(os.path.join(directory, "bundle.json")):
        raise ValueError(
            f"{directory}: a LiteRT bundle (python -m export's output), not a model directory: "
            f"convert or export the model directory it was exported from"
        )
    return _checked(
        directory, read_json_object(path, "config", f"; is {directory!r} a model directory?")
    )


def _checked(directory: str, info: dict) -> dict:
    """`read_info` of the config.json object `info` read from `directory`."""
    path = os.path.join(directory, CONFIG)
    if "encoder" not in info:
        _refuse_other_formats(directory, info)
        # A bare BertConfig (or Google's bert_config.json form).
        info = {"task": "encoder", "encoder": BertConfig.from_json(path).to_dict()}
    elif info.get("task") == "feature_tagger":
        raise ValueError(
            f"{directory}: a feature-based tagger (python -m model.feature_tagger's: a BiLSTM "
            f"over the frozen encoder {info['encoder']}), which model.evaluate --task "
            f"conll2003 scores; other commands take that encoder"
        )
    elif not isinstance(info["encoder"], dict):
        raise ValueError(f'{path}: "encoder" must be an object of BertConfig fields')
    else:  # checked here, where the file can be named
        BertConfig.from_dict(with_records_casing(info)["encoder"], f"{path}: encoder")
    if info.get("task", "encoder") not in TASKS:
        raise ValueError(f"{path}: unknown task {info['task']!r}; expected one of {TASKS}")
    _check_head(path, info)
    return with_records_casing({"task": "encoder", **info})  # no task: an encoder


def _check_head(path: str, info: dict) -> None:
    """The head's fields of a config.json, where present, named with the file when wrong (they
    failed deep in Keras before: "'list' object has no attribute 'items'")."""

    def whole(value, least: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= least

    for key, least in (("num_labels", 1), ("num_choices", 2), ("bilstm_units", 1)):
        # num_choices and bilstm_units may be null (any number of choices; no BiLSTM)
        given = key in info and (key == "num_labels" or info[key] is not None)
        if given and not whole(info[key], least):
            raise ValueError(
                f"{path}: {key} must be an integer of at least {least}, not {info[key]!r}"
            )
    if "max_seq_length" in info and not whole(info["max_seq_length"], 2):
        raise ValueError(f"{path}: max_seq_length must be an integer of at least 2")
    dropout = info.get("dropout", 0.0)
    if not is_number(dropout) or not 0 <= dropout < 1:  # as BertConfig's own dropout
        raise ValueError(f"{path}: dropout must be a number in [0, 1), not {dropout!r}")
    id2label = info.get("id2label")
    if id2label is not None and not (
        isinstance(id2label, dict) and all(str(k).isdigit() for k in id2label)
    ):
        raise ValueError(f'{path}: id2label must be an object {{"0": label, "1": ...}}')


def _refuse_other_formats(directory: str, info: dict) -> None:
    """A keras-hub preset's or a Hugging Face folder's config.json, where one of ours is read
    (evaluate, export, the app): one line saying to convert it (`model.load` and
    `finetune --init` read them as they are)."""
    found = other_format(info)
    if found is not None:
        fmt, what = found
        raise ValueError(
            f"{directory}: {what}, not a model directory of this project; convert it first: "
            f"python -m model.convert --from {fmt} {directory} --to keras DIR"
        )


def with_records_casing(info: dict) -> dict:
    """A model directory's config.json fields, the casing of a run written before the encoder's
    config held it moved in: pre-training wrote its records' casing at the top, and the
    encoder kept its preset's default; the records' is the model's."""
    if "lowercase" not in info:
        return info
    rest = {k: v for k, v in info.items() if k != "lowercase"}
    return {**rest, "encoder": {**info["encoder"], "lowercase": bool(info["lowercase"])}}


def check_model_path(path: str | None) -> None:
    """`path` names a model: a folder or file that exists, or a Google checkpoint's prefix
    (PREFIX.index beside it); else FileNotFoundError naming it."""
    if path and not os.path.exists(path) and not os.path.isfile(path + ".index"):
        raise FileNotFoundError(f"{path}: no such file or directory")


def check_model_dir(path: str | None) -> dict | None:
    """Where `path` is one of our model directories (config.json beside model.weights.h5), its
    config.json is checked as `read_info` does (ValueError naming the file) and returned, for a
    command's own checks of flags against the model; other formats, bundles, paths that are
    not folders (None) and feature-based taggers are left to their readers."""
    if not path or not os.path.isdir(path):
        return None
    try:
        ours = detect_format(path) == "keras"
    except ValueError:  # not a model folder at all: the command's reader says what it is
        return None
    if not ours:
        return None
    info = read_json_object(os.path.join(path, CONFIG))  # read once
    if info.get("task") != "feature_tagger":  # a tagger's: model.evaluate's reader checks it
        _checked(path, info)
    return info
