"""Pre-training data: raw text in, sharded TFRecord files of instances out.

    python -m model.data --input '../shared/data/pretrain/enwiki-2015/AA/*.gz' \\
        --vocab vocab.txt --output data/wiki128 --max-seq-length 128

Documents are read, sentence-split and tokenised in a stream; instances are
made from a bounded pool of documents at a time (`--pool-tokens`), so memory
stays flat for a corpus larger than RAM. NotNext segments come from another
document of the same pool. The pool's instances are shuffled and dealt
round-robin to `--num-shards` files. The same inputs and `--seed` give the
same bytes.

Masking: `dynamic` (default) writes unmasked instances and the training input
pipeline draws fresh masks every epoch (RoBERTa); `static` draws the masks
here, `--dupe-factor` times per instance with different masks
(google-research/bert). Records use google-research's feature names, so
records made by its `create_pretraining_data.py` train here too.

The output directory appears only when complete (built under a temporary
name, then renamed); it holds the shards, `vocab.txt` and `dataset.json`.
"""

from __future__ import annotations

import argparse
import sys

from model.io.native_logs import import_tensorflow_quietly
from model.pretraining.build import build, expand_inputs
from model.pretraining.corpus import FORMATS
from model.pretraining.instances import InstanceConfig
from model.pretraining.masking import MaskingConfig


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m model.data",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--input",
        action="append",
        required=True,
        help="input file or glob (repeatable); .gz is read as gzip",
    )
    p.add_argument("--vocab", required=True, help="WordPiece vocab.txt")
    p.add_argument("--cased", action="store_true", help="the vocabulary is cased")
    p.add_argument("--output", required=True, help="new directory for the shards")
    p.add_argument("--format", default="auto", choices=FORMATS, help="corpus format")
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--short-seq-prob", type=float, default=0.1)
    p.add_argument("--no-nsp", action="store_true", help="single segments, no next-sentence labels")
    p.add_argument("--masking", choices=("dynamic", "static"), default="dynamic")
    p.add_argument(
        "--dupe-factor",
        type=int,
        default=1,
        help="static masking: copies of each instance with different masks",
    )
    p.add_argument("--max-predictions", type=int, default=20)
    p.add_argument("--mask-rate", type=float, default=0.15)
    p.add_argument("--mask-token-rate", type=float, default=0.8)
    p.add_argument("--random-token-rate", type=float, default=0.1)
    p.add_argument("--whole-word-masking", action="store_true")
    p.add_argument("--num-shards", type=int, default=8)
    p.add_argument(
        "--pool-tokens",
        type=int,
        default=2_000_000,
        help="tokens of documents held in memory at once (bounds RAM)",
    )
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also show TensorFlow's C++ start-up log lines (as does setting "
        "TF_CPP_MIN_LOG_LEVEL yourself)",
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import_tensorflow_quietly(args.verbose)
    from model.text.tokenizer import WordPieceTokenizer

    try:
        files = expand_inputs(args.input)
        tokenizer = WordPieceTokenizer(args.vocab, lowercase=not args.cased)
        masking_config = MaskingConfig(
            mask_rate=args.mask_rate,
            mask_token_rate=args.mask_token_rate,
            random_token_rate=args.random_token_rate,
            max_predictions=args.max_predictions,
            whole_word=args.whole_word_masking,
        )
        info = build(
            files,
            tokenizer,
            args.output,
            InstanceConfig(args.max_seq_length, args.short_seq_prob, not args.no_nsp),
            masking=args.masking,
            masking_config=masking_config,
            dupe_factor=args.dupe_factor,
            num_shards=args.num_shards,
            seed=args.seed,
            corpus_format=args.format,
            pool_tokens=args.pool_tokens,
            show_progress=sys.stderr.isatty(),
        )
    except (FileNotFoundError, FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(
        f"wrote {info['num_instances']} instances from {info['num_documents']} documents "
        f"({info['num_tokens']} tokens) to {args.output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
