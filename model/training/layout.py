"""Where a training run keeps what, in one place (no Keras: the experiments planner reads it).

RUN/checkpoints/ckpt-00001000/        a whole checkpoint (`checkpointing` writes it)
RUN/checkpoints/.ckpt-00001000.tmp-*  a save cut off before its rename: never read
RUN/train_summary.json                a finished pre-training's steps and timings
"""

from __future__ import annotations

import copy
import os
import re

CHECKPOINTS = "checkpoints"
SUMMARY = "train_summary.json"
WEIGHTS = "model.weights.h5"
_NAME = re.compile(r"^ckpt-(\d{8})$")
_PARTIAL = re.compile(r"^\.ckpt-\d{8}\.tmp-")


def checkpoint_name(step: int) -> str:
    """The directory name of the checkpoint at `step`: ckpt-NNNNNNNN."""
    return f"ckpt-{step:08d}"


def partial_prefix(step: int) -> str:
    """The start of the temporary name a save of `step` is built under."""
    return f".{checkpoint_name(step)}.tmp-"


def checkpoint_dir(run: str, step: int) -> str:
    """RUN/checkpoints/ckpt-NNNNNNNN."""
    return os.path.join(run, CHECKPOINTS, checkpoint_name(step))


def step_of(name: str) -> int | None:
    """The step a whole checkpoint's directory `name` is at; None for any other name."""
    m = _NAME.match(name)
    return int(m.group(1)) if m else None


def is_partial(name: str) -> bool:
    """Whether `name` is a save that never finished (`partial_prefix`)."""
    return _PARTIAL.match(name) is not None


def checkpoint_of(path: str) -> str | None:
    """The checkpoint directory `path` names (`.../ckpt-NNNNNNNN`, its model.weights.h5, or a
    partial `.ckpt-*.tmp-*`), or None when `path` is no training checkpoint."""
    directory = os.path.normpath(path)
    if os.path.basename(directory) == WEIGHTS:
        directory = os.path.dirname(directory)
    name = os.path.basename(directory)
    return directory if step_of(name) is not None or is_partial(name) else None


def seed_outputs(output: str, seeds: list[int] | None) -> list[str]:
    """Each seed's --output ({seed} filled in) for `model.train finetune --seeds`, or
    [output] without seeds."""
    return [output.replace("{seed}", str(seed)) for seed in seeds] if seeds else [output]


# What a finished run of each command leaves in its --output besides its model, and its name.
FINISHED = {
    "finetune": ("metrics.json", "fine-tuning (or feature tagger)"),
    "pretrain": (SUMMARY, "pre-training"),
}


def per_seed(args) -> list:
    """`args` for each seed of --seeds (its --output with {seed} filled in), or [args]."""
    if not getattr(args, "seeds", None):
        return [args]
    out = []
    for seed, output in zip(args.seeds, seed_outputs(args.output, args.seeds)):
        one = copy.copy(args)
        # its metrics.json's command is this seed's run alone: the same result
        one.seed, one.seeds, one.output = seed, None, output
        out.append(one)
    return out


def check_run_output(output: str, command: str) -> None:
    """ValueError where `output`, an existing folder, holds something a run of `command`
    ("finetune" or "pretrain") would write over without having written it: the other
    command's finished run, or files no run wrote (a model folder, a user's own files). A new
    or empty folder, or one a run left (its checkpoints, logs or finished-run file), passes:
    the run goes on there, after its checkpoints say they are this run's."""
    if not os.path.isdir(output):
        return
    try:
        names = sorted(n for n in os.listdir(output) if not n.startswith("."))
    except OSError as e:
        raise ValueError(f"--output {output}: cannot be read ({e.strerror})") from None
    (other,) = (c for c in FINISHED if c != command)
    done, what = FINISHED[other]
    if done in names:
        hint = f"; fine-tune from it with --init {output}" if command == "finetune" else ""
        raise ValueError(
            f"--output {output} holds a finished {what} run ({done}), which this {command} "
            f"would write over: name another --output{hint}"
        )
    if not names or {CHECKPOINTS, "logs", FINISHED[command][0]} & set(names):
        return
    what = "a model" if "config.json" in names else "other files"
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    raise ValueError(
        f"--output {output} already holds {what} ({shown}), not a training run's, which this "
        f"{command} would write over or among: name a new or empty folder"
    )
