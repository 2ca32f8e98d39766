"""Each BERT weight under its three names, and how its array is laid out.

One table serves both checkpoint formats that name BERT's weights their own
way: Google's `modeling.py` (`model.checkpoints.google`) and transformers'
`BertModel` (`model.checkpoints.huggingface`, and ELECTRA's encoder, which
transformers names as BERT's). A row is a Keras variable path, its Google
name, its transformers name (before the "bert." / "electra." prefix that
task models add to the backbone), and a layout:

    plain      the same array in all three (embeddings, LayerNorms, biases)
    dense      a Dense kernel: (in, out) in Keras and Google; torch's Linear
               stores (out, in)
    heads_in   a query/key/value kernel: Keras splits its output features
               (hidden, heads, head_dim); the others keep (hidden, hidden)
    heads_bias its bias: (heads, head_dim) against (hidden,)
    heads_out  the attention output kernel: (heads, head_dim, hidden)
    output_weights  a Dense kernel that `modeling.py` stores transposed
               (`output_weights`, multiplied with transpose_b=True)

The heads are contiguous slices of the output features in every format, so a
reshape is all the split needs.

    (used by `python -m model.convert`; no command of its own)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from model.checkpoints.mapping import ENCODER, Entry

GOOGLE, HF = "google", "hf"
_KERNELS = ("dense", "heads_in", "heads_out", "output_weights")


class Name(NamedTuple):
    ours: str
    google: str
    hf: str
    layout: str = "plain"


EMBEDDINGS = (
    Name("token_embedding/embeddings", "bert/embeddings/word_embeddings",
         "embeddings.word_embeddings.weight"),
    Name("position_embedding/embeddings", "bert/embeddings/position_embeddings",
         "embeddings.position_embeddings.weight"),
    Name("segment_embedding/embeddings", "bert/embeddings/token_type_embeddings",
         "embeddings.token_type_embeddings.weight"),
    Name("embeddings_layer_norm/gamma", "bert/embeddings/LayerNorm/gamma",
         "embeddings.LayerNorm.weight"),
    Name("embeddings_layer_norm/beta", "bert/embeddings/LayerNorm/beta",
         "embeddings.LayerNorm.bias"),
)  # fmt: skip


# Transformer block {i} (fill in with .format(i=...)).
BLOCK = (
    Name("transformer_layer_{i}/self_attention_layer/query/kernel",
         "bert/encoder/layer_{i}/attention/self/query/kernel",
         "encoder.layer.{i}.attention.self.query.weight", "heads_in"),
    Name("transformer_layer_{i}/self_attention_layer/query/bias",
         "bert/encoder/layer_{i}/attention/self/query/bias",
         "encoder.layer.{i}.attention.self.query.bias", "heads_bias"),
    Name("transformer_layer_{i}/self_attention_layer/key/kernel",
         "bert/encoder/layer_{i}/attention/self/key/kernel",
         "encoder.layer.{i}.attention.self.key.weight", "heads_in"),
    Name("transformer_layer_{i}/self_attention_layer/key/bias",
         "bert/encoder/layer_{i}/attention/self/key/bias",
         "encoder.layer.{i}.attention.self.key.bias", "heads_bias"),
    Name("transformer_layer_{i}/self_attention_layer/value/kernel",
         "bert/encoder/layer_{i}/attention/self/value/kernel",
         "encoder.layer.{i}.attention.self.value.weight", "heads_in"),
    Name("transformer_layer_{i}/self_attention_layer/value/bias",
         "bert/encoder/layer_{i}/attention/self/value/bias",
         "encoder.layer.{i}.attention.self.value.bias", "heads_bias"),
    Name("transformer_layer_{i}/self_attention_layer/attention_output/kernel",
         "bert/encoder/layer_{i}/attention/output/dense/kernel",
         "encoder.layer.{i}.attention.output.dense.weight", "heads_out"),
    Name("transformer_layer_{i}/self_attention_layer/attention_output/bias",
         "bert/encoder/layer_{i}/attention/output/dense/bias",
         "encoder.layer.{i}.attention.output.dense.bias"),
    Name("transformer_layer_{i}/self_attention_layer_norm/gamma",
         "bert/encoder/layer_{i}/attention/output/LayerNorm/gamma",
         "encoder.layer.{i}.attention.output.LayerNorm.weight"),
    Name("transformer_layer_{i}/self_attention_layer_norm/beta",
         "bert/encoder/layer_{i}/attention/output/LayerNorm/beta",
         "encoder.layer.{i}.attention.output.LayerNorm.bias"),
    Name("transformer_layer_{i}/feedforward_intermediate_dense/kernel",
         "bert/encoder/layer_{i}/intermediate/dense/kernel",
         "encoder.layer.{i}.intermediate.dense.weight", "dense"),
    Name("transformer_layer_{i}/feedforward_intermediate_dense/bias",
         "bert/encoder/layer_{i}/intermediate/dense/bias",
         "encoder.layer.{i}.intermediate.dense.bias"),
    Name("transformer_layer_{i}/feedforward_output_dense/kernel",
         "bert/encoder/layer_{i}/output/dense/kernel",
         "encoder.layer.{i}.output.dense.weight", "dense"),
    Name("transformer_layer_{i}/feedforward_output_dense/bias",
         "bert/encoder/layer_{i}/output/dense/bias",
         "encoder.layer.{i}.output.dense.bias"),
    Name("transformer_layer_{i}/feedforward_layer_norm/gamma",
         "bert/encoder/layer_{i}/output/LayerNorm/gamma",
         "encoder.layer.{i}.output.LayerNorm.weight"),
    Name("transformer_layer_{i}/feedforward_layer_norm/beta",
         "bert/encoder/layer_{i}/output/LayerNorm/beta",
         "encoder.layer.{i}.output.LayerNorm.bias"),
)  # fmt: skip
POOLER = (
    Name("pooled_dense/kernel", "bert/pooler/dense/kernel", "pooler.dense.weight", "dense"),
    Name("pooled_dense/bias", "bert/pooler/dense/bias", "pooler.dense.bias"),
)
# The decoder is the word embedding (tied); only its bias is the head's own.
MASKED_LM = (
    Name("masked_lm_head/intermediate_dense/kernel", "cls/predictions/transform/dense/kernel",
         "cls.predictions.transform.dense.weight", "dense"),
    Name("masked_lm_head/intermediate_dense/bias", "cls/predictions/transform/dense/bias",
         "cls.predictions.transform.dense.bias"),
    Name("masked_lm_head/intermediate_layer_norm/gamma",
         "cls/predictions/transform/LayerNorm/gamma", "cls.predictions.transform.LayerNorm.weight"),
    Name("masked_lm_head/intermediate_layer_norm/beta",
         "cls/predictions/transform/LayerNorm/beta", "cls.predictions.transform.LayerNorm.bias"),
    Name("masked_lm_head/output_bias", "cls/predictions/output_bias", "cls.predictions.bias"),
)  # fmt: skip
NEXT_SENTENCE = (
    Name("next_sentence_head/kernel", "cls/seq_relationship/output_weights",
         "cls.seq_relationship.weight", "output_weights"),
    Name("next_sentence_head/bias", "cls/seq_relationship/output_bias",
         "cls.seq_relationship.bias"),
)  # fmt: skip


def entries(
    names, variables: dict, fmt: str, config, prefix: str = "", part: str = ENCODER, **fields
) -> list[Entry]:
    """One Entry per row of `names` in format `fmt` (GOOGLE or HF).

    `variables`: the model's variables by path; `config`: its encoder's
    BertConfig (for the heads' shapes); `prefix` goes before transformers'
    names; `fields` fill the rows' placeholders (`i=3` for a BLOCK row).
    """
    return [
        Entry(
            prefix + getattr(n, fmt).format(**fields),
            variables[n.ours.format(**fields)],
            *_converters(n.layout, fmt, config.hidden_dim, config.num_heads),
            part=part,
        )
        for n in names
    ]


def encoder_entries(variables: dict, fmt: str, config, prefix: str = "") -> list[Entry]:
    """The Entries of the embeddings and every Transformer block (not the pooler)."""
    rows = entries(EMBEDDINGS, variables, fmt, config, prefix)
    for i in range(config.num_layers):
        rows += entries(BLOCK, variables, fmt, config, prefix, i=i)
    return rows


def _converters(layout: str, fmt: str, hidden: int, heads: int):
    """(to_keras, from_keras) for one layout in one format."""
    keras_shape = {
        "heads_in": (hidden, heads, hidden // heads),
        "heads_bias": (heads, hidden // heads),
        "heads_out": (heads, hidden // heads, hidden),
    }.get(layout)
    flat_shape = (hidden,) if layout == "heads_bias" else (hidden, hidden)
    transposed = (fmt == HF and layout in _KERNELS) or layout == "output_weights"

    def to_keras(a: np.ndarray) -> np.ndarray:
        a = a.T if transposed else a
        return a.reshape(keras_shape) if keras_shape else a

    def from_keras(a: np.ndarray) -> np.ndarray:
        a = a.reshape(flat_shape) if keras_shape else a
        return a.T if transposed else a

    return to_keras, from_keras
