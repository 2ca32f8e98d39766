"""The papers' tables as experiments: rows (a pre-training each), columns (what is measured from
it), the paper's own figures for the same rows, and the comparisons each table is about.

    pretraining-tasks  BERT Table 5: MLM + NSP, No NSP, LTR & No NSP (+ a random floor)
    model-size         BERT Table 6: the same objective at several sizes
    training-steps     BERT Figure 5: fine-tuned score against pre-training steps, MLM and LTR
                       (a row per kept checkpoint of each run; a PNG plot beside the table)
    feature-based      BERT Table 7: fine-tuning against a BiLSTM on frozen layers (CoNLL-2003)
    masking            BERT Table 8: MASK / SAME / RND shares, fine-tuned and feature-based NER
    beyond-bert        RoBERTa (dynamic and static masking), SpanBERT, ELECTRA against BERT

The papers' figures are those of `../shared/reference/PAPERS.md`, at the papers'
scale; they stand beside the measured ones for reading, never for comparing
numbers across scales.
"""

from __future__ import annotations

import dataclasses

from model.config import BertConfig
from model.experiments.plan import Pretraining, Work


@dataclasses.dataclass(frozen=True)
class Column:
    """What is measured from a row's model: `finetune` (a task of the scale, its dev metric
    over the seeds), `features` (a BiLSTM tagger on frozen layers, CoNLL-2003 dev F1: `arg`
    the `--layers`, `combine` the `--combine`) or `mlm` (held-out masked-LM perplexity)."""

    name: str
    kind: str
    arg: str = ""
    combine: str = "concat"


@dataclasses.dataclass(frozen=True)
class Row:
    """A row: a pre-training run, and how its `finetune` columns start from it.

    checkpoint: fine-tune from the run's checkpoint k of the scale's `checkpoints` (the
        last is the finished run); such rows are points of a curve against the steps.
    series: the curve such a row is a point of (the plot's legend).
    bilstm: fine-tune with a randomly initialised BiLSTM on the encoder (`--bilstm`).
    """

    label: str
    run: Pretraining
    paper: dict = dataclasses.field(default_factory=dict)  # column name -> the paper's figure
    floor: bool = False  # the randomly initialised encoder
    checkpoint: int | None = None
    series: str = ""
    bilstm: bool = False


@dataclasses.dataclass(frozen=True)
class Comparison:
    """An effect the paper reports: `better` against `worse`, in the paper's words."""

    better: str
    worse: str
    paper_says: str


@dataclasses.dataclass(frozen=True)
class Table:
    name: str
    title: str
    rows: tuple[Row, ...]
    columns: tuple[Column, ...]
    comparisons: tuple[Comparison, ...] = ()
    paper_columns: tuple[str, ...] = ()  # the paper's column names, for its figures
    not_built: tuple[str, ...] = ()  # rows or columns of the paper this table cannot run yet
    note: str = ""


RANDOM = Pretraining("random", random=True)
# Left-only context hurts token tasks even untrained: the floor of the LTR rows.
RANDOM_CAUSAL = Pretraining("random-ltr", objective="ltr", inputs="segments", random=True)
BERT = Pretraining("bert")
NO_NSP = Pretraining("no-nsp", inputs="segments", flags=("--no-nsp",))
LTR = Pretraining("ltr", objective="ltr", inputs="segments")
ROBERTA = Pretraining("roberta", objective="roberta", inputs="full-sentences")
ROBERTA_STATIC = Pretraining(
    "roberta-static", objective="roberta", inputs="full-sentences", static=True
)
SPANBERT = Pretraining("spanbert", objective="spanbert", inputs="segments")
ELECTRA = Pretraining("electra", objective="electra", inputs="segment-pairs")
# Table 8's rows: (MASK, SAME, RND) in percent; 80/10/10 is BERT's own run.
MASKINGS = ((100, 0, 0), (80, 0, 20), (80, 20, 0), (0, 20, 80), (0, 0, 100))
PAPER_MASKING = {
    (80, 10, 10): (84.2, 95.4, 94.9),
    (100, 0, 0): (84.3, 94.9, 94.0),
    (80, 0, 20): (84.1, 95.2, 94.6),
    (80, 20, 0): (84.4, 95.2, 94.7),
    (0, 20, 80): (83.7, 94.8, 94.6),
    (0, 0, 100): (83.6, 94.9, 94.6),
}
LAST_FOUR = "-1,-2,-3,-4"


def masking_run(mask: int, same: int, rnd: int) -> Pretraining:
    if (mask, same, rnd) == (80, 10, 10):
        return BERT
    flags = ("--mask-token-rate", str(mask / 100), "--random-token-rate", str(rnd / 100))
    return Pretraining(f"mask-{mask}-{same}-{rnd}", flags=flags)


def task_columns(work: Work, tasks=None) -> tuple[Column, ...]:
    names = [t for t in (tasks or work.scale.tasks) if t in work.scale.tasks]
    return tuple(Column(t, "finetune", t) for t in names)


def pretraining_tasks(work: Work) -> Table:
    return Table(
        "pretraining-tasks",
        "Pre-training tasks (BERT Table 5)",
        rows=(
            Row("BERT (MLM + NSP)", BERT, {"mrpc": 86.7, "sst2": 92.7, "squad1": 88.5}),
            Row("No NSP", NO_NSP, {"mrpc": 86.5, "sst2": 92.6, "squad1": 87.9}),
            Row("LTR & No NSP", LTR, {"mrpc": 77.5, "sst2": 92.1, "squad1": 77.8}),
            Row(
                "LTR & No NSP + BiLSTM",
                LTR,
                {"mrpc": 75.7, "sst2": 91.6, "squad1": 84.9},
                bilstm=True,
            ),
            Row("random initialisation (floor)", RANDOM, floor=True),
            Row("random causal initialisation (floor of the LTR rows)", RANDOM_CAUSAL, floor=True),
        ),
        columns=task_columns(work),
        comparisons=(
            Comparison("BERT (MLM + NSP)", "LTR & No NSP", "9.2 MRPC, 10.7 SQuAD F1 (large)"),
            Comparison("BERT (MLM + NSP)", "No NSP", "0.2 MRPC, 0.6 SQuAD F1 (small)"),
            Comparison(
                "LTR & No NSP + BiLSTM",
                "LTR & No NSP",
                "+7.1 SQuAD F1 (large); GLUE not helped: MRPC -1.8, SST-2 -0.5",
            ),
        ),
        paper_columns=("mrpc", "sst2", "squad1"),
        note="+ BiLSTM: the LTR run fine-tuned with a randomly initialised BiLSTM between the "
        "encoder and the head (`--bilstm`, half the encoder's width a direction).",
        not_built=("MNLI, QNLI: no training data offline",),
    )


def model_size(work: Work) -> Table:
    def weights(size):  # a Transformer's weights but its embeddings': 4H^2 + 2HI a block
        shape = size[1]  # a preset's name or its fields
        c = BertConfig.preset(shape) if isinstance(shape, str) else BertConfig(**shape)
        return c.num_layers * (4 * c.hidden_dim**2 + 2 * c.hidden_dim * c.intermediate_dim)

    # smallest first, as Table 6: each comparison is a size against the next larger one
    rows = tuple(
        Row(f"size {name}", dataclasses.replace(BERT, size=name))
        for name, _ in sorted(work.scale.sizes, key=weights)
    )
    return Table(
        "model-size",
        "Model size (BERT Table 6)",
        rows=rows + (Row("random initialisation (floor)", RANDOM, floor=True),),
        columns=(Column("held-out MLM perplexity", "mlm"),)
        + task_columns(work, ("mrpc", "sst2", "conll2003")),
        comparisons=tuple(
            Comparison(b.label, a.label, "larger is better on every task (Table 6)")
            for a, b in zip(rows, rows[1:])
        ),
        paper_columns=(),
        note="The paper's sizes and figures (Table 6; dev, mean of 5 fine-tuning restarts), "
        "L/H/A: LM perplexity, MRPC, SST-2: 3/768/12: 5.84, 79.8, 88.4; 6/768/3: 5.24, 82.2, "
        "90.7; 6/768/12: 4.68, 84.8, 91.3; 12/768/12: 3.99, 86.7, 92.9; 12/1024/16: 3.54, "
        "86.9, 93.3; 24/1024/16: 3.23, 87.8, 93.7. Its perplexity is on held-out training "
        "data, not this held-out text, and its models are far larger than this scale's.",
        not_built=("MNLI: no training data offline",),
    )


def feature_based(work: Work) -> Table:
    # (column, --layers, --combine), in the paper's order
    layers = (
        ("embeddings only", "embeddings", "concat"),
        ("second-to-last hidden", "-2", "concat"),
        ("last hidden", "-1", "concat"),
        ("weighted sum last four", LAST_FOUR, "sum"),
        ("concat last four", LAST_FOUR, "concat"),
        ("weighted sum all layers", "all", "sum"),
    )
    return Table(
        "feature-based",
        "Feature-based against fine-tuning, CoNLL-2003 (BERT Table 7)",
        rows=(
            Row("BERT (MLM + NSP)", BERT),
            Row("random initialisation (floor)", RANDOM, floor=True),
        ),
        columns=task_columns(work, ("conll2003",))
        + tuple(Column(label, "features", spec, combine) for label, spec, combine in layers),
        comparisons=(),
        paper_columns=(),
        note="The paper (BERT-Base, dev F1): fine-tuning 96.4; embeddings only 91.0; "
        "second-to-last 95.6; last hidden 94.9; weighted sum last four 95.9; concat last four "
        '96.1; weighted sum all 12 layers 95.5. Here a "weighted sum" adds the layers with '
        'equal weights (`--combine sum`: the paper gives no weights), "all layers" are the '
        'Transformer blocks (not the embeddings), and "embeddings only" is the embedding '
        "layer's output (`--layers=embeddings`).",
    )


def masking(work: Work) -> Table:
    rows = []
    for rates in ((80, 10, 10), *MASKINGS):
        mnli, fine, feat = PAPER_MASKING[rates]
        rows.append(
            Row(
                "MASK {} / SAME {} / RND {}".format(*rates),
                masking_run(*rates),
                {"conll2003": fine, "features": feat},
            )
        )
    return Table(
        "masking",
        "Masking procedures (BERT Table 8)",
        rows=tuple(rows) + (Row("random initialisation (floor)", RANDOM, floor=True),),
        columns=task_columns(work, ("conll2003",)) + (Column("features", "features", LAST_FOUR),),
        comparisons=(
            Comparison(
                rows[0].label, rows[1].label, "feature-based 0.9 (MASK only hurts features)"
            ),
            Comparison(rows[0].label, rows[5].label, "fine-tuned 0.5, feature-based 0.3"),
        ),
        paper_columns=("conll2003", "features"),
        note="The paper's NER figures are dev F1 of BERT-Base; its MNLI column has no data here.",
    )


def beyond_bert(work: Work) -> Table:
    size = dict(work.scale.table_sizes).get("beyond-bert")  # ELECTRA-Small's size on a GPU
    copies = work.scale.static_copies
    static = f"RoBERTa, static masking ({copies} {'copy' if copies == 1 else 'copies'})"

    def at_size(run: Pretraining) -> Pretraining:
        return dataclasses.replace(run, size=size) if size else run

    return Table(
        "beyond-bert",
        "Beyond BERT at equal pre-training time: RoBERTa, SpanBERT, ELECTRA",
        rows=(
            Row("BERT (MLM + NSP)", at_size(BERT)),
            Row("RoBERTa, dynamic masking, FULL-SENTENCES", at_size(ROBERTA)),
            Row(static, at_size(ROBERTA_STATIC)),
            Row("SpanBERT (span masking + SBO)", at_size(SPANBERT)),
            Row("ELECTRA (generator counted in the time)", at_size(ELECTRA)),
            Row("random initialisation (floor)", at_size(RANDOM), floor=True),
        ),
        columns=task_columns(work),
        comparisons=(
            Comparison(
                "ELECTRA (generator counted in the time)",
                "BERT (MLM + NSP)",
                "+4.8 GLUE at Small size, equal FLOPs (ELECTRA Table 1)",
            ),
            Comparison(
                "SpanBERT (span masking + SBO)",
                "BERT (MLM + NSP)",
                "+2.0 SQuAD 1.1 F1 (large, SpanBERT Table 1)",
            ),
            Comparison(
                "RoBERTa, dynamic masking, FULL-SENTENCES",
                static,
                "dynamic +0.4 SQuAD 2.0 F1, -0.3 MNLI (RoBERTa Table 1: a tie)",
            ),
        ),
        note=(
            "Each pre-training gets the same wall-clock budget on this machine. "
            if work.scale.budget_seconds
            else "Each pre-training takes the same number of steps (this scale has no "
            "wall-clock budget: ELECTRA's generator is not counted in its time). "
        )
        + "Static masking: RoBERTa's baseline masked each sequence 10 ways for 40 epochs, so each "
        "masking was seen 4 times; a scale whose runs see the corpus a few times keeps fewer "
        "copies (`static_copies`) so that each is still seen several times.",
    )


def training_steps(work: Work) -> Table:
    n = work.scale.checkpoints

    def point(series: str, run: Pretraining, k: int) -> Row:
        return Row(steps_label(series, k, n), run, checkpoint=k, series=series)

    series = (("BERT (MLM + NSP)", BERT), ("LTR & No NSP", LTR))
    comparisons = [
        Comparison(
            steps_label("BERT (MLM + NSP)", k, n),
            steps_label("LTR & No NSP", k, n),
            "MLM converges slightly slower than LTR but outperforms it in absolute accuracy "
            "almost immediately (MNLI, Figure 5)",
        )
        for k in dict.fromkeys((1, n))
    ]
    if n % 2 == 0:
        comparisons.append(
            Comparison(
                steps_label("BERT (MLM + NSP)", n, n),
                steps_label("BERT (MLM + NSP)", n // 2, n),
                "BERT-Base gains almost 1.0 MNLI from 500k to 1M steps (Figure 5)",
            )
        )
    return Table(
        "training-steps",
        "Fine-tuned score against pre-training steps, MLM and LTR (BERT Figure 5)",
        rows=tuple(point(name, run, k) for name, run in series for k in range(1, n + 1)),
        columns=task_columns(work, ("conll2003",)),
        comparisons=tuple(comparisons),
        note=f"Each row fine-tunes from one of the {n} checkpoints the run keeps "
        "(`finetune --init RUN/checkpoints/ckpt-N`; the last is the finished run). "
        "The paper's figure is MNLI, which has no training data here; its values are in the "
        "figure only.",
        not_built=("MNLI: no training data offline",),
    )


def steps_label(series: str, k: int, n: int) -> str:
    return f"{series}, {k}/{n} of the steps"


TABLES = {
    "pretraining-tasks": pretraining_tasks,
    "model-size": model_size,
    "training-steps": training_steps,
    "feature-based": feature_based,
    "masking": masking,
    "beyond-bert": beyond_bert,
}
