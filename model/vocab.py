"""Learn a WordPiece vocabulary from a corpus.

    python -m model.vocab --input 'corpus/*.gz' --size 30522 --output vocab.txt

The sentences of `model.pretraining.corpus` go to `model.text.vocabulary`
(keras-hub's WordPiece learner after the tokenizer's own text cleaning);
the special tokens come first, `[PAD]` as id 0.
"""

from __future__ import annotations

import argparse
import sys

from model.io.native_logs import import_tensorflow_quietly


def corpus_sentences(
    files: list[str], corpus_format: str = "auto", max_sentences: int | None = None
):
    """A callable giving a fresh iterator over the corpus's sentences, the first N only if asked."""
    from model.pretraining.corpus import iter_documents

    def sentences():
        n = 0
        for path in files:
            for doc in iter_documents(path, corpus_format):
                for sentence in doc:
                    yield sentence
                    n += 1
                    if max_sentences and n >= max_sentences:
                        return

    return sentences


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m model.vocab",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--input", action="append", required=True, help="file or glob (repeatable)")
    p.add_argument("--size", type=int, default=30522, help="target vocabulary size")
    p.add_argument("--output", required=True, help="vocab.txt to write")
    p.add_argument("--cased", action="store_true", help="keep case and accents")
    p.add_argument("--format", default="auto", help="corpus format (see model.pretraining.corpus)")
    p.add_argument(
        "--max-sentences", type=int, default=None, help="learn from the first N sentences only"
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also show TensorFlow's C++ start-up log lines (as does setting "
        "TF_CPP_MIN_LOG_LEVEL yourself)",
    )
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    import_tensorflow_quietly(args.verbose)
    from model.pretraining.build import expand_inputs
    from model.text.vocabulary import learn_vocabulary

    try:
        files = expand_inputs(args.input)
        n = learn_vocabulary(
            corpus_sentences(files, args.format, args.max_sentences),
            args.size,
            args.output,
            not args.cased,
            source=", ".join(files[:3]),
        )
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {n} tokens to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
