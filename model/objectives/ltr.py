"""The BERT paper's left-to-right baseline ("LTR & No NSP", section 5.1): a causal language model.

    python -m model.data --inputs segments ...                # or full-sentences / doc-sentences
    python -m model.train pretrain --objective ltr ...

- the encoder: causal attention (a position never sees a later one); the
  model's config records `causal`, so fine-tuning, evaluation, the export and
  the app keep the left-only attention, as the paper did, with no flag;
- batches: nothing masked; position i is labelled with token i + 1
  (`model.pretraining.next_token`);
- heads: one LM head tied to the token embedding at every position
  (`BertCausalLM`); no NSP;
- loss: next-token cross-entropy, the mean over the real tokens.
"""

from __future__ import annotations

from model.objectives.base import Objective
from model.pretraining.next_token import NextTokenBatches


class LeftToRight(Objective):
    name = "ltr"
    inputs = ("segments", "full-sentences", "doc-sentences")

    @property
    def batches(self):
        return NextTokenBatches()

    def device_batches(self, tables):
        from model.pretraining.device_data import next_token

        return next_token

    def encoder_config(self, config):
        return config.replace(causal=True)

    def build_model(self, encoder, seed=None):
        from model.heads.causal_lm import BertCausalLM

        return BertCausalLM(encoder)

    def outputs(self) -> tuple[str, ...]:
        return ("next_token",)
