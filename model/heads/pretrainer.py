"""`BertPretrainer`: the encoder with the paper's two pre-training heads.

    inputs  {"token_ids", "segment_ids", "padding_mask"}  (batch, seq_len) int32
            {"mask_positions"}                            (batch, max_predictions) int32
    outputs {"mlm": (batch, max_predictions, vocabulary_size) float32 logits,
             "nsp": (batch, 2) float32 logits}            ("nsp" only with next_sentence=True)

The masked-LM head (dense + GELU + LayerNorm, then the token embedding used
as the decoder, plus an output bias) is evaluated only at `mask_positions`:
a softmax over 30k words at every position would cost ~7x more for nothing.
Logits are float32 even under mixed precision, so the losses are too.
"""

from __future__ import annotations

import keras
from keras_hub.layers import MaskedLMHead

from model.heads.task_model import BertTaskModel
from model.networks.encoder import BertEncoder, activation_fn


def head_dtype(encoder: BertEncoder):
    """The dtype of a head whose output is a loss's logits: float32 under a mixed policy.

    keras-hub's MaskedLMHead turns autocasting off and adds its float32 output
    bias to logits of its compute dtype: under a mixed policy that is a
    bfloat16 + float32 add, which TensorFlow refuses when the model is called
    eagerly. A float32 head avoids it; the vocabulary-sized matmul still runs in
    the tied embedding's own (mixed) dtype.
    """
    policy = encoder.dtype_policy
    return "float32" if policy.compute_dtype != policy.variable_dtype else policy


def masked_lm_head(
    encoder: BertEncoder, activation: str | None = None, layer_norm_epsilon: float | None = None
) -> MaskedLMHead:
    """The language-model head over `encoder` (dense + GELU + LayerNorm, then the
    token embedding as decoder, plus a bias), evaluated only at given positions;
    named `masked_lm_head` in every model that has one, so its weights transfer.
    Its activation and LayerNorm epsilon are the encoder's unless given (keras-hub's
    BertMaskedLM computes the exact GELU and epsilon 1e-5 over a tanh-GELU backbone)."""
    cfg = encoder.config
    return MaskedLMHead(
        token_embedding=encoder.token_embedding,
        intermediate_activation=activation_fn(activation or cfg.activation),
        layer_norm_epsilon=layer_norm_epsilon or cfg.layer_norm_epsilon,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=cfg.initializer_range),
        dtype=head_dtype(encoder),
        name="masked_lm_head",
    )


@keras.saving.register_keras_serializable(package="bert")
class BertPretrainer(BertTaskModel):
    """Masked-LM + next-sentence-prediction model over a `BertEncoder`.

    Args:
        encoder: the `BertEncoder`; its token embedding is the tied decoder.
        next_sentence: add the NSP head on the pooled output.
        head_activation, head_layer_norm_epsilon: the masked-LM head's, where
            they are not the encoder's (a keras-hub BertMaskedLM's).

    Example:
    >>> model = BertPretrainer(BertEncoder.from_preset("tiny"))
    """

    def __init__(
        self,
        encoder: BertEncoder,
        next_sentence: bool = True,
        head_activation: str | None = None,
        head_layer_norm_epsilon: float | None = None,
        **kwargs,
    ):
        cfg = encoder.config
        init = lambda: keras.initializers.TruncatedNormal(stddev=cfg.initializer_range)

        # === Layers ===
        self.encoder = encoder
        self.masked_lm_head = masked_lm_head(encoder, head_activation, head_layer_norm_epsilon)
        self.next_sentence_head = (
            keras.layers.Dense(
                2, kernel_initializer=init(), dtype=encoder.dtype_policy, name="next_sentence_head"
            )
            if next_sentence
            else None
        )

        # === Functional Model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in ("token_ids", "segment_ids", "padding_mask", "mask_positions")
        }
        features = encoder({k: inputs[k] for k in ("token_ids", "segment_ids", "padding_mask")})
        mlm = self.masked_lm_head(
            features["sequence_output"], mask_positions=inputs["mask_positions"]
        )
        outputs = {"mlm": keras.layers.Activation("linear", dtype="float32", name="mlm")(mlm)}
        if next_sentence:
            nsp = self.next_sentence_head(features["pooled_output"])
            outputs["nsp"] = keras.layers.Activation("linear", dtype="float32", name="nsp")(nsp)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.next_sentence = next_sentence
        self.head_activation = head_activation
        self.head_layer_norm_epsilon = head_layer_norm_epsilon

    # === Config ===
    def head_config(self):
        own = {"head_activation": self.head_activation}
        own["head_layer_norm_epsilon"] = self.head_layer_norm_epsilon
        return {"next_sentence": self.next_sentence, **{k: v for k, v in own.items() if v}}
