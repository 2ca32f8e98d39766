"""Training: `pretrain` (an objective of model/objectives/) and `finetune` (a task of the paper).

    python -m model.train pretrain --config mini --data 'DATA/*.tfrecord' --output runs/mini \\
        --batch-size 32 --steps 10000 --learning-rate 1e-4 --warmup-steps 1000

`--objective` picks what is learned: `bert` (default; masked LM + next
sentence prediction, `--no-nsp` for masked LM alone), `roberta` (dynamic
masking, no NSP, FULL-SENTENCES inputs), `spanbert` (span masking + the span
boundary objective), `electra` (a small generator's replacements, detected by
the discriminator) or `ltr` (a left-to-right LM with causal attention, which
the saved config keeps for fine-tuning, export and the app). Each needs
records of its inputs format (`python -m model.data --inputs ...`).
`--eval-data` scores held-out records after every checkpoint interval
(OUTPUT/eval.json).

`--data` is made by `python -m model.data` (or google-research's
`create_pretraining_data.py`). A checkpoint is written every
`--checkpoint-every` steps under OUTPUT/checkpoints; started again on the same
`--output` after being killed at any moment, the same command resumes from
the newest one, at the same position in the data. TensorBoard logs go to
OUTPUT/logs (under JAX, the same scalars to OUTPUT/logs/scalars.csv). At the end OUTPUT holds `config.json`, `vocab.txt`,
`model.weights.h5` and `train_summary.json`.

The paper's two-phase recipe: 90 % of the steps at 128 tokens, then the rest
at 512 from the first run's weights:

    python -m model.train pretrain --config base --data 'd128/*' --output r128 --steps 900000
    python -m model.train pretrain --config base --data 'd512/*' --output r512 --steps 100000 \\
        --init r128

Every command also takes `--strategy` (auto, cpu, gpu, mirrored, multiworker,
tpu), `--mixed-precision` (float32, mixed_float16, mixed_bfloat16) and `--jit`
(XLA); both start from `--init` (pretrain's older `--init-checkpoint` still
works); `python -m model.train pretrain --help` lists all flags.

Several replicas: `--batch-size` is the global batch, split evenly over
them, and the loss is the same mean over the global batch as on one replica
(see model/pretraining/dataset.py), so a run gives the same weights on 1 or N
replicas up to float rounding when dropout is 0. On a machine without GPUs,
`--strategy mirrored --cpu-replicas 2` trains on two logical CPUs. Several
machines: start the same command on each with `--strategy multiworker` and
its own TF_CONFIG, e.g. for worker 1 of 2

    TF_CONFIG='{"cluster": {"worker": ["host0:12345", "host1:12345"]},
                "task": {"type": "worker", "index": 1}}' \
        python -m model.train pretrain ... --strategy multiworker --output /shared/run

OUTPUT must be on a filesystem all workers share: worker 0 (the chief)
writes the checkpoints, the logs and the final model; every worker restores
from the chief's checkpoints. After any worker dies, stop the others and
start all of them again with the same command: they resume together from the
newest checkpoint.

The JAX backend trains the same model from the same records, without
TensorFlow (model/pretraining/pydataset.py reads the records and yields the
very batches of the tf.data pipeline):

    KERAS_BACKEND=jax python -m model.train pretrain --config mini --data DATA --output RUN ...
    KERAS_BACKEND=jax python -m model.train pretrain ... --strategy data-parallel

`--strategy` is then auto (one device) or data-parallel
(keras.distribution.DataParallel over all devices); the step is always
XLA-compiled; the run imports no TensorFlow, so its curves go to
OUTPUT/logs/scalars.csv (`tag,step,value`), not TensorBoard.
With dropout 0 a run follows the TensorFlow backend's loss curve to float
rounding (tests/test_jax_backend.py). On one accelerator, `--device-data`
keeps the records on the device and cuts and masks each batch inside one
compiled call of `--steps-per-call` steps (model/training/device_loop.py;
dropout 0 by default there):

    KERAS_BACKEND=jax python -m model.train pretrain --device-data --config mini ...
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from model.io.backend import check_keras_backend, keras_backend
from model.io.files import INTERRUPTED, TERMINATED, exit_on_sigterm, exit_with
from model.io.flags import non_negative_float, non_negative_int, positive_float, positive_int
from model.io.native_logs import import_tensorflow_quietly
from model.pretraining.masking import check_flags
from model.tasks import ALIASES, TASKS
from model.training.strategy import STRATEGIES

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


def seed_list(text: str) -> list[int]:
    """`--seeds 1,2,3`."""
    try:
        seeds = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated whole numbers, got {text!r}") from None
    return seeds


# Where fine-tuning's defaults differ from pre-training's, its help says so.
FINETUNE_HELP = {
    "batch_size": "global batch size (default: the task's, e.g. swag 16, squad2 48, else "
    "the paper's 32)",
    "learning_rate": "default: the task's (model/tasks/*): GLUE and swag 2e-5, conll2003 "
    "3e-5, squad1 and squad2 5e-5",
    "warmup_steps": "linear warm-up steps (default: 10%% of the run's steps, at most 10,000)",
}


def add_common_flags(p: argparse.ArgumentParser, help_texts: dict | None = None) -> None:
    """The flags of every training run; `help_texts` replaces the help of some (by dest)."""
    said = lambda dest, text: (help_texts or {}).get(dest, text)  # noqa: E731
    p.add_argument("--output", required=True, help="run directory (resumes if it has checkpoints)")
    p.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="auto",
        help="tf.distribute strategy; under KERAS_BACKEND=jax auto or "
        "data-parallel (default: auto)",
    )
    p.add_argument("--tpu", default=None, help="TPU name or address for --strategy tpu")
    p.add_argument(
        "--batch-size", type=positive_int, default=32, help=said("batch_size", "global batch size")
    )
    p.add_argument(
        "--learning-rate", type=positive_float, default=1e-4, help=said("learning_rate", None)
    )
    p.add_argument(
        "--warmup-steps",
        type=non_negative_int,
        default=None,
        help=said(
            "warmup_steps", "linear warm-up steps (default: 10%% of --steps, at most 10,000)"
        ),
    )
    p.add_argument("--weight-decay", type=non_negative_float, default=0.01)
    p.add_argument("--mixed-precision", choices=PRECISIONS, default="float32")
    p.add_argument(
        "--jit",
        action="store_true",
        help="compile the train step with XLA (TensorFlow backend; under JAX every step is compiled)",
    )
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--checkpoint-every", type=positive_int, default=1000)
    p.add_argument(
        "--keep-checkpoints",
        type=positive_int,
        default=3,
        help="the newest N checkpoints kept (default 3)",
    )
    p.add_argument(
        "--log-every",
        type=positive_int,
        default=100,
        help="steps between TensorBoard rows (under JAX: logs/scalars.csv; default 100)",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also show TensorFlow's C++ start-up log lines (as does setting "
        "TF_CPP_MIN_LOG_LEVEL yourself)",
    )


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m model.train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True)
    pre = _pretrain_parser(sub)
    _finetune_parser(sub)
    args = p.parse_args(argv)
    if args.command == "pretrain":
        check_flags(pre, args)
        _check_objective_flags(pre, args)
    return args


def _check_objective_flags(pre, args) -> None:
    """Flags of one objective given to another (they were ignored, silently)."""
    electra = [
        f
        for f in ("generator_size", "discriminator_weight")
        if getattr(args, f) != pre.get_default(f)
    ]
    if electra and args.objective != "electra":
        flags = " and ".join("--" + f.replace("_", "-") for f in electra)
        pre.error(f"{flags}: ELECTRA's (--objective electra), not {args.objective}'s")
    if args.no_nsp and args.objective != "bert":
        pre.error(f"--no-nsp: --objective bert's (BERT without NSP); {args.objective} has no NSP")


def flag_defaults(command: str) -> dict:
    """{"--flag": its default, as `run_command.command_line` writes it} of `python -m model.train
    COMMAND`'s flags whose default it writes (not None or False)."""
    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    _pretrain_parser(sub)
    _finetune_parser(sub)
    actions = sub.choices[command]._actions
    return {
        "--" + a.dest.replace("_", "-"): True if a.default is True else str(a.default)
        for a in actions
        if a.default not in (None, False, argparse.SUPPRESS) and a.dest != "help"
    }


def _pretrain_parser(sub):
    """The `pretrain` command's flags (its parser, for `check_flags`' errors)."""
    pre = sub.add_parser(
        "pretrain",
        help="pre-training: BERT's masked LM + NSP, RoBERTa, SpanBERT, ELECTRA or a "
        "left-to-right LM",
        description="Pre-train an encoder on TFRecords from model.data, with one of the "
        "objectives of model/objectives/ (default: BERT's masked LM + next sentence prediction).",
    )
    pre.add_argument(
        "--objective",
        choices=("bert", "roberta", "spanbert", "ltr", "electra"),
        default="bert",
        help="bert: masked LM + NSP (records --inputs sentence-pairs); roberta: masked LM, "
        "fresh masks every epoch, no NSP (full-sentences or doc-sentences); spanbert: span "
        "masking, masked LM + span boundary objective (segments); ltr: left-to-right LM with "
        "causal attention, kept downstream (segments); electra: a small generator's samples "
        "at the masked positions, a discriminator that tells every token replaced or "
        "original (segment-pairs, the reference's, or segments or the packed formats). With "
        "--no-nsp, bert takes segments or segment-pairs too. Default: %(default)s",
    )
    pre.add_argument(
        "--config",
        default="mini",
        help="preset (tiny, mini, small, medium, base, large, minilm-l6, electra-small, "
        "electra-mini) "
        "or a config JSON (ours or Google's bert_config.json)",
    )
    pre.add_argument(
        "--data",
        required=True,
        help="record files: a glob or a directory (several joined by commas)",
    )
    pre.add_argument("--vocab", default=None, help="vocab.txt (default: the data's)")
    pre.add_argument(
        "--init",
        "--init-checkpoint",
        dest="init_checkpoint",
        default=None,
        help="start from these weights (a model directory, HF or Google checkpoint; "
        "--init-checkpoint is the older spelling)",
    )
    pre.add_argument(
        "--steps",
        type=non_negative_int,
        required=True,
        help="total training steps (0: save the initialised model, train nothing: a "
        "random-initialisation floor)",
    )
    pre.add_argument(
        "--stop-at",
        type=positive_int,
        default=None,
        metavar="STEP",
        help="stop after this step and write the model of that step; the "
        "learning-rate schedule still spans --steps, and a later run with "
        "the same --output goes on from there",
    )
    pre.add_argument(
        "--seq-len",
        type=positive_int,
        default=None,
        help="sequence length; must equal the records' (default: theirs)",
    )
    pre.add_argument("--dropout", type=float, default=None, help="override the config's dropout")
    pre.add_argument(
        "--no-nsp", action="store_true", help="bert: train masked LM only (the paper's No NSP)"
    )
    pre.add_argument(
        "--eval-data",
        default=None,
        help="held-out records (a glob or a directory, made like --data): scored after every "
        "checkpoint interval into OUTPUT/eval.json, the run's pre-training curve",
    )
    pre.add_argument(
        "--eval-steps",
        type=positive_int,
        default=20,
        help="batches of --eval-data scored each time (default: %(default)s)",
    )
    pre.add_argument(
        "--cpu-replicas",
        type=int,
        default=None,
        metavar="N",
        help="with --strategy mirrored and no GPU: split the CPU into N logical "
        "devices, one replica each (tests; multi-replica numerics on a laptop)",
    )
    _device_flags(
        pre,
        "keep the records on the device and cut and mask each batch inside the compiled "
        "step, several steps per call (every objective; default dropout 0)",
        "default: 100, or the largest number below it that divides --checkpoint-every and "
        "the stop step",
    )
    _masking_flags(pre)
    _electra_flags(pre)
    add_common_flags(pre)
    return pre


def _masking_flags(pre) -> None:
    g = pre.add_argument_group("dynamic masking (records made with --masking dynamic)")
    g.add_argument(
        "--max-predictions",
        type=positive_int,
        default=None,
        help="masked positions per sequence (default: --mask-rate of --seq-len, at least "
        "15%%, rounded up; spanbert: 10%% more, room for the span that reaches the budget)",
    )
    g.add_argument("--mask-rate", type=float, default=0.15)
    g.add_argument(
        "--mask-token-rate",
        type=float,
        default=None,
        help="of the chosen tokens, the share made [MASK] (default: 0.8; electra: 0.85)",
    )
    g.add_argument(
        "--random-token-rate",
        type=float,
        default=None,
        help="of the chosen tokens, the share made a random token (default: 0.1; electra: 0)",
    )
    g.add_argument("--whole-word-masking", action="store_true")
    g.add_argument("--shuffle-buffer", type=positive_int, default=10_000)


def _electra_flags(pre) -> None:
    g = pre.add_argument_group("electra")
    g.add_argument(
        "--generator-size",
        type=positive_float,
        default=0.25,
        help="the generator's width as a share of the discriminator's (default: %(default)s)",
    )
    g.add_argument(
        "--discriminator-weight",
        type=non_negative_float,
        default=50.0,
        help="λ, the weight of the discriminator's loss beside the generator's "
        "(default: %(default)s)",
    )


def _finetune_parser(sub) -> None:
    """The `finetune` command's flags."""
    fine = sub.add_parser(
        "finetune",
        help="fine-tune on a task of the paper",
        description="Fine-tune a pre-trained encoder on one task "
        "(see model/tasks/). Defaults follow the paper.",
    )
    fine.add_argument(
        "--task",
        required=True,
        help=f"one of {', '.join(TASKS)}, in any case (aliases: {', '.join(ALIASES)})",
    )
    fine.add_argument(
        "--data", required=True, help="the task's data: its directory or its train file"
    )
    fine.add_argument(
        "--init",
        "--init-checkpoint",
        dest="init",
        required=True,
        help="pre-trained checkpoint: our model directory, HF or Google folder, or one step "
        "of a finished training run, RUN/checkpoints/ckpt-NNNNNNNN",
    )
    fine.add_argument(
        "--epochs",
        type=positive_float,
        default=None,
        help="default: the task's (squad2: 2), else 3 (the paper's)",
    )
    fine.add_argument("--seq-len", type=positive_int, default=None, help="default: the task's")
    fine.add_argument("--dropout", type=float, default=0.1)
    fine.add_argument(
        "--max-train-examples",
        type=positive_int,
        default=None,
        help="use only the first N training examples",
    )
    fine.add_argument(
        "--bilstm",
        type=positive_int,
        default=None,
        metavar="UNITS",
        help="put a randomly initialised bidirectional LSTM (UNITS a direction) between the "
        "encoder and the task's head (BERT Table 5's '+ BiLSTM'); recorded in config.json",
    )
    fine.add_argument(
        "--group-by-length",
        action="store_true",
        help="batch training examples of similar length together (less "
        "padding, faster on short texts; batches stay in random order)",
    )
    fine.add_argument(
        "--skip-invalid",
        action="store_true",
        help="squad1, squad2: skip (and count) malformed questions of the training and dev "
        "files, e.g. an answer_start that does not place its answer, instead of stopping at "
        "the first (google-research's run_squad.py skips training answers it cannot find)",
    )
    fine.add_argument(
        "--document-context",
        action="store_true",
        help="conll2003: read each sentence with the words around it in its document, up to "
        "--seq-len (the paper's section 5.3); recorded in config.json",
    )
    g = _device_flags(
        fine,
        "keep the encoded features on the device and run several full-length steps in "
        "one compiled call (model/training/seeds.py); each epoch rounds up to whole calls",
        "default 50: model/training/finetune.py's DEVICE_STEPS_PER_CALL",
    )
    g.add_argument(
        "--seeds",
        type=seed_list,
        default=None,
        metavar="S,S,...",
        help="with --device-data: these seeds (in place of --seed) trained together in one "
        "compiled program, each its own run; --output names each seed's directory with "
        "{seed} (runs/sst2-seed{seed})",
    )
    add_common_flags(fine, FINETUNE_HELP)
    # None: the task's own default (model/tasks/*), else the paper's.
    fine.set_defaults(learning_rate=None, batch_size=None)


def _device_flags(parser, data_help: str, steps_default: str):
    """The "one accelerator" group (`--device-data`, `--steps-per-call`), returned."""
    g = parser.add_argument_group("one accelerator, fully used (KERAS_BACKEND=jax)")
    g.add_argument("--device-data", action="store_true", help=data_help)
    g.add_argument(
        "--steps-per-call",
        type=positive_int,
        default=None,
        metavar="K",
        help=f"with --device-data: training steps in one compiled call ({steps_default})",
    )
    return g


def check_inputs(args) -> None:
    """The input paths exist (FileNotFoundError naming the first that does not), --output is
    neither an input nor a folder no run of the command wrote, --init is a model (a model
    directory's config.json valid), the records are records of --seq-len in a format the
    --objective trains on, of the --vocab, with held-out ones of their length, vocabulary and
    casing (ValueError naming each), and the --strategy, --cpu-replicas and a multi-worker
    run's TF_CONFIG can run (StrategyError), checked before TensorFlow is imported: a
    mistyped path or field fails in well under a second."""
    from model.checkpoints.detect import detect_format
    from model.checkpoints.model_info import check_model_dir, check_model_path
    from model.config import PRESETS
    from model.io.files import check_output, check_paths
    from model.pretraining.records import record_files
    from model.training.layout import check_run_output, checkpoint_of, seed_outputs
    from model.training.strategy import check_device_flags, check_flags

    if args.dropout is not None and not 0.0 <= args.dropout < 1.0:
        raise ValueError(f"--dropout is a rate from 0 up to 1 (not included), not {args.dropout}")
    if args.command == "pretrain":
        if args.config not in PRESETS and not os.path.isfile(args.config):
            raise FileNotFoundError(
                f"--config {args.config}: neither a preset ({', '.join(PRESETS)}) nor a "
                "config JSON file"
            )
        for pattern in filter(None, (args.data, args.eval_data)):
            record_files(pattern)
        init, paths = args.init_checkpoint, (args.vocab,)
    else:
        init, paths = args.init, (args.data,)
        if args.strategy == "multiworker":  # its batches are one process's tf.data pipeline
            raise ValueError(
                "fine-tuning runs in one process: --strategy multiworker is pre-training's; "
                "use the default (auto), or mirrored for this machine's GPUs under TensorFlow"
            )
    check_flags(args.strategy, getattr(args, "cpu_replicas", None), keras_backend())
    check_device_flags(args, keras_backend())

    def run_step(path):  # one step of a run: its loader names the steps the run has
        parent = os.path.dirname(os.path.abspath(path))
        return os.path.basename(path.rstrip("/")).startswith("ckpt-") and os.path.isdir(parent)

    check_paths(*(p for p in paths if p))
    for output in seed_outputs(args.output, getattr(args, "seeds", None)):
        check_output(output, _inputs(args), in_place=True)
        check_run_output(output, args.command)
    if init and not run_step(init):
        check_model_path(init)  # a folder, a file, or a Google checkpoint's prefix
        if checkpoint_of(init) is None:
            detect_format(init)  # a bundle, or a folder of no model format: said now
    check_model_dir(init)
    if args.command == "pretrain":  # the records against the flags, the objective, each other
        from model.training.pretrain_data import checked_data

        checked_data(args)


def _inputs(args) -> list[tuple[str, str | None]]:
    """(flag, path) of what a run reads, which its --output must neither be nor hold (a
    records glob by its folder)."""
    if args.command == "finetune":
        return [("--init", args.init), ("--data", args.data)]
    records = [
        (flag, os.path.dirname(part) if any(c in part for c in "*?[") else part)
        for flag, value in (("--data", args.data), ("--eval-data", args.eval_data))
        for part in (value or "").split(",")
    ]
    return [("--init", args.init_checkpoint), ("--vocab", args.vocab), *records]


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from model.training.strategy import StrategyError  # TensorFlow-free, as check_inputs

    try:
        check_inputs(args)
    except (FileNotFoundError, ValueError, StrategyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    check_keras_backend()  # one line on a machine without TensorFlow, before Keras picks it
    at_start = _at_start(args)
    import_tensorflow_quietly(args.verbose, setup=at_start)
    from model.training.layout import per_seed

    if at_start is not None:
        try:  # where TensorFlow started loudly; or said in one line where it refused
            at_start(refuse=True)
        except StrategyError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    restore = exit_on_sigterm()  # `kill`, `timeout`: the run stops as at Ctrl-C
    made = [run.output for run in per_seed(args) if not os.path.exists(run.output)]
    try:
        if args.command == "pretrain":
            from model.training.pretrain import pretrain

            return pretrain(args)
        if args.command == "finetune":
            from model.training.finetune import finetune

            return finetune(args)
    except (FileNotFoundError, ValueError, StrategyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, SystemExit) as stop:
        if isinstance(stop, KeyboardInterrupt) or stop.code == TERMINATED:
            how = "Ctrl-C" if isinstance(stop, KeyboardInterrupt) else "SIGTERM"
            print(stopped(args, how), flush=True)
        raise
    finally:
        restore()
        for output in made:  # a run refused before it wrote anything leaves no empty folder
            with contextlib.suppress(OSError):  # written to, or removed, meanwhile: left
                if not os.listdir(output):
                    os.rmdir(output)
    return 2


def _at_start(args):
    """What must precede TensorFlow's first op, or None: --cpu-replicas' logical CPUs, and
    the multi-worker strategy (collective ops are configured at program start-up), which
    `make_strategy` then returns to the command. Runs inside TensorFlow's quiet import,
    before the op that import runs, where a refusal is passed over, and again
    (`refuse=True`), where it is said in one line; each step is a no-op once done."""
    if keras_backend() != "tensorflow":
        return None  # check_inputs refused these flags under JAX
    replicas = getattr(args, "cpu_replicas", None)
    split = replicas is not None  # with mirrored and at least 1: check_inputs' check_flags
    multi_worker = args.strategy == "multiworker"
    if not split and not multi_worker:
        return None

    def setup(refuse: bool = False):
        from model.training.strategy import (
            StrategyError,
            configure_cpu_replicas,
            make_strategy,
        )

        try:
            if split:
                configure_cpu_replicas(replicas)
            if multi_worker:
                make_strategy("multiworker")
        except StrategyError:
            if refuse:
                raise

    return setup


def stopped(args, how: str) -> str:
    """The line a run stopped by a signal ends with: the newest checkpoint of each of its
    outputs (each seed's, for --seeds), from which the same command goes on."""
    from model.training.checkpointing import of_run
    from model.training.layout import per_seed

    kept = []
    for run in per_seed(args):
        found = of_run(run.output).checkpoints()
        if found:
            step, path = found[-1]
            kept.append(f"{path} (step {step})")
    if not kept:
        return f"stopped by {how} before a checkpoint was saved: the same command starts over"
    where = "there" if len(kept) == 1 else "the newest step they all have"
    return f"stopped by {how}; kept {', '.join(kept)}: the same command goes on from {where}"


if __name__ == "__main__":
    try:
        status = main()
    except KeyboardInterrupt:
        status = INTERRUPTED
    except SystemExit as stop:
        if stop.code != TERMINATED:
            raise
        status = TERMINATED
    exit_with(status)  # a stopped run dies of its signal, as a shell loop expects
