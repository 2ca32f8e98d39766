"""Feature-based BERT (paper section 5.3): the hidden states of chosen layers, per token.

    from model.features.layers import LayerFeatures, extract, load_encoder
    encoder, vocab_path = load_encoder("runs/base")
    features = LayerFeatures(encoder, (-1, -2, -3, -4))                  # concatenated
    features = LayerFeatures(encoder, (-1, -2, -3, -4), combine="sum")   # summed

Layer -1 is the last Transformer block's output, -2 the one before, and so on
(0 is the first block, not the embeddings, as in Google's `extract_features.py`).
"embeddings" is the embedding layer's output (the first block's input), and
`--layers all` every block, embeddings excluded (the paper's "all 12 layers" of
BERT-Base). `combine="concat"` keeps the chosen layers side by side,
`combine="sum"` adds them up (the paper's Table 7 "weighted sum" rows, with
equal weights here: see `COMBINE`).
`python -m model.extract_features` writes these to JSON lines; `model.features.tagger`
trains the paper's BiLSTM tagger on them.
"""

from __future__ import annotations

import os

import numpy as np

from model.io.files import reading

DEFAULT_LAYERS = (-1, -2, -3, -4)
# The embedding layer's output, as a layer of `--layers`.
EMBEDDINGS = "embeddings"
# How the chosen layers make one vector per token. "sum" is an unweighted sum: the paper
# names its rows "weighted sum" and gives no weights (ELMo learns a softmax-normalised
# mix); equal weights need no training, and keep the features one layer wide, so they
# are computed once for the whole data set like every other column of Table 7.
COMBINE = ("concat", "sum")


def parse_layers(text: str, num_layers: int | None = None) -> tuple:
    """ "-1,-2" -> (-1, -2); "embeddings" -> ("embeddings",); "all" -> (0, ..., num_layers - 1).
    Indexes are checked against `num_layers` when given ("all" needs it)."""
    layers = []
    for v in (v.strip() for v in text.split(",")):
        if not v:
            continue
        if v == EMBEDDINGS:
            layers.append(v)
        elif v == "all":
            if num_layers is None:
                raise ValueError("--layers all: the number of layers is not known here")
            layers += range(num_layers)
        else:
            try:
                layers.append(int(v))
            except ValueError:
                raise ValueError(
                    f"--layers {text!r}: expected comma-separated integers, '{EMBEDDINGS}' or 'all'"
                ) from None
    if not layers:
        raise ValueError("--layers: no layer given")
    if num_layers is not None:
        bad = [i for i in layers if i != EMBEDDINGS and not -num_layers <= i < num_layers]
        if bad:
            raise ValueError(
                f"--layers {bad}: the model has {num_layers} layers "
                f"(indexes {-num_layers}..{num_layers - 1}, or '{EMBEDDINGS}')"
            )
    return tuple(layers)


class LayerFeatures:
    """The outputs of chosen layers of a (frozen) `BertEncoder`, side by side or summed.

    Args:
        encoder: the `BertEncoder`; its layers are shared, not copied.
        layers: block indexes, negative from the top (-1 is the last), or "embeddings".
        combine: "concat" (each layer its own slot) or "sum" (one slot: their sum).

    Example:
    >>> features = LayerFeatures(BertEncoder.from_preset("tiny"), (-1, -2))   # doctest: +SKIP
    >>> features(inputs).shape                                               # doctest: +SKIP
    (batch, seq_len, 2, 32)
    """

    def __init__(self, encoder, layers=DEFAULT_LAYERS, combine: str = "concat"):
        import keras

        if combine not in COMBINE:
            raise ValueError(f"combine {combine!r}: expected one of {COMBINE}")
        num_layers = encoder.config.num_layers
        self.layers = parse_layers(",".join(map(str, layers)), num_layers)
        self.combine = combine
        self.hidden_dim = encoder.config.hidden_dim
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in ("token_ids", "segment_ids", "padding_mask")
        }
        # The encoder's own forward pass, keeping the embeddings and every block's output.
        e = encoder
        x = e.embed(inputs["token_ids"], inputs["segment_ids"])  # (batch, seq_len, hidden_dim)
        embeddings = x
        masks = e.block_masks(inputs["padding_mask"])  # causal encoders keep their mask
        blocks = []
        for block in e.transformer_layers:
            x = block(x, **masks)  # (batch, seq_len, hidden_dim)
            blocks.append(x)
        chosen = [embeddings if i == EMBEDDINGS else blocks[i] for i in self.layers]
        if combine == "sum" and len(chosen) > 1:
            chosen = [keras.layers.Add(name="layer_sum")(chosen)]  # (batch, seq_len, hidden_dim)
        elif combine == "sum":
            chosen = chosen[:1]
        # Slots per token: one per layer concatenated, one for a sum.
        self.slots = len(chosen)
        self.width = self.slots * self.hidden_dim
        self.model = keras.Model(inputs, chosen)

    def __call__(self, x: dict) -> np.ndarray:
        """(batch, seq_len, slots, hidden_dim) float32 features of one batch: slots is
        len(layers) for "concat", 1 for "sum"."""
        outputs = self.model.predict_on_batch(x)
        if not isinstance(outputs, (list, tuple)):
            outputs = [outputs]
        return np.stack([np.asarray(o, np.float32) for o in outputs], axis=2)

    def batches(self, x: dict, batch_size: int = 32):
        """(start row, features) over `x`, `batch_size` rows at a time."""
        n = len(x["token_ids"])
        for i in range(0, n, batch_size):
            yield i, self({k: v[i : i + batch_size] for k, v in x.items()})


def read_lines(path: str) -> list[tuple[str, str | None]]:
    """(text A, text B or None) per line, an empty line too (as google-research/bert's
    extract_features.py: output line i is input line i's); `A ||| B` marks a pair."""
    pairs = []
    with reading(path):
        with open(path, encoding="utf-8-sig") as f:  # a byte-order mark read past
            for line_no, line in enumerate(f, 1):
                line = line.strip()
                if "|||" in line:
                    a, _, b = line.partition("|||")
                    if "|||" in b:
                        raise ValueError(f"{path}:{line_no}: more than one '|||' separator")
                    pairs.append((a.strip(), b.strip()))
                else:
                    pairs.append((line, None))
    return pairs


def extract(features: LayerFeatures, tokenizer, pairs, seq_len: int = 128, batch_size: int = 32):
    """Yields (tokens, (num_tokens, len(layers), hidden_dim) array) per input of `pairs`
    (each a text, or a (text_a, text_b) pair whose text_b may be None), [CLS] and [SEP]
    included, padding excluded."""
    from model.tasks.base import encode_texts, pack_rows

    if isinstance(pairs, str):  # else read as one text per character
        raise TypeError(f"extract takes a list of texts or pairs; for one text: [{pairs[:40]!r}]")
    pairs = [_pair(p) for p in pairs]
    firsts = encode_texts(tokenizer, [a for a, _ in pairs])
    seconds = encode_texts(tokenizer, [b or "" for _, b in pairs])
    x = pack_rows(
        tokenizer,
        firsts,
        [b if pair[1] is not None else None for b, pair in zip(seconds, pairs)],
        seq_len,
    )
    for start, values in features.batches(x, batch_size):
        for row, value in enumerate(values):
            length = int(x["padding_mask"][start + row].sum())
            ids = x["token_ids"][start + row, :length]
            yield [tokenizer.vocabulary[i] for i in ids], value[:length]


def _pair(item) -> tuple:
    """An input of `extract` as (text_a, text_b or None)."""
    if isinstance(item, str):
        return item, None
    if isinstance(item, (tuple, list)) and len(item) == 2:
        return tuple(item)
    raise TypeError(f"each input is a text or a (text_a, text_b) pair, not {item!r:.80}")


def load_encoder(path: str):
    """(BertEncoder, vocab path) of any checkpoint `model.load` reads."""
    from model.checkpoints import model_dir
    from model.checkpoints.formats import read

    model, vocab_path, _ = read(path)
    encoder = model_dir.encoder_of(model)  # under a fine-tuned model's head (and BiLSTM)
    if vocab_path is None:
        vocab_path = os.path.join(path, "vocab.txt")
        if not os.path.isfile(vocab_path):
            raise FileNotFoundError(f"{path}: no vocab.txt beside the checkpoint")
    return encoder, vocab_path
