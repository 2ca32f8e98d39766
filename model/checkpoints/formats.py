"""Any supported checkpoint format in and out: detect it, read it, write it, verify it.

    from model.checkpoints.formats import read, write, verify
    model, vocab_path, notes = read("path/to/checkpoint")   # google, hf, keras or keras-hub
    notes, checked = write(model, "hf", "out/folder", vocab_path, usage=usage_of(path))

`python -m model.convert` is the command over these; `model.load(path)` calls `read`.
Formats and the rules they follow are in that command's docstring (model/convert.py).
"""

from __future__ import annotations

import contextlib
import os

from model.checkpoints.detect import detect_format

FORMATS = ("google", "hf", "keras", "keras-hub")
# CLI task names -> (our task, options); "masked_lm" is pre-training without NSP.
TASKS = {
    "encoder": ("encoder", {}),
    "pretraining": ("pretraining", {"next_sentence": True}),
    "masked_lm": ("pretraining", {"next_sentence": False}),
    "classifier": ("classifier", {}),
    "token_classifier": ("token_classifier", {}),
    "question_answerer": ("question_answerer", {}),
    "multiple_choice": ("multiple_choice", {}),
    "replaced_token_detection": ("replaced_token_detection", {}),
}
# How a fine-tuned model is used, beside its weights (our config.json's fields, which
# export and evaluate read): the task it was fine-tuned on, the length it was trained and
# is served at, SQuAD 2.0's tuned "no answer" threshold, CoNLL-2003's document context.
# A conversion that keeps the model's task keeps them where the format has room: ours, and
# Hugging Face's config.json (the task as transformers' `finetuning_task`); a keras-hub
# preprocessor takes the length; what a format cannot hold is said in a note.
USAGE_FIELDS = ("finetuned_task", "max_seq_length", "null_threshold", "document_context")


def usage_of(path: str, fmt: str | None = None) -> dict:
    """The `USAGE_FIELDS` a model folder records ({} where its format holds none). A Hugging
    Face `finetuning_task` is read only where it names one of this project's tasks (not
    transformers' "ner", which its NER script writes for any dataset)."""
    from model.io.files import read_json_object

    fmt = fmt or detect_format(path)
    config = os.path.join(path, "config.json")
    if fmt not in ("keras", "hf") or not os.path.isfile(config):
        return {}
    data = read_json_object(config, "config")
    if fmt == "hf":
        data = {**data, "finetuned_task": _our_task_name(data.get("finetuning_task"))}
    return {k: data[k] for k in USAGE_FIELDS if data.get(k) is not None}


def _our_task_name(name) -> str | None:
    """A Hugging Face `finetuning_task` as one of this project's task names, or None."""
    from model.tasks import SPELLINGS
    from model.tasks import TASKS as TASK_NAMES

    name = SPELLINGS.get(str(name).lower(), str(name).lower())  # not "ner": any tag set
    return name if name in TASK_NAMES else None


def usage_for(model, usage: dict) -> tuple[dict, list[str]]:
    """(`usage` as far as it describes `model`, notes): a fine-tuning task whose head is not
    the model's task (the encoder of an MNLI classifier, read with --task encoder) keeps
    none of it, and says so."""
    from model import tasks
    from model.checkpoints.model_dir import describe

    name, task = usage.get("finetuned_task"), describe(model)["task"]
    try:
        head = tasks.get(name).head if name else None
    except ValueError:
        head = None  # a task of the user's own: kept as it is
    if head is None or head == task:
        return usage, []
    return {}, [f"not kept, as the model's task is now {task}, not {name}'s {head}: {usage}"]


# What `read` (and `model.load`) take beside the task: the heads' sizes and dropout.
OPTIONS = ("num_labels", "num_choices", "dropout", "next_sentence")


def _task_args(task: str | None, options: dict) -> tuple[str | None, dict]:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)}; a task head takes {OPTIONS}")
    heads = sorted(set(options) & {"num_labels", "num_choices"})
    if task is None and heads:
        raise ValueError(
            f"{', '.join(heads)} size(s) a new head: name its task too (task=, --task)"
        )
    if task is None:
        return None, options
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose from {sorted(TASKS)}")
    ours, defaults = TASKS[task]
    return ours, {**defaults, **options}


def read(
    path: str,
    fmt: str | None = None,
    task: str | None = None,
    allow_new_heads: bool = False,
    vocab: str | None = None,
    **options,
):
    """(model, vocab_path or None, notes) for a checkpoint in any of the formats.

    Args:
        path: the folder (or `.keras` file, or Google checkpoint prefix).
        fmt: one of `FORMATS`; None detects it.
        task: a key of `TASKS`; None keeps the checkpoint's own.
        allow_new_heads: create heads absent from the source fresh (reported
            in the notes) instead of stopping.
        vocab: a vocab.txt for a Hugging Face folder without one (tokenizer.json alone).
        **options: `num_labels`, `num_choices`, `dropout` for task heads.
    """
    path = os.path.expanduser(path)  # "~/models/x" from Python as from a shell
    fmt = fmt or detect_format(path)
    ours, options = _task_args(task, {k: v for k, v in options.items() if v is not None})
    if fmt == "hf":
        from model.checkpoints import huggingface as hf_checkpoint

        return hf_checkpoint.read(path, ours, allow_new_heads, vocab, **options)
    if fmt == "google":
        from model.checkpoints import google as google_checkpoint

        return google_checkpoint.read(path, ours, allow_new_heads, **options)
    if fmt == "keras":
        return _read_keras(path, ours, allow_new_heads, options)
    if fmt == "keras-hub":
        from model.checkpoints import keras_hub_preset

        return keras_hub_preset.read(path, ours, allow_new_heads, **options)
    raise ValueError(f"unknown format {fmt!r}; choose from {FORMATS}")


def _read_keras(path: str, task, allow_new_heads: bool, options: dict):
    import keras

    from model.checkpoints import model_dir

    if path.endswith(".keras") and os.path.isfile(path):
        # safe_mode refuses lambdas and other code embedded in the file.
        model, vocab_path = keras.saving.load_model(path, safe_mode=True), None
    else:
        model = model_dir.load(path)
        vocab_path = os.path.join(path, model_dir.VOCAB)
        if not os.path.isfile(vocab_path):
            vocab_path = None
    if task is None:
        return model, vocab_path, []
    info = model_dir.describe(model)
    wanted = {**info, "task": task, **options}
    if all(info.get(k) == v for k, v in wanted.items() if k != "encoder"):
        return model, vocab_path, []
    encoder = model_dir.encoder_of(model)
    new = model_dir.build_model(wanted, encoder=encoder)
    old_heads = {w.path for w in model.weights} - {w.path for w in encoder.weights}
    new_heads = {w.path for w in new.weights} - {w.path for w in encoder.weights}
    old_values = {w.path: w for w in model.weights}
    kept = sorted(old_heads & new_heads)
    for w in new.weights:
        if w.path in kept and tuple(w.shape) == tuple(old_values[w.path].shape):
            w.assign(old_values[w.path])
        elif w.path in kept:
            kept.remove(w.path)
    fresh = sorted(new_heads - set(kept))
    notes = []
    if fresh and not allow_new_heads:
        raise ValueError(
            f"{path}: task {task!r} needs {', '.join(fresh)}, which the source lacks; "
            f"pass --allow-new-heads (allow_new_heads=True) to create them fresh"
        )
    if fresh:
        notes.append(f"created fresh with random initialisation: {', '.join(fresh)}")
    dropped = sorted(old_heads - set(kept))
    if dropped:
        notes.append(f"dropped (not used by task {task!r}): {', '.join(dropped)}")
    return new, vocab_path, notes


def write(
    model,
    fmt: str,
    path: str,
    vocab_path: str | None,
    sequence_length: int | None = None,
    usage: dict | None = None,
    check: bool = True,
) -> tuple[list[str], int | None]:
    """Writes `model` in format `fmt`; returns (notes, weights verified or None).

    Args:
        sequence_length: a keras-hub task preprocessor's (the other formats have none;
            default: `usage`'s max_seq_length, else the encoder's positions, at most 512).
        usage: the source's `USAGE_FIELDS` (`usage_of`), kept where `fmt` has room.
        check: read the output back and compare it with `model` (`verify`) before it
            replaces what `path` held: a failed check leaves `path` as it was.
    """
    usage = usage or {}
    if fmt == "keras" and path.endswith(".keras"):
        from model.io.files import atomic_path

        with atomic_path(path) as tmp, _naming(tmp, path):
            model.save(tmp)
            checked = _verify_keras_file(model, tmp) if check else None
        notes = ["a .keras file holds no vocabulary"] + _not_kept(usage, "a .keras file")
        return [note.replace(tmp, path) for note in notes], checked
    if vocab_path is None:
        raise ValueError(f"writing {fmt} needs a vocabulary; the source has none, pass --vocab")
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose from {FORMATS}")
    from model.checkpoints.model_dir import encoder_of
    from model.io.files import staged_directory
    from model.text.wordpiece import check_vocabulary

    check_vocabulary(vocab_path, encoder_of(model).config.vocabulary_size)  # before any write
    if fmt in ("hf", "google"):
        _refuse_own_head_settings(model, fmt)
    # The whole folder, checked, then in place of the old one: no old file stays beside the
    # new, and a folder that fails its check replaces nothing.
    with staged_directory(path) as tmp, _naming(tmp, path):
        notes, kept = _write_folder(model, fmt, tmp, vocab_path, sequence_length, usage)
        checked = None
        if check:
            checked, more = verify(model, fmt, tmp, kept)
            notes += more
    return [note.replace(tmp, path) for note in notes], checked


@contextlib.contextmanager
def _naming(tmp: str, path: str):
    """An error raised while `tmp` stands in for `path` names `path` (`tmp` is gone by the
    time it is read)."""
    try:
        yield
    except ValueError as e:
        raise ValueError(str(e).replace(tmp, path)) from None


def _write_folder(model, fmt, path, vocab_path, sequence_length, usage) -> tuple[list, dict]:
    """(notes, the usage fields written) of `model` written as `fmt` to `path`."""
    from model.checkpoints import electra

    if fmt == "keras":
        from model.checkpoints import model_dir

        model_dir.save(model, path, vocab_path, extra=usage)
        return [], usage
    if fmt == "hf" and not electra.writes_as_electra(model):
        from model.checkpoints import huggingface as hf_checkpoint

        notes = hf_checkpoint.write(model, path, vocab_path, usage)
        name = usage.get("finetuned_task")
        if name is None or _our_task_name(name) == name:
            return notes, usage
        # Written as finetuning_task, but not read back as one of this project's tasks.
        return notes, {k: v for k, v in usage.items() if k != "finetuned_task"}
    if fmt == "hf":
        return electra.write(model, path, vocab_path) + _not_kept(usage, "ELECTRA's form"), {}
    if fmt == "google":
        from model.checkpoints import google as google_checkpoint

        notes = google_checkpoint.write(model, path, vocab_path)
        return notes + _not_kept(usage, "a Google checkpoint"), {}
    if fmt == "keras-hub":
        from model.checkpoints import keras_hub_preset

        length = usage.get("max_seq_length") if sequence_length is None else sequence_length
        notes = keras_hub_preset.write(model, path, vocab_path, length)
        rest = {k: v for k, v in usage.items() if k != "max_seq_length"}
        return notes + _not_kept(rest, "a keras-hub preset"), {}
    raise AssertionError(fmt)


def _not_kept(usage: dict, where: str) -> list[str]:
    """The note for `usage` fields that `where` has no room for."""
    if not usage:
        return []
    return [f"{where} has no room for the source's {usage}: not kept"]


def _refuse_own_head_settings(model, fmt: str) -> None:
    """A masked-LM head computing other than its encoder (read from keras-hub's
    BertMaskedLM) has no form in formats whose head follows the encoder's config."""
    from model.checkpoints.model_dir import describe

    info = describe(model)
    own = {k: info[k] for k in ("head_activation", "head_layer_norm_epsilon") if k in info}
    if own:
        raise ValueError(
            f"this masked-LM head computes {own}, unlike its encoder; {fmt}'s head follows "
            f"the encoder's config: pass --task encoder to write the encoder alone"
        )


def verify(model, fmt: str, path: str, usage: dict | None = None) -> tuple[int, list[str]]:
    """Reads `path` back and checks every weight it holds equals the model's, and that it
    records `usage` (`usage_of`); returns (weights checked, notes)."""
    checked = _verify(model, fmt, path)
    if usage is not None and usage != usage_of(path, fmt):
        raise ValueError(
            f"{path}: verification failed: it records {usage_of(path, fmt)}, not {usage}"
        )
    if fmt == "keras-hub":
        from model.checkpoints import keras_hub_preset

        return checked, keras_hub_preset.check_outputs(model, path)
    return checked, []


def _verify_keras_file(model, path: str) -> int:
    """A `.keras` file read back as `model.load` reads it: every weight equal to `model`'s,
    in order (the file holds the same model); returns the weights checked."""
    import keras

    again = keras.saving.load_model(path, safe_mode=True)
    if len(again.weights) != len(model.weights):
        raise ValueError(
            f"{path}: verification failed: {len(again.weights)} weights read back, "
            f"{len(model.weights)} written"
        )
    return _same_in_order(model, again, path)


def _same_in_order(model, again, path: str) -> int:
    """Checks `again` (the same model read back) holds `model`'s weights in their order;
    returns how many."""
    from model.checkpoints.mapping import same_values

    for w, back in zip(model.weights, again.weights, strict=True):
        if not same_values(w.numpy(), back.numpy()):
            raise ValueError(f"{path}: verification failed: {w.path} differs after writing")
    return len(model.weights)


def _verify(model, fmt: str, path: str) -> int:
    import numpy as np

    from model.checkpoints.mapping import same_values
    from model.checkpoints.model_dir import describe

    info = describe(model)
    task = info["task"]
    if fmt == "hf":
        from model.checkpoints import electra

        if electra.writes_as_electra(model):
            # ELECTRA has no pooler; a pre-training run is two folders.
            return electra.verify(model, path)
    if task == "pretraining":
        task = "pretraining" if info["next_sentence"] else "masked_lm"
    elif task not in TASKS:
        task = None  # another objective's pre-training model: the written file's own
    # The written format may lack the pooler (hf heads without one): allow it back.
    again, _, _ = read(
        path,
        fmt,
        task=task,
        allow_new_heads=True,
        num_labels=info.get("num_labels"),
        num_choices=info.get("num_choices"),
    )
    ours = {w.path: np.asarray(w.numpy()) for w in model.weights}
    if len(ours) < len(model.weights):
        # Names repeat (ELECTRA's generator names its blocks as the discriminator
        # does): the same model lists its weights in the same order.
        return _same_in_order(model, again, path)
    skip = {"pooled_dense/kernel", "pooled_dense/bias"} if fmt == "hf" else set()
    if fmt == "hf":
        from model.checkpoints import huggingface as hf_checkpoint

        if hf_checkpoint.architecture_of(info) not in hf_checkpoint.WITHOUT_POOLER:
            skip = set()
    checked = 0
    for w in again.weights:
        if w.path in skip:
            continue
        if not same_values(w.numpy(), ours[w.path]):
            raise ValueError(f"{path}: verification failed: {w.path} differs after writing")
        checked += 1
    return checked
