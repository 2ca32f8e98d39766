"""Resumable training checkpoints, written atomically.

Keras' `BackupAndRestore` overwrites `latest.weights.h5` in place and writes
its step counter in a second file afterwards: a `kill -9` in between leaves
a truncated file, or new weights with an old counter. Here every checkpoint
is a directory built under a temporary name and renamed when complete:

    checkpoints/ckpt-00001000/model.weights.h5   weights + optimizer state
                             /rng.npz            dropout seed-generator states
                             /state.json         {"step": 1000, "run": ...}

so a directory named `ckpt-*` is always whole, and restarting the same
command resumes from the newest one. Dropout's seed state is saved too (Keras
leaves it out of `.weights.h5`): a resumed run then matches an uninterrupted
one bit for bit.

Multi-worker training: only the chief (`is_chief`) writes; every worker
restores from the same directory, which must be on a filesystem they share.
The others have nothing of their own to save, since their variables are
kept identical to the chief's by the all-reduce.

`run` in state.json says what the run trains (`run_identity`: the objective or task, the
model's shape, what sets each step's examples): a command that trains something else into the
same --output is refused before any weight is read, instead of resuming another run's weights
and optimizer state.

`load_checkpoint(RUN/checkpoints/ckpt-N)` reads one checkpoint back as a model
(the run's config.json and vocab.txt, this step's weights, no optimizer): what
`python -m model.train finetune --init RUN/checkpoints/ckpt-N` starts from, to
fine-tune from a pre-training run at an intermediate step (BERT Figure 5).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile

import keras
import numpy as np

from model.io.files import staging_dir
from model.training import layout
from model.training.layout import WEIGHTS, checkpoint_of
from model.training.optimizer import create_optimizer_variables
from model.training.run_command import difference


def _rng_variables(model):
    return [v for v in model.non_trainable_variables if "seed_generator_state" in v.path]


def run_identity(trains: str, model, reads: dict | None = None) -> dict:
    """What a run trains, as its checkpoints record it: `trains` (the command's
    `--objective ...` or `--task ...`), the model's shape (`model_dir.describe`
    less its dropout rates, which a resumed run may change) and `reads`, what sets the
    examples each step reads ({"--batch-size": 256, "training examples": 67349, ...}: a
    resumed run starts at the examples its step count says, so they must not change)."""
    from model.checkpoints.model_dir import describe

    def shape(value):
        if isinstance(value, dict):
            return {k: shape(v) for k, v in value.items() if k != "dropout"}
        return value

    identity = {"trains": trains, "model": shape(describe(model))}
    if reads:
        identity["reads"] = reads
    return json.loads(json.dumps(identity))


def _same_run(theirs: dict, ours: dict) -> bool:
    """Whether a checkpoint's `run` is this command's: the same training and model, and the
    same "reads" where both record one (a checkpoint written before runs recorded a read, or
    all of them, is compared without it)."""
    rest = [{k: v for k, v in run.items() if k != "reads"} for run in (theirs, ours)]
    return rest[0] == rest[1] and not _reads_differ(theirs, ours)


def _reads_differ(theirs: dict, ours: dict) -> list[str]:
    """The "reads" both runs record that differ: ["--batch-size 4 (this command: 2)", ...]."""
    a, b = theirs.get("reads", {}), ours.get("reads", {})
    return [difference(key, a[key], b[key]) for key in a if key in b and a[key] != b[key]]


def _other_run(directory: str, theirs: dict, ours: dict) -> str:
    """The error for checkpoints of another run than this command's."""
    if theirs.get("trains") != ours.get("trains"):
        differs = difference("trains", theirs.get("trains"), ours.get("trains"))
    else:
        found = []

        def compare(a, b, where=""):
            for key in sorted(set(a) | set(b)):
                x, y = a.get(key), b.get(key)
                if isinstance(x, dict) and isinstance(y, dict):
                    compare(x, y, f"{where}{key}.")
                elif x != y:
                    found.append(difference(where + key, x, y))

        compare(theirs.get("model", {}), ours.get("model", {}))
        if found:
            differs = "another model: " + "; ".join(found)
        else:
            differs = "other examples at each step: " + "; ".join(_reads_differ(theirs, ours))
    return (
        f"{directory}: its checkpoints are of another run ({differs}); resume with the "
        f"command that wrote them, or use a new --output"
    )


def _read(path: str, reader):
    """`reader(path)`, its failures re-raised as ValueError naming `path`: h5py's
    and zipfile's messages do not, and a truncated `.npz` raises BadZipFile or
    EOFError, which are neither OSError nor ValueError."""
    try:
        return reader(path)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise ValueError(f"{path}: {e}") from None


def _read_npz(path: str) -> dict:
    with np.load(path) as f:
        return {name: f[name] for name in f.files}


def _read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class ResumableCheckpoint(keras.callbacks.Callback):
    """Saves every `every` steps (and at the end); `restore()` picks up the newest.

    Args:
        directory: where `ckpt-*` directories go.
        every: steps between checkpoints.
        keep: how many recent checkpoints to keep.
        is_chief: only the chief writes (multi-worker training).
        run: what the run trains (`run_identity`), kept in state.json; `restore`
            refuses checkpoints of another run. None: not recorded nor checked.
    """

    def __init__(
        self,
        directory: str,
        every: int,
        keep: int = 3,
        is_chief: bool = True,
        state=None,
        run: dict | None = None,
    ):
        super().__init__()
        self.directory = directory
        self.every = every
        self.keep = keep
        self.is_chief = is_chief
        # state(): a JSON-able dict stored in state.json beside the step (e.g.
        # fine-tuning's dev history); restore() puts it in `restored_state`.
        self.state = state
        self.restored_state: dict = {}
        self.last_saved = None
        self.run = run

    # === Restore ===

    def checkpoints(self) -> list[tuple[int, str]]:
        if not os.path.isdir(self.directory):
            return []
        found = []
        for name in os.listdir(self.directory):
            step = layout.step_of(name)
            if step is not None and os.path.isfile(
                os.path.join(self.directory, name, "state.json")
            ):
                found.append((step, os.path.join(self.directory, name)))
        return sorted(found)

    def restore(self, model, at_most: int | None = None) -> int:
        """Loads the newest complete checkpoint (of a step up to `at_most`, if given) into
        `model` (built, compiled). Returns its step, or 0 when there is none. Raises
        ValueError when there are checkpoints but none fits `model`: starting over would
        rotate the real ones away after `keep` saves."""
        error = None
        found = [(s, p) for s, p in self.checkpoints() if at_most is None or s <= at_most]
        self._check_run(found)
        for step, path in reversed(found):
            try:
                if not model.optimizer.built:
                    create_optimizer_variables(model)
                _read(os.path.join(path, WEIGHTS), model.load_weights)
                rng = _read(os.path.join(path, "rng.npz"), _read_npz)
                variables = _rng_variables(model)
                if len(rng) != len(variables):
                    raise ValueError(
                        f"{path}: {len(rng)} seed states for {len(variables)} seed generators"
                    )
                for i, v in enumerate(variables):
                    v.assign(rng[f"s{i}"])
                state = _read(os.path.join(path, "state.json"), _read_json)
            except (OSError, ValueError) as e:
                # Renamed directories are complete, so this is disk damage, not
                # a crash mid-write; say so and fall back to the one before.
                print(f"warning: checkpoint {path} is unreadable ({e}); trying an older one")
                error = error or e
                continue
            self.last_saved = step
            self.restored_state = {k: v for k, v in state.items() if k not in ("step", "run")}
            return step
        if error is not None:
            raise ValueError(
                f"{self.directory}: no checkpoint there fits this model (the newest: "
                f"{error}); resume with the command that wrote them, or use a new --output"
            )
        return 0

    def _check_run(self, found: list[tuple[int, str]]) -> None:
        """Raises ValueError when the newest of `found` that records its run (older
        checkpoints do not) records another than this one."""
        if self.run is None:
            return
        for _, path in reversed(found):
            try:
                theirs = _read_json(os.path.join(path, "state.json")).get("run")
            except (OSError, ValueError, AttributeError):
                continue  # unreadable: restore says so, and tries an older one
            if theirs is not None:
                if not _same_run(theirs, self.run):
                    raise ValueError(_other_run(self.directory, theirs, self.run))
                return

    # === Save ===

    def save(self, step: int) -> None:
        if self.last_saved == step:
            return
        self.last_saved = step
        if not self.is_chief:
            return
        os.makedirs(self.directory, exist_ok=True)
        tmp = staging_dir(self.directory, layout.partial_prefix(step))
        try:
            self.model.save_weights(os.path.join(tmp, WEIGHTS))
            np.savez(
                os.path.join(tmp, "rng.npz"),
                **{
                    f"s{i}": keras.ops.convert_to_numpy(v.value)
                    for i, v in enumerate(_rng_variables(self.model))
                },
            )
            with open(os.path.join(tmp, "state.json"), "w") as f:
                json.dump(self._state(step), f)
            for name in os.listdir(tmp):
                with open(os.path.join(tmp, name), "rb+") as f:
                    os.fsync(f.fileno())
            final = os.path.join(self.directory, layout.checkpoint_name(step))
            if os.path.isdir(final):
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for _, old in self.checkpoints()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)

    def _state(self, step: int) -> dict:
        run = {} if self.run is None else {"run": self.run}
        return {"step": step, **run, **(self.state() if self.state else {})}

    def update_state(self) -> None:
        """Rewrites state.json of the newest checkpoint (atomically) with the
        current `state()`: what happened after its weights were saved (e.g.
        that epoch's dev scores) then survives a crash too."""
        found = self.checkpoints()
        if not self.is_chief or not found:
            return
        step, path = found[-1]
        from model.io.files import write_json

        write_json(os.path.join(path, "state.json"), self._state(step))

    def remove_after(self, step: int) -> None:
        """Deletes the checkpoints of steps after `step` (a run gone back to it)."""
        if self.is_chief:
            for later, path in self.checkpoints():
                if later > step:
                    shutil.rmtree(path, ignore_errors=True)

    def remove_all(self) -> None:
        """Deletes every checkpoint (a finished run no longer needs them)."""
        if self.is_chief and os.path.isdir(self.directory):
            shutil.rmtree(self.directory, ignore_errors=True)

    def clean_partial(self) -> None:
        """Removes temporaries left by a run killed mid-save."""
        if os.path.isdir(self.directory):
            for name in os.listdir(self.directory):
                if name.startswith(".ckpt-"):
                    shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)

    def _step(self) -> int:
        return optimizer_step(self.model)

    def on_train_batch_end(self, batch, logs=None):
        if logs and not np.isfinite(logs.get("loss", 0.0)):
            # This callback runs before TerminateOnNaN: a NaN step that falls
            # on a checkpoint step must not replace the last good checkpoint.
            return
        step = self._step()
        if step % self.every == 0:
            self.save(step)

    def on_train_end(self, logs=None):
        if self.model.stop_training and logs and not np.isfinite(logs.get("loss", 0.0)):
            return  # never checkpoint NaN weights: keep the last good one
        self.save(self._step())


def of_run(run: str) -> ResumableCheckpoint:
    """RUN's checkpoints, to list or remove (`checkpoints()`, `remove_all()`), not to train with."""
    return ResumableCheckpoint(os.path.join(run, layout.CHECKPOINTS), every=1)


# === Reading one checkpoint as a model ===


def optimizer_step(model) -> int:
    """The training step `model` is at: its optimizer's step count (what a checkpoint saves)."""
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


def load_checkpoint(path: str):
    """(model, vocab path, step): the model of a training run at one of its checkpoints.

    `path` is RUN/checkpoints/ckpt-NNNNNNNN (or its model.weights.h5). The model is the
    one RUN/config.json describes (written when the run finished), with this checkpoint's
    weights, the optimizer's state left out; the vocabulary is RUN/vocab.txt. Every tensor
    is checked by name and shape before any is read, into a model built here and returned
    only whole: a missing, partial or damaged checkpoint raises (FileNotFoundError or
    ValueError) naming the file, and nothing is loaded in part.
    """
    from model.checkpoints import model_dir

    directory = checkpoint_of(path) or os.path.normpath(path)
    name = os.path.basename(directory)
    if layout.step_of(name) is None:
        raise ValueError(
            f"{directory}: not a complete checkpoint (complete ones are named "
            f"ckpt-NNNNNNNN; .ckpt-*.tmp-* is a save that never finished)"
        )
    if not os.path.isdir(directory):
        found = ResumableCheckpoint(os.path.dirname(directory), every=1).checkpoints()
        have = ", ".join(os.path.basename(p) for _, p in found) or "none"
        raise FileNotFoundError(f"{directory}: no such checkpoint (the run has: {have})")
    state_path, weights = os.path.join(directory, "state.json"), os.path.join(directory, WEIGHTS)
    for needed in (state_path, weights):
        if not os.path.isfile(needed):
            raise FileNotFoundError(f"{needed}: missing, so {directory} is not a whole checkpoint")
    state = _read(state_path, _read_json)
    step = state.get("step") if isinstance(state, dict) else None
    if step != layout.step_of(name):
        raise ValueError(f"{state_path}: step {step!r} is not the step its directory names")
    run = os.path.dirname(os.path.dirname(directory))
    for needed in (model_dir.CONFIG, model_dir.VOCAB):
        if not os.path.isfile(os.path.join(run, needed)):
            raise FileNotFoundError(
                f"{os.path.join(run, needed)}: missing; a checkpoint is read with the "
                f"{needed} its run writes when it finishes"
            )
    model = model_dir.build_model(model_dir.read_info(run))
    # Names and shapes first (a truncated file fails here, naming it), the optimizer aside.
    model_dir.check_weights_file(model, weights, skip=("optimizer/",))
    with tempfile.TemporaryDirectory() as tmp:
        clean = os.path.join(tmp, WEIGHTS)
        _read(weights, lambda source: _copy_without_optimizer(source, clean))
        _read(weights, lambda _: model.load_weights(clean))
    return model, os.path.join(run, model_dir.VOCAB), step


def _copy_without_optimizer(source: str, target: str) -> None:
    """The model's part of a checkpoint's weights file: every group but "optimizer"."""
    import h5py

    with h5py.File(source, "r") as f, h5py.File(target, "w") as out:
        for key, value in f.attrs.items():
            out.attrs[key] = value
        for name in f:
            if name != "optimizer":
                f.copy(f[name], out, name=name)
