"""Converts BERT checkpoints between Google TF1, Hugging Face and our Keras format.

    python -m model.convert --from hf /path/to/all-MiniLM-L6-v2 --to keras runs/minilm
    python -m model.convert --from google uncased_L-4_H-256_A-4 --to hf runs/bert-mini-hf
    python -m model.convert --from keras runs/classifier --to hf runs/classifier-hf
    python -m model.convert --from hf SRC --to keras DST --task classifier --num-labels 3 --allow-new-heads

Formats (a folder each):
    google  bert_config.json, bert_model.ckpt.{index,data-*}, vocab.txt  (encoder + pre-training heads)
    hf      config.json, model.safetensors, vocab.txt   (BertModel, BertForPreTraining, BertForMaskedLM,
            BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering,
            BertForMultipleChoice)
    keras   config.json, model.weights.h5, vocab.txt (our model directory; DST ending in
            `.keras` writes a single Keras file, without the vocabulary)

Nothing is guessed and nothing is silent: a missing, unexpected or mis-shaped
tensor, or a vocabulary that does not fit the embedding, stops the conversion
with its name. A head absent from the source (no MLM head in a sentence
encoder, no pooler in BertForTokenClassification) is created fresh only with
--allow-new-heads, and reported. After writing, the output is read back and
compared with the model, weight by weight (--no-verify skips it).

The same as a Python API: `model.load(path)` detects the format and returns
the Keras model; `read(path)` also returns its vocabulary and the notes.
"""

from __future__ import annotations

import argparse
import os
import sys

FORMATS = ("google", "hf", "keras")
# CLI task names -> (our task, options); "masked_lm" is pre-training without NSP.
TASKS = {
    "encoder": ("encoder", {}),
    "pretraining": ("pretraining", {"next_sentence": True}),
    "masked_lm": ("pretraining", {"next_sentence": False}),
    "classifier": ("classifier", {}),
    "token_classifier": ("token_classifier", {}),
    "question_answerer": ("question_answerer", {}),
    "multiple_choice": ("multiple_choice", {}),
}


def detect_format(path: str) -> str:
    """"keras", "hf" or "google", from the files a path holds."""
    if path.endswith(".keras") and os.path.isfile(path):
        return "keras"
    if not os.path.isdir(path):
        if os.path.isfile(path + ".index") or path.endswith(".index"):
            return "google"
        raise FileNotFoundError(f"{path}: no such model folder or file")
    files = set(os.listdir(path))
    if "config.json" in files and "model.weights.h5" in files:
        return "keras"
    if "config.json" in files and (files & {"model.safetensors", "model.safetensors.index.json",
                                            "pytorch_model.bin"}):
        return "hf"
    if "bert_config.json" in files and any(f.endswith(".index") for f in files):
        return "google"
    raise ValueError(f"{path}: not a recognised model folder (expected config.json + "
                     f"model.weights.h5, config.json + model.safetensors, or bert_config.json + "
                     f"*.ckpt.index); found {sorted(files)[:10]}")


def _task_args(task: str | None, options: dict) -> tuple[str | None, dict]:
    if task is None:
        return None, options
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose from {sorted(TASKS)}")
    ours, defaults = TASKS[task]
    return ours, {**defaults, **options}


def read(path: str, fmt: str | None = None, task: str | None = None,
         allow_new_heads: bool = False, **options):
    """(model, vocab_path or None, notes) for a checkpoint in any of the formats.

    Args:
        path: the folder (or `.keras` file, or Google checkpoint prefix).
        fmt: "google", "hf" or "keras"; None detects it.
        task: a key of `TASKS`; None keeps the checkpoint's own.
        allow_new_heads: create heads absent from the source fresh (reported
            in the notes) instead of stopping.
        **options: `num_labels`, `num_choices`, `dropout` for task heads.
    """
    fmt = fmt or detect_format(path)
    ours, options = _task_args(task, {k: v for k, v in options.items() if v is not None})
    if fmt == "hf":
        from model import hf_checkpoint

        return hf_checkpoint.read(path, ours, allow_new_heads, **options)
    if fmt == "google":
        from model import google_checkpoint

        return google_checkpoint.read(path, ours, allow_new_heads, **options)
    if fmt == "keras":
        return _read_keras(path, ours, allow_new_heads, options)
    raise ValueError(f"unknown format {fmt!r}; choose from {FORMATS}")


def _read_keras(path: str, task, allow_new_heads: bool, options: dict):
    import keras

    from model import model_dir

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
        raise ValueError(f"{path}: task {task!r} needs {', '.join(fresh)}, which the source lacks; "
                         f"pass --allow-new-heads to create them fresh")
    if fresh:
        notes.append(f"created fresh with random initialisation: {', '.join(fresh)}")
    dropped = sorted(old_heads - set(kept))
    if dropped:
        notes.append(f"dropped (not used by task {task!r}): {', '.join(dropped)}")
    return new, vocab_path, notes


def write(model, fmt: str, path: str, vocab_path: str | None) -> list[str]:
    """Writes `model` in format `fmt`; returns notes."""
    if fmt == "keras" and path.endswith(".keras"):
        from model.io import atomic_path

        with atomic_path(path) as tmp:
            model.save(tmp)
        return ["a .keras file holds no vocabulary"]
    if vocab_path is None:
        raise ValueError(f"writing {fmt} needs a vocabulary; the source has none, pass --vocab")
    if fmt == "keras":
        from model import model_dir

        model_dir.save(model, path, vocab_path)
        return []
    if fmt == "hf":
        from model import hf_checkpoint

        return hf_checkpoint.write(model, path, vocab_path)
    if fmt == "google":
        from model import google_checkpoint

        return google_checkpoint.write(model, path, vocab_path)
    raise ValueError(f"unknown format {fmt!r}; choose from {FORMATS}")


def verify(model, fmt: str, path: str) -> int:
    """Reads `path` back and checks every weight it holds equals the model's."""
    import numpy as np

    from model.model_dir import describe

    info = describe(model)
    task = info["task"]
    if task == "pretraining":
        task = "pretraining" if info["next_sentence"] else "masked_lm"
    # The written format may lack the pooler (hf heads without one): allow it back.
    again, _, _ = read(path, fmt, task=task, allow_new_heads=True,
                       num_labels=info.get("num_labels"), num_choices=info.get("num_choices"))
    ours = {w.path: np.asarray(w.numpy()) for w in model.weights}
    skip = {"pooled_dense/kernel", "pooled_dense/bias"} if fmt == "hf" else set()
    if fmt == "hf":
        from model import hf_checkpoint

        if hf_checkpoint.architecture_of(info) not in hf_checkpoint.WITHOUT_POOLER:
            skip = set()
    checked = 0
    for w in again.weights:
        if w.path in skip:
            continue
        if not np.array_equal(np.asarray(w.numpy()), ours[w.path]):
            raise ValueError(f"{path}: verification failed: {w.path} differs after writing")
        checked += 1
    return checked


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m model.convert", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="source", nargs=2, metavar=("FORMAT", "SRC"), required=True,
                        help=f"source format ({', '.join(FORMATS)} or auto) and path")
    parser.add_argument("--to", dest="target", nargs=2, metavar=("FORMAT", "DST"), required=True,
                        help=f"target format ({', '.join(FORMATS)}) and path")
    parser.add_argument("--task", choices=sorted(TASKS),
                        help="model to build (default: the source's own); heads of the source "
                             "that it does not use are dropped, and reported")
    parser.add_argument("--num-labels", type=int, help="labels of a (token) classifier head")
    parser.add_argument("--num-choices", type=int, help="choices of a multiple-choice head")
    parser.add_argument("--allow-new-heads", action="store_true",
                        help="create heads absent from the source with random initialisation "
                             "(each is reported by name) instead of stopping")
    parser.add_argument("--vocab", help="vocab.txt to use instead of (or when missing from) the source")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing DST")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip reading DST back and comparing every weight")
    args = parser.parse_args(argv)
    (src_fmt, src), (dst_fmt, dst) = args.source, args.target
    if src_fmt not in FORMATS + ("auto",):
        parser.error(f"--from: unknown format {src_fmt!r}; choose from {FORMATS + ('auto',)}")
    if dst_fmt not in FORMATS:
        parser.error(f"--to: unknown format {dst_fmt!r}; choose from {FORMATS}")
    if os.path.exists(dst) and (os.path.isfile(dst) or os.listdir(dst)) and not args.overwrite:
        parser.error(f"{dst} exists and is not empty; pass --overwrite to replace it")
    try:
        model, vocab_path, notes = read(
            src, None if src_fmt == "auto" else src_fmt, task=args.task,
            allow_new_heads=args.allow_new_heads, num_labels=args.num_labels,
            num_choices=args.num_choices)
        if args.vocab:
            vocab_path = args.vocab
        notes += write(model, dst_fmt, dst, vocab_path)
        checked = None
        if not args.no_verify and not dst.endswith(".keras"):
            checked = verify(model, dst_fmt, dst)
    except (ValueError, FileNotFoundError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    from model.model_dir import describe

    info = describe(model)
    print(f"wrote {dst_fmt} {dst}: task {info['task']}, {len(model.weights)} weights"
          + (f", {checked} verified equal after reading back" if checked is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
