"""Learn a WordPiece vocabulary from a corpus.

    python -m model.vocab --input 'corpus/*.gz' --size 30522 --output vocab.txt

Uses keras-hub's `compute_word_piece_vocabulary` (tensorflow-text's BERT
vocabulary learner) on the sentences of `model.corpus`, after the same text
cleaning the tokenizer applies, so every learned piece is reachable. The
special tokens come first: `[PAD]` is id 0, as BERT's inputs assume.
"""

from __future__ import annotations

import argparse
import os
import sys

RESERVED = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def learn_vocabulary(files: list[str], size: int, output: str, lowercase: bool = True,
                     corpus_format: str = "auto", max_sentences: int | None = None) -> int:
    """Writes a vocabulary of at most `size` tokens to `output`; returns its size."""
    import tensorflow as tf
    from keras_hub.tokenizers import compute_word_piece_vocabulary

    from model.corpus import iter_documents
    from model.io import atomic_open
    from model.tokenizer import clean_text

    def sentences():
        n = 0
        for path in files:
            for doc in iter_documents(path, corpus_format):
                for sentence in doc:
                    yield sentence
                    n += 1
                    if max_sentences and n >= max_sentences:
                        return

    data = tf.data.Dataset.from_generator(
        sentences, output_signature=tf.TensorSpec((), tf.string)).batch(1024)
    data = data.map(lambda s: clean_text(s, lowercase))
    # Seed the check: an empty corpus must fail here, not inside tensorflow-text.
    if next(iter(sentences()), None) is None:
        raise ValueError(f"no text in {', '.join(files[:3])}")
    # Lower-casing and accent stripping are already done by clean_text.
    vocabulary = compute_word_piece_vocabulary(
        data, vocabulary_size=size, lowercase=False, strip_accents=False,
        reserved_tokens=RESERVED)
    with atomic_open(output) as f:
        for token in vocabulary:
            f.write(token + "\n")
    return len(vocabulary)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m model.vocab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", action="append", required=True, help="file or glob (repeatable)")
    p.add_argument("--size", type=int, default=30522, help="target vocabulary size")
    p.add_argument("--output", required=True, help="vocab.txt to write")
    p.add_argument("--cased", action="store_true", help="keep case and accents")
    p.add_argument("--format", default="auto", help="corpus format (see model.corpus)")
    p.add_argument("--max-sentences", type=int, default=None,
                   help="learn from the first N sentences only")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    from model.data import expand_inputs

    try:
        files = expand_inputs(args.input)
        n = learn_vocabulary(files, args.size, args.output, not args.cased, args.format,
                             args.max_sentences)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {n} tokens to {args.output}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
