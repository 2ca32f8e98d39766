"""keras-hub preset directories in and out, written and read by keras-hub itself.

    DIR/config.json           the backbone: keras_hub>BertBackbone or keras_hub>ElectraBackbone
    DIR/model.weights.h5      its weights
    DIR/tokenizer.json        BertTokenizer / ElectraTokenizer (lowercase)
    DIR/assets/tokenizer/vocabulary.txt
    DIR/task.json, task.weights.h5, preprocessor.json    a task, when there is one
    DIR/metadata.json

Our models and keras-hub's:

    BertEncoder                      BertBackbone (ElectraBackbone over a factorised embedding)
    BertClassifier                   BertTextClassifier
    BertPretrainer, no NSP           BertMaskedLM
    ElectraDiscriminator, and the tasks keras-hub has no class for (token
    classification, SQuAD spans, multiple choice, NSP, ELECTRA's heads, SpanBERT's
    and the left-to-right model's): refused by name; `--task encoder` writes the
    encoder alone as a backbone, `--task masked_lm` drops NSP.

Both directions build keras-hub's own classes (`save_to_preset`, `from_preset`)
and copy the weights by name (the encoder's layers carry keras-hub's names), as
strictly as every other format (`model.checkpoints.mapping`).

keras-hub's BERT and ELECTRA compute the tanh GELU and a LayerNorm epsilon of
1e-12, whatever the config. A model trained with the exact GELU (every Hugging
Face BERT, all-MiniLM-L6-v2) is written with a note, and `check_outputs` (after
the weights are read back) measures how far keras-hub's outputs move; read back,
a preset is our model with the tanh GELU, which computes what keras-hub computes.

    python -m model.convert --from keras runs/sst2 --to keras-hub runs/sst2-keras-hub
    python -m model.convert --from keras-hub bert_tiny_en_uncased --to keras runs/bert-tiny
"""

from __future__ import annotations

import os

import numpy as np

from model.checkpoints.detect import KERAS_HUB_PREFIX
from model.checkpoints.mapping import ENCODER, Entry, assign
from model.config import GELU, GELU_APPROXIMATE, BertConfig
from model.io.files import read_json_object

CONFIG = "config.json"
TASK_CONFIG = "task.json"
TASK_WEIGHTS = "task.weights.h5"
TOKENIZER_CONFIG = "tokenizer.json"
VOCABULARY = os.path.join("assets", "tokenizer", "vocabulary.txt")
PREFIX = KERAS_HUB_PREFIX
BACKBONES = ("BertBackbone", "ElectraBackbone")
LAYER_NORM_EPSILON = 1e-12  # keras-hub's BERT and ELECTRA hard-code it
# BertMaskedLM's head: the exact GELU and MaskedLMHead's default epsilon, over a tanh-GELU backbone
MASKED_LM_HEAD = {"head_activation": GELU, "head_layer_norm_epsilon": 1e-5}
# keras-hub task class -> (our task, its options)
TASKS = {
    "BertTextClassifier": ("classifier", {}),
    "BertMaskedLM": ("pretraining", {"next_sentence": False, **MASKED_LM_HEAD}),
}
# keras-hub head layer -> ours (the encoder's and the classifier's "logits" agree)
HEADS = {"mlm_head": "masked_lm_head", "logits": "logits"}
THEIR_HEADS = {ours: hub for hub, ours in HEADS.items()}
MAX_SEQUENCE_LENGTH = 512  # keras-hub's preprocessors' default
# The config fields keras-hub's backbones and our BertConfig name alike.
SHARED_FIELDS = (
    "num_layers",
    "num_heads",
    "hidden_dim",
    "intermediate_dim",
    "dropout",
    "max_sequence_length",
    "num_segments",
)


# === Writing ===


def write(model, directory: str, vocab_path: str, sequence_length: int | None = None):
    """Writes `model` as a keras-hub preset directory; returns notes.

    Args:
        model: one of our models (see the module docstring for those keras-hub has).
        directory: the preset directory (`formats.write` stages it: written whole or not at
            all).
        vocab_path: the WordPiece vocabulary.
        sequence_length: the task preprocessor's length, 3 to the encoder's positions
            (default: the encoder's positions, at most 512).
    """
    from model.checkpoints.model_dir import describe, encoder_of

    info, cfg = describe(model), encoder_of(model).config
    kind = _writable(info, cfg)
    length = sequence_length
    if length is None:
        length = min(MAX_SEQUENCE_LENGTH, cfg.max_sequence_length)
    if not 3 <= length <= cfg.max_sequence_length:  # [CLS] a [SEP], within the positions
        raise ValueError(
            f"a preprocessor length of {length}: the encoder has {cfg.max_sequence_length} "
            "positions (--sequence-length from 3 to that)"
        )
    saved, tokenizer = _keras_hub_model(kind, info, cfg, vocab_path, length)
    tensors = {w.path: np.asarray(w.numpy()) for w in model.weights}
    assign(_entries(saved, _our_name), tensors, f"our {info['task']} model")
    os.makedirs(directory, exist_ok=True)
    saved.save_to_preset(directory)
    if not hasattr(saved, "preprocessor"):  # a backbone: its tokenizer beside it
        tokenizer.save_to_preset(directory)
    notes = [
        f"keras-hub computes this model with {difference}, so its outputs differ slightly "
        f"(measured below)"
        for difference in _differs_from_keras_hub(info)
    ]
    if info.get("id2label"):
        notes.append(f"keras-hub's classifier keeps no label names: {info['id2label']}")
    return notes


def _writable(info: dict, cfg: BertConfig) -> str:
    """The keras-hub backbone class for `info`, or a ValueError naming what keras-hub lacks."""
    task = info["task"]
    kind = "ElectraBackbone" if cfg.embedding_dim not in (None, cfg.hidden_dim) else "BertBackbone"
    if task == "replaced_token_detection":
        kind = "ElectraBackbone"
    if cfg.causal:
        raise ValueError("keras-hub has no causal (left-to-right) BERT backbone")
    if info.get("bilstm_units") is not None:
        raise ValueError(
            "keras-hub has no BiLSTM over a backbone; --task encoder writes the BERT encoder alone"
        )
    if cfg.layer_norm_epsilon != LAYER_NORM_EPSILON or cfg.activation == "relu":
        raise ValueError(
            f"keras-hub's {kind} hard-codes LayerNorm epsilon 1e-12 and the GELU; this "
            f"encoder has epsilon {cfg.layer_norm_epsilon} and activation {cfg.activation!r}"
        )
    wanted = {"classifier": "BertTextClassifier", "pretraining": "BertMaskedLM"}.get(task)
    if task == "pretraining" and info.get("next_sentence"):
        raise ValueError(
            "keras-hub's BertMaskedLM has no next-sentence head: pass --task masked_lm "
            "to write the masked LM without it, or --task encoder for the backbone"
        )
    if task != "encoder" and (wanted is None or kind != "BertBackbone"):
        raise ValueError(
            f"keras-hub has no task for our {task!r} over its {kind} (it has "
            f"BertTextClassifier and BertMaskedLM over BertBackbone): pass --task encoder "
            f"to write the encoder alone as a {kind}"
        )
    return kind


def _keras_hub_model(kind: str, info: dict, cfg: BertConfig, vocab_path: str, length: int):
    """(keras-hub's model for `info`, freshly initialised; its tokenizer)."""
    import keras_hub

    shape = {name: getattr(cfg, name) for name in SHARED_FIELDS}
    # BERT's uncased tokenizer strips accents as it lowercases; keras-hub's does so only when told.
    casing = {"lowercase": cfg.lowercase, "strip_accents": cfg.lowercase}
    if kind == "ElectraBackbone":
        backbone = keras_hub.models.ElectraBackbone(
            vocab_size=cfg.vocabulary_size,
            embedding_dim=cfg.embedding_size,
            dtype="float32",
            **shape,
        )
        tokenizer = keras_hub.models.ElectraTokenizer(vocabulary=vocab_path, **casing)
    else:
        backbone = keras_hub.models.BertBackbone(
            vocabulary_size=cfg.vocabulary_size, dtype="float32", **shape
        )
        tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocab_path, **casing)
    if info["task"] == "classifier":
        preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
            tokenizer, sequence_length=length
        )
        classifier = keras_hub.models.BertTextClassifier(
            backbone,
            num_classes=info["num_labels"],
            preprocessor=preprocessor,
            dropout=info["dropout"],
        )
        return classifier, tokenizer
    if info["task"] == "pretraining":
        preprocessor = keras_hub.models.BertMaskedLMPreprocessor(tokenizer, sequence_length=length)
        return keras_hub.models.BertMaskedLM(backbone, preprocessor=preprocessor), tokenizer
    return backbone, tokenizer


def _our_name(keras_hub_path: str) -> str:
    layer, _, rest = keras_hub_path.partition("/")
    return f"{HEADS.get(layer, layer)}/{rest}"


def _their_name(our_path: str) -> str:
    layer, _, rest = our_path.partition("/")
    return f"{THEIR_HEADS.get(layer, layer)}/{rest}"


def _entries(model, name) -> list[Entry]:
    """An Entry per weight of `model`, named as the other side names it; a
    head's weights form one part, so a head wholly absent can be created fresh."""
    entries = []
    for w in model.weights:
        layer = w.path.split("/")[0]
        head = layer in HEADS or layer in THEIR_HEADS or layer == "next_sentence_head"
        entries.append(Entry(name(w.path), w, part=layer if head else ENCODER))
    return entries


# === Reading ===


def read(path: str, task: str | None, allow_new_heads: bool = False, **options):
    """(model, vocab_path, notes) for a keras-hub preset directory.

    Args:
        path: the preset directory (config.json of a BertBackbone or ElectraBackbone).
        task: our task to build (model_dir.TASKS); None keeps the preset's own
            (its task.json's BertTextClassifier or BertMaskedLM, else the encoder).
        allow_new_heads: create a head the preset lacks fresh (and say so).
        **options: `num_labels`, `next_sentence`, `dropout` of the head.
    """
    from model.checkpoints.model_dir import build_model

    kind, backbone_config = _backbone_config(path)
    own_task, own_options, loaded, notes = _load(path, kind, task)
    lowercase, casing_notes = _casing(path)
    notes += casing_notes
    cfg = _our_config(kind, backbone_config, lowercase, path)
    info = {"task": own_task, "encoder": cfg.to_dict(), **own_options}
    if task is not None and task != own_task:
        info = {"task": task, "encoder": cfg.to_dict()}
    model = build_model({**info, **options})
    tensors = {w.path: np.asarray(w.numpy()) for w in loaded.weights}
    head_names = {f"{hub}/" for hub in HEADS}
    notes += assign(
        _entries(model, _their_name),
        tensors,
        path,
        allow_new_heads=allow_new_heads,
        droppable=lambda n: n.startswith(tuple(head_names)),
        drop_heads=task is not None,
    )
    vocab = os.path.join(path, VOCABULARY)
    return model, (vocab if os.path.isfile(vocab) else None), notes


def _backbone_config(path: str) -> tuple[str, dict]:
    data = read_json_object(os.path.join(path, CONFIG), "config", "; is it a keras-hub preset?")
    name = str(data.get("registered_name", ""))
    kind = name.removeprefix(PREFIX)
    if not name.startswith(PREFIX) or kind not in BACKBONES:
        raise ValueError(
            f"{path}/{CONFIG}: a {name or 'non-keras-hub'} preset; only "
            f"{' and '.join(BACKBONES)} presets are read"
        )
    return kind, data.get("config", {})


def _from_preset(cls, path: str):
    """`cls.from_preset(path)`, its failures (a truncated weights file, weights that do not fit
    the config) said in one line naming the preset."""
    try:
        return cls.from_preset(path)
    except (OSError, ValueError) as e:
        reason = " ".join(str(e).split())[:300]
        raise ValueError(f"{path}: keras-hub cannot load this preset ({reason})") from None


def _load(path: str, kind: str, task: str | None):
    """(our task, its options, the keras-hub model with the weights, notes) of a
    preset: its task, or its backbone alone when there is none or `task` is "encoder"."""
    import keras_hub

    task_file = os.path.join(path, TASK_CONFIG)
    if not os.path.isfile(task_file) or task == "encoder":
        return "encoder", {}, _from_preset(keras_hub.models.Backbone, path), []
    data = read_json_object(task_file, "task config")
    name = str(data.get("registered_name", "")).removeprefix(PREFIX)
    if name not in TASKS:
        raise ValueError(
            f"{task_file}: task {name!r} has no counterpart here (read: {', '.join(TASKS)}); "
            f"pass --task encoder to read the {kind} alone"
        )
    if not os.path.isfile(os.path.join(path, TASK_WEIGHTS)):
        # keras-hub's from_preset then builds the task with a random head, and says nothing.
        raise ValueError(
            f"{path}: {TASK_CONFIG} names a {name} but {TASK_WEIGHTS} is missing (its head "
            f"would be random); pass --task encoder to read the {kind} alone"
        )
    own, options = TASKS[name]
    loaded, notes = _from_preset(getattr(keras_hub.models, name), path), []
    if own == "classifier":
        config = data.get("config", {})
        if not isinstance(config.get("num_classes"), int):
            raise ValueError(f"{task_file}: the BertTextClassifier config has no num_classes")
        options = {"num_labels": config["num_classes"], "dropout": config.get("dropout", 0.1)}
        if config.get("activation") not in (None, "linear"):
            notes.append(
                f"keras-hub's classifier applied {config['activation']!r} to its logits; "
                f"ours returns the logits"
            )
    return own, options, loaded, notes


def _our_config(kind: str, config: dict, lowercase: bool, path: str) -> BertConfig:
    vocabulary = config.get("vocabulary_size", config.get("vocab_size"))
    embedding_dim = config.get("embedding_dim") if kind == "ElectraBackbone" else None
    missing = [name for name in ("num_layers", "num_heads", "hidden_dim") if name not in config]
    if missing or vocabulary is None:
        raise ValueError(f"{path}/{CONFIG}: the {kind} config lacks {missing or 'vocab_size'}")
    return BertConfig(
        vocabulary_size=vocabulary,
        **{name: config[name] for name in SHARED_FIELDS if name in config},
        activation=GELU_APPROXIMATE,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        lowercase=lowercase,
        embedding_dim=None if embedding_dim == config["hidden_dim"] else embedding_dim,
    )


def _casing(path: str) -> tuple[bool, list[str]]:
    """(lowercase, notes) from the preset's tokenizer.json: ours strips accents
    exactly when it lowercases (BERT's rule); keras-hub sets the two apart."""
    tokenizer = os.path.join(path, TOKENIZER_CONFIG)
    if not os.path.isfile(tokenizer):
        return False, [f"{path} has no {TOKENIZER_CONFIG}: read as cased"]
    config = read_json_object(tokenizer, "tokenizer config").get("config", {})
    lowercase, strip_accents = bool(config.get("lowercase")), bool(config.get("strip_accents"))
    if lowercase == strip_accents:
        return lowercase, []
    return lowercase, [
        f"{TOKENIZER_CONFIG}: lowercase {lowercase} but strip_accents {strip_accents}; ours "
        f"{'strips' if lowercase else 'keeps'} accents as it {'lowercases' if lowercase else 'keeps case'}, "
        f"so accented words get other ids than keras-hub's"
    ]


# === Verifying ===


def check_outputs(model, path: str) -> list[str]:
    """Runs keras-hub's model read from `path` and ours on the same random ids:
    computing the same (tanh GELU; keras-hub's masked-LM head) they must agree
    within 1e-4, else the difference is reported. Returns the note that says it.
    (`formats.verify` compares the weights first, as for every format.)"""
    from model.checkpoints.model_dir import describe

    info = describe(model)
    what, diff = _output_difference(model, info, path)
    if not _differs_from_keras_hub(info) and diff > 1e-4:
        raise ValueError(f"{path}: verification failed: keras-hub's {what} is {diff:.2e} from ours")
    return [f"keras-hub's model against ours on random ids: max |{what} difference| {diff:.2e}"]


def _output_difference(model, info: dict, path: str) -> tuple[str, float]:
    """(what was compared, max |ours - keras-hub's|) on `probe_inputs`."""
    import keras_hub

    cfg = info["encoder"]
    inputs = probe_inputs(cfg["vocabulary_size"], min(64, cfg["max_sequence_length"]))
    if info["task"] == "classifier":
        theirs = keras_hub.models.BertTextClassifier.from_preset(path)
        what, a, b = "logits", model(inputs), theirs(inputs)
    elif info["task"] == "pretraining":
        inputs["mask_positions"] = np.array([[1, 2, 5], [0, 3, 4]], "int32")
        theirs = keras_hub.models.BertMaskedLM.from_preset(path)
        what, a, b = "masked-LM logits", model(inputs)["mlm"], theirs(inputs)
    else:
        theirs = keras_hub.models.Backbone.from_preset(path)
        what, a, b = "sequence output", model(inputs)["sequence_output"], theirs(inputs)
        b = b["sequence_output"]
    return what, float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def _differs_from_keras_hub(info: dict) -> list[str]:
    """What `info`'s model computes that keras-hub's would not (empty: the same)."""
    differences = []
    if info["encoder"]["activation"] != GELU_APPROXIMATE:
        differences.append(
            f"the encoder's {info['encoder']['activation']!r} (keras-hub: tanh GELU)"
        )
    if info["task"] == "pretraining":
        head = {k: info.get(k) for k in MASKED_LM_HEAD}
        if head != MASKED_LM_HEAD:
            differences.append(f"the masked-LM head's {head} (keras-hub: {MASKED_LM_HEAD})")
    return differences


def probe_inputs(vocabulary_size: int, length: int, rows: int = 2) -> dict:
    """Random token ids (seed 0), a second segment, the last rows' tail padded."""
    rng = np.random.default_rng(0)
    token_ids = rng.integers(0, vocabulary_size, (rows, length)).astype("int32")
    segment_ids = np.zeros_like(token_ids)
    segment_ids[:, length // 2 :] = 1
    padding_mask = np.ones_like(token_ids)
    padding_mask[-1, length - length // 4 :] = 0
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}
