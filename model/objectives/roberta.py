"""RoBERTa's objective (Liu et al. 2019, sections 4.1-4.2): masked LM alone, dynamic masks,
full-length inputs.

    python -m model.data --inputs full-sentences ...          # or doc-sentences
    python -m model.train pretrain --objective roberta ...

- batches: BERT's masking (15 %; 80/10/10), drawn afresh for every epoch in
  the input pipeline (the same for the same seed, epoch and example); records
  made with `--masking static --dupe-factor N` give the paper's static
  comparison;
- inputs: FULL-SENTENCES (contiguous sentences packed up to the length,
  crossing documents with an extra [SEP]) or DOC-SENTENCES (never crossing);
- heads and loss: the masked-LM head alone (`BertPretrainer` without NSP),
  cross-entropy over the masked positions.
"""

from __future__ import annotations

import dataclasses

from model.objectives.base import ObjectiveOptions
from model.objectives.bert import Bert


class Roberta(Bert):
    name = "roberta"
    inputs = ("full-sentences", "doc-sentences")

    def __init__(self, vocabulary: list[str], options: ObjectiveOptions):
        super().__init__(vocabulary, dataclasses.replace(options, next_sentence=False))
