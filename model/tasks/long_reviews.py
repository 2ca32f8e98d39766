"""A long-text check from SST-2 dev: rows of same-label dev sentences joined until they are a
few hundred WordPieces long, in SST-2's own `sentence<TAB>label` format.

    python -m model.tasks.glue make-long-reviews --min-wordpieces 200 --max-wordpieces 400 \\
        --seed 0 --input ../shared/data/glue/SST-2/dev.tsv --output runs/sst2-long/dev.tsv
    python -m model.evaluate --task sst2 --model assets/models/sst2 --data runs/sst2-long/dev.tsv \\
        --long-texts truncate      # windows (the default) or truncate

SST-2 has no long texts, so this builds one from its dev set, each sentence used at most once.
As every sentence of a row has the row's label, windows agree by construction: the check tests
the reading (is the verdict of a long text its sentences' verdict?), not whether a model follows
a review that weighs good against bad. The command is `model.tasks.glue`'s (its documented
spelling); the code lives here.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

from model.tasks.base import check_labelled
from model.tasks.glue import Sst2


def make_long_reviews(
    lengths: list[int],
    labels: list,
    min_wordpieces: int,
    max_wordpieces: int,
    rng: random.Random,
) -> list[list[int]]:
    """Rows for a long-text check: each a list of indices of sentences with one label,
    whose WordPieces (`lengths`) add up to between `min_wordpieces` and
    `max_wordpieces`; every sentence is in at most one row.

    For each label in turn, its sentences are shuffled; a row draws a target length
    uniformly from [min, max] and takes sentences until it reaches it, skipping one that
    would take it past max. A row that cannot reach min (what is left does not fit) is
    dropped and its sentences not used. The rows come back shuffled, labels mixed.

    Example:
    >>> make_long_reviews([5, 5, 5, 5], ["1", "1", "1", "0"], 8, 10, random.Random(0))
    [[1, 0]]
    """
    if not 0 < min_wordpieces <= max_wordpieces:
        raise ValueError(
            f"need 0 < min_wordpieces <= max_wordpieces, not {min_wordpieces}, {max_wordpieces}"
        )
    by_label: dict = {}
    for k, label in enumerate(labels):
        by_label.setdefault(label, []).append(k)
    rows = []
    for label in sorted(by_label):
        pool = by_label[label]
        rng.shuffle(pool)
        while pool:
            target = rng.randint(min_wordpieces, max_wordpieces)
            row, n = [], 0
            while n < target:
                fits = (
                    j for j in reversed(range(len(pool))) if n + lengths[pool[j]] <= max_wordpieces
                )
                j = next(fits, None)
                if j is None:
                    break
                n += lengths[pool[j]]
                row.append(pool.pop(j))
            if not row:  # what is left is longer than a whole row
                break
            if n >= min_wordpieces:
                rows.append(row)
    rng.shuffle(rows)
    return rows


# === Command line ===

# The shipped sentiment model's vocabulary: WordPieces are counted as it reads them.
DEFAULT_VOCAB = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "assets",
    "models",
    "sst2",
    "vocab.txt",
)


def main(argv=None) -> int:
    """`make-long-reviews`: the rows written, their summary printed as JSON."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    from model.text.wordpiece import WordPieceTokenizer

    try:
        examples = Sst2().read(args.input)
        check_labelled(examples)
        sentences = [e.text_a.strip() for e in examples]
        tokenizer = WordPieceTokenizer(args.vocab)
        lengths = [len(ids) for ids in tokenizer.encode(sentences)]
        rows = make_long_reviews(
            lengths,
            [e.label for e in examples],
            args.min_wordpieces,
            args.max_wordpieces,
            random.Random(args.seed),
        )
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not rows:
        print(
            f"error: {args.input}: too few sentences for one row of {args.min_wordpieces} "
            f"WordPieces",
            file=sys.stderr,
        )
        return 1
    _write_rows(args.output, sentences, [examples[row[0]].label for row in rows], rows)
    print(json.dumps(_summary(args, examples, rows, lengths), indent=2))
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m model.tasks.glue", description="GLUE data tools.")
    sub = p.add_subparsers(dest="command", required=True)
    make = sub.add_parser(
        "make-long-reviews",
        help="a long-text check in SST-2's format from SST-2 dev",
        description=make_long_reviews.__doc__,
    )
    make.add_argument("--input", required=True, help="an SST-2 file (sentence, label): dev.tsv")
    make.add_argument("--output", required=True, help="the SST-2-format .tsv file to write")
    make.add_argument("--min-wordpieces", type=int, default=200)
    make.add_argument("--max-wordpieces", type=int, default=400)
    make.add_argument("--seed", type=int, default=0)
    make.add_argument(
        "--vocab",
        default=DEFAULT_VOCAB,
        help="the vocabulary WordPieces are counted with, lower-cased "
        "(default: the shipped sentiment bundle's, assets/models/sst2/vocab.txt)",
    )
    return p


def _write_rows(path: str, sentences: list[str], labels: list[str], rows) -> None:
    """The rows in SST-2's format: each its sentences joined by one space (so that it
    reads as their WordPieces one after another), and its label."""
    from model.io.files import atomic_path

    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write("sentence\tlabel\n")
            for row, label in zip(rows, labels):
                f.write(" ".join(sentences[k] for k in row) + "\t" + label + "\n")


def _summary(args, examples, rows, lengths: list[int]) -> dict:
    sizes = [sum(lengths[k] for k in row) for row in rows]
    return {
        "output": args.output,
        "rows": len(rows),
        "rows_by_label": {
            label: sum(examples[row[0]].label == label for row in rows)
            for label in sorted({e.label for e in examples})
        },
        "sentences_used": sum(map(len, rows)),
        "sentences": len(examples),
        "wordpieces": {
            "min": min(sizes),
            "mean": round(sum(sizes) / len(sizes), 1),
            "max": max(sizes),
        },
        "seed": args.seed,
    }


if __name__ == "__main__":
    sys.exit(main())
