"""Converts BERT (and ELECTRA) checkpoints between Google TF1, Hugging Face and our Keras format.

    python -m model.convert --from hf /path/to/all-MiniLM-L6-v2 --to keras runs/minilm
    python -m model.convert --from google uncased_L-4_H-256_A-4 --to hf runs/bert-mini-hf
    python -m model.convert --from keras runs/classifier --to hf runs/classifier-hf
    python -m model.convert --from hf SRC --to keras DST --task classifier --num-labels 3 --allow-new-heads
    python -m model.convert --from hf electra-small-discriminator --to keras runs/electra-small
    python -m model.convert --from keras runs/electra --to hf runs/electra-hf   # a pre-training run
    python -m model.convert --from keras runs/sst2 --to keras-hub runs/sst2-keras-hub
    python -m model.convert --from keras-hub bert_tiny_en_uncased --to keras runs/bert-tiny

Formats (a folder each):
    google  bert_config.json, bert_model.ckpt.{index,data-*}, vocab.txt  (encoder + pre-training heads)
    hf      config.json, model.safetensors, vocab.txt   (BertModel, BertForPreTraining, BertForMaskedLM,
            BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering,
            BertForMultipleChoice; ELECTRA: ElectraModel, ElectraForPreTraining, ElectraForMaskedLM)
    keras   config.json, model.weights.h5, vocab.txt (our model directory; DST ending in
            `.keras` writes a single Keras file, without the vocabulary)
    keras-hub  a preset directory as keras-hub's save_to_preset writes it (BertBackbone,
            ElectraBackbone, BertTextClassifier, BertMaskedLM; tasks keras-hub lacks are
            refused by name: --task encoder writes their encoder). keras-hub computes the
            tanh GELU: a model trained with the exact one is written with a note, and the
            check after writing measures the difference.

ELECTRA (model_type "electra"): ElectraForPreTraining reads as task
replaced_token_detection, ElectraForMaskedLM (a generator) as pretraining
without NSP, ElectraModel as encoder, each over an encoder with the factorised
embedding (`embedding_dim`); ELECTRA has no pooler, so ours is created fresh
and a note says so. Written to hf, an ELECTRA pre-training run directory
(task electra_pretraining) becomes two folders: DST holds the discriminator
(ElectraForPreTraining), DST/generator the generator (ElectraForMaskedLM). An
encoder or masked LM with a factorised embedding is written as ElectraModel /
ElectraForMaskedLM; any other task over one is refused (BertModel has no
embedding projection).

Nothing is guessed and nothing is silent: a missing, unexpected or mis-shaped
tensor, or a vocabulary that does not fit the embedding, stops the conversion
with its name. A head absent from the source (no MLM head in a sentence
encoder, no pooler in BertForTokenClassification) is created fresh only with
--allow-new-heads, and reported. After writing, the output is read back and
compared with the model, weight by weight, before it replaces DST: a failed
check leaves DST as it was (--no-verify skips it).

A fine-tuned model's usage (config.json's finetuned_task, max_seq_length,
null_threshold, document_context: what export and evaluate read) is kept in
our format and in Hugging Face's config.json (the task as `finetuning_task`);
a keras-hub preset's preprocessor takes its max_seq_length; a note names what
a format has no room for, or what a model of another task (--task) leaves behind.

The same as a Python API: `model.load(path)` detects the format and returns
the Keras model; `read(path)` also returns its vocabulary and the notes.
"""

from __future__ import annotations

import argparse
import os
import sys

from model.checkpoints.formats import FORMATS, TASKS, read, usage_for, usage_of, write
from model.checkpoints.model_info import check_model_dir
from model.io.files import check_stageable, exit_on_sigterm, held_by
from model.io.flags import positive_int
from model.io.native_logs import import_tensorflow_quietly


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m model.convert",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--from",
        dest="source",
        nargs=2,
        metavar=("FORMAT", "SRC"),
        required=True,
        help=f"source format ({', '.join(FORMATS)} or auto) and path",
    )
    parser.add_argument(
        "--to",
        dest="target",
        nargs=2,
        metavar=("FORMAT", "DST"),
        required=True,
        help=f"target format ({', '.join(FORMATS)}) and path",
    )
    parser.add_argument(
        "--task",
        choices=sorted(TASKS),
        help="model to build (default: the source's own); heads of the source "
        "that it does not use are dropped, and reported",
    )
    parser.add_argument(
        "--num-labels", type=positive_int, help="labels of a (token) classifier head"
    )
    parser.add_argument(
        "--num-choices", type=positive_int, help="choices of a multiple-choice head"
    )
    parser.add_argument(
        "--allow-new-heads",
        action="store_true",
        help="create heads absent from the source with random initialisation "
        "(each is reported by name) instead of stopping",
    )
    parser.add_argument(
        "--vocab", help="vocab.txt to use instead of (or when missing from) the source"
    )
    parser.add_argument(
        "--seq-len",
        "--sequence-length",
        dest="sequence_length",
        type=positive_int,
        help="keras-hub only: the task preprocessor's sequence length (--sequence-length is "
        "the older spelling) "
        "(default: the model's fine-tuning length, else the encoder's positions, at most 512)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing DST")
    parser.add_argument(
        "--no-verify", action="store_true", help="skip reading DST back and comparing every weight"
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also show TensorFlow's C++ start-up log lines (as does setting "
        "TF_CPP_MIN_LOG_LEVEL yourself)",
    )
    return parser


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    exit_on_sigterm()
    (src_fmt, src), (dst_fmt, dst) = args.source, args.target
    if src_fmt not in FORMATS + ("auto",):
        parser.error(f"--from: unknown format {src_fmt!r}; choose from {FORMATS + ('auto',)}")
    if dst_fmt not in FORMATS:
        parser.error(f"--to: unknown format {dst_fmt!r}; choose from {FORMATS}")
    if args.sequence_length is not None and dst_fmt != "keras-hub":
        parser.error("--seq-len is a keras-hub preset's (--to keras-hub): no other has one")
    if os.path.exists(dst) and (os.path.isfile(dst) or os.listdir(dst)) and not args.overwrite:
        parser.error(f"{dst} exists and is not empty; pass --overwrite to replace it")
    held = held_by(dst, {"the current directory": os.getcwd(), "the source": src}, "the source")
    if held:
        parser.error(f"{dst} holds {held}, which replacing it would delete; write elsewhere")
    try:
        check_stageable(dst)
        if src_fmt in ("auto", "keras"):
            check_model_dir(src)
    except (FileNotFoundError, ValueError) as e:
        parser.error(str(e))
    import_tensorflow_quietly(args.verbose)
    try:
        model, vocab_path, notes = read(
            src,
            None if src_fmt == "auto" else src_fmt,
            task=args.task,
            allow_new_heads=args.allow_new_heads,
            vocab=args.vocab,
            num_labels=args.num_labels,
            num_choices=args.num_choices,
        )
        if args.vocab:
            vocab_path = args.vocab
        usage, dropped = usage_for(model, usage_of(src, None if src_fmt == "auto" else src_fmt))
        notes += dropped
        before = set(os.listdir(dst)) if os.path.isdir(dst) else set()
        written, checked = write(
            model, dst_fmt, dst, vocab_path, args.sequence_length, usage, not args.no_verify
        )
        notes += written
        gone = sorted(before - set(os.listdir(dst))) if os.path.isdir(dst) else []
        if gone:  # --overwrite replaces DST whole: a run's metrics.json, logs, label_map.json
            notes.append(f"{dst} was replaced whole; gone from it: {', '.join(gone)}")
    except (ValueError, OSError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    from model.checkpoints.model_dir import describe

    info = describe(model)
    print(
        f"wrote {dst_fmt} {dst}: task {info['task']}, {len(model.weights)} weights"
        + (f", {checked} verified equal after reading back" if checked is not None else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
