"""ELECTRA's objective (Clark et al. 2020): replaced-token detection, as google-research/electra.

    python -m model.data --inputs segment-pairs ...           # or segments / full-sentences / doc-sentences
    python -m model.train pretrain --objective electra ...    # --generator-size, --discriminator-weight

- batches: 15 % of the positions chosen (never [CLS], [SEP] or padding), 85 %
  of them made [MASK] and 15 % left as they are, no random token (the
  reference's `pretrain_helpers.mask`, which draws its 19 positions of 128 with
  replacement, 17.7 distinct on average; here 19 distinct, as BERT's masking
  draws them); fresh every epoch. Labels: the masked
  tokens for the generator, the whole original sequence for the discriminator,
  weighted by its real (non-padding) tokens;
- heads: a generator (a masked LM `--generator-size` as wide, over the
  discriminator's embeddings) whose samples (never a special token; the
  reference samples the whole vocabulary) replace the masked tokens, and the
  discriminator, which scores every token original (0) or replaced (1); a
  sample equal to the original counts as original (`ElectraPretrainer`);
- loss: the generator's masked-LM cross-entropy + λ x the discriminator's
  sigmoid cross-entropy over the real tokens, λ = `--discriminator-weight`
  (50). The sample is drawn under stop-gradient, so the discriminator's loss
  reaches the generator only through the embeddings they share.

Metrics: the generator's masked-LM accuracy; the discriminator's accuracy on
replaced and on original tokens apart (85-95 % of tokens stay original, so a
single accuracy says little), its precision, recall (= the accuracy on
replaced tokens) and AUC.
"""

from __future__ import annotations

import numpy as np

from model.objectives.base import Objective
from model.pretraining.masking import MaskedLMBatches


class ReplacedTokenBatches(MaskedLMBatches):
    """ELECTRA's work in the input pipeline: BERT's masking (`MaskedLMBatches`,
    at ELECTRA's rates), plus the discriminator's label, the original sequence,
    weighted by the real tokens."""

    def outputs(self, seq_len: int) -> dict:
        out = super().outputs(seq_len)
        out["y"]["rtd"] = ("int32", [seq_len])
        out["sw"]["rtd"] = ("float32", [seq_len])
        return out

    def __call__(self, token_ids: np.ndarray, padding_mask: np.ndarray, keys: np.ndarray) -> dict:
        out = super().__call__(token_ids, padding_mask, keys)
        out["y"]["rtd"] = np.asarray(token_ids, np.int32)
        out["sw"]["rtd"] = np.asarray(padding_mask, np.float32)
        return out


class Electra(Objective):
    name = "electra"
    # segment-pairs first: the reference's inputs (A [SEP] B [SEP], no NSP), which train the
    # second segment's embedding that pair tasks (MRPC, SQuAD) use.
    inputs = ("segment-pairs", "segments", "full-sentences", "doc-sentences")
    # google-research/electra: 85 % [MASK], 15 % kept, no random token.
    mask_token_rate = 0.85
    random_token_rate = 0.0

    @property
    def batches(self):
        return ReplacedTokenBatches(self.masker())

    def device_batches(self, tables):
        from model.pretraining.device_data import replaced_token

        return replaced_token(tables, self.max_predictions(), self.options.whole_word)

    def build_model(self, encoder, seed=None):
        from model.heads.electra import ElectraPretrainer
        from model.text.wordpiece import SPECIAL_TOKENS

        specials = [i for i, token in enumerate(self.vocabulary) if token in SPECIAL_TOKENS]
        return ElectraPretrainer(
            encoder, generator_size=self.options.generator_size, seed=seed, excluded_ids=specials
        )

    def outputs(self) -> tuple[str, ...]:
        return ("mlm", "rtd")

    def losses(self) -> dict:
        import keras

        from model.objectives.electra_loss import ReplacedTokenLoss

        return {
            "mlm": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            "rtd": ReplacedTokenLoss(),
        }

    def loss_weights(self) -> dict:
        return {"mlm": 1.0, "rtd": self.options.discriminator_weight}

    def metrics(self) -> dict:
        import keras

        from model.objectives.electra_loss import replaced_token_metrics

        return {
            "mlm": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
            "rtd": replaced_token_metrics(),
        }
