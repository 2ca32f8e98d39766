"""Learning a WordPiece vocabulary from sentences (the work of `python -m model.vocab`).

    from model.text.vocabulary import learn_vocabulary
    learn_vocabulary(lambda: iter(["Some text.", "More text."]), 1000, "vocab.txt")

Uses keras-hub's `compute_word_piece_vocabulary` (tensorflow-text's BERT
vocabulary learner) after the same text cleaning the tokenizer applies, so
every learned piece is reachable. The special tokens come first: `[PAD]` is
id 0, as BERT's inputs assume.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

RESERVED = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def learn_vocabulary(
    sentences: Callable[[], Iterator[str]],
    size: int,
    output: str,
    lowercase: bool = True,
    source: str = "the corpus",
) -> int:
    """Writes a vocabulary of at most `size` tokens to `output`; returns its size.

    Args:
        sentences: called to get a fresh iterator over the training sentences
            (it is read more than once).
        size: the target vocabulary size, special tokens included.
        output: the vocab.txt to write (atomically).
        lowercase: lower-case and strip accents, as an uncased model does.
        source: named in the error when `sentences` yields nothing.
    """
    import tensorflow as tf
    from keras_hub.tokenizers import compute_word_piece_vocabulary

    from model.io.files import atomic_open
    from model.text.tokenizer import clean_text

    # Seed the check: an empty corpus must fail here, not inside tensorflow-text.
    if next(iter(sentences()), None) is None:
        raise ValueError(f"no text in {source}")
    data = tf.data.Dataset.from_generator(
        sentences, output_signature=tf.TensorSpec((), tf.string)
    ).batch(1024)
    data = data.map(lambda s: clean_text(s, lowercase))
    # Lower-casing and accent stripping are already done by clean_text.
    vocabulary = compute_word_piece_vocabulary(
        data, vocabulary_size=size, lowercase=False, strip_accents=False, reserved_tokens=RESERVED
    )
    with atomic_open(output) as f:
        for token in vocabulary:
            f.write(token + "\n")
    return len(vocabulary)
