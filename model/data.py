"""Pre-training data: raw text in, sharded TFRecord files of instances out.

    python -m model.data --input '../shared/data/pretrain/enwiki-2015/AA/*.gz' \\
        --vocab vocab.txt --output data/wiki128 --seq-len 128

Documents are read, sentence-split and tokenised in a stream; instances are
made from a bounded pool of documents at a time (`--pool-tokens`), so memory
stays flat for a corpus larger than RAM. The pool's instances are shuffled and
dealt round-robin to `--num-shards` files. The same inputs and `--seed` give
the same bytes.

Inputs (`--inputs`, the formats RoBERTa's section 4.2 compares):
  sentence-pairs  (default; BERT, RoBERTa's SEGMENT-PAIR+NSP) `[CLS] A [SEP] B
                  [SEP]`, A and B runs of whole sentences, with a
                  next-sentence label: B continues A, or (half the time) comes
                  from another document of the same pool. `--short-seq-prob`
                  of them are made shorter on purpose.
  segments        (SpanBERT, left-to-right LM) `[CLS] S [SEP]`: consecutive
                  sentences of one document, no label; `--short-seq-prob` as
                  above. `--no-nsp` is the older name of this choice.
  segment-pairs   (ELECTRA) `[CLS] A [SEP] B [SEP]`: the sentences of one
                  stretch of a document split in two near the middle, no label
                  (B never comes from elsewhere); one in ten is A alone;
                  `--short-seq-prob` (default 0.05, ELECTRA's) of them shorter.
  full-sentences  (RoBERTa) `[CLS] S [SEP]`: whole sentences packed in reading
                  order while they fit in `--seq-len`, running on into
                  the next document with a `[SEP]` between the two; a sentence
                  that does not fit starts the next input, so every input but
                  the very last is full to within a sentence.
  doc-sentences   (RoBERTa) the same packing, but an input ends where its
                  document ends, however short.
In the packed formats a sentence longer than a whole input keeps its first
`--seq-len` - 2 tokens and loses the rest; nothing is shortened on
purpose. Records of the packed formats and segment-pairs have no
`next_sentence_labels` (`segments` records keep the all-zero one `--no-nsp`
always wrote); segment ids are 1 on B (and its [SEP]) in sentence-pairs and
segment-pairs, 0 everywhere else. `dataset.json` records the choice as
"input_format", and "next_sentence" (true for sentence-pairs only).

Masking: `dynamic` (default) writes unmasked instances and the training input
pipeline draws fresh masks every epoch (RoBERTa); `static` draws the masks
here, `--dupe-factor` times per instance with different masks
(google-research/bert, RoBERTa's static baseline), with any `--inputs`.
Records use google-research's feature names, so records made by its
`create_pretraining_data.py` train here too.

The output directory appears only when complete (built under a temporary
name, then renamed); it holds the shards, `vocab.txt` and `dataset.json`.

Tokenise once, make records anywhere: `--write-ids` writes the documents as
WordPiece ids to one `--output NAME.ids.npz.xz` file instead of records, and
such a file is then an `--input` like any text: its records are made without
tokenising and without TensorFlow (model/pretraining/tokenized.py).
"""

from __future__ import annotations

import argparse
import os
import sys

from model.io.backend import has_tensorflow
from model.io.cpus import usable_cpus
from model.io.files import check_output, check_paths, exit_on_sigterm
from model.io.flags import positive_int
from model.io.native_logs import import_tensorflow_quietly
from model.pretraining import tokenized
from model.pretraining.build import build, check_free, expand_inputs, tokenized_documents
from model.pretraining.corpus import FORMATS
from model.pretraining.instances import INPUT_FORMATS, MIN_SEQ_LEN, PACKED_FORMATS, InstanceConfig
from model.pretraining.masking import MaskingConfig, check_flags, prediction_slots
from model.pretraining.tokenized import SUFFIX, is_tokenized
from model.text.wordpiece import vocabulary_sha256

SHORT_SEQ_PROB = 0.1  # the paper's, for sentence-pairs and segments
SHORT_SEQ_PROBS = {"segment-pairs": 0.05}  # google-research/electra's, for its format


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m model.data",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _corpus_flags(p.add_argument_group("corpus and output"))
    _instance_flags(p.add_argument_group("instances"))
    _masking_flags(p.add_argument_group("masking"))
    _run_flags(p.add_argument_group("the run"))
    args = p.parse_args(argv)
    if args.write_ids and not is_tokenized(args.output):
        p.error(f"--write-ids writes one file named NAME{SUFFIX}, not {args.output}")
    try:
        args.inputs, args.short_seq_prob = resolve_inputs(
            args.inputs, args.no_nsp, args.short_seq_prob
        )
    except ValueError as e:
        p.error(str(e))
    check_flags(p, args)
    if not 0.0 <= args.short_seq_prob <= 1.0:
        p.error(f"--short-seq-prob is a probability, from 0 to 1, not {args.short_seq_prob}")
    if args.max_seq_length < MIN_SEQ_LEN:
        p.error(f"--seq-len must be at least {MIN_SEQ_LEN}, not {args.max_seq_length}")
    return args


def _corpus_flags(g) -> None:
    g.add_argument(
        "--input",
        action="append",
        required=True,
        help="input file or glob (repeatable); .gz is read as gzip",
    )
    g.add_argument("--vocab", required=True, help="WordPiece vocab.txt")
    g.add_argument("--cased", action="store_true", help="the vocabulary is cased")
    g.add_argument(
        "--output",
        required=True,
        help="new directory for the shards (with --write-ids: the NAME.ids.npz.xz file)",
    )
    g.add_argument(
        "--write-ids",
        action="store_true",
        help="write the tokenised documents (WordPiece ids) to --output instead of records",
    )
    g.add_argument("--format", default="auto", choices=FORMATS, help="corpus format")


def _instance_flags(g) -> None:
    g.add_argument(
        "--seq-len", "--max-seq-length", dest="max_seq_length", type=positive_int, default=128
    )
    g.add_argument(
        "--inputs",
        choices=INPUT_FORMATS,
        default=None,
        help="input format (above; default sentence-pairs)",
    )
    g.add_argument(
        "--short-seq-prob",
        type=float,
        default=None,
        help="sentence-pairs, segments and segment-pairs: share of instances made shorter "
        f"on purpose (default {SHORT_SEQ_PROB}; segment-pairs {SHORT_SEQ_PROBS['segment-pairs']})",
    )
    g.add_argument(
        "--no-nsp",
        action="store_true",
        help="the same as --inputs segments (single segments, no next-sentence labels)",
    )


def _masking_flags(g) -> None:
    g.add_argument("--masking", choices=("dynamic", "static"), default="dynamic")
    g.add_argument(
        "--dupe-factor",
        type=positive_int,
        default=1,
        help="static masking: copies of each instance with different masks",
    )
    g.add_argument(
        "--max-predictions",
        type=positive_int,
        default=None,
        help="static masking: prediction slots a sequence (default: what --mask-rate needs "
        "at --seq-len, never under 15 %%: 20 at 128 tokens)",
    )
    g.add_argument("--mask-rate", type=float, default=0.15)
    g.add_argument("--mask-token-rate", type=float, default=0.8)
    g.add_argument("--random-token-rate", type=float, default=0.1)
    g.add_argument("--whole-word-masking", action="store_true")


def _run_flags(g) -> None:
    g.add_argument("--num-shards", type=positive_int, default=8)
    g.add_argument(
        "--pool-tokens",
        type=positive_int,
        default=2_000_000,
        help="tokens of documents held in memory at once (bounds RAM)",
    )
    g.add_argument("--seed", type=int, default=12345)
    g.add_argument(
        "--workers",
        type=positive_int,
        default=usable_cpus(),
        help="processes making the records of the pools (default: one per core, %(default)s "
        "here); any number gives the same bytes",
    )
    g.add_argument(
        "--verbose",
        action="store_true",
        help="also show TensorFlow's C++ start-up log lines (as does setting "
        "TF_CPP_MIN_LOG_LEVEL yourself)",
    )


def resolve_inputs(
    inputs: str | None, no_nsp: bool, short_seq_prob: float | None
) -> tuple[str, float]:
    """The input format and short_seq_prob that the flags ask for; ValueError if they contradict."""
    if no_nsp:
        if inputs not in (None, "segments"):
            raise ValueError(
                f"--no-nsp means --inputs segments; it contradicts --inputs {inputs} "
                "(drop one of the two)"
            )
        inputs = "segments"
    inputs = inputs or "sentence-pairs"
    if inputs in PACKED_FORMATS:
        if short_seq_prob:
            raise ValueError(
                f"--short-seq-prob does not apply to --inputs {inputs}: its inputs are packed "
                "with whole sentences up to --seq-len, never shortened on purpose"
            )
        return inputs, 0.0
    default = SHORT_SEQ_PROBS.get(inputs, SHORT_SEQ_PROB)
    return inputs, default if short_seq_prob is None else short_seq_prob


def warn_of_casing(vocab: str, cased: bool) -> None:
    """One line when --cased and the vocabulary disagree: a cased text on an uncased vocabulary
    turns capitalised words into [UNK]; an uncased one never uses a cased vocabulary's
    capitalised WordPieces."""
    from model.text.wordpiece import load_vocabulary, looks_cased

    if cased == looks_cased(load_vocabulary(vocab)):
        return
    if cased:
        said = "has no upper-case WordPieces (uncased): --cased turns capitalised words to [UNK]"
    else:
        said = (
            "is cased: without --cased the text is lowercased and its capitalised WordPieces unused"
        )
    print(f"warning: {vocab} {said}", file=sys.stderr)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    exit_on_sigterm()  # a stopped build leaves no half-written records
    try:  # before TensorFlow: a mistyped path or a taken --output fails in under a second
        files = expand_inputs(args.input)
        check_paths(files=(args.vocab,))
        check_output(args.output, [("--input", f) for f in files] + [("--vocab", args.vocab)])
        if args.write_ids and os.path.exists(args.output):
            raise FileExistsError(f"{args.output}: output exists")
        if not args.write_ids:
            check_free(args.output)
    except (FileNotFoundError, FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    tokenized = all(is_tokenized(f) for f in files)
    if tokenized:  # nothing to tokenise: no TensorFlow
        from model.text.wordpiece import WordPieceTokenizer
    else:
        if not has_tensorflow():
            print(
                "error: tokenising text needs TensorFlow (tensorflow-text), not installed here: "
                "make the ids where it is (python -m model.data --write-ids --input TEXT "
                "--vocab VOCAB --output corpus.ids.npz.xz) and give that file as --input here",
                file=sys.stderr,
            )
            return 1
        import_tensorflow_quietly(args.verbose)
        from model.text.tokenizer import WordPieceTokenizer

    try:
        tokenizer = WordPieceTokenizer(args.vocab, lowercase=not args.cased)
        if not tokenized:
            warn_of_casing(args.vocab, args.cased)
        if args.write_ids:
            return write_ids(files, tokenizer, args)
        masking_config = MaskingConfig(
            mask_rate=args.mask_rate,
            mask_token_rate=args.mask_token_rate,
            random_token_rate=args.random_token_rate,
            max_predictions=args.max_predictions
            or prediction_slots(args.mask_rate, args.max_seq_length),
            whole_word=args.whole_word_masking,
        )
        info = build(
            files,
            tokenizer,
            args.output,
            InstanceConfig(args.max_seq_length, args.short_seq_prob, inputs=args.inputs),
            masking=args.masking,
            masking_config=masking_config,
            dupe_factor=args.dupe_factor,
            num_shards=args.num_shards,
            seed=args.seed,
            corpus_format=args.format,
            pool_tokens=args.pool_tokens,
            show_progress=sys.stderr.isatty(),
            workers=args.workers,
        )
    except (FileNotFoundError, FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(
        f"wrote {info['num_instances']} instances from {info['num_documents']} documents "
        f"({info['num_tokens']} tokens) to {args.output}"
    )
    return 0


def write_ids(files, tokenizer, args) -> int:
    documents = tokenized_documents(files, args.format, tokenizer)
    counts = tokenized.write(
        args.output, documents, vocabulary_sha256(tokenizer.vocab_path), tokenizer.lowercase
    )
    print(
        f"wrote {counts['num_tokens']} WordPiece ids of {counts['num_documents']} documents "
        f"to {args.output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
