"""Google's TF1 BERT checkpoints in and out (google-research/bert releases).

    DIR/bert_config.json                 Google's config ("gelu" = tanh approximation)
    DIR/bert_model.ckpt.index            TF checkpoint (V2 bundle) index ...
    DIR/bert_model.ckpt.data-00000-of-00001   ... and data
    DIR/vocab.txt                        the WordPiece vocabulary

Read with `tf.train.load_checkpoint` and written with the `SaveV2` op: plain
named tensors, no TF1 graph, so the names are exactly `modeling.py`'s
(`bert/encoder/layer_3/attention/self/query/kernel`, ...). What the format
holds is the encoder and both pre-training heads (`cls/predictions/*` with the
output bias of the tied decoder, `cls/seq_relationship/*`). Fine-tuning
checkpoints also hold `global_step` and Adam slots (`*/adam_m`, `*/adam_v`):
those are skipped, and reported.

    python -m model.convert --from google DIR --to keras OUT
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import tempfile

import numpy as np

from model.checkpoints import bert_names as names
from model.checkpoints.mapping import Entry, assign, export
from model.config import BertConfig
from model.io.files import write_json
from model.text.wordpiece import check_vocabulary, copy_vocabulary

CONFIG = "bert_config.json"
CHECKPOINT = "bert_model.ckpt"
VOCAB = "vocab.txt"
HEAD_PREFIXES = ("cls/", "output_weights", "output_bias")


def _ignored(name: str) -> bool:
    # Training state, not weights.
    return (
        name == "global_step"
        or name.endswith(("/adam_m", "/adam_v"))
        or name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")
    )


# === Mapping ===


def weight_entries(model) -> list[Entry]:
    """One Entry per Keras variable, named as Google's `modeling.py` names it."""
    from model.checkpoints.model_dir import encoder_of

    cfg = encoder_of(model).config
    v = {w.path: w for w in model.weights}
    unknown = [p for p in v if p.startswith("logits/")]
    if unknown:
        raise ValueError(
            f"Google TF1 checkpoints hold the encoder and the pre-training heads "
            f"only, not a {type(model).__name__} head; write it --to hf or keras"
        )
    entries = names.encoder_entries(v, names.GOOGLE, cfg)
    entries += names.entries(names.POOLER, v, names.GOOGLE, cfg, part="pooled_dense")
    if "masked_lm_head/output_bias" in v:
        entries += names.entries(names.MASKED_LM, v, names.GOOGLE, cfg, part="masked_lm_head")
    if "next_sentence_head/kernel" in v:
        entries += names.entries(
            names.NEXT_SENTENCE, v, names.GOOGLE, cfg, part="next_sentence_head"
        )
    return entries


# === Reading ===


def find_checkpoint(path: str) -> str:
    """The checkpoint prefix for a folder, a prefix, or an `.index` file."""
    if path.endswith(".index"):
        path = path[: -len(".index")]
    if not os.path.isdir(path):
        if os.path.isfile(path + ".index"):
            return path
        raise FileNotFoundError(f"{path}: no such checkpoint folder or prefix")
    preferred = os.path.join(path, CHECKPOINT)
    if os.path.isfile(preferred + ".index"):
        return preferred
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(path)
    if latest:
        return latest
    indexes = sorted(glob.glob(os.path.join(path, "*.index")))
    if len(indexes) == 1:
        return indexes[0][: -len(".index")]
    if not indexes:
        raise FileNotFoundError(f"{path}: no *.ckpt.index file (not a Google checkpoint folder)")
    raise ValueError(
        f"{path}: several checkpoints ({', '.join(map(os.path.basename, indexes))}) "
        f"and no 'checkpoint' file; pass the prefix, e.g. {indexes[-1][:-6]}"
    )


def read_tensors(prefix: str) -> dict[str, np.ndarray]:
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(prefix)
        names = reader.get_variable_to_shape_map()
    except Exception as e:  # tf raises several OpError kinds; all mean "unreadable"
        raise ValueError(f"{prefix}.index: unreadable TF checkpoint ({_first_line(e)})") from None
    tensors = {}
    for name in sorted(names):
        if _ignored(name):
            tensors[name] = np.empty(0)  # skipped unread; only its name is reported
            continue
        try:
            tensors[name] = np.asarray(reader.get_tensor(name))
        except Exception as e:
            raise ValueError(
                f"{prefix}: cannot read tensor {name!r} (truncated or corrupt "
                f"data file?): {_first_line(e)}"
            ) from None
    return tensors


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def read(path: str, task: str | None = None, allow_new_heads: bool = False, **task_options):
    """(model, vocab_path, notes) from a Google checkpoint folder (or prefix).

    Without `task`, the heads present decide: both `cls/*` groups make a
    `BertPretrainer` with NSP, `cls/predictions` alone one without, none a
    `BertEncoder`.
    """
    from model.checkpoints.model_dir import build_model

    prefix = find_checkpoint(path)
    directory = os.path.dirname(prefix)
    config_path = os.path.join(directory, CONFIG)
    config, casing_note = _stated_casing(config_path, BertConfig.from_json(config_path))
    tensors = read_tensors(prefix)
    explicit = task is not None
    if not explicit:
        has_mlm = any(n.startswith("cls/predictions/") for n in tensors)
        has_nsp = any(n.startswith("cls/seq_relationship/") for n in tensors)
        task = "pretraining" if has_mlm else "encoder"
        task_options = {"next_sentence": has_nsp, **task_options} if has_mlm else task_options
    info = {
        "task": task,
        "encoder": config.to_dict(),
        **{k: v for k, v in task_options.items() if v is not None},
    }
    model = build_model(info)
    if task not in ("encoder", "pretraining"):
        # The task head cannot come from this format; the encoder can.
        entries = weight_entries(model.encoder)
    else:
        entries = weight_entries(model)
    notes = assign(
        entries,
        tensors,
        prefix,
        allow_new_heads=allow_new_heads,
        droppable=lambda n: n.startswith(HEAD_PREFIXES),
        drop_heads=explicit,
        ignored=_ignored,
    )
    if task not in ("encoder", "pretraining"):
        if not allow_new_heads:
            raise ValueError(
                f"{prefix}: a Google checkpoint has no {task} head; pass "
                f"--allow-new-heads (allow_new_heads=True) to create it fresh"
            )
        notes.append(
            f"logits ({task} head): not in {prefix}; created fresh with random initialisation"
        )

    vocab_path = check_vocabulary(os.path.join(directory, VOCAB), config.vocabulary_size)
    return model, vocab_path, notes + [casing_note] * bool(casing_note)


def _stated_casing(config_path: str, config: BertConfig) -> tuple[BertConfig, str | None]:
    """`config` with the casing its folder shows where bert_config.json states none (Google's
    never does): a release folder's name ("cased_L-12_H-768_A-12", "multi_cased_...", as
    google-research's own `validate_case_matches_checkpoint` reads it), else a vocabulary
    with capitals; and the note that says which it read."""
    from model.io.files import read_json_object
    from model.text.wordpiece import load_vocabulary

    if "do_lower_case" in read_json_object(config_path):
        return config, None
    directory = os.path.dirname(os.path.abspath(config_path))
    name = os.path.basename(directory).lower()
    if re.match(r"^(?:multi_|wwm_)?cased_", name):
        return config.replace(lowercase=False), (
            f"{config_path} states no casing: read as cased, as the folder's name says"
        )
    vocab = os.path.join(directory, VOCAB)
    if not re.match(r"^(?:multi_|wwm_)?uncased_", name) and os.path.isfile(vocab):
        tokens = load_vocabulary(vocab)
        capitals = sum(t[:1].isupper() for t in tokens if not t.startswith("["))
        if capitals > len(tokens) // 20:  # an uncased vocabulary has none
            return config.replace(lowercase=False), (
                f"{config_path} states no casing: read as cased, as {capitals} words of "
                f"{vocab} start with a capital"
            )
    return config, None


# === Writing ===


def write_checkpoint(prefix: str, tensors: dict[str, np.ndarray]) -> None:
    """A V2 checkpoint with exactly these names, published atomically (data, then index)."""
    import tensorflow as tf

    directory = os.path.dirname(os.path.abspath(prefix))
    os.makedirs(directory, exist_ok=True)
    tmp_dir = tempfile.mkdtemp(prefix=".ckpt-", dir=directory)
    try:
        tmp = os.path.join(tmp_dir, "ckpt")
        names = sorted(tensors)
        tf.raw_ops.SaveV2(
            prefix=tmp,
            tensor_names=names,
            shape_and_slices=[""] * len(names),
            tensors=[tf.constant(tensors[n]) for n in names],
        )
        data = sorted(glob.glob(tmp + ".data-*"))
        for f in data:
            os.replace(f, prefix + f[len(tmp) :])
        # Readers open the index first: publish it last.
        os.replace(tmp + ".index", prefix + ".index")
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def write(model, directory: str, vocab_path: str) -> list[str]:
    """Writes bert_config.json, bert_model.ckpt.* and vocab.txt; returns notes."""
    from model.checkpoints.model_dir import encoder_of

    cfg = encoder_of(model).config
    google_config = cfg.to_google_dict()  # refuses the exact GELU, which Google cannot name
    google_config["layer_norm_eps"] = cfg.layer_norm_epsilon
    # Not a key of Google's config: releases encode casing in the folder name.
    # modeling.py ignores unknown keys, and our reader gets the casing back.
    google_config["do_lower_case"] = cfg.lowercase
    entries = weight_entries(model)
    os.makedirs(directory, exist_ok=True)
    write_checkpoint(os.path.join(directory, CHECKPOINT), export(entries))
    write_json(os.path.join(directory, CONFIG), google_config)
    copy_vocabulary(vocab_path, directory, VOCAB)
    return []
