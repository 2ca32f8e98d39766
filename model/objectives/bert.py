"""BERT's objective (the paper, section 3.1): masked LM + next sentence prediction.

    python -m model.data --inputs sentence-pairs ...          # A/B pairs, IsNext/NotNext labels
    python -m model.train pretrain --objective bert ...       # --no-nsp: the "No NSP" ablation

- batches: 15 % of the tokens chosen (whole words with --whole-word-masking),
  80 % of them [MASK], 10 % a random token, 10 % unchanged; fresh masks every
  epoch, or the records' own masks when made with `--masking static`;
- heads: the masked-LM head (tied to the token embedding, evaluated only at
  the masked positions) and the NSP head on the pooled output (`BertPretrainer`);
- loss: masked-LM cross-entropy (mean over the masked positions) + NSP
  cross-entropy.
"""

from __future__ import annotations

from model.objectives.base import Objective, ObjectiveOptions, records_inputs
from model.pretraining.masking import MaskedLMBatches


class Bert(Objective):
    name = "bert"
    inputs = ("sentence-pairs", "segments", "segment-pairs")
    static_masks = True

    def __init__(self, vocabulary: list[str], options: ObjectiveOptions):
        super().__init__(vocabulary, options)
        self.next_sentence = options.next_sentence
        if self.next_sentence:
            self.inputs = ("sentence-pairs",)

    def check_records(self, pattern: str, info: dict) -> None:
        inputs = records_inputs(info)
        if self.next_sentence and inputs in Bert.inputs[1:]:
            raise ValueError(
                f"{pattern}: records of {inputs} inputs, which have no next-sentence labels: "
                "--objective bert trains on sentence-pairs (python -m model.data --inputs "
                "sentence-pairs), or on these with --no-nsp"
            )
        super().check_records(pattern, info)

    @property
    def batches(self):
        return MaskedLMBatches(self.masker())

    def device_batches(self, tables):
        from model.pretraining.device_data import masked_lm

        return masked_lm(tables, self.max_predictions(), self.options.whole_word)

    def build_model(self, encoder, seed=None):
        from model.heads.pretrainer import BertPretrainer

        return BertPretrainer(encoder, next_sentence=self.next_sentence)

    def outputs(self) -> tuple[str, ...]:
        return ("mlm", "nsp") if self.next_sentence else ("mlm",)
