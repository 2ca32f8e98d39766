"""Feature-based BERT (paper section 5.3): the hidden states of chosen layers, per token.

    python -m model.extract_features --model runs/base --input sentences.txt \\
        --output features.jsonl --layers=-1,-2,-3,-4 --max-seq-length 128

`--model` is any checkpoint `model.load` reads (our model directory, a Hugging
Face or Google folder); only the encoder runs. The input has one text per
line, or a pair as `text A ||| text B`. The output is Google's
`extract_features.py` JSON-lines format, one line per input line:

    {"linex_index": 0, "features": [{"token": "[CLS]",
        "layers": [{"index": -1, "values": [0.1234, ...]}, ...]}, ...]}

Layer -1 is the last Transformer block's output, -2 the one before, and so on
(0 is the first block, not the embeddings, as in Google's tool). The Python
side, `LayerFeatures`, is what `model.feature_tagger` trains on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from model.io import reading

DEFAULT_LAYERS = (-1, -2, -3, -4)


def parse_layers(text: str, num_layers: int | None = None) -> tuple[int, ...]:
    """"-1,-2" -> (-1, -2); indexes checked against `num_layers` when given."""
    try:
        layers = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"--layers {text!r}: expected comma-separated integers") from None
    if not layers:
        raise ValueError("--layers: no layer given")
    if num_layers is not None:
        bad = [i for i in layers if not -num_layers <= i < num_layers]
        if bad:
            raise ValueError(f"--layers {bad}: the model has {num_layers} layers "
                             f"(indexes {-num_layers}..{num_layers - 1})")
    return layers


class LayerFeatures:
    """The outputs of chosen Transformer blocks of a (frozen) `BertEncoder`.

    Args:
        encoder: the `BertEncoder`; its layers are shared, not copied.
        layers: block indexes, negative from the top (-1 is the last).

    Example:
    >>> features = LayerFeatures(BertEncoder.from_preset("tiny"), (-1, -2))   # doctest: +SKIP
    >>> features(inputs).shape                                               # doctest: +SKIP
    (batch, seq_len, 2, 32)
    """

    def __init__(self, encoder, layers=DEFAULT_LAYERS):
        import keras

        num_layers = encoder.config.num_layers
        self.layers = parse_layers(",".join(map(str, layers)), num_layers)
        self.hidden_dim = encoder.config.hidden_dim
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
                  for name in ("token_ids", "segment_ids", "padding_mask")}
        # The encoder's own forward pass, keeping every block's output.
        e = encoder
        tokens = e.token_embedding(inputs["token_ids"])  # (batch, seq_len, hidden_dim)
        x = e.embeddings_add([tokens, e.position_embedding(tokens),
                              e.segment_embedding(inputs["segment_ids"])])
        x = e.embeddings_dropout(e.embeddings_layer_norm(x))
        blocks = []
        for block in e.transformer_layers:
            x = block(x, padding_mask=inputs["padding_mask"])  # (batch, seq_len, hidden_dim)
            blocks.append(x)
        self.model = keras.Model(inputs, [blocks[i] for i in self.layers])

    def __call__(self, x: dict) -> np.ndarray:
        """(batch, seq_len, len(layers), hidden_dim) float32 features of one batch."""
        outputs = self.model.predict_on_batch(x)
        if not isinstance(outputs, (list, tuple)):
            outputs = [outputs]
        return np.stack([np.asarray(o, np.float32) for o in outputs], axis=2)

    def batches(self, x: dict, batch_size: int = 32):
        """(start row, features) over `x`, `batch_size` rows at a time."""
        n = len(x["token_ids"])
        for i in range(0, n, batch_size):
            yield i, self({k: v[i:i + batch_size] for k, v in x.items()})


def read_lines(path: str) -> list[tuple[str, str | None]]:
    """(text A, text B or None) per non-empty line; `A ||| B` marks a pair."""
    pairs = []
    with reading(path):
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                if "|||" in line:
                    a, _, b = line.partition("|||")
                    if "|||" in b:
                        raise ValueError(f"{path}:{line_no}: more than one '|||' separator")
                    pairs.append((a.strip(), b.strip()))
                else:
                    pairs.append((line, None))
    return pairs


def extract(features: LayerFeatures, tokenizer, pairs, seq_len: int = 128, batch_size: int = 32):
    """Yields (tokens, (num_tokens, len(layers), hidden_dim) array) per input,
    [CLS] and [SEP] included, padding excluded."""
    from model.tasks.base import encode_texts, pack_rows

    firsts = encode_texts(tokenizer, [a for a, _ in pairs])
    seconds = encode_texts(tokenizer, [b or "" for _, b in pairs])
    x = pack_rows(tokenizer, firsts, [b if pair[1] is not None else None
                                      for b, pair in zip(seconds, pairs)], seq_len)
    for start, values in features.batches(x, batch_size):
        for row, value in enumerate(values):
            length = int(x["padding_mask"][start + row].sum())
            ids = x["token_ids"][start + row, :length]
            yield [tokenizer.vocabulary[i] for i in ids], value[:length]


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m model.extract_features", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True,
                   help="checkpoint: model directory, HF or Google folder")
    p.add_argument("--input", required=True, help="text file, one text (or 'A ||| B') a line")
    p.add_argument("--output", required=True, help="JSON-lines file to write")
    p.add_argument("--layers", default=",".join(map(str, DEFAULT_LAYERS)),
                   help="comma-separated block indexes, -1 the last (default: %(default)s); "
                        "write --layers=-1,-2 (with '=': the value starts with '-')")
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--decimals", type=int, default=6, help="rounding of the values written")
    return p.parse_args(argv)


def load_encoder(path: str):
    """(BertEncoder, vocab path) of any checkpoint `model.load` reads."""
    from model.convert import read
    from model.encoder import BertEncoder

    model, vocab_path, _ = read(path)
    encoder = model if isinstance(model, BertEncoder) else model.encoder
    if vocab_path is None:
        vocab_path = os.path.join(path, "vocab.txt")
        if not os.path.isfile(vocab_path):
            raise FileNotFoundError(f"{path}: no vocab.txt beside the checkpoint")
    return encoder, vocab_path


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from model.io import atomic_open
    from model.tokenizer import WordPieceTokenizer

    try:
        pairs = read_lines(args.input)
        encoder, vocab_path = load_encoder(args.model)
        layers = parse_layers(args.layers, encoder.config.num_layers)
        if args.max_seq_length > encoder.config.max_sequence_length:
            raise ValueError(f"--max-seq-length {args.max_seq_length} exceeds the model's "
                             f"{encoder.config.max_sequence_length}")
        tokenizer = WordPieceTokenizer(vocab_path, lowercase=encoder.config.lowercase)
        features = LayerFeatures(encoder, layers)
        with atomic_open(args.output) as f:
            for index, (tokens, values) in enumerate(
                    extract(features, tokenizer, pairs, args.max_seq_length, args.batch_size)):
                values = np.round(values.astype(np.float64), args.decimals)
                record = {"linex_index": index, "features": [
                    {"token": token, "layers": [{"index": layer, "values": v.tolist()}
                                                for layer, v in zip(layers, values[t])]}
                    for t, token in enumerate(tokens)]}
                f.write(json.dumps(record) + "\n")
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {len(pairs)} lines of layers {list(layers)} to {args.output}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
