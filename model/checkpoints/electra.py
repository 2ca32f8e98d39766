"""Hugging Face ELECTRA folders in and out (`model_type` "electra").

    DIR/config.json            transformers' ElectraConfig (+ architectures)
    DIR/model.safetensors      the weights (or model.safetensors.index.json + shards)
    DIR/vocab.txt              the WordPiece vocabulary
    DIR/tokenizer_config.json  do_lower_case (written; read when present)

Architectures and our models:

    ElectraModel            BertEncoder                           task encoder
    ElectraForPreTraining   ElectraDiscriminator                  task replaced_token_detection
    ElectraForMaskedLM      BertPretrainer(next_sentence=False)   task pretraining (a generator)

The encoder's tensors are named as BERT's (`huggingface.encoder_entries`), under
"electra." ("" in a bare ElectraModel), plus `embeddings_project.*` when
`embedding_size` differs from `hidden_size` (our `embeddings_projection`). The
discriminator's `discriminator_predictions.{dense,dense_prediction}.*` are our
`replaced_token_head`; the generator's `generator_predictions.{dense,LayerNorm}.*`
and `generator_lm_head.bias` are our `masked_lm_head` (`generator_lm_head.weight`
is the word embedding, tied: absent, or equal to it).

ELECTRA has no pooler, and our encoder has one (`pooled_dense`, which
`BertClassifier` reads). Reading an ELECTRA folder creates it fresh, with random
initialisation, and says so in the notes: no ELECTRA folder ever holds one, so
asking for --allow-new-heads would only stop every read (and `finetune --init`,
which trains it with its head anyway). Writing leaves it out, and says so.

An ELECTRA pre-training run (`ElectraPretrainer`, task electra_pretraining) is
two models, which Google released as two folders; it is written as

    OUT/            the discriminator, ElectraForPreTraining (the model that fine-tunes)
    OUT/generator/  the generator, ElectraForMaskedLM (its embeddings are the
                    discriminator's: the same values, stored again)

and each folder reads back on its own.

    python -m model.convert --from hf electra-small-discriminator --to keras runs/electra-small
    python -m model.convert --from keras runs/electra --to hf runs/electra-hf
"""

from __future__ import annotations

import os

from model.checkpoints import huggingface as hf
from model.checkpoints import safetensors_io
from model.checkpoints.mapping import Entry, assign, export
from model.config import GELU, BertConfig
from model.io.files import write_json

MODEL_TYPE = "electra"
# architecture -> (our task, task options)
ARCHITECTURES = {
    "ElectraModel": ("encoder", {}),
    "ElectraForPreTraining": ("replaced_token_detection", {}),
    "ElectraForMaskedLM": ("pretraining", {"next_sentence": False}),
}
# Heads of ELECTRA folders (and of the ones we do not read): dropped with an explicit --task.
HEAD_PREFIXES = (
    "discriminator_predictions.",
    "generator_predictions.",
    "generator_lm_head.",
    "classifier.",
    "qa_outputs.",
)
GENERATOR_DIR = "generator"  # OUT/generator: a pre-training run's generator
# transformers' ElectraConfig default, for a config.json that does not name it.
DEFAULT_EMBEDDING_SIZE = 128
T = lambda a: a.T  # torch Linear stores (out, in); Keras Dense (in, out)


# === Mapping ===


def projection_entries(encoder, prefix: str) -> list[Entry]:
    """`embeddings_project.*`, the factorised embedding's projection (none when unfactorised)."""
    projection = encoder.embeddings_projection
    if projection is None:
        return []
    return [
        Entry(f"{prefix}embeddings_project.weight", projection.kernel, T, T),
        Entry(f"{prefix}embeddings_project.bias", projection.bias),
    ]


def replaced_token_entries(head) -> list[Entry]:
    """The discriminator's head: dense -> activation -> dense_prediction (one logit)."""
    part = head.name  # "replaced_token_head"
    return [
        Entry("discriminator_predictions.dense.weight", head.dense.kernel, T, T, part=part),
        Entry("discriminator_predictions.dense.bias", head.dense.bias, part=part),
        Entry(
            "discriminator_predictions.dense_prediction.weight",
            head.prediction.kernel,
            T,
            T,
            part=part,
        ),
        Entry("discriminator_predictions.dense_prediction.bias", head.prediction.bias, part=part),
    ]


def masked_lm_entries(head) -> list[Entry]:
    """The generator's head: dense (hidden -> embedding size) -> GELU -> LayerNorm,
    then the tied word embedding plus `generator_lm_head.bias`."""
    part = head.name  # "masked_lm_head"
    v = {w.path: w for w in head.weights}
    return [
        Entry(
            "generator_predictions.dense.weight",
            v[f"{part}/intermediate_dense/kernel"],
            T,
            T,
            part=part,
        ),
        Entry("generator_predictions.dense.bias", v[f"{part}/intermediate_dense/bias"], part=part),
        Entry(
            "generator_predictions.LayerNorm.weight",
            v[f"{part}/intermediate_layer_norm/gamma"],
            part=part,
        ),
        Entry(
            "generator_predictions.LayerNorm.bias",
            v[f"{part}/intermediate_layer_norm/beta"],
            part=part,
        ),
        # The decoder weight is the word embedding (tied); only the bias is its own.
        Entry("generator_lm_head.bias", v[f"{part}/output_bias"], part=part),
    ]


def weight_entries(
    encoder, prefix: str, masked_lm_head=None, replaced_token_head=None
) -> list[Entry]:
    """One Entry per variable of `encoder` (its pooler excepted: ELECTRA has
    none) and of the heads given, named as transformers' ELECTRA names it.
    `prefix` is "electra." in ElectraForPreTraining / ElectraForMaskedLM and ""
    in a bare ElectraModel."""
    entries = hf.encoder_entries(encoder, prefix) + projection_entries(encoder, prefix)
    if masked_lm_head is not None:
        entries += masked_lm_entries(masked_lm_head)
    if replaced_token_head is not None:
        entries += replaced_token_entries(replaced_token_head)
    return entries


def model_entries(model, prefix: str) -> list[Entry]:
    """`weight_entries` of one of our models (an encoder, a masked LM, a discriminator)."""
    from model.checkpoints.model_dir import encoder_of

    return weight_entries(
        encoder_of(model),
        prefix,
        masked_lm_head=getattr(model, "masked_lm_head", None),
        replaced_token_head=getattr(model, "replaced_token_head", None),
    )


# === Reading ===


def encoder_config(data: dict, source: str) -> BertConfig:
    """Our `BertConfig` of an ElectraConfig dict: BERT's keys, plus `embedding_size`
    (our `embedding_dim`, None when it equals `hidden_size`)."""
    config = BertConfig.from_dict(data, source, hugging_face=True)
    embedding = data.get("embedding_size", DEFAULT_EMBEDDING_SIZE)
    if not isinstance(embedding, int) or isinstance(embedding, bool) or embedding < 1:
        raise ValueError(f"{source}: embedding_size must be a positive integer, got {embedding!r}")
    return config.replace(embedding_dim=None if embedding == config.hidden_dim else embedding)


def read(
    directory: str,
    task: str | None = None,
    allow_new_heads: bool = False,
    vocab: str | None = None,
    **task_options,
):
    """(model, vocab_path, notes) from a Hugging Face ELECTRA folder.

    Args:
        directory: the folder.
        task: one of `model.checkpoints.model_dir.TASKS`; default: the config's architecture.
        allow_new_heads: create heads absent from the checkpoint fresh instead
            of stopping (the pooler is always created fresh: ELECTRA has none).
        **task_options: `next_sentence`, `num_labels`, `num_choices`, `dropout`.
    """
    from model.checkpoints.model_dir import build_model

    path = os.path.join(directory, hf.CONFIG)
    data = hf.read_config(directory, MODEL_TYPE)
    config = encoder_config(data, path)
    if task == "electra_pretraining":
        raise ValueError(
            f"{directory}: an ELECTRA folder holds one model; read the discriminator "
            f"(ElectraForPreTraining) and the generator (ElectraForMaskedLM) apart"
        )
    info, _ = hf.description(data, config, path, task, task_options, ARCHITECTURES)
    model = build_model(info)

    tensors, source = hf.read_tensors(directory)
    prefix = "electra." if "electra.embeddings.word_embeddings.weight" in tensors else ""
    hf.check_tied(
        tensors,
        (("generator_lm_head.weight", f"{prefix}embeddings.word_embeddings.weight"),),
        source,
    )
    _check_generator_activation(model, config, tensors, data, path)
    entries = model_entries(model, prefix)
    unmapped = _unmapped_heads(model, entries, source, allow_new_heads)
    notes = assign(
        entries,
        tensors,
        source,
        allow_new_heads=allow_new_heads,
        droppable=lambda n: n.startswith(HEAD_PREFIXES),
        drop_heads=task is not None,  # the task was chosen: its unused heads may go
        # Buffers, not weights: older transformers saved them.
        ignored=lambda n: (
            n in (f"{prefix}embeddings.position_ids", f"{prefix}embeddings.token_type_ids")
        ),
    )
    notes += [
        f"{part}: not in {source} (an ELECTRA folder has no tensors for it); "
        f"created fresh with random initialisation"
        for part in unmapped
    ]
    notes.append(
        f"pooled_dense: not in {source} (ELECTRA has no pooler); created fresh with "
        f"random initialisation (a head on pooled_output trains it from there)"
    )
    return model, hf.folder_vocabulary(directory, config, vocab), notes


def _check_generator_activation(model, config, tensors: dict, data: dict, path: str) -> None:
    """Refuses a generator whose head would compute otherwise here than in transformers."""
    if (
        getattr(model, "masked_lm_head", None) is not None
        and "generator_predictions.dense.weight" in tensors
        and config.activation != GELU
    ):
        raise ValueError(
            f"{path}: hidden_act {data.get('hidden_act')!r}: transformers' ELECTRA generator "
            f"head always applies the exact GELU, ours the encoder's activation, so this "
            f"masked LM would not compute what it computes there"
        )


def _unmapped_heads(model, entries: list[Entry], source: str, allow_new_heads: bool) -> list[str]:
    """The model's heads no ELECTRA tensor maps to (a classifier's, NSP's; the pooler
    aside, which ELECTRA never has): an error unless `allow_new_heads`."""
    from model.checkpoints.model_dir import encoder_of

    mapped = {id(e.variable) for e in entries}
    mapped |= {id(w) for w in encoder_of(model).pooled_dense.weights}
    unmapped = sorted({w.path.split("/")[0] for w in model.weights if id(w) not in mapped})
    if unmapped and not allow_new_heads:
        raise ValueError(
            f"{source}: checkpoint does not match the model:\n  "
            + "\n  ".join(
                f"{part} is not in the source (an ELECTRA folder has no tensors for it); "
                f"pass --allow-new-heads (allow_new_heads=True) to create it fresh, or "
                f"choose a --task without it"
                for part in unmapped
            )
        )
    return unmapped


# === Writing ===


def writes_as_electra(model) -> bool:
    """Whether `huggingface.write` hands `model` to this module: ELECTRA's own
    models, and an encoder or masked LM (no NSP) with a factorised embedding,
    which BERT's classes cannot hold (ElectraModel and ElectraForMaskedLM can)."""
    from model.checkpoints.model_dir import describe, encoder_of
    from model.heads.electra import ElectraDiscriminator, ElectraPretrainer

    if isinstance(model, (ElectraDiscriminator, ElectraPretrainer)):
        return True
    cfg = encoder_of(model).config
    if cfg.embedding_size == cfg.hidden_dim:
        return False
    info = describe(model)
    return info["task"] == "encoder" or (
        info["task"] == "pretraining" and not info.get("next_sentence", True)
    )


def architecture_of(model) -> str:
    """The transformers class of one of our models (not the two-model pre-trainer)."""
    from model.checkpoints.model_dir import describe

    info = describe(model)
    if info["task"] == "replaced_token_detection":
        return "ElectraForPreTraining"
    if info["task"] == "pretraining" and not info.get("next_sentence", True):
        return "ElectraForMaskedLM"
    if info["task"] == "encoder":
        return "ElectraModel"
    raise ValueError(f"no Hugging Face ELECTRA architecture for task {info['task']!r}")


def hf_config(cfg: BertConfig, arch: str) -> dict:
    """transformers' ElectraConfig dict of an encoder config and an architecture."""
    if cfg.causal:
        raise ValueError(
            "a causal (left-to-right) model has no Hugging Face ELECTRA form: "
            "transformers' ElectraModel attends in both directions unless it is a decoder"
        )
    if arch == "ElectraForMaskedLM" and cfg.activation != GELU:
        raise ValueError(
            f"a masked LM with activation {cfg.activation!r} has no Hugging Face ELECTRA "
            f"form: transformers' ELECTRA generator head always applies the exact GELU"
        )
    return {**hf.encoder_config(cfg, arch, MODEL_TYPE), "embedding_size": cfg.embedding_size}


def _write_folder(
    directory: str,
    arch: str,
    encoder,
    vocab_path: str,
    masked_lm_head=None,
    replaced_token_head=None,
) -> list[str]:
    data = hf_config(encoder.config, arch)
    prefix = "" if arch == "ElectraModel" else "electra."
    entries = weight_entries(encoder, prefix, masked_lm_head, replaced_token_head)
    os.makedirs(directory, exist_ok=True)
    safetensors_io.write(os.path.join(directory, hf.WEIGHTS), export(entries), {"format": "pt"})
    write_json(os.path.join(directory, hf.CONFIG), data)
    hf.write_tokenizer(directory, encoder.config, vocab_path, "ElectraTokenizer")
    return [f"pooled_dense not written to {directory}: {arch} has no pooler"]


def write(model, directory: str, vocab_path: str) -> list[str]:
    """Writes the folder(s) `transformers.ElectraFor*.from_pretrained` reads; returns notes.

    An `ElectraPretrainer` writes its discriminator to `directory` and its
    generator to `directory/generator`; any other model one folder."""
    from model.checkpoints.model_dir import encoder_of
    from model.heads.electra import ElectraPretrainer

    if isinstance(model, ElectraPretrainer):
        generator_dir = os.path.join(directory, GENERATOR_DIR)
        # Both refusals before anything is written: never half a pair.
        hf_config(model.encoder.config, "ElectraForPreTraining")
        hf_config(model.generator.config, "ElectraForMaskedLM")
        notes = _write_folder(
            directory,
            "ElectraForPreTraining",
            model.encoder,
            vocab_path,
            replaced_token_head=model.replaced_token_head,
        )
        notes += _write_folder(
            generator_dir,
            "ElectraForMaskedLM",
            model.generator,
            vocab_path,
            masked_lm_head=model.masked_lm_head,
        )
        notes.append(
            f"an ELECTRA pre-training run is two models: the discriminator "
            f"(ElectraForPreTraining) is in {directory}, the generator (ElectraForMaskedLM) "
            f"in {generator_dir}"
        )
        return notes
    return _write_folder(
        directory,
        architecture_of(model),
        encoder_of(model),
        vocab_path,
        masked_lm_head=getattr(model, "masked_lm_head", None),
        replaced_token_head=getattr(model, "replaced_token_head", None),
    )


# === Verifying ===


def _same_weights(pairs, path: str) -> int:
    """Compares (ours, read back) layers' weights by name, the pooler excepted;
    returns how many of our variables were checked (a tied one once)."""
    from model.checkpoints.mapping import same_values

    checked = set()
    for ours, theirs in pairs:
        mine = {w.path: w for w in ours.weights if not w.path.startswith("pooled_dense/")}
        back = {w.path: w for w in theirs.weights if not w.path.startswith("pooled_dense/")}
        if set(mine) != set(back):
            differ = sorted(set(mine) ^ set(back))
            raise ValueError(f"{path}: verification failed: weights {differ[:5]} differ in name")
        for name, w in mine.items():
            if not same_values(w.numpy(), back[name].numpy()):
                raise ValueError(f"{path}: verification failed: {name} differs after writing")
            checked.add(id(w))
    return len(checked)


def verify(model, directory: str) -> int:
    """Reads what `write` wrote back and checks every weight it holds equals the
    model's (the pooler, never written, excepted); returns how many were checked."""
    from model.heads.electra import ElectraPretrainer

    if isinstance(model, ElectraPretrainer):
        discriminator, _, _ = read(directory, "replaced_token_detection")
        generator_dir = os.path.join(directory, GENERATOR_DIR)
        generator, _, _ = read(generator_dir, "pretraining", next_sentence=False)
        pairs = [
            (model.encoder, discriminator.encoder),
            (model.replaced_token_head, discriminator.replaced_token_head),
            (model.generator, generator.encoder),
            (model.masked_lm_head, generator.masked_lm_head),
        ]
        return _same_weights(pairs, directory)
    again, _, _ = read(directory)
    return _same_weights([(model, again)], directory)
