"""The commands of an experiment: records, calibration, pre-training, fine-tuning, features.

Everything lives under one work directory, named so that a run made for one
table is found, complete, by every other table that needs it (the `bert` model
of `pretraining-tasks` is the 80/10/10 row of `masking`):

    WORK/data/train-FORMAT, valid-FORMAT     records (`python -m model.data --inputs FORMAT`)
    WORK/configs/SIZE.json                   a size that is not a preset
    WORK/calibration/RUN/                    a short run timing the step of RUN
    WORK/runs/RUN/                           a pre-training run, RUN = NAME-SIZE-seedN
    WORK/finetune/RUN/TASK-seedK/            a fine-tuning run (metrics.json)
    WORK/finetune/RUN/TASK-bilstm-seedK/     the same with a BiLSTM on the encoder (--bilstm)
    WORK/finetune/RUN/TASK-checkpointKofN-seedK/   from RUN's checkpoint k of the scale's N
    WORK/features/RUN/LAYERS[-sum]-seedK/    a feature-based tagger (metrics.json)
    WORK/mlm/RUN.json                        held-out masked-LM scores
    WORK/timings.json                        every finished command's wall time
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os

from model.experiments.scales import Scale
from model.recipes.runner import Command, Deferred, WorkAndData, read_json
from model.training import layout

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# bert-base-uncased's 30,522 WordPieces (the shipped models' vocabulary).
DEFAULT_VOCAB = os.path.join(REPOSITORY, "assets", "models", "mlm", "vocab.txt")
PRETRAINING_SEED = 1


@dataclasses.dataclass(frozen=True)
class Pretraining:
    """One pre-training run of a table row.

    Args:
        name: the row's run name ("bert", "no-nsp", "mask-100-0-0", ...).
        objective: `--objective`.
        inputs: the records' `--inputs` format.
        flags: further `model.train pretrain` flags (--no-nsp, masking rates).
        size: a preset or a size of `Scale.sizes`; None: the scale's size.
        static: records masked at creation (`--masking static`, the scale's
            `static_copies` copies of each sequence).
        random: no training: the initialised model, saved (`--steps 0`; the floor).
    """

    name: str
    objective: str = "bert"
    inputs: str = "sentence-pairs"
    flags: tuple[str, ...] = ()
    size: str | None = None
    static: bool = False
    random: bool = False


@dataclasses.dataclass(frozen=True)
class Work(WorkAndData):
    """The work directory, the data directory and the scale of one experiment; `device`: the
    accelerator's kind where the commands run ("NVIDIA H200"; None: not known, or a CPU)."""

    work: str
    data: str
    scale: Scale
    vocab: str = DEFAULT_VOCAB
    device: str | None = None

    # === Names ===

    def size_of(self, p: Pretraining) -> str:
        return p.size or self.scale.size

    def run_name(self, p: Pretraining) -> str:
        return f"{p.name}-{self.size_of(p)}-seed{PRETRAINING_SEED}"

    def run_dir(self, p: Pretraining) -> str:
        return self.in_work("runs", self.run_name(p))

    def records(self, inputs: str, static: bool = False, split: str = "train") -> str:
        return self.in_work("data", f"{split}-{inputs}" + ("-static" if static else ""))

    def finetune_dir(
        self,
        p: Pretraining,
        task: str,
        seed: int | str,
        checkpoint: int | None = None,
        bilstm: bool = False,
    ) -> str:
        """`checkpoint`: k of the scale's checkpoints (the last is the finished run itself)."""
        name = task + ("-bilstm" if bilstm else "")
        if checkpoint is not None and checkpoint != self.scale.checkpoints:
            name += f"-checkpoint{checkpoint}of{self.scale.checkpoints}"
        return self.in_work("finetune", self.run_name(p), f"{name}-seed{seed}")

    def features_dir(self, p: Pretraining, layers: str, seed: int, combine: str = "concat") -> str:
        # "-1,-2" names a folder "layers-1,-2": a name starting with "-" reads as an option to
        # ls and rm. A WORK made before keeps its "-1,-2-seedN" folders, found as they are.
        name = layers + ("" if combine == "concat" else f"-{combine}") + f"-seed{seed}"
        old = self.in_work("features", self.run_name(p), name)
        new = self.in_work(
            "features", self.run_name(p), ("layers" if name[0] == "-" else "") + name
        )
        return old if os.path.isdir(old) and not os.path.isdir(new) else new

    def mlm_file(self, p: Pretraining) -> str:
        return self.in_work("mlm", f"{self.run_name(p)}.json")

    def hidden_dim(self, size: str) -> int:
        from model.config import BertConfig

        fields = dict(self.scale.sizes).get(size, size)
        if isinstance(fields, str):
            return BertConfig.preset(fields).hidden_dim
        return fields["hidden_dim"]

    def bilstm_units(self, p: Pretraining) -> int:
        """`--bilstm`: half the encoder's width a direction, so the head reads vectors as wide
        as without it (the paper does not give the BiLSTM's size)."""
        return max(1, self.hidden_dim(self.size_of(p)) // 2)

    def checkpoint_step(self, p: Pretraining, k: int) -> int | None:
        """The pre-training step of checkpoint `k` of the scale's `checkpoints` (the last: the
        finished run); None while a run with a time budget has not finished."""
        s = self.scale
        total = s.steps or read_json(os.path.join(self.run_dir(p), layout.SUMMARY)).get("steps")
        if not isinstance(total, int):
            return None
        if k == s.checkpoints:
            return total
        # The run's --checkpoint-every (`pretrain`): a budget's steps are a multiple of it.
        every = max(1, s.steps // s.checkpoints) if s.steps else total // s.checkpoints
        return k * every

    def checkpoint_dir(self, p: Pretraining, k: int) -> str:
        step = self.checkpoint_step(p, k)
        if step is None:
            raise ValueError(f"{self.run_dir(p)}: the run has not finished (no train_summary.json)")
        return layout.checkpoint_dir(self.run_dir(p), step)

    def config_arg(self, size: str) -> str:
        """`--config`: a preset name, or WORK/configs/SIZE.json for a size given by its fields
        (written when the plan is made; a dry run writes nothing)."""
        fields = dict(self.scale.sizes).get(size, size)
        if isinstance(fields, str):
            return fields
        return self.in_work("configs", f"{size}.json")

    def config_files(self) -> dict[str, dict]:
        """{path: BertConfig fields} of the sizes that are not presets."""
        return {
            self.in_work("configs", f"{name}.json"): {"vocabulary_size": 30522, **fields}
            for name, fields in self.scale.sizes
            if not isinstance(fields, str)
        }

    # === Commands ===

    def make_records(self, inputs: str, static: bool = False) -> list[Command]:
        """Training records from the scale's corpora and held-out ones from its held-out text."""
        commands = []
        for split, sources in (("valid", (self.scale.held_out,)), ("train", self.scale.corpora)):
            if split == "valid" and static:
                continue  # held-out instances are masked the same way for every row
            out = self.records(inputs, static, split)
            argv = ["--inputs", inputs, "--vocab", self.vocab, "--output", out]
            for source in sources:
                argv += ["--input", self.in_data(source)]
            argv += ["--seq-len", str(self.scale.seq_len)]
            argv += ["--num-shards", str(self.scale.record_shards)]
            if static:
                argv += ["--masking", "static", "--dupe-factor", str(self.scale.static_copies)]
            commands.append(Command("model.data", tuple(argv), os.path.join(out, "dataset.json")))
        return commands

    def pretrain_argv(self, p: Pretraining, output: str, steps, every) -> tuple:
        s = self.scale
        argv = [
            "pretrain",
            "--objective",
            p.objective,
            "--config",
            self.config_arg(self.size_of(p)),
            "--data",
            self.records(p.inputs, p.static),
            "--eval-data",
            self.records(p.inputs, split="valid"),
            "--eval-steps",
            str(s.eval_steps),
            "--output",
            output,
            "--steps",
            steps,
            "--checkpoint-every",
            every,
            "--keep-checkpoints",
            "100",
            "--learning-rate",
            str(s.learning_rate),
            "--batch-size",
            str(s.batch_size),
            "--seed",
            str(PRETRAINING_SEED),
            *p.flags,
            *s.strategy_flags,
        ]
        if s.steps_per_call and steps != "0":
            argv += ["--steps-per-call", str(s.steps_per_call)]
        return tuple(argv)

    def known_step_seconds(self, p: Pretraining) -> float | None:
        """The scale's measured seconds a step of `p`'s run on this device, if it has them."""
        run = f"{p.name}-{self.size_of(p)}"
        for device, name, seconds in self.scale.step_seconds:
            if device == self.device and name == run:
                return seconds
        return None

    def pretrain(self, p: Pretraining) -> list[Command]:
        """The run of `p` (after a calibration run when the scale has a time budget and no
        measured step time for this device)."""
        run = self.run_dir(p)
        done = os.path.join(run, layout.SUMMARY)
        s = self.scale
        # A run of this name trained on records of another format stops the plan rather than
        # stand in for this one (its summary says which since 2026-11-29, when ELECTRA's row
        # moved from `segments` to `segment-pairs`).
        command = functools.partial(Command, made_with=(("input_format", p.inputs),))
        if p.random:  # the initialised model, saved: nothing trained, nothing compiled
            return [command("model.train", self.pretrain_argv(p, run, "0", "1"), done)]
        if not s.budget_seconds:
            every = str(max(1, s.steps // s.checkpoints))
            return [command("model.train", self.pretrain_argv(p, run, str(s.steps), every), done)]
        known = self.known_step_seconds(p)
        if known is not None:
            steps = self.steps_for(known)
            every = str(steps // s.checkpoints)
            return [command("model.train", self.pretrain_argv(p, run, str(steps), every), done)]
        calibration = self.in_work("calibration", self.run_name(p))
        n = s.calibration_steps
        calibrate = command(
            "model.train",
            self.pretrain_argv(p, calibration, str(n), str(n)),
            os.path.join(calibration, layout.SUMMARY),
            skip_if=done,  # the run itself is complete: nothing left to time
        )
        steps = Deferred(
            f"<{s.budget_seconds:.0f} s / the calibrated s per step>",
            lambda: str(self.budgeted_steps(calibration)),
        )
        every = Deferred(
            f"<steps / {s.checkpoints}>",
            lambda: str(self.budgeted_steps(calibration) // s.checkpoints),
        )
        return [calibrate, command("model.train", self.pretrain_argv(p, run, steps, every), done)]

    def budgeted_steps(self, calibration: str) -> int:
        """The scale's budget over the calibration run's seconds per step (`steps_for`): its
        median call's (`median_step_seconds`: a slow call after compiling or one with a save
        does not move it), else the mean over the time inside the training steps
        (`seconds_in_steps`, without the held-out evaluation that would count several times
        more per step than in the long run), else, for a run written before either field, its
        wall time."""
        summary = read_json(os.path.join(calibration, layout.SUMMARY))
        if summary.get("median_step_seconds"):
            return self.steps_for(summary["median_step_seconds"])
        seconds = summary.get("seconds_in_steps") or summary.get("seconds_this_run")
        if not summary.get("steps_this_run") or not seconds:
            raise ValueError(f"{calibration}: no timed steps in train_summary.json")
        return self.steps_for(seconds / summary["steps_this_run"])

    def steps_for(self, per_step: float) -> int:
        """The scale's budget at `per_step` seconds a step, rounded up to a whole number of
        checkpoint intervals (of whole compiled calls, with `steps_per_call`)."""
        multiple = self.scale.checkpoints * (self.scale.steps_per_call or 1)
        return multiple * math.ceil(self.scale.budget_seconds / per_step / multiple)

    def finetune(
        self,
        p: Pretraining,
        task: str,
        seed: int | None,
        checkpoint: int | None = None,
        bilstm: bool = False,
    ) -> Command:
        """Fine-tuning `task` from the run of `p` (from its checkpoint `checkpoint` of the
        scale's, when given; with a BiLSTM on the encoder, when `bilstm`). `seed` None: every
        seed of the scale in one command (`--seeds`, trained together), done when the last
        seed's metrics.json is written (the seeds' are written in order)."""
        t = self.scale.tasks[task]
        if seed is None:
            out = self.finetune_dir(p, task, "{seed}", checkpoint, bilstm)
            seeds = ("--seeds", ",".join(map(str, self.scale.seeds)))
            last = self.finetune_dir(p, task, self.scale.seeds[-1], checkpoint, bilstm)
        else:
            out = self.finetune_dir(p, task, seed, checkpoint, bilstm)
            seeds, last = ("--seed", str(seed)), out
        init = self.run_dir(p)
        if checkpoint is not None and checkpoint != self.scale.checkpoints:
            k, n = checkpoint, self.scale.checkpoints
            if self.scale.steps:  # known now: print the very path
                init = self.checkpoint_dir(p, k)
            else:  # the steps are the calibrated budget's
                init = Deferred(
                    f"{init}/checkpoints/<ckpt at {k}/{n} of the steps>",
                    lambda: self.checkpoint_dir(p, k),
                )
        argv = (
            "finetune",
            "--task",
            task,
            "--data",
            self.in_data(t.data),
            "--init",
            init,
            "--output",
            out,
            *seeds,
            *t.flags,
            *(("--bilstm", str(self.bilstm_units(p))) if bilstm else ()),
            *self.scale.finetune_flags,
        )
        return Command("model.train", argv, os.path.join(last, "metrics.json"), concurrent=True)

    def feature_tagger(
        self, p: Pretraining, layers: str, seed: int, combine: str = "concat"
    ) -> Command:
        t = self.scale.tasks["conll2003"]
        out = self.features_dir(p, layers, seed, combine)
        flags = [f for f in t.flags if f != "--group-by-length"]
        argv = (
            "--model",
            self.run_dir(p),
            "--data",
            self.in_data(t.data),
            "--output",
            out,
            f"--layers={layers}",
            *(("--combine", combine) if combine != "concat" else ()),
            "--seed",
            str(seed),
            *_tagger_flags(flags),
            *self.scale.tagger_flags,
        )
        return Command(
            "model.feature_tagger", argv, os.path.join(out, "metrics.json"), concurrent=True
        )

    def mlm_score(self, p: Pretraining) -> Command:
        out = self.mlm_file(p)
        argv = (
            "--task",
            "mlm",
            "--model",
            self.run_dir(p),
            "--data",
            self.in_data(self.scale.held_out),
            "--seq-len",
            str(self.scale.seq_len),
            "--output",
            out,
        )
        return Command("model.evaluate", argv, out, concurrent=True)


def _tagger_flags(finetune_flags: list[str]) -> list[str]:
    """The fine-tuning flags that `model.feature_tagger` shares (the slice, the epochs, the
    length, the batch); the others (learning rate, grouping, the device path) are not its."""
    shared = ("--max-train-examples", "--epochs", "--seq-len", "--batch-size")
    out, i = [], 0
    while i < len(finetune_flags):
        if finetune_flags[i] in shared and i + 1 < len(finetune_flags):
            out += finetune_flags[i : i + 2]
            i += 2
        else:
            i += 1
    return out
