"""Where the project tokenizer's time goes: each graph op of `encode_tf` alone, one thread.

    PYTHONPATH=. python bench/tokenizer_stages.py [--megabytes 20] [--vocab VOCAB_TXT]

The stages of `model.text.tokenizer.clean_text` (in its order, each on the previous one's output)
and tensorflow-text's FastBertTokenizer, on the same Wikipedia text as `tokenization.py`;
then the whole `encode_tf`, and turning its ragged result into numpy. Fastest of 3 calls after
one warm-up, printed (not written to the results file: it is a profile, not a comparison).
"""

from __future__ import annotations

import argparse
import sys

import common


def fastest(fn, repeats: int = 3) -> float:
    return common.time_repeats(fn, repeats, warmup=1).min


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/tokenizer_stages.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--megabytes", type=float, default=20)
    parser.add_argument("--vocab", default=common.VOCAB)
    args = parser.parse_args(argv)
    common.tensorflow_threads(1)
    import tensorflow as tf

    from model.text import tokenizer as tok_module

    texts = common.wikipedia_lines(int(args.megabytes * 1e6))
    tok = tok_module.WordPieceTokenizer(args.vocab)
    x = tf.constant(texts)
    stages = [
        *tok_module.cleaning_stages(lowercase=True),
        ("FastBertTokenizer", tok._fast.tokenize),
    ]
    rows, cleaning = [], 0.0
    for name, op in stages:
        seconds = fastest(lambda: op(x))
        if name != "FastBertTokenizer":
            cleaning += seconds
        rows.append([name, f"{seconds:.3f}"])
        x = op(x)
    rows.append(["clean_text, sum of the stages above it", f"{cleaning:.3f}"])
    whole = tf.constant(texts)
    rows.append(
        [
            "encode_tf (clean_text + FastBertTokenizer)",
            f"{fastest(lambda: tok.encode_tf(whole)):.3f}",
        ]
    )
    ragged = tok.encode_tf(whole)
    to_numpy = fastest(lambda: (ragged.flat_values.numpy(), ragged.row_lengths().numpy()))
    rows.append(["ragged -> numpy (flat values, row lengths)", f"{to_numpy:.3f}"])
    ascii_share = float(
        tf.reduce_mean(tf.cast(tf.strings.regex_full_match(whole, "[\\x00-\\x7f]*"), tf.float32))
    )
    print(
        f"{len(texts):,} paragraphs, {sum(len(t.encode()) for t in texts) / 1e6:.1f} MB of "
        f"English Wikipedia, one thread, fastest of 3 calls; {100 * ascii_share:.0f} % of the "
        f"paragraphs are pure ASCII.\n"
    )
    print(common.table(["stage", "seconds"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
