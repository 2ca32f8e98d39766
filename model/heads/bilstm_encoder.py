"""`BertBiLstmEncoder`: a `BertEncoder` with a randomly initialised BiLSTM on its sequence output.

    inputs  {"token_ids", "segment_ids", "padding_mask"}  (batch, seq_len) int32
    outputs {"sequence_output": (batch, seq_len, 2 * units),
             "pooled_output":   (batch, 2 * units)}

BERT Table 5's last row: the left-to-right model fine-tuned with "a randomly
initialized BiLSTM on top", which gives every token the right-hand context its
causal encoder cannot see. The wrapper has the encoder's inputs and outputs, so
every head (`BertClassifier`, `BertTokenClassifier`, `BertQuestionAnswerer`,
`BertMultipleChoice`) is built over it unchanged: token heads read the BiLSTM's
states, sentence heads its pooled output, the final states of the two
directions (the forward LSTM's after the last real token, the backward one's
after `[CLS]`). Padding is masked out of both directions, so it changes neither
output at the real tokens. The BERT encoder stays `.encoder`
(`model_dir.encoder_of` unwraps it); its pooler is unused. A model directory
records the BiLSTM as `"bilstm_units"` in config.json.

    python -m model.train finetune --task conll2003 --data ../shared/data/conll2003 \\
        --init runs/ltr --output runs/ltr-bilstm-ner --bilstm 128
"""

from __future__ import annotations

import keras
from keras import ops

from model.heads.classifier import INPUTS
from model.networks.encoder import BertEncoder


class _RealTokens(keras.layers.Layer):
    """(batch, seq_len) int padding mask -> bool mask, the form an RNN's `mask=` takes."""

    def call(self, padding_mask):
        return ops.not_equal(padding_mask, 0)

    def compute_output_spec(self, padding_mask):
        return keras.KerasTensor(padding_mask.shape, dtype="bool")


@keras.saving.register_keras_serializable(package="bert")
class BertBiLstmEncoder(keras.Model):
    """`encoder`'s sequence output -> Bidirectional(LSTM(units)); the heads' encoder.

    Args:
        encoder: the `BertEncoder` (kept as `.encoder`, its weights shared).
        units: LSTM units in each direction; the outputs are `2 * units` wide.

    Example:
    >>> model = BertBiLstmEncoder(BertEncoder.from_preset("tiny"), units=8)
    >>> head = BertTokenClassifier(model, num_labels=5)   # doctest: +SKIP
    """

    def __init__(self, encoder: BertEncoder, units: int, name="bert_bilstm_encoder", **kwargs):
        if not isinstance(units, int) or isinstance(units, bool) or units < 1:
            raise ValueError(f"BiLSTM units must be a positive integer, got {units!r}")

        # === Layers ===
        self.encoder = encoder
        self.real_tokens = _RealTokens(name="real_tokens")
        self.bilstm = keras.layers.Bidirectional(
            keras.layers.LSTM(
                units, return_sequences=True, return_state=True, dtype=encoder.dtype_policy
            ),
            dtype=encoder.dtype_policy,
            name="bilstm",
        )
        self.pooled_concat = keras.layers.Concatenate(
            dtype=encoder.dtype_policy, name="pooled_concat"
        )

        # === Functional Model ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in INPUTS}
        sequence = encoder(inputs)["sequence_output"]  # (batch, seq_len, hidden_dim)
        mask = self.real_tokens(inputs["padding_mask"])  # (batch, seq_len) bool
        # states: (batch, seq_len, 2 * units), zero at padding; h and c: (batch, units) each
        states, forward_h, _, backward_h, _ = self.bilstm(sequence, mask=mask)
        pooled = self.pooled_concat([forward_h, backward_h])  # (batch, 2 * units)
        super().__init__(
            inputs=inputs,
            outputs={"sequence_output": states, "pooled_output": pooled},
            dtype=encoder.dtype_policy,
            name=name,
            **kwargs,
        )
        self.units = units
        # The heads read the initializer range from here, as from a `BertEncoder`.
        self.config = encoder.config

    # === Config ===
    def get_config(self):
        return {
            "encoder": keras.layers.serialize(self.encoder),
            "units": self.units,
            "name": self.name,
            "trainable": self.trainable,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.layers.deserialize(config["encoder"])
        return cls(**config)
