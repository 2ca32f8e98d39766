"""`BertCausalLM`: a causal encoder predicting the next token (the paper's "LTR & No NSP").

    inputs  {"token_ids", "segment_ids", "padding_mask"}  (batch, seq_len) int32
            {"predict_positions"}                         (batch, num_predictions) int32
    outputs {"next_token": (batch, num_predictions, vocabulary_size) float32 logits}

The left-to-right baseline of the paper (section 5.1): the encoder attends only
to the left (`BertConfig.causal`), and the hidden state at position i predicts
token i + 1. The head is the masked-LM head of `BertPretrainer` (dense + GELU +
LayerNorm, the token embedding as the decoder, an output bias), with the same
name and weights, evaluated only at `predict_positions` (the input pipeline
passes positions 0..L-2 of the real tokens and labels them with tokens 1..L-1):
its weights move to and from an MLM checkpoint by name, and Hugging Face's
`BertLMHeadModel` keeps the same `cls.predictions` tensors. No NSP head.

    python -c "from model.heads.causal_lm import *; from model.networks.encoder import BertEncoder; BertCausalLM(BertEncoder.from_preset('tiny', causal=True)).summary()"
"""

from __future__ import annotations

import keras

from model.heads.pretrainer import masked_lm_head
from model.heads.task_model import BertTaskModel
from model.networks.encoder import BertEncoder

INPUTS = ("token_ids", "segment_ids", "padding_mask", "predict_positions")


@keras.saving.register_keras_serializable(package="bert")
class BertCausalLM(BertTaskModel):
    """Next-token language model over a causal `BertEncoder`.

    Args:
        encoder: a `BertEncoder` built with `causal=True`; its token embedding
            is the tied decoder.

    Example:
    >>> model = BertCausalLM(BertEncoder.from_preset("tiny", causal=True))
    """

    def __init__(self, encoder: BertEncoder, **kwargs):
        cfg = encoder.config
        if not cfg.causal:
            # A bidirectional encoder sees token i + 1 when predicting it: the
            # loss would fall to zero and the model would learn nothing.
            raise ValueError(
                "BertCausalLM needs a causal encoder (BertConfig.causal=True); a "
                "bidirectional one reads the very token it is asked to predict"
            )

        # === Layers ===
        self.encoder = encoder
        # BertPretrainer's head, under its name: its weights transfer by name.
        self.masked_lm_head = masked_lm_head(encoder)

        # === Functional Model ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in INPUTS}
        features = encoder({k: inputs[k] for k in INPUTS[:3]})
        logits = self.masked_lm_head(
            features["sequence_output"], mask_positions=inputs["predict_positions"]
        )  # (batch, num_predictions, vocabulary_size)
        outputs = {
            "next_token": keras.layers.Activation("linear", dtype="float32", name="next_token")(
                logits
            )
        }
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
