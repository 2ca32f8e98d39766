"""Pre-training objectives, one file each: what the input pipeline does to a batch, which heads
go on the encoder, and the loss (`python -m model.train pretrain --objective NAME`).

    bert      masked LM (+ next sentence prediction), the paper's
    roberta   masked LM with fresh masks every epoch, no NSP, FULL-SENTENCES inputs
    spanbert  whole-word span masking, masked LM + span boundary objective
    ltr       left-to-right LM: causal attention, every position predicts the next token
    electra   a small generator fills the masked positions, a discriminator tells every
              token replaced or original

A new objective is a new file here (a subclass of `base.Objective`) and a line in `OBJECTIVES`.
"""

from __future__ import annotations

from model.objectives.base import Objective, ObjectiveOptions
from model.objectives.bert import Bert
from model.objectives.electra import Electra
from model.objectives.ltr import LeftToRight
from model.objectives.roberta import Roberta
from model.objectives.spanbert import SpanBert

OBJECTIVES: dict[str, type[Objective]] = {
    cls.name: cls for cls in (Bert, Roberta, SpanBert, LeftToRight, Electra)
}

__all__ = ["OBJECTIVES", "Objective", "ObjectiveOptions", "get"]


def get(name: str) -> type[Objective]:
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; choose from {sorted(OBJECTIVES)}")
    return OBJECTIVES[name]
