"""`SpanBertPretrainer`: the encoder with SpanBERT's two pre-training heads.

    inputs  {"token_ids", "segment_ids", "padding_mask"}       (batch, seq_len) int32
            {"mask_positions", "left_boundaries", "right_boundaries", "relative_positions"}
                                                               (batch, max_predictions) int32
    outputs {"mlm": (batch, max_predictions, vocabulary_size) float32 logits,
             "sbo": (batch, max_predictions, vocabulary_size) float32 logits}

The masked-LM head is `BertPretrainer`'s (gathered at the masked positions,
tied to the token embedding); the span boundary head
(`model.heads.span_boundary`) predicts the same tokens from the span's
boundary tokens and the position in the span, through the same tied
embedding. Both heads are float32 under a mixed policy, as in `BertPretrainer`.
The inputs come from `model.pretraining.span_masking.SpanMaskedBatches`.
"""

from __future__ import annotations

import keras

from model.heads.pretrainer import head_dtype, masked_lm_head
from model.heads.span_boundary import SpanBoundaryHead
from model.heads.task_model import BertTaskModel
from model.networks.encoder import BertEncoder, activation_fn

SLOT_INPUTS = ("mask_positions", "left_boundaries", "right_boundaries", "relative_positions")


@keras.saving.register_keras_serializable(package="bert")
class SpanBertPretrainer(BertTaskModel):
    """Masked-LM + span-boundary model over a `BertEncoder`.

    Args:
        encoder: the `BertEncoder`; its token embedding is both heads' decoder.
        max_span_tokens: SBO positions within a span (the reference's 15).
        position_dim: width of the SBO position embedding (the reference's 200).

    Example:
    >>> model = SpanBertPretrainer(BertEncoder.from_preset("tiny"))
    """

    def __init__(
        self,
        encoder: BertEncoder,
        max_span_tokens: int = 15,
        position_dim: int = 200,
        **kwargs,
    ):
        cfg = encoder.config

        # === Layers ===
        self.encoder = encoder
        self.masked_lm_head = masked_lm_head(encoder)
        self.span_boundary_head = SpanBoundaryHead(
            encoder.token_embedding,
            max_span_tokens=max_span_tokens,
            position_dim=position_dim,
            intermediate_activation=activation_fn(cfg.activation),
            layer_norm_epsilon=cfg.layer_norm_epsilon,
            initializer_range=cfg.initializer_range,
            dtype=head_dtype(encoder),  # float32 logits under a mixed policy
            name="span_boundary_head",
        )

        # === Functional Model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in ("token_ids", "segment_ids", "padding_mask", *SLOT_INPUTS)
        }
        features = encoder({k: inputs[k] for k in ("token_ids", "segment_ids", "padding_mask")})
        sequence = features["sequence_output"]  # (batch, seq_len, hidden_dim)
        mlm = self.masked_lm_head(sequence, mask_positions=inputs["mask_positions"])
        sbo = self.span_boundary_head(
            sequence,
            inputs["left_boundaries"],
            inputs["right_boundaries"],
            inputs["relative_positions"],
        )
        outputs = {
            "mlm": keras.layers.Activation("linear", dtype="float32", name="mlm")(mlm),
            "sbo": keras.layers.Activation("linear", dtype="float32", name="sbo")(sbo),
        }
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.max_span_tokens = max_span_tokens
        self.position_dim = position_dim

    # === Config ===
    def head_config(self):
        return {"max_span_tokens": self.max_span_tokens, "position_dim": self.position_dim}
