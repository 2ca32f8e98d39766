"""How large each experiment runs: `--scale {smoke,cpu,gpu,paper}`.

A scale fixes everything a table leaves open: the corpora and the records'
length, the model sizes, how long each pre-training runs (a number of steps, or
a wall-clock budget that a short calibration run turns into steps, so that every
pre-training of a table gets the same time), the learning rate, the fine-tuning
tasks with their slices and epochs, and the seeds.

    python -c "from model.experiments.scales import SCALES; print(SCALES['cpu'])"
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Task:
    """A fine-tuning task as a scale runs it.

    Args:
        data: the task's data, relative to `--data`.
        metric: the key of its dev metric in the run's metrics.json.
        flags: `python -m model.train finetune` flags (epochs, slices, lengths).
        percent: whether the metric is written in percent (the official SQuAD script's)
            rather than as a fraction (GLUE's, seqeval's).
    """

    data: str
    metric: str
    flags: tuple[str, ...] = ()
    percent: bool = False

    def dev_percent(self, metrics: dict) -> float | None:
        """The dev score of a fine-tuning run's metrics.json in percent; None if absent or
        not a number (NaN, a JSON true)."""
        value = metrics.get("dev", {}).get(self.metric)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return self.scale * value if math.isfinite(value) else None

    @property
    def scale(self) -> float:
        """What the metric is multiplied by to be in percent."""
        return 1.0 if self.percent else 100.0


@dataclasses.dataclass(frozen=True)
class Scale:
    """Args:
    name: the `--scale` value.
    corpora: pre-training text, globs relative to `--data`.
    held_out: the raw text the held-out records (pre-training curves) are made from.
    seq_len: the records' length.
    size: the model size of every table but `model-size` (a preset).
    sizes: `model-size`'s sizes, (name, preset or BertConfig fields).
    batch_size, learning_rate: pre-training's.
    steps: pre-training steps, when there is no budget.
    budget_seconds: the wall-clock each pre-training of a table gets; the steps
        come from a calibration run of `calibration_steps` (its s/step).
    checkpoints: pre-training checkpoints kept per run (the `training-steps` points).
    eval_steps: held-out batches each pre-training checkpoint is scored on (its curve).
    tasks: fine-tuning tasks by name.
    seeds: fine-tuning seeds (median and spread over them).
    strategy_flags: extra pre-training flags (devices, precision, dropout).
    finetune_flags: extra fine-tuning flags (devices, precision).
    steps_per_call: pre-training steps in one compiled call (`--steps-per-call`, with
        `--device-data`); a budget's steps are then a whole number of calls a checkpoint.
    record_shards: files a record set is written in (`--num-shards`; one process reads each).
    static_copies: the static-masking row's copies of each sequence (`--dupe-factor`).
    table_sizes: a table's own model size where it is not `size`: (table, preset) pairs.
    tagger_flags: extra `model.feature_tagger` flags (default: the paper's tagger).
    step_seconds: measured seconds a pre-training step, (device kind, run, s) triples with
        the run as "NAME-SIZE" ("bert-mini"): a budgeted run on such a device takes its steps
        from here, not from a calibration run.
    seeds_together: each fine-tuning's seeds in one command (`finetune --seeds`, one
        compiled program for all of them; needs `--device-data` in `finetune_flags`).
    executable: whether this scale is meant to run here (paper: --dry-run only).
    accelerator: whether its budgets and batches are sized for a GPU (a run without one
        is warned: its budgets buy far fewer steps, another experiment).
    """

    name: str
    corpora: tuple[str, ...]
    held_out: str
    seq_len: int
    size: str
    sizes: tuple[tuple[str, object], ...]
    batch_size: int
    learning_rate: float
    steps: int | None
    budget_seconds: float | None
    tasks: dict[str, Task]
    seeds: tuple[int, ...]
    calibration_steps: int = 30
    checkpoints: int = 6
    eval_steps: int = 20
    strategy_flags: tuple[str, ...] = ()
    finetune_flags: tuple[str, ...] = ()
    steps_per_call: int | None = None
    record_shards: int = 8
    static_copies: int = 10
    table_sizes: tuple[tuple[str, str], ...] = ()
    tagger_flags: tuple[str, ...] = ()
    step_seconds: tuple[tuple[str, str, float], ...] = ()
    seeds_together: bool = False
    executable: bool = True
    accelerator: bool = False
    note: str = ""  # what a report of this scale can and cannot say, in a sentence or two

    def budget_text(self) -> str:
        if self.budget_seconds:
            return f"{self.budget_seconds / 60:.1f} min of pre-training each (steps calibrated)"
        return f"{self.steps:,} pre-training steps each"


WIKITEXT_VALID = "wikitext-2-raw/wiki.valid.raw"
# Google's BERT-Tiny (Turc et al. 2019): 2 layers of width 128.
BERT_TINY = {"num_layers": 2, "num_heads": 2, "hidden_dim": 128, "intermediate_dim": 512}

# One batch of the 32 sentences' features (39 at 32 WordPieces): one compiled training step
# a fine-tuning; a smaller last batch is a second program to compile under JAX (~4 s here).
SMOKE_TASKS = {
    "conll2003": Task(
        "conll2003",
        "f1",
        ("--max-train-examples", "32", "--epochs", "1", "--seq-len", "32", "--batch-size", "64"),
    ),
}
# Small models from scratch prefer a larger learning rate than the paper's 2e-5..5e-5.
CPU_LR = ("--learning-rate", "1e-4")
CPU_TASKS = {
    "sst2": Task(
        "glue/SST-2",
        "accuracy",
        ("--max-train-examples", "20000", "--epochs", "1", "--seq-len", "64")
        + ("--group-by-length", *CPU_LR),
    ),
    "mrpc": Task("glue/MRPC", "f1", ("--epochs", "3", "--seq-len", "128", *CPU_LR)),
    "conll2003": Task("conll2003", "f1", ("--epochs", "3", "--group-by-length", *CPU_LR)),
    "squad1": Task(
        "squad/train-v1.1.reconstructed.json",
        "f1",
        ("--max-train-examples", "8000", "--epochs", "1", "--seq-len", "256", *CPU_LR),
        percent=True,
    ),
}
# One GPU: whole training sets (SQuAD's first 30,000 questions), full-length batches
# on the device (no --group-by-length), the small models' larger learning rate.
GPU_TASKS = {
    "sst2": Task("glue/SST-2", "accuracy", ("--epochs", "1", "--seq-len", "64", *CPU_LR)),
    "mrpc": Task("glue/MRPC", "f1", ("--epochs", "3", "--seq-len", "128", *CPU_LR)),
    "conll2003": Task("conll2003", "f1", ("--epochs", "3", "--seq-len", "128", *CPU_LR)),
    "squad1": Task(
        "squad/train-v1.1.reconstructed.json",
        "f1",
        ("--max-train-examples", "30000", "--epochs", "1", "--seq-len", "256", *CPU_LR),
        percent=True,
    ),
}
PAPER_TASKS = {
    "sst2": Task("glue/SST-2", "accuracy", ("--epochs", "3")),
    "mrpc": Task("glue/MRPC", "f1", ("--epochs", "3")),
    "conll2003": Task("conll2003", "f1", ("--epochs", "3")),
    "squad1": Task("squad/train-v1.1.reconstructed.json", "f1", ("--epochs", "2"), percent=True),
}

SCALES = {
    # Every table end to end in seconds per command: the test suite runs it.
    "smoke": Scale(
        name="smoke",
        corpora=(WIKITEXT_VALID,),
        held_out=WIKITEXT_VALID,
        seq_len=32,
        size="4x16",  # four blocks: the feature-based columns read the last four
        sizes=(
            ("4x16", {"num_layers": 4, "num_heads": 1, "hidden_dim": 16, "intermediate_dim": 32}),
            ("1x16", {"num_layers": 1, "num_heads": 1, "hidden_dim": 16, "intermediate_dim": 32}),
            ("2x32", {"num_layers": 2, "num_heads": 2, "hidden_dim": 32, "intermediate_dim": 64}),
        ),
        batch_size=8,
        learning_rate=1e-3,
        steps=4,
        budget_seconds=None,
        tasks=SMOKE_TASKS,
        seeds=(1,),
        checkpoints=2,
        eval_steps=2,
        # The paper's 2 x 768-unit BiLSTM is most of a smoke table's time, on 16-wide features.
        tagger_flags=("--lstm-units", "16"),
        note=(
            "The smoke scale checks that every command of the table runs (models 16 or 32 wide, "
            "4 pre-training steps, one fine-tuning step on 32 CoNLL-2003 sentences, one seed; "
            "its held-out text is its training text): its numbers say nothing about the "
            "papers, and the paper's columns beside them are not comparisons."
        ),
    ),
    # A 2-core CPU, a few hours a table: `mini` models, ~21 minutes of pre-training each.
    "cpu": Scale(
        name="cpu",
        corpora=("pretrain/enwiki-2015/AA/wiki_0*.gz", "pretrain/gutenberg/books/00[0-2]*.txt.gz"),
        held_out=WIKITEXT_VALID,
        seq_len=128,
        size="mini",
        sizes=(("bert-tiny", BERT_TINY), ("mini", "mini"), ("small", "small")),
        batch_size=32,
        learning_rate=5e-4,
        steps=None,
        budget_seconds=1275.0,
        tasks=CPU_TASKS,
        seeds=(1, 2, 3),
    ),
    # One H100 or H200, TensorFlow-free (KERAS_BACKEND=jax): `mini` models, one minute of
    # pre-training each on the device path (dropout 0, bf16), the tasks' full training sets
    # but SQuAD's, 3 seeds. The budget arithmetic: docs/experiments.md, "The `gpu` scale".
    "gpu": Scale(
        name="gpu",
        corpora=("pretrain/enwiki-2015/AA/*.gz", "pretrain/gutenberg/books/*.txt.gz"),
        held_out=WIKITEXT_VALID,
        seq_len=128,
        size="mini",
        sizes=(("bert-tiny", BERT_TINY), ("mini", "mini"), ("small", "small")),
        batch_size=256,
        learning_rate=5e-4,
        steps=None,
        budget_seconds=60.0,
        tasks=GPU_TASKS,
        seeds=(1, 2, 3),
        calibration_steps=200,
        strategy_flags=("--device-data", "--dropout", "0", "--mixed-precision", "mixed_bfloat16"),
        finetune_flags=("--device-data", "--mixed-precision", "mixed_bfloat16"),
        steps_per_call=20,
        record_shards=16,
        # About four passes over the corpus: one copy is seen four times, as RoBERTa's
        # 10 copies were over its 40 epochs (10 copies would each be seen once or not at all).
        static_copies=1,
        table_sizes=(("beyond-bert", "electra-small"),),
        # The steps of whole runs (seconds_in_steps / steps_this_run of train_summary.json;
        # docs/experiments.md#the-gpu-scale-one-table-on-one-rented-gpu), six checkpoint saves
        # included (the timer counted them then: if a save takes the 0.2-0.5 s the
        # calibrations suggest, these rows' 60 s held 57-59 s of steps alone). 100-step
        # calibration runs measured 14-15 ms for the steps that take 9.0 ms in the runs
        # themselves, and their runs got 36 s of steps: their one save counted, and their few
        # calls were slower after compiling. A calibration now reads its median call
        # (`median_step_seconds`), saves not counted.
        step_seconds=(
            ("NVIDIA H200", "bert-mini", 0.00899),
            ("NVIDIA H200", "no-nsp-mini", 0.00902),
        ),
        seeds_together=True,
        accelerator=True,
    ),
    # The papers' BERT-Base schedule (1M steps of 256 x 128; the paper's last 10 % at 512 is
    # the documented second phase, docs/pretraining.md): for GPUs and TPUs, printed here.
    "paper": Scale(
        name="paper",
        corpora=("pretrain/enwiki-2015/AA/*.gz", "pretrain/gutenberg/books/*.txt.gz"),
        held_out=WIKITEXT_VALID,
        seq_len=128,
        size="base",
        sizes=(
            (
                "3x768",
                {"num_layers": 3, "num_heads": 12, "hidden_dim": 768, "intermediate_dim": 3072},
            ),
            (
                "6x768",
                {"num_layers": 6, "num_heads": 12, "hidden_dim": 768, "intermediate_dim": 3072},
            ),
            ("base", "base"),
            ("large", "large"),
        ),
        batch_size=256,
        learning_rate=1e-4,
        steps=1_000_000,
        budget_seconds=None,
        tasks=PAPER_TASKS,
        seeds=(1, 2, 3, 4, 5),
        checkpoints=10,
        strategy_flags=("--strategy", "tpu", "--mixed-precision", "mixed_bfloat16"),
        executable=False,
    ),
}
