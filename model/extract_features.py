"""Feature-based BERT (paper section 5.3): the hidden states of chosen layers, per token.

    python -m model.extract_features --model runs/base --input sentences.txt \\
        --output features.jsonl --layers=-1,-2,-3,-4 --seq-len 128

`--model` is any checkpoint `model.load` reads (our model directory, a Hugging
Face or Google folder); only the encoder runs. The input has one text per
line, or a pair as `text A ||| text B`. The output is Google's
`extract_features.py` JSON-lines format, one line per input line:

    {"linex_index": 0, "features": [{"token": "[CLS]",
        "layers": [{"index": -1, "values": [0.1234, ...]}, ...]}, ...]}

Layer -1 is the last Transformer block's output, -2 the one before, and so on
(0 is the first block, not the embeddings, as in Google's tool). The Python
side is `model.features.layers`.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from model.checkpoints.model_info import check_model_dir, check_model_path
from model.features.layers import (
    DEFAULT_LAYERS,
    LayerFeatures,
    extract,
    load_encoder,
    parse_layers,
    read_lines,
)
from model.io.files import check_paths
from model.io.flags import non_negative_int, positive_int
from model.io.native_logs import import_tensorflow_quietly


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m model.extract_features",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model", required=True, help="checkpoint: model directory, HF or Google folder"
    )
    p.add_argument("--input", required=True, help="text file, one text (or 'A ||| B') a line")
    p.add_argument("--output", required=True, help="JSON-lines file to write")
    p.add_argument(
        "--layers",
        default=",".join(map(str, DEFAULT_LAYERS)),
        help="comma-separated block indexes, -1 the last (default: %(default)s), "
        "'embeddings' (the embedding layer's output) or 'all' (every block); write "
        "--layers=-1,-2 (with '=': the value starts with '-')",
    )
    p.add_argument(
        "--seq-len", "--max-seq-length", dest="max_seq_length", type=positive_int, default=128
    )
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument(
        "--decimals", type=non_negative_int, default=6, help="rounding of the values written"
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also show TensorFlow's C++ start-up log lines (as does setting "
        "TF_CPP_MIN_LOG_LEVEL yourself)",
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:  # before TensorFlow starts: a mistyped path or a bad config.json fails at once
        check_paths(files=(args.input,))
        check_model_path(args.model)
        check_model_dir(args.model)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    import_tensorflow_quietly(args.verbose)
    from model.io.files import atomic_open
    from model.text import tokenizer_class

    try:
        if args.batch_size < 1:
            raise ValueError("--batch-size must be positive")
        pairs = read_lines(args.input)
        encoder, vocab_path = load_encoder(args.model)
        layers = parse_layers(args.layers, encoder.config.num_layers)
        if args.max_seq_length > encoder.config.max_sequence_length:
            raise ValueError(
                f"--seq-len {args.max_seq_length} exceeds the model's "
                f"{encoder.config.max_sequence_length}"
            )
        tokenizer = tokenizer_class()(vocab_path, lowercase=encoder.config.lowercase)
        features = LayerFeatures(encoder, layers)
        with atomic_open(args.output) as f:
            for index, (tokens, values) in enumerate(
                extract(features, tokenizer, pairs, args.max_seq_length, args.batch_size)
            ):
                values = np.round(values.astype(np.float64), args.decimals)
                record = {
                    "linex_index": index,
                    "features": [
                        {
                            "token": token,
                            "layers": [
                                {"index": layer, "values": v.tolist()}
                                for layer, v in zip(layers, values[t])
                            ],
                        }
                        for t, token in enumerate(tokens)
                    ],
                }
                f.write(json.dumps(record) + "\n")
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {len(pairs)} lines of layers {list(layers)} to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
