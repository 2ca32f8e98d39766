"""Hugging Face BERT folders in and out: config.json, model.safetensors, vocab.txt.

    DIR/config.json            transformers' BertConfig (+ architectures, id2label/label2id)
    DIR/model.safetensors      the weights (or model.safetensors.index.json + shards)
    DIR/vocab.txt              the WordPiece vocabulary
    DIR/tokenizer_config.json  do_lower_case (written; read when present)

Architectures and our models:

    BertModel                       BertEncoder
    BertForPreTraining              BertPretrainer(next_sentence=True)
    BertForMaskedLM                 BertPretrainer(next_sentence=False)
    BertForSequenceClassification   BertClassifier
    BertForTokenClassification      BertTokenClassifier
    BertForQuestionAnswering        BertQuestionAnswerer
    BertForMultipleChoice           BertMultipleChoice

ELECTRA folders (`model_type` "electra": ElectraModel, ElectraForPreTraining,
ElectraForMaskedLM, and an ELECTRA pre-training run as two folders) are read
and written by `model.checkpoints.electra`; `read` and `write` hand them over.

`pytorch_model.bin` is a pickle: reading it runs whatever code it names, so it
is refused (convert it to safetensors where it is trusted). Weights are read
with the numpy reader in `model.checkpoints.safetensors_io`, not torch.

    python -m model.convert --from hf DIR --to keras OUT
"""

from __future__ import annotations

import os

import numpy as np

from model.checkpoints import bert_names as names
from model.checkpoints import safetensors_io
from model.checkpoints.mapping import Entry, assign, export
from model.config import GELU, GELU_APPROXIMATE, BertConfig
from model.io.files import read_json_object, write_json
from model.text.wordpiece import check_vocabulary, copy_vocabulary

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
PICKLE_WEIGHTS = "pytorch_model.bin"
VOCAB = "vocab.txt"
TOKENIZER_CONFIG = "tokenizer_config.json"
TOKENIZER_JSON = "tokenizer.json"

# architecture -> (our task, task options)
ARCHITECTURES = {
    "BertModel": ("encoder", {}),
    "BertForPreTraining": ("pretraining", {"next_sentence": True}),
    "BertForMaskedLM": ("pretraining", {"next_sentence": False}),
    "BertForSequenceClassification": ("classifier", {}),
    "BertForTokenClassification": ("token_classifier", {}),
    "BertForQuestionAnswering": ("question_answerer", {}),
    "BertForMultipleChoice": ("multiple_choice", {}),
}
# transformers builds these with `add_pooling_layer=False`: no pooler weights.
WITHOUT_POOLER = ("BertForMaskedLM", "BertForTokenClassification", "BertForQuestionAnswering")
HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.")


def architecture_of(info: dict) -> str:
    """The transformers class name for one of our model descriptions."""
    task = info["task"]
    if task == "pretraining":
        return "BertForPreTraining" if info.get("next_sentence", True) else "BertForMaskedLM"
    for arch, (t, _) in ARCHITECTURES.items():
        if t == task:
            return arch
    raise ValueError(f"no Hugging Face architecture for task {task!r}")


# === Mapping ===


def encoder_entries(encoder, prefix: str) -> list[Entry]:
    """The Entries of `encoder`'s embeddings and Transformer blocks (not its
    pooler), named as transformers' BertModel names them under `prefix`.
    ELECTRA's `ElectraModel` names them the same way (`model.checkpoints.electra`)."""
    v = {w.path: w for w in encoder.weights}
    return names.encoder_entries(v, names.HF, encoder.config, prefix)


def weight_entries(model, prefix: str) -> list[Entry]:
    """One Entry per Keras variable of `model`, named as transformers names it.

    `prefix` is "bert." in every task model and "" in a bare `BertModel`.
    """
    from model.checkpoints.model_dir import encoder_of

    encoder = encoder_of(model)
    cfg, v = encoder.config, {w.path: w for w in model.weights}
    entries = encoder_entries(encoder, prefix)
    entries += names.entries(names.POOLER, v, names.HF, cfg, prefix, part="pooled_dense")
    if "masked_lm_head/output_bias" in v:
        entries += names.entries(names.MASKED_LM, v, names.HF, cfg, part="masked_lm_head")
    if "next_sentence_head/kernel" in v:
        entries += names.entries(names.NEXT_SENTENCE, v, names.HF, cfg, part="next_sentence_head")
    if "logits/kernel" in v:
        T = lambda a: a.T  # torch Linear stores (out, in); Keras Dense (in, out)
        name = "qa_outputs" if type(model).__name__ == "BertQuestionAnswerer" else "classifier"
        entries += [
            Entry(f"{name}.weight", v["logits/kernel"], T, T, part="logits"),
            Entry(f"{name}.bias", v["logits/bias"], part="logits"),
        ]
    return entries


# === Reading ===


def model_type(directory: str) -> str:
    """The folder's `model_type` ("bert" when the config names none, as old BERT folders)."""
    path = os.path.join(directory, CONFIG)
    data = read_json_object(path, "config", f"; is {directory!r} a Hugging Face model folder?")
    return data.get("model_type", "bert")


def read_config(directory: str, expected_type: str = "bert") -> dict:
    path = os.path.join(directory, CONFIG)
    data = read_json_object(path, "config", f"; is {directory!r} a Hugging Face model folder?")
    from model.checkpoints.detect import other_format

    found = other_format(data)
    if found is not None and found[0] == "keras-hub":
        raise ValueError(
            f"{directory}: a keras-hub preset, not a Hugging Face folder (--from keras-hub)"
        )
    if data.get("model_type", "bert") != expected_type:
        raise ValueError(f"{path}: model_type is {data.get('model_type')!r}, not {expected_type!r}")
    if data.get("problem_type") == "multi_label_classification":
        raise ValueError(
            f"{path}: problem_type multi_label_classification: this project's classifier is "
            f"single-label (softmax); its sigmoid labels would be read as one choice"
        )
    tok_path = os.path.join(directory, TOKENIZER_CONFIG)
    tok = read_json_object(tok_path, "tokenizer config") if os.path.isfile(tok_path) else {}
    if "do_lower_case" not in data and "do_lower_case" in tok:
        data["do_lower_case"] = bool(tok["do_lower_case"])
    lowercase, strip = data.get("do_lower_case", True), tok.get("strip_accents")
    if strip is not None and bool(strip) != bool(lowercase):
        import warnings

        from model.io.native_logs import ProjectWarning

        warnings.warn(
            f"{tok_path}: do_lower_case {str(bool(lowercase)).lower()} but strip_accents "
            f"{str(bool(strip)).lower()}; ours strips accents exactly when it lowercases, so "
            f"accented words get other ids than transformers'",
            ProjectWarning,
            stacklevel=2,
        )
    return data


def read_tensors(directory: str) -> tuple[dict[str, np.ndarray], str]:
    """(tensors, the file they came from), refusing pickled weights; LayerNorm's legacy
    `gamma`/`beta` names (bert-base-uncased's own file) read as `weight`/`bias`, as
    transformers reads them."""
    tensors, source = _read_weight_files(directory)
    return {_current_name(name): array for name, array in tensors.items()}, source


def _current_name(name: str) -> str:
    for legacy, current in (
        ("LayerNorm.gamma", "LayerNorm.weight"),
        ("LayerNorm.beta", "LayerNorm.bias"),
    ):
        if name.endswith(legacy):
            return name[: -len(legacy)] + current
    return name


def _read_weight_files(directory: str) -> tuple[dict[str, np.ndarray], str]:
    single = os.path.join(directory, WEIGHTS)
    index = os.path.join(directory, WEIGHTS_INDEX)
    if os.path.isfile(single):
        return safetensors_io.read(single), single
    if os.path.isfile(index):
        weight_map = read_json_object(index, "safetensors index").get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"{index}: no 'weight_map' object (a truncated or corrupt index?)")
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            for name, array in safetensors_io.read(os.path.join(directory, shard)).items():
                tensors[name] = array
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise ValueError(f"{index}: tensors listed but not in any shard: {missing[:5]}")
        return tensors, index
    if os.path.isfile(os.path.join(directory, PICKLE_WEIGHTS)):
        raise ValueError(
            f"{os.path.join(directory, PICKLE_WEIGHTS)}: refusing to read a pickled PyTorch "
            f"checkpoint (unpickling can run arbitrary code). Convert it to {WEIGHTS} where it "
            f"is trusted, with the class config.json names (AutoModel would drop its heads), "
            f"e.g. `getattr(transformers, AutoConfig.from_pretrained(DIR).architectures[0])"
            f".from_pretrained(DIR).save_pretrained(DIR, safe_serialization=True)`"
        )
    raise FileNotFoundError(f"{directory}: no {WEIGHTS} (or {WEIGHTS_INDEX}) found")


def read(
    directory: str,
    task: str | None = None,
    allow_new_heads: bool = False,
    vocab: str | None = None,
    **task_options,
):
    """(model, vocab_path, notes) from a Hugging Face BERT folder (or an ELECTRA
    one, read by `model.checkpoints.electra.read`).

    Args:
        directory: the folder.
        task: one of `model.checkpoints.model_dir.TASKS`; default: the config's architecture.
        allow_new_heads: create heads (and the pooler) absent from the
            checkpoint fresh instead of stopping.
        **task_options: `next_sentence`, `num_labels`, `num_choices`, `dropout`.
    """
    from model.checkpoints.model_dir import build_model

    if model_type(directory) == "electra":
        from model.checkpoints import electra

        return electra.read(directory, task, allow_new_heads, vocab, **task_options)
    data = read_config(directory)
    config = BertConfig.from_dict(data, os.path.join(directory, CONFIG), hugging_face=True)
    info, arch = description(data, config, os.path.join(directory, CONFIG), task, task_options)
    model = build_model(info)

    tensors, source = read_tensors(directory)
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in tensors else ""
    _check_tied(tensors, prefix, source)
    entries, notes = weight_entries(model, prefix), []
    if arch in WITHOUT_POOLER and f"{prefix}pooler.dense.weight" not in tensors:
        # transformers builds these without a pooler: none is missing, so ours starts
        # fresh (a head on pooled_output trains it) without --allow-new-heads.
        entries = [e for e in entries if e.part != "pooled_dense"]
        notes.append(
            f"pooled_dense: not in {source} ({arch} has no pooler); created fresh with "
            f"random initialisation"
        )
    notes += assign(
        entries,
        tensors,
        source,
        allow_new_heads=allow_new_heads,
        droppable=lambda n: n.startswith(HEAD_PREFIXES),
        drop_heads=task is not None,  # the task was chosen: its unused heads may go
        ignored=lambda n: n == f"{prefix}embeddings.position_ids",
    )

    return model, folder_vocabulary(directory, config, vocab), notes


def description(
    data: dict,
    config: BertConfig,
    path: str,
    task: str | None,
    task_options: dict,
    architectures: dict = ARCHITECTURES,
) -> tuple[dict, str | None]:
    """(the model description `build_model` takes, the config's architecture) of a
    folder's config `data` (read from `path`): --task, or else the task of its
    architecture in `architectures` (BERT's; ELECTRA's reader passes its own); the
    label names when the label count agrees; `task_options` over both."""
    archs = data.get("architectures") or []
    arch = archs[0] if archs else None
    if arch is not None and arch not in architectures and task is None:
        raise ValueError(
            f"{path}: unsupported architecture "
            f"{arch!r}; supported: {sorted(architectures)} (or pass --task)"
        )
    if task is None and arch is None:
        raise ValueError(f"{path}: no 'architectures'; pass --task")
    info = {"encoder": config.to_dict()}
    if task is not None:
        info["task"] = task
    else:
        info["task"], defaults = architectures[arch]
        info.update(defaults)
    id2label = data.get("id2label")
    if (
        info["task"] in ("classifier", "token_classifier")
        and id2label
        and ("num_labels" not in task_options or task_options["num_labels"] == len(id2label))
    ):
        info["id2label"] = {str(k): v for k, v in id2label.items()}
        info["num_labels"] = len(id2label)
    elif info["task"] in ("classifier", "token_classifier") and data.get("num_labels"):
        info["num_labels"] = data["num_labels"]  # a config that names the count alone
    if data.get("classifier_dropout") is not None:
        info["dropout"] = data["classifier_dropout"]
    info.update({k: v for k, v in task_options.items() if v is not None})
    return info, arch


def folder_vocabulary(directory: str, config: BertConfig, vocab_path: str | None = None) -> str:
    """The folder's vocab.txt (or `vocab_path`; or, for a folder that ships only
    tokenizer.json, as transformers 5 saves one, its WordPiece vocabulary written out),
    refused (with its path) unless it fits the token embedding."""
    own = os.path.join(directory, VOCAB)
    if vocab_path is None and not os.path.isfile(own):
        vocab_path = vocab_from_tokenizer_json(directory)
    return check_vocabulary(vocab_path or own, config.vocabulary_size)


def vocab_from_tokenizer_json(directory: str) -> str | None:
    """A temporary vocab.txt of the WordPiece vocabulary in the folder's tokenizer.json (None
    without one); removed when the process ends."""
    import atexit
    import tempfile

    path = os.path.join(directory, TOKENIZER_JSON)
    if not os.path.isfile(path):
        return None
    tokenizer = read_json_object(path, "tokenizer").get("model") or {}
    vocab = tokenizer.get("vocab")
    if tokenizer.get("type") != "WordPiece" or not isinstance(vocab, dict):
        raise ValueError(
            f"{path}: not a WordPiece tokenizer ({tokenizer.get('type')!r}) and no {VOCAB} "
            f"beside it; pass --vocab"
        )
    tokens = sorted(vocab, key=vocab.get)
    if [vocab[t] for t in tokens] != list(range(len(tokens))):
        raise ValueError(f"{path}: the vocabulary's ids are not 0 to {len(tokens) - 1}")
    fd, out = tempfile.mkstemp(prefix="vocab-from-tokenizer-json-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.writelines(token + "\n" for token in tokens)
    atexit.register(lambda: os.path.exists(out) and os.remove(out))
    return out


def _check_tied(tensors: dict, prefix: str, source: str) -> None:
    check_tied(
        tensors,
        (
            ("cls.predictions.decoder.weight", f"{prefix}embeddings.word_embeddings.weight"),
            ("cls.predictions.decoder.bias", "cls.predictions.bias"),
        ),
        source,
    )


def check_tied(tensors: dict, pairs, source: str) -> None:
    """Older files also store the tied MLM decoder; it must equal what it is tied to.

    `pairs`: (tied tensor, the tensor it is tied to); an equal tied copy is removed."""
    for tied, origin in pairs:
        if tied in tensors:
            if origin not in tensors or not np.array_equal(tensors[tied], tensors[origin]):
                raise ValueError(
                    f"{source}: tensor {tied!r} differs from {origin!r}; our MLM "
                    f"head ties them, so an untied decoder cannot be loaded"
                )
            del tensors[tied]


# === Writing ===


def encoder_config(cfg: BertConfig, arch: str, model_type: str) -> dict:
    """The encoder's keys of a transformers config.json (BERT's, which ELECTRA's share)."""
    act = {GELU: "gelu", GELU_APPROXIMATE: "gelu_new"}.get(cfg.activation, cfg.activation)
    return {
        "architectures": [arch],
        "model_type": model_type,
        "attention_probs_dropout_prob": cfg.dropout,
        "hidden_act": act,
        "hidden_dropout_prob": cfg.dropout,
        "hidden_size": cfg.hidden_dim,
        "initializer_range": cfg.initializer_range,
        "intermediate_size": cfg.intermediate_dim,
        "layer_norm_eps": cfg.layer_norm_epsilon,
        "max_position_embeddings": cfg.max_sequence_length,
        "num_attention_heads": cfg.num_heads,
        "num_hidden_layers": cfg.num_layers,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "type_vocab_size": cfg.num_segments,
        "vocab_size": cfg.vocabulary_size,
        "tie_word_embeddings": True,
    }


def hf_config(model) -> dict:
    from model.checkpoints.model_dir import describe, encoder_of

    info = describe(model)
    cfg = encoder_of(model).config
    if cfg.causal:
        # transformers' BertModel can mask causally (is_decoder) but pools [CLS], where
        # ours pools the last real token: refuse rather than write a model that would
        # load as another.
        raise ValueError(
            "a causal (left-to-right) model has no Hugging Face BERT form: "
            "transformers' BertModel pools [CLS] where ours pools the last real token"
        )
    if cfg.embedding_size != cfg.hidden_dim:
        # Only an encoder, a masked LM and ELECTRA's models have ELECTRA forms
        # (`model.checkpoints.electra`), which `write` chose before reaching here.
        raise ValueError(
            f"task {info['task']!r} over embeddings {cfg.embedding_size} wide under a hidden "
            f"width of {cfg.hidden_dim} (ELECTRA's factorised embedding) has no Hugging Face "
            f"form: transformers' BertModel has no embedding projection, and ELECTRA's "
            f"task heads differ from ours; write its encoder (--task encoder) instead"
        )
    data = encoder_config(cfg, architecture_of(info), "bert")
    if "dropout" in info:
        data["classifier_dropout"] = None if info["dropout"] == cfg.dropout else info["dropout"]
    if info["task"] in ("classifier", "token_classifier"):
        id2label = info.get("id2label") or {str(i): f"LABEL_{i}" for i in range(info["num_labels"])}
        data["id2label"] = id2label
        data["label2id"] = {name: int(i) for i, name in id2label.items()}
        if info["num_labels"] == 1 and info["task"] == "classifier":
            data["problem_type"] = "regression"
    return data


def write(model, directory: str, vocab_path: str, usage: dict | None = None) -> list[str]:
    """Writes a folder `transformers.AutoModel*.from_pretrained` reads; returns notes.
    `usage` (`formats.USAGE_FIELDS`) goes into config.json, the fine-tuning task as
    transformers' `finetuning_task`.

    ELECTRA's models, and encoders and masked LMs with a factorised embedding,
    are written as ELECTRA (`model.checkpoints.electra`)."""
    from model.checkpoints import electra

    if electra.writes_as_electra(model):
        return electra.write(model, directory, vocab_path)
    data = hf_config(model)
    for key, value in (usage or {}).items():
        data["finetuning_task" if key == "finetuned_task" else key] = value
    arch = data["architectures"][0]
    prefix = "" if arch == "BertModel" else "bert."
    entries = weight_entries(model, prefix)
    notes = []
    if arch in WITHOUT_POOLER:
        entries = [e for e in entries if e.part != "pooled_dense"]
        notes.append(f"pooled_dense not written: {arch} has no pooler")
    os.makedirs(directory, exist_ok=True)
    safetensors_io.write(os.path.join(directory, WEIGHTS), export(entries), {"format": "pt"})
    write_json(os.path.join(directory, CONFIG), data)
    from model.checkpoints.model_dir import encoder_of

    write_tokenizer(directory, encoder_of(model).config, vocab_path, "BertTokenizer")
    return notes


def write_tokenizer(
    directory: str, config: BertConfig, vocab_path: str, tokenizer_class: str
) -> None:
    """tokenizer_config.json and a copy of vocab.txt (unless it is already there)."""
    write_json(
        os.path.join(directory, TOKENIZER_CONFIG),
        {
            "tokenizer_class": tokenizer_class,
            "do_lower_case": config.lowercase,
            "model_max_length": config.max_sequence_length,
        },
    )
    copy_vocabulary(vocab_path, directory, VOCAB)
