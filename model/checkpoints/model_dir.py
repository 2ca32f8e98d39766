"""The project's own ("keras") model directory: config, vocabulary, weights.

    DIR/config.json        {"task": ..., "encoder": {BertConfig fields}, ...task fields}
    DIR/vocab.txt          the WordPiece vocabulary the model was trained with
    DIR/model.weights.h5   Keras weights (no pickled code, safe to load)

Like nanoGPT's checkpoints, the config sits beside the weights, so a directory
rebuilds its model with no other input. Tasks and their fields:

    encoder                                   BertEncoder
    pretraining        next_sentence (head_activation, head_layer_norm_epsilon)
                                              BertPretrainer (MLM [+ NSP])
    span_pretraining   max_span_tokens, position_dim   SpanBertPretrainer (MLM + SBO)
    causal_lm                                 BertCausalLM (left-to-right LM; encoder causal)
    electra_pretraining  generator_size, seed, ElectraPretrainer (generator + discriminator)
                         excluded_ids
    replaced_token_detection                  ElectraDiscriminator (ELECTRA's discriminator)
    classifier         num_labels, dropout, id2label   BertClassifier
    token_classifier   num_labels, dropout, id2label   BertTokenClassifier
    question_answerer                         BertQuestionAnswerer
    multiple_choice    num_choices, dropout   BertMultipleChoice

A fine-tuned head may sit on a randomly initialised BiLSTM over the encoder
(`finetune --bilstm UNITS`, BERT Table 5's "+ BiLSTM"): config.json then holds
`"bilstm_units"` and the head is built over `BertBiLstmEncoder(encoder, units)`.

Loading is strict: every tensor stored in model.weights.h5 is compared by
name and shape with the model the config describes, and any missing,
unexpected or mis-shaped tensor stops the load with its name (Keras itself
only warns about some of these and leaves the variable randomly initialised).

    python -c "import model.checkpoints.model_dir as d; print(d.describe(d.load('DIR')))"
"""

from __future__ import annotations

import math
import os
import tempfile

import h5py
import keras

from model.checkpoints.model_info import CONFIG, TASKS, VOCAB, WEIGHTS, read_info
from model.config import BertConfig
from model.heads.bilstm_encoder import BertBiLstmEncoder
from model.heads.causal_lm import BertCausalLM
from model.heads.classifier import BertClassifier
from model.heads.electra import ElectraDiscriminator, ElectraPretrainer
from model.heads.multiple_choice import BertMultipleChoice
from model.heads.pretrainer import BertPretrainer
from model.heads.question_answerer import BertQuestionAnswerer
from model.heads.span_pretrainer import SpanBertPretrainer
from model.heads.token_classifier import BertTokenClassifier
from model.io.files import atomic_path, write_json
from model.networks.encoder import BertEncoder
from model.text.wordpiece import check_vocabulary, copy_vocabulary


def build_model(info: dict, encoder: BertEncoder | None = None) -> keras.Model:
    """The (freshly initialised) model a config.json describes; `encoder`, when
    given, is used instead of a new one (to put another head on it)."""
    if encoder is None:
        encoder = BertEncoder.from_config_object(BertConfig.from_dict(info["encoder"]))
    task = info.get("task", "encoder")
    if info.get("bilstm_units") is not None and task in BILSTM_TASKS:
        # Other tasks have no BiLSTM: a fine-tuned model read as its "encoder" (model.convert
        # --task encoder) keeps the BERT encoder alone.
        encoder = BertBiLstmEncoder(encoder, units=info["bilstm_units"])
    if task == "encoder":
        return encoder
    if task == "pretraining":
        return BertPretrainer(
            encoder,
            next_sentence=info.get("next_sentence", True),
            head_activation=info.get("head_activation"),
            head_layer_norm_epsilon=info.get("head_layer_norm_epsilon"),
        )
    if task == "span_pretraining":
        return SpanBertPretrainer(
            encoder,
            max_span_tokens=info.get("max_span_tokens", 15),
            position_dim=info.get("position_dim", 200),
        )
    if task == "causal_lm":
        return BertCausalLM(encoder)
    if task == "electra_pretraining":
        return ElectraPretrainer(
            encoder,
            generator_size=info.get("generator_size", 0.25),
            seed=info.get("seed"),
            excluded_ids=info.get("excluded_ids", ()),
        )
    if task == "replaced_token_detection":
        return ElectraDiscriminator(encoder)
    if task == "classifier":
        return BertClassifier(
            encoder,
            num_labels=_num_labels(info),
            dropout=_dropout(info),
            id2label=info.get("id2label"),
        )
    if task == "token_classifier":
        return BertTokenClassifier(
            encoder,
            num_labels=_num_labels(info),
            dropout=_dropout(info),
            id2label=info.get("id2label"),
        )
    if task == "question_answerer":
        return BertQuestionAnswerer(encoder)
    if task == "multiple_choice":
        return BertMultipleChoice(
            encoder, num_choices=info.get("num_choices"), dropout=_dropout(info)
        )
    raise ValueError(f"unknown task {task!r} in config.json; expected one of {TASKS}")


# The heads a BiLSTM may stand under (fine-tuning's; pre-training has none).
BILSTM_TASKS = ("classifier", "token_classifier", "question_answerer", "multiple_choice")


def _num_labels(info: dict) -> int:
    if "num_labels" in info:
        return info["num_labels"]
    if info.get("id2label"):
        return len(info["id2label"])
    raise ValueError(
        f"task {info['task']!r} needs num_labels (or id2label) in config.json, or from "
        f"model.load(..., num_labels=N)"
    )


def _dropout(info: dict) -> float:
    # Heads default to the encoder's dropout, as Hugging Face's do.
    return info.get("dropout", info["encoder"].get("dropout", 0.1))


def describe(model: keras.Model) -> dict:
    """The config.json fields that rebuild `model` with `build_model`."""
    top = getattr(model, "encoder", None)
    if isinstance(top, BertBiLstmEncoder):
        return {**_describe(model), "bilstm_units": top.units}
    return _describe(model)


def _describe(model: keras.Model) -> dict:
    if isinstance(model, BertPretrainer):
        return {
            "task": "pretraining",
            "encoder": model.encoder.config.to_dict(),
            **model.head_config(),
        }
    if isinstance(model, SpanBertPretrainer):
        return {
            "task": "span_pretraining",
            "encoder": model.encoder.config.to_dict(),
            **model.head_config(),
        }
    if isinstance(model, BertCausalLM):
        return {"task": "causal_lm", "encoder": model.encoder.config.to_dict()}
    if isinstance(model, ElectraPretrainer):
        return {
            "task": "electra_pretraining",
            "encoder": model.encoder.config.to_dict(),
            **model.head_config(),
        }
    if isinstance(model, ElectraDiscriminator):
        return {"task": "replaced_token_detection", "encoder": model.encoder.config.to_dict()}
    if isinstance(model, (BertClassifier, BertTokenClassifier)):
        task = "classifier" if isinstance(model, BertClassifier) else "token_classifier"
        info = {
            "task": task,
            "encoder": model.encoder.config.to_dict(),
            "num_labels": model.num_labels,
            "dropout": model.dropout,
        }
        if model.id2label:
            info["id2label"] = model.id2label
        return info
    if isinstance(model, BertQuestionAnswerer):
        return {"task": "question_answerer", "encoder": model.encoder.config.to_dict()}
    if isinstance(model, BertMultipleChoice):
        return {
            "task": "multiple_choice",
            "encoder": model.encoder.config.to_dict(),
            "num_choices": model.num_choices,
            "dropout": model.dropout,
        }
    if isinstance(model, BertEncoder):
        return {"task": "encoder", "encoder": model.config.to_dict()}
    raise TypeError(f"cannot describe {type(model).__name__}")


def encoder_of(model: keras.Model) -> BertEncoder:
    """The `BertEncoder` of a task model (under its BiLSTM, if it has one)."""
    encoder = model if isinstance(model, BertEncoder) else model.encoder
    return encoder.encoder if isinstance(encoder, BertBiLstmEncoder) else encoder


def save(model: keras.Model, directory: str, vocab_path: str, extra: dict | None = None) -> None:
    """Writes config.json, vocab.txt and model.weights.h5 (no optimizer state), each atomically."""
    check_vocabulary(vocab_path, encoder_of(model).config.vocabulary_size)
    if getattr(model, "optimizer", None) is not None:
        # A compiled model's save_weights adds the optimizer's state; a model
        # directory holds the model's weights alone (checkpoints keep the rest).
        clean = build_model(describe(model))
        clean.set_weights(model.get_weights())
        model = clean
    os.makedirs(directory, exist_ok=True)
    with atomic_path(os.path.join(directory, WEIGHTS)) as tmp:
        model.save_weights(tmp)
    copy_vocabulary(vocab_path, directory, VOCAB)
    write_json(os.path.join(directory, CONFIG), {**describe(model), **(extra or {})})


def load(directory: str) -> keras.Model:
    """The model of a directory, every weight checked by name and shape first."""
    info = read_info(directory)
    weights = os.path.join(directory, WEIGHTS)
    if not os.path.isfile(weights):
        raise FileNotFoundError(f"{weights}: weights not found")
    check_size(info, weights)
    model = build_model(info)
    check_weights_file(model, weights)
    model.load_weights(weights)
    vocab = os.path.join(directory, VOCAB)
    if os.path.isfile(vocab):
        check_vocabulary(vocab, encoder_of(model).config.vocabulary_size)
    return model


# === Strict weight check ===


def check_size(info: dict, path: str) -> None:
    """Refuses, before anything is built, a config.json whose model needs more numbers than
    the weights file `path` holds: a lower bound of the encoder's (embeddings, attention and
    feed-forward kernels) and a classifier's kernel. A hidden size of 10^9 or 10^6 blocks
    would otherwise be built whole (minutes, all the memory) to be refused after."""
    config = BertConfig.from_dict(info["encoder"])
    hidden, width = config.hidden_dim, config.embedding_dim or config.hidden_dim
    least = config.vocabulary_size * width + config.max_sequence_length * min(width, hidden)
    least += config.num_layers * (4 * hidden * hidden + 2 * hidden * config.intermediate_dim)
    if info.get("task") in ("classifier", "token_classifier") and not info.get("bilstm_units"):
        least += _num_labels(info) * hidden
    stored = sum(math.prod(shape) for _, shape in weights_layout(path).values())
    if least > stored:
        raise ValueError(
            f"{path}: holds {stored:,} numbers, and the model config.json describes needs at "
            f"least {least:,}: the weights are not this config's"
        )


def weights_layout(path: str) -> dict[str, tuple[str, tuple]]:
    """{h5 dataset path: (readable name, shape)} of a Keras `.weights.h5` file.

    Keras stores variables under class-derived group names
    (`layers/bert_encoder/layers/transformer_encoder_1/...`); each group's
    `name` attribute holds our layer name, which makes the readable form
    (`bert_encoder/transformer_layer_1/query/vars/0`).
    """
    layout = {}
    try:
        with h5py.File(path, "r") as f:

            def visit(name, obj):
                if isinstance(obj, h5py.Dataset):
                    layout[name] = (_readable(f, name), tuple(obj.shape))

            f.visititems(visit)
    except OSError as e:
        raise ValueError(f"{path}: truncated or corrupt weights file ({e})") from None
    return layout


def _readable(f: h5py.File, name: str) -> str:
    parts, group = [], f
    for part in name.split("/"):
        group = group[part]
        if part in ("layers", "vars"):
            continue
        if isinstance(group, h5py.Dataset):
            parts.append(f"vars/{part}")
        elif "vars" in group and "name" in group["vars"].attrs:
            parts.append(str(group["vars"].attrs["name"]))
        else:
            parts.append(part)
    return "/".join(parts)


def check_weights_file(model: keras.Model, path: str, skip: tuple[str, ...] = ()) -> None:
    """Raises naming the first tensors that are missing, unexpected or mis-shaped;
    stored tensors under the groups `skip` (e.g. a training checkpoint's "optimizer/")
    are left out of the comparison."""
    stored = {k: v for k, v in weights_layout(path).items() if not k.startswith(skip)}
    with tempfile.TemporaryDirectory() as tmp:
        # The layout Keras would write for this model is the layout it expects.
        reference = os.path.join(tmp, WEIGHTS)
        model.save_weights(reference)
        expected = weights_layout(reference)
    missing = sorted(set(expected) - set(stored))
    unexpected = sorted(set(stored) - set(expected))
    mismatched = sorted(k for k in set(expected) & set(stored) if expected[k][1] != stored[k][1])
    problems = (
        [f"missing tensor {expected[k][0]} ({k}), shape {expected[k][1]}" for k in missing]
        + [f"unexpected tensor {stored[k][0]} ({k}), shape {stored[k][1]}" for k in unexpected]
        + [
            f"tensor {expected[k][0]} ({k}) has shape {stored[k][1]}, the config needs "
            f"{expected[k][1]}"
            for k in mismatched
        ]
    )
    if problems:
        shown = "\n  ".join(problems[:10])
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise ValueError(f"{path}: weights do not match config.json:\n  {shown}{more}")
