"""Running a recipe: a list of the project's own command lines, each skipped when its output exists.

A `Command` is `python -m MODULE ARGV` and the file it completes; a `Step` a named
group of them. `run` prints each command before it runs it in a child process
(this interpreter, the repository importable), times it, stops at the first
failure, and skips every command whose output already exists, so the same
recipe started again after a stop goes on where it was (the training commands
themselves resume from their checkpoints). Shared by the default models'
recipe (`model.recipes.defaults`) and the papers' experiments (`model.experiments`).

With `jobs` above 1, the commands marked `concurrent` run as child processes up to
`jobs` at a time, each one's output kept in a log file and printed whole when it ends;
every other command waits for them all and runs alone (a pre-training is timed alone).

An argument known only once earlier commands have run (the number of steps that
fits a wall-clock budget, measured by a calibration run) is a `Deferred`: its
text is printed in a dry run, its value computed just before the command runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from model.io.files import INTERRUPTED, TERMINATED, exit_on_sigterm

# `run`'s status when its time limit stopped it between two commands: sysexits' EX_TEMPFAIL
# ("try again later"), apart from every command's own statuses (3: a training's NaN loss)
STOPPED = 75


class WorkAndData:
    """Paths under a dataclass's `work` and `data` fields (an experiment's, the defaults'):
    a mixin, so the dataclass keeps its own fields in its own order."""

    def in_work(self, *parts) -> str:
        return os.path.join(self.work, *parts)

    def in_data(self, *parts) -> str:
        return os.path.join(self.data, *parts)


@dataclass(frozen=True)
class Deferred:
    """An argument computed when its command is about to run; `text` stands for it until then."""

    text: str
    value: Callable[[], str]

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Command:
    """`python -m module argv`; done when `output` exists (and, for an export, when the
    bundle there was made from `bundle_of`: the shipped bundles of a fresh clone were not made
    from this run's models, so the recipe exports over them), or when `skip_if` exists (a
    later command's output that makes this one pointless: a finished run needs no timing).
    `made_with`: (field, value) pairs the output JSON holds when this command made it (records'
    or a pre-training's "input_format"); an output that says otherwise is another command's,
    and the run stops there rather than build on it (`made_otherwise`)."""

    module: str
    argv: tuple
    output: str
    bundle_of: str | None = None
    skip_if: str | None = None
    # May run beside other such commands (`run(jobs=N)`): it reads only what the commands
    # before it that are not concurrent wrote (a fine-tuning, from its pre-training).
    concurrent: bool = False
    made_with: tuple = ()

    def made_otherwise(self) -> str | None:
        """What says the existing output was made by another command than this one (a field
        of `made_with` with another value; a field the file lacks, written before it was
        recorded, is not compared), or None."""
        if not self.made_with or not os.path.isfile(self.output) or self.done_by_another():
            return None
        found = read_json(self.output)
        for field, value in self.made_with:
            if field in found and found[field] != value:
                folder = os.path.dirname(self.output)
                return (
                    f"{self.output} says {field} {found[field]!r}, where this command makes "
                    f"{value!r}: delete {folder} and what was made from it (or choose another "
                    "work folder) to make them again"
                )
        return None

    def ran_otherwise(self) -> tuple[str, list[str]] | None:
        """(the command it records, what differs) where the existing output records the
        command that made it (a `model.train` run's "command": every flag, defaults included)
        and that is not this one as its run would record it, or None. Paths are not compared
        (a moved work folder, a GPU call's /tmp/w), nor an argument computed when it runs."""
        if self.module != "model.train" or not os.path.isfile(self.output):
            return None
        recorded = read_json(self.output).get("command")
        if not isinstance(recorded, str):
            return None  # made before runs recorded their command, or not a run's summary
        from model.train import flag_defaults
        from model.training.run_command import commands_differ, flags_of

        ours = as_recorded([("1" if _later(a) else str(a)) for a in self.argv])
        here = f"--output {shlex.quote(os.path.dirname(self.output))} "  # --seeds: this seed's
        ours = [line for line in ours if here in line] or ours[-1:]
        if not ours:
            return None
        computed = {str(self.argv[i - 1]) for i, a in enumerate(self.argv) if _later(a)}
        paths = {  # a file or folder: where it is is not what it holds
            flag
            for command in (recorded, ours[0])
            for flag, value in flags_of(command).items()
            if isinstance(value, str) and ("/" in value or os.sep in value)
        }
        absent = flag_defaults(shlex.split(ours[0])[3])
        differs = commands_differ(recorded, ours[0], computed | paths, absent)
        return (recorded, differs) if differs else None

    def done_by_another(self) -> bool:
        """Whether `skip_if`, a later command's output, makes this one pointless."""
        return self.skip_if is not None and os.path.exists(self.skip_if)

    def done(self) -> bool:
        if self.done_by_another():
            return True
        if not os.path.exists(self.output):
            return False
        if self.bundle_of is None:
            return True
        source = read_json(self.output).get("source")
        made_from = source.get("model_dir") if isinstance(source, dict) else None
        return isinstance(made_from, str) and os.path.abspath(made_from) == os.path.abspath(
            self.bundle_of
        )

    def resolved(self) -> list[str]:
        """The arguments, every `Deferred` computed."""
        return [a.value() if isinstance(a, Deferred) else str(a) for a in self.argv]

    def shell(self, resolve: bool = False) -> str:
        """The command as one would type it (shell-quoted: globs reach the program unexpanded);
        a `Deferred` shows its text unless `resolve`."""
        argv = self.resolved() if resolve else [str(a) for a in self.argv]
        return shlex.join(["python", "-m", self.module, *argv])


@dataclass(frozen=True)
class Step:
    name: str
    commands: tuple
    needs: tuple = ()  # steps whose outputs this one reads
    summary: str = ""


def _later(arg) -> bool:
    return isinstance(arg, Deferred)


def as_recorded(argv: list[str]) -> list[str]:
    """The "command" each run of `python -m model.train ARGV` records (each seed's, for
    --seeds), computed as the run computes it; [] for an argument list it refuses."""
    from model.train import parse_args
    from model.training import finetune, layout
    from model.training.run_command import command_line

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = parse_args(argv)  # an error's usage lines unprinted
        if args.command == "finetune":
            args = finetune.resolve_defaults(args, finetune.task_of(args))
    except (SystemExit, ValueError, KeyError):
        return []
    return [command_line(run) for run in layout.per_seed(args)]


def child_env() -> dict:
    """The environment of the children: this repository importable wherever they start."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def run(
    chosen: list[Step],
    dry_run: bool = False,
    log=print,
    timings: str | None = None,
    in_process: bool = False,
    time_limit: float | None = None,
    jobs: int = 1,
    log_dir: str | None = None,
) -> int:
    """Runs (or prints) every command of `chosen`; 0, or the first failing command's status,
    or STOPPED when `time_limit` seconds had passed before a command was due to start.

    `timings`: a JSON file where each finished command's wall time is recorded
    ({output: seconds}), kept across restarts, for the tables' cost columns.
    `in_process`: call each module's `main(argv)` here instead of in a child
    process (no interpreter start-up: for tiny runs, as the tests make).
    `jobs`: the `concurrent` commands run up to this many at a time, as child processes
    whose output goes to `log_dir` (a temporary directory when None).
    """
    total = sum(len(s.commands) for s in chosen)
    number = 0
    started = time.time()
    children = Children(log, timings, log_dir)
    restore = exit_on_sigterm()
    try:
        for step in chosen:
            log(f"# step {step.name}: {step.summary}")
            for command in step.commands:
                number += 1
                tag = f"[{number}/{total} {step.name}]"
                stale = command.made_otherwise()
                if stale and not dry_run:
                    log(f"{tag} error: {stale}")
                    return children.wait(below=1) or 1  # the running ones finish first
                if stale:
                    log(f"{tag} would stop here: {stale}")
                if _skipped(command, tag, dry_run, log):
                    continue
                beside = jobs > 1 and command.concurrent
                rc = children.wait(below=jobs if beside else 1)
                if rc:
                    return rc
                if time_limit is not None and time.time() - started > time_limit:
                    log(
                        f"{tag} not started: the {time_limit:.0f} s time limit has passed "
                        f"({number - 1} of {total} commands done or skipped); the same "
                        "command line goes on from here"
                    )
                    return children.wait(below=1) or STOPPED
                argv = command.resolved()
                log(f"{tag} {shlex.join(['python', '-m', command.module, *argv])}")
                if beside:
                    children.start(tag, command, argv)
                    continue
                start = time.time()
                rc = _run_here(command.module, argv, in_process)
                rc = finished(tag, command, rc, time.time() - start, log, timings)
                if rc:
                    return rc
        rc = children.wait(below=1)
        if rc:
            return rc
    except (KeyboardInterrupt, SystemExit) as stop:  # Ctrl-C, or a SIGTERM (exit_on_sigterm)
        if isinstance(stop, SystemExit) and stop.code != TERMINATED:
            raise  # an error's exit, not a signal
        log("# stopped by a signal; the same command line goes on from here")
        return INTERRUPTED if isinstance(stop, KeyboardInterrupt) else TERMINATED
    finally:
        children.stop()
        restore()
    if not dry_run:
        log(f"# all {total} commands done or skipped in {time.time() - started:.1f} s")
    return 0


def _skipped(command: Command, tag: str, dry_run: bool, log) -> bool:
    """Whether `command` is not run: its output exists (said), or a dry run prints it."""
    if command.done():
        found = command.output if os.path.exists(command.output) else command.skip_if
        log(f"{tag} skip, {found} exists: {command.shell()}")
        other = command.ran_otherwise() if found == command.output else None
        if other:
            log(
                f"{tag} warning: {found} was made by another command ({'; '.join(other[1])}); "
                f"it is kept, and reported as that command's: delete it to run this one"
            )
        if found.endswith(".json") and not _valid_json(found):
            log(f"{tag} warning: {found} is not valid JSON: delete it to run the command again")
        return True
    if dry_run:
        log(f"{tag} {command.shell()}")
    return dry_run


def _valid_json(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            json.load(f)
        return True
    except (OSError, ValueError):
        return False


def _run_here(module: str, argv: list[str], in_process: bool, grace: float = 10.0) -> int:
    """`python -m module argv`'s exit status: its `main` called here, or a child process.
    Stopped by a signal (SystemExit from a SIGTERM) or Ctrl-C, this process gives the child
    an interrupt and `grace` seconds to save, as `Children.stop` does, before killing it."""
    if in_process:
        return call_main(module, argv)
    process = subprocess.Popen([sys.executable, "-m", module, *argv], env=child_env())
    try:
        return process.wait()
    except BaseException as stop:
        # Ctrl-C reached the child too (one process group): a second interrupt would cut
        # its saving short. A SIGTERM to this process alone did not.
        if not isinstance(stop, KeyboardInterrupt) and process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        finally:  # after the grace, or at a second signal within it: never left running
            if process.poll() is None:
                process.kill()
                process.wait()
        raise


def finished(tag: str, command: Command, rc: int, seconds: float, log, timings) -> int:
    """Says how `command` ended (its exit status `rc` after `seconds`) and records its time;
    0 when it succeeded and wrote its output."""
    if rc != 0:
        log(
            f"{tag} failed with exit status {rc} after {seconds:.1f} s; fix it and run "
            f"the same command line again (finished commands are skipped)"
        )
        return rc
    if not os.path.exists(command.output):
        log(f"{tag} exited 0 but did not write {command.output}")
        return 1
    if timings:
        record_time(timings, command.output, seconds)
    log(f"{tag} done in {seconds:.1f} s ({seconds / 60:.1f} min)")
    return 0


class Children:
    """The concurrent commands running as child processes, each writing to its own log file
    (printed whole through `log` when it ends, so that commands' lines never interleave)."""

    def __init__(self, log, timings: str | None, log_dir: str | None):
        self.log, self.timings, self.log_dir = log, timings, log_dir
        self.running = []  # (tag, command, process, log file, start time)
        self.failed = 0

    def start(self, tag: str, command: Command, argv: list[str]) -> None:
        import tempfile

        if self.log_dir is None:
            self.log_dir = tempfile.mkdtemp(prefix="runner-logs-")
        os.makedirs(self.log_dir, exist_ok=True)
        # named after what it writes (a fine-tuning's run directory), so that the tables run
        # one after another in one WORK never write over each other's logs
        folder, file = os.path.split(os.path.abspath(command.output))
        stem = os.path.splitext(file)[0]
        name = f"{tag.strip('[]').split()[-1]}-{os.path.basename(folder)}-{stem}"
        path = os.path.join(self.log_dir, f"{name}.log")
        with open(path, "w", encoding="utf-8") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", command.module, *argv],
                env=child_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.running.append((tag, command, process, path, time.time()))
        self.log(f"{tag} started beside {len(self.running) - 1} other(s); its output: {path}")

    def wait(self, below: int) -> int:
        """Waits until fewer than `below` children run, or, once one has failed, until none
        does; the first failed one's status, or 0."""
        while True:
            self.reap()
            if not self.running or (len(self.running) < below and not self.failed):
                return self.failed
            time.sleep(0.2)

    def reap(self) -> None:
        """Says how each child that ended did, its output first."""
        for child in list(self.running):
            tag, command, process, path, start = child
            if process.poll() is None:
                continue
            self.running.remove(child)
            self.show(tag, path)
            seconds = time.time() - start
            rc = finished(tag, command, process.returncode, seconds, self.log, self.timings)
            self.failed = self.failed or rc

    def show(self, tag: str, path: str) -> None:
        with open(path, encoding="utf-8", errors="replace") as f:
            self.log(f"{tag} output:\n{f.read().rstrip()}")

    def stop(self, grace: float = 10.0) -> None:
        """Interrupts the children still running (a stop by signal or error of the parent),
        so that none goes on writing after it: each may save what it has within `grace`
        seconds in all, then is killed; their output is shown as far as it got."""
        for _, _, process, _, _ in self.running:
            if process.poll() is None:  # `timeout` may have signalled the whole group already
                process.send_signal(signal.SIGINT)
        deadline = time.time() + grace
        try:
            for _, _, process, _, _ in self.running:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=max(0.0, deadline - time.time()))
        finally:  # after the grace, or at a second signal within it: none is left running
            for _, _, process, _, _ in self.running:
                if process.poll() is None:
                    process.kill()
                    process.wait()
            stopped, self.running = self.running, []
        for tag, _, _, path, _ in stopped:
            self.show(f"{tag} (stopped)", path)


def call_main(module: str, argv: list[str]) -> int:
    """`module.main(argv)` (or its package's `__main__.main`), its exit status."""
    import importlib

    target = importlib.import_module(module)
    if not hasattr(target, "main"):
        target = importlib.import_module(f"{module}.__main__")
    try:
        return int(target.main(argv) or 0)
    except SystemExit as e:
        if e.code == TERMINATED:  # a SIGTERM (exit_on_sigterm): the run stops, as a child's would
            raise
        return e.code if isinstance(e.code, int) else 1


def record_time(path: str, output: str, seconds: float) -> None:
    """Records `output`'s wall time in the JSON file `path`, keyed by its path relative to
    that file's folder (WORK): a WORK moved, or merged from another machine, keeps them."""
    from model.io.files import write_json

    times = read_json(path)
    times[_timing_key(path, output)] = round(seconds, 1)
    write_json(path, times)


def time_of(path: str, output: str) -> float | None:
    """`output`'s wall time in the JSON file `path` (record_time's), or None. Keys written
    before they were relative are absolute paths of the WORK they ran in, maybe another
    machine's: one that ends with the relative path counts."""
    times, key = read_json(path), _timing_key(path, output)
    seconds = times.get(key, times.get(output))
    if seconds is None:  # the nearest WORK's: the shortest old key with this tail
        tail = os.sep + key
        older = sorted((k for k in times if k.endswith(tail)), key=len)
        seconds = times[older[0]] if older else None
    return seconds if isinstance(seconds, (int, float)) else None


def _timing_key(path: str, output: str) -> str:
    base = os.path.dirname(os.path.abspath(path))
    relative = os.path.relpath(os.path.abspath(output), base)
    return output if relative.startswith(os.pardir) else relative


def read_json(path: str) -> dict:
    """A JSON object file's content; {} when it is missing, unreadable or not an object."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}
