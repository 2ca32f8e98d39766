"""Which checkpoint format a path holds, from its files alone (no Keras, no TensorFlow).

`detect_format` serves `model.checkpoints.formats` (which reads and writes them); `other_format`
tells a folder of another format from one of our model directories where ours is expected (the
model directory reader, the Hugging Face reader, the app's LiteRT side).
"""

from __future__ import annotations

import os

from model.io.files import read_json_object

# keras-hub's `registered_name` of a serialised layer: "keras_hub>BertBackbone".
KERAS_HUB_PREFIX = "keras_hub>"


def detect_format(path: str) -> str:
    """ "keras", "keras-hub", "hf" or "google", from the files a path holds."""
    if path.endswith(".keras") and os.path.isfile(path):
        return "keras"
    if not os.path.isdir(path):
        if os.path.isfile(path + ".index") or path.endswith(".index"):
            return "google"
        if os.path.isfile(path):
            raise ValueError(
                f"{path}: a file; pass the model folder that holds it "
                f"({os.path.dirname(path) or '.'})"
            )
        raise FileNotFoundError(f"{path}: no such model folder or file")
    files = set(os.listdir(path))
    if "config.json" in files and _config_format(os.path.join(path, "config.json")) == "keras-hub":
        return "keras-hub"
    if "config.json" in files and "model.weights.h5" in files:
        return "keras"
    if "config.json" in files and (
        files & {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"}
    ):
        return "hf"
    if "bert_config.json" in files and any(f.endswith(".index") for f in files):
        return "google"
    if "bundle.json" in files:
        raise ValueError(
            f"{path}: a LiteRT bundle (python -m export's output), which only runs: train, "
            f"convert or export from the model directory it was exported from"
        )
    raise ValueError(
        f"{path}: not a recognised model folder (expected config.json + "
        f"model.weights.h5, config.json + model.safetensors, or bert_config.json + "
        f"*.ckpt.index, or a keras-hub preset); found {sorted(files)[:10]}"
    )


def other_format(config: dict) -> tuple[str, str] | None:
    """(format, what it is) when a folder's config.json is a keras-hub preset's or a Hugging
    Face folder's rather than one of our model directories'; else None. Cheap (no
    TensorFlow): the app's LiteRT side calls it too."""
    if str(config.get("registered_name", "")).startswith(KERAS_HUB_PREFIX):
        return "keras-hub", "a keras-hub preset"
    if "architectures" in config or "model_type" in config:
        return "hf", "a Hugging Face folder"
    return None


def _config_format(config: str) -> str | None:
    """`other_format`'s format of the JSON object in the file `config`; None when it is
    ours, unreadable or no object."""
    try:
        found = other_format(read_json_object(config))
    except (OSError, ValueError):
        return None
    return found and found[0]
