"""SpanBERT's objective (Joshi et al. 2020): span masking, masked LM + span boundary objective.

    python -m model.data --inputs segments ...                # single contiguous segments, no NSP
    python -m model.train pretrain --objective spanbert ...

- batches: whole-word spans of geometric length (p = 0.2, 1..10 words, mean
  3.8) until 15 % of the tokens are masked, one 80/10/10 decision per span
  (`model.pretraining.span_masking`); for each masked token, its span's two
  boundary positions and its position in the span;
- heads: the masked-LM head and the span boundary head (boundary tokens + a
  position embedding through two dense/GeLU/LayerNorm layers into the tied
  decoder) (`SpanBertPretrainer`);
- loss: masked-LM + SBO cross-entropy, each the mean over its targets (edge
  spans have no SBO target).
"""

from __future__ import annotations

from model.objectives.base import Objective
from model.pretraining.span_masking import SpanMaskedBatches, SpanMasker, SpanMaskingConfig


class SpanBert(Objective):
    name = "spanbert"
    inputs = ("segments",)

    def span_config(self) -> SpanMaskingConfig:
        o = self.options
        mask_token_rate, random_token_rate = self.replacement_rates()
        return SpanMaskingConfig(
            mask_rate=o.mask_rate,
            mask_token_rate=mask_token_rate,
            random_token_rate=random_token_rate,
            # room for the span that reaches the budget to overshoot it (25 % at 15 %)
            max_predictions=self.max_predictions(room=0.10),
        )

    @property
    def batches(self):
        return SpanMaskedBatches(SpanMasker(self.vocabulary, self.span_config()))

    def device_batches(self, tables):
        from model.pretraining.device_data import span_masked

        return span_masked(tables, self.span_config())

    def build_model(self, encoder, seed=None):
        from model.heads.span_pretrainer import SpanBertPretrainer

        return SpanBertPretrainer(encoder)

    def outputs(self) -> tuple[str, ...]:
        return ("mlm", "sbo")
