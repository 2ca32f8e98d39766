"""The default models of the app (`assets/models/`), rebuilt from the real all-MiniLM-L6-v2 weights.

    python -m model.recipes.defaults --dry-run                  # print the commands, run nothing
    python -m model.recipes.defaults --minilm /path/to/all-MiniLM-L6-v2     # everything (hours)
    python -m model.recipes.defaults --only convert,sst2        # some steps
    python -m model.recipes.defaults --work runs/defaults --assets assets/models \\
        --data ../shared/data    # the defaults

The recipe is nothing but the project's own command lines, each run as
`python -m ...` in a child process (the interpreter running this one), printed
before it runs and timed after. Steps, in order (`--only` picks some, by name):

    convert    the Hugging Face checkpoint -> our model directory WORK/minilm
               (--minilm DIR: config.json, vocab.txt, model.safetensors; default $BERT_MINILM_DIR)
    mlm        pre-training records from DATA/pretrain (the Wikipedia 2015 sample and 100
               Gutenberg books, 128 tokens, MiniLM vocabulary, 64 shards), masked-LM + NSP
               from WORK/minilm on 26 of the shards (3,800 steps of 256: 6 minutes of one
               H200 GPU under KERAS_BACKEND=jax; ~9 hours of a 2-core CPU), the fill-mask
               bundle, and both scored on WikiText-2 valid; the bundle's "encoder"
               signature also draws the app's Attention view
    sst2       fine-tuned, exported, the bundle scored on SST-2 dev
    conll2003  fine-tuned, exported, the bundle scored on CoNLL-2003 valid
    squad1     fine-tuned (0.8 epoch, bfloat16), exported to ASSETS/squad, the bundle scored on SQuAD v1.1 dev
    electra    ELECTRA pre-trained from scratch (`mini`, ~21 minutes of this CPU: the cpu-scale
               experiments' run electra-mini-seed1), its replaced-token bundle with the
               generator signature (the app's Replaced tokens view) and its report card on
               corrupted WikiText-2 valid

Every command names the file it completes (a model directory's metrics.json or
train_summary.json, a bundle's bundle.json, an evaluation's JSON): a command
whose file exists is skipped, so the same command line started again after a
stop goes on where it was; the training commands themselves resume from
their checkpoints. An export is skipped only when the bundle there was made
from this run's model (its bundle.json "source"): on a fresh clone, whose
assets/models holds the shipped bundles, the recipe exports over them.
Bundles go to ASSETS under the folder names the app looks for
(`app/models.py` VIEWS: mlm, sst2, squad, conll2003, and the optional view's electra; there is no encoder
bundle: the Attention view falls back to mlm, whose file holds the encoder as
a second signature for ~1 % of its size); every intermediate model stays
under WORK. At the end a table compares each bundle's score with its Keras
model's.

The settings below are the ones that made the shipped models; change them
here, not on the command line, so that the file stays the record.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from model.recipes.runner import Command, Step, WorkAndData, read_json, run
from model.training import layout

# === The settings of the shipped models ===

MINILM_ENV = "BERT_MINILM_DIR"
DEFAULT_WORK = "runs/defaults"
DEFAULT_ASSETS = "assets/models"
DEFAULT_DATA = "../shared/data"
QUANTIZATION = "dynamic"  # int8 weights, float activations: ~26 % of float32, ~-0.3 points

# Pre-training records (relative to --data): the whole 2015 Wikipedia sample (AA/wiki_00..99)
# and the first hundred Gutenberg books (their dataset.json: 323,504 instances, 6,610
# documents, 31,735,872 tokens, seed 12345), in 64 shards.
PRETRAIN_INPUTS = ("pretrain/enwiki-2015/AA/*.gz", "pretrain/gutenberg/books/00[0-9]*.txt.gz")
RECORDS_FLAGS = (
    "--seq-len",
    "128",
    "--num-shards",
    "64",
    "--masking",
    "dynamic",
    "--seed",
    "12345",
)
# The shards trained on: the first 26 of the 64 (131,430 instances, 15.5 M input tokens), what fit
# beside the code, the wheels and the float16 start weights in the GPU machine's 64 MiB
# transfer (docs/pretraining.md). Comma-joined globs under the records directory.
PRETRAIN_SHARDS = ("part-0000?-*", "part-0001?-*", "part-0002[0-5]-*")
# Continued pre-training, one run (its model directory under --work) from WORK/minilm with
# fresh heads: 3,800 steps of 256 sequences (7.4 passes over those shards), the steps a
# 200-step calibration on the GPU gave for the ~6 minutes the lease left; 20 % of the tokens
# masked in training (the evaluation masks 15 %), the config's dropout (0.1). It ran under
# KERAS_BACKEND=jax on one NVIDIA H200 (346 s of steps); the TensorFlow backend reads the same
# batches. Its start weights travelled as float16 and its weights came back as float16 (the
# lease's transfer limits): the model directory's float32 weights are those float16 values.
# The earlier shipped model (two CPU schedules of batch 32 on the Wikipedia sample alone,
# 41.55 % top-1) is in assets/MODEL_CARD.md's history.
PRETRAIN_FLAGS = (
    "--config",
    "minilm-l6",
    "--batch-size",
    "256",
    "--mask-rate",
    "0.2",
    "--max-predictions",
    "26",
    "--mixed-precision",
    "mixed_bfloat16",
    "--checkpoint-every",
    "950",
)
PRETRAIN_STAGES = (
    (
        "mlm",
        ("--steps", "3800", "--warmup-steps", "228", "--learning-rate", "5e-4", "--seed", "12345"),
    ),
)

# Fine-tuning: task -> (--data, relative to --data; flags). `--seq-len` is the
# sequence-length flag of `python -m model.train finetune` (sst2 ran at 64).
FINETUNE = {
    "sst2": (
        "glue/SST-2",
        ("--group-by-length", "--seq-len", "64", "--learning-rate", "5e-5", "--epochs", "2"),
    ),
    "conll2003": ("conll2003", ("--learning-rate", "8e-5", "--epochs", "4", "--group-by-length")),
    "squad1": (
        "squad/train-v1.1.reconstructed.json",
        (
            "--learning-rate",
            "1e-4",
            "--epochs",
            "0.8",
            "--batch-size",
            "32",
            "--mixed-precision",
            "mixed_bfloat16",
            "--checkpoint-every",
            "100",
            "--group-by-length",
        ),
    ),
}

# The ELECTRA default, pre-trained from scratch with the WordPiece vocabulary of the others
# (all-MiniLM-L6-v2's is bert-base-uncased's): the cpu-scale experiments' run
# `electra-mini-seed1` (model/experiments/scales.py), so the same command makes both: records of
# the first ten Wikipedia files and thirty Gutenberg books (4.8 M tokens) and held-out ones of
# WikiText-2 valid (the curve in RUN/eval.json), the `mini` size (the discriminator; the
# generator a quarter of its width), and the steps its calibration run gave for ~21 minutes
# of this 2-core CPU (1.24 s a step). The held-out evaluation stays in the command: the
# generator's sampling there advances the seed state that training draws from.
ELECTRA_INPUTS = ("pretrain/enwiki-2015/AA/wiki_0*.gz", "pretrain/gutenberg/books/00[0-2]*.txt.gz")
ELECTRA_HELD_OUT = "wikitext-2-raw/wiki.valid.raw"
ELECTRA_RECORDS_FLAGS = ("--inputs", "segment-pairs", "--seq-len", "128", "--num-shards", "8")
ELECTRA_PRETRAIN_FLAGS = (
    "--objective",
    "electra",
    "--config",
    "mini",
    "--eval-steps",
    "20",
    "--steps",
    "1032",
    "--checkpoint-every",
    "172",
    "--keep-checkpoints",
    "100",
    "--learning-rate",
    "5e-4",
    "--batch-size",
    "32",
    "--seed",
    "1",
)

# The file (relative to --data) each model is verified and scored on.
DEV = {
    "mlm": "wikitext-2-raw/wiki.valid.raw",
    "sst2": "glue/SST-2/dev.tsv",
    "conll2003": "conll2003/valid.txt",
    "squad1": "squad/dev-v1.1.json",
    "electra": "wikitext-2-raw/wiki.valid.raw",
}

# Bundle folders under --assets: the names app/models.py VIEWS look for
# (tests/test_recipes.py checks they agree). The Attention view's "encoder" is
# not made: the mlm bundle serves it.
ASSET_FOLDERS = {
    "mlm": "mlm",
    "sst2": "sst2",
    "conll2003": "conll2003",
    "squad1": "squad",
    "electra": "electra",
}

STEPS = ("convert", "mlm", "sst2", "conll2003", "squad1", "electra")

# The figures of the final table: step -> metric keys of model.evaluate's JSON.
TABLE_METRICS = {
    "mlm": ("mlm_top1_accuracy", "mlm_top5_accuracy"),
    "sst2": ("accuracy",),
    "conll2003": ("f1",),
    "squad1": ("exact_match", "f1"),
}


# === The plan ===


@dataclass(frozen=True)
class Paths(WorkAndData):
    minilm: str | None
    work: str
    assets: str
    data: str

    def bundle(self, step: str) -> str:
        return os.path.join(self.assets, ASSET_FOLDERS[step])


def export_and_score(step: str, model: str, p: Paths, task: str, *flags: str) -> list[Command]:
    """Export `model` (with `flags`) to its bundle folder and score the bundle on the step's
    dev file as `task`."""
    bundle, dev = p.bundle(step), p.in_data(DEV[step])
    out = p.in_work(f"{step}.bundle-metrics.json")
    return [
        Command(
            "export",
            (
                "--model",
                model,
                "--quantize",
                QUANTIZATION,
                "--output",
                bundle,
                "--data",
                dev,
                *flags,
            ),
            os.path.join(bundle, "bundle.json"),
            bundle_of=model,
        ),
        Command(
            "model.evaluate",
            ("--task", task, "--model", bundle, "--data", dev, "--output", out),
            out,
        ),
    ]


def pretrain_stages(records: str, start: str, p: Paths) -> list[Command]:
    """One `model.train pretrain` per schedule of PRETRAIN_STAGES, each from the one before."""
    commands = []
    for name, flags in PRETRAIN_STAGES:
        output = p.in_work(name)
        commands.append(
            Command(
                "model.train",
                (
                    "pretrain",
                    "--data",
                    records,
                    "--init",
                    start,
                    "--output",
                    output,
                    *PRETRAIN_FLAGS,
                    *flags,
                ),
                os.path.join(output, layout.SUMMARY),
                made_with=_made_as(RECORDS_FLAGS),
            )
        )
        start = output
    return commands


def plan(p: Paths) -> list[Step]:
    """Every step of the recipe, in order."""
    minilm = p.in_work("minilm")
    steps = [_convert_step(p, minilm), _mlm_step(p, minilm)]
    steps += [_finetune_step(p, minilm, task) for task in FINETUNE]
    steps.append(electra_step(p, os.path.join(minilm, "vocab.txt")))
    assert tuple(s.name for s in steps) == STEPS
    return steps


def _convert_step(p: Paths, minilm: str) -> Step:
    convert = (
        "--from",
        "hf",
        p.minilm or f"${MINILM_ENV}",
        "--to",
        "keras",
        minilm,
        # A conversion killed half-way leaves a partial directory (no config.json yet):
        # the rerun writes over it.
        "--overwrite",
    )
    return Step(
        "convert",
        (Command("model.convert", convert, os.path.join(minilm, "config.json")),),
        summary="all-MiniLM-L6-v2 (Hugging Face) -> WORK/minilm",
    )


def _mlm_step(p: Paths, minilm: str) -> Step:
    records, mlm = p.in_work("pretrain_records"), p.in_work(PRETRAIN_STAGES[-1][0])
    trained_on = ",".join(os.path.join(records, shard) for shard in PRETRAIN_SHARDS)
    inputs = [a for pattern in PRETRAIN_INPUTS for a in ("--input", p.in_data(pattern))]
    vocab = os.path.join(minilm, "vocab.txt")
    keras_metrics = p.in_work("mlm.metrics.json")
    evaluate = ("--task", "mlm", "--model", mlm, "--data", p.in_data(DEV["mlm"]))
    return Step(
        "mlm",
        (
            _records(inputs, vocab, records, RECORDS_FLAGS),
            *pretrain_stages(trained_on, minilm, p),
            Command("model.evaluate", (*evaluate, "--output", keras_metrics), keras_metrics),
            # --encoder-signature (the default for pre-training models, written for the record):
            # the same file draws the Attention view.
            *export_and_score("mlm", mlm, p, "mlm", "--encoder-signature"),
        ),
        ("convert",),
        "continued pre-training (masked LM + NSP) and the fill-mask bundle "
        "(which also draws the attention maps)",
    )


def _records(inputs, vocab: str, output: str, flags) -> Command:
    """`python -m model.data`: the text of `inputs` (--input flags) as records in `output`
    (records of another format there stop the recipe: `Command.made_with`)."""
    return Command(
        "model.data",
        (*inputs, "--vocab", vocab, "--output", output, *flags),
        os.path.join(output, "dataset.json"),
        made_with=_made_as(flags),
    )


def _made_as(records_flags) -> tuple:
    """The `made_with` of records made with `records_flags`, and of a run trained on them: the
    input format `model.data` makes of those flags."""
    from model.data import resolve_inputs

    flags = list(records_flags)
    given = flags[flags.index("--inputs") + 1] if "--inputs" in flags else None
    return (("input_format", resolve_inputs(given, "--no-nsp" in flags, None)[0]),)


def _finetune_step(p: Paths, minilm: str, task: str) -> Step:
    data, flags = FINETUNE[task]
    output = p.in_work(task)
    finetune = ("finetune", "--task", task, "--data", p.in_data(data), "--init", minilm)
    return Step(
        task,
        (
            Command(
                "model.train",
                (*finetune, "--output", output, *flags),
                os.path.join(output, "metrics.json"),
            ),
            *export_and_score(task, output, p, task),
        ),
        ("convert",),
        f"fine-tuned on {task} and its bundle",
    )


def electra_step(p: Paths, vocab: str) -> Step:
    """ELECTRA from scratch, its bundle (discriminator + generator) and its report card
    (`python -m export.report`: AUC, accuracy on replaced and original tokens, float32 against
    the shipped dynamic int8, on corrupted held-out text)."""
    records, held_out = p.in_work("electra_records"), p.in_work("electra_held_out")
    run, dev = p.in_work("electra"), p.in_data(DEV["electra"])
    bundle, card = p.bundle("electra"), p.in_work("electra.card.md")
    inputs = [a for pattern in ELECTRA_INPUTS for a in ("--input", p.in_data(pattern))]
    return Step(
        "electra",
        (
            _records(inputs, vocab, records, ELECTRA_RECORDS_FLAGS),
            _records(
                ("--input", p.in_data(ELECTRA_HELD_OUT)), vocab, held_out, ELECTRA_RECORDS_FLAGS
            ),
            Command(
                "model.train",
                ("pretrain", "--data", records, "--eval-data", held_out, "--output", run)
                + ELECTRA_PRETRAIN_FLAGS,
                os.path.join(run, layout.SUMMARY),
                made_with=_made_as(ELECTRA_RECORDS_FLAGS),
            ),
            Command(
                "export",
                ("--model", run, "--quantize", QUANTIZATION, "--output", bundle, "--data", dev),
                os.path.join(bundle, "bundle.json"),
                bundle_of=run,
            ),
            Command(
                "export.report",
                ("--model", run, "--data", dev, "--variants", f"float32,{QUANTIZATION}")
                + ("--output", card),
                card,
            ),
        ),
        ("convert",),
        "ELECTRA pre-trained from scratch, its replaced-token bundle and report card",
    )


def select(steps: list[Step], only: str | None) -> list[Step]:
    """The steps named in `only` ("mlm,sst2"; None: all), in the recipe's order."""
    if only is None:
        return list(steps)
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in STEPS]
    if unknown or not names:
        raise ValueError(
            f"--only: unknown step{'s' * (len(unknown) > 1)} "
            f"{', '.join(map(repr, unknown)) or repr(only)}; the steps are "
            f"{', '.join(STEPS)}"
        )
    return [s for s in steps if s.name in names]


def missing_inputs(steps: list[Step], chosen: list[Step]) -> list[str]:
    """Problems: a chosen step needs a step that is neither chosen nor done."""
    by_name = {s.name: s for s in steps}
    chosen_names = {s.name for s in chosen}
    problems = []
    for step in chosen:
        for need in step.needs:
            final = by_name[need].commands[-1].output
            if need not in chosen_names and not os.path.exists(final):
                problems.append(
                    f"step {step.name} needs step {need}'s output ({final}), which "
                    f"does not exist: add {need} to --only"
                )
    return problems


# === The final table ===


def table(p: Paths) -> list[str]:
    """Markdown lines: every bundle, its size, its score and its Keras model's."""
    lines = ["| step | bundle | MB | metric | Keras model | bundle |", "|---|---|---|---|---|---|"]
    for step in STEPS[1:]:
        bundle = p.bundle(step)
        model = os.path.join(bundle, "model.tflite")
        size = f"{os.path.getsize(model) / 1e6:.1f}" if os.path.isfile(model) else "-"
        lite = read_json(p.in_work(f"{step}.bundle-metrics.json"))
        keras_metrics = (
            read_json(p.in_work("mlm.metrics.json"))
            if step == "mlm"
            else read_json(p.in_work(step, "metrics.json")).get("dev", {})
        )
        for key in TABLE_METRICS.get(step, ("-",)):
            lines.append(
                f"| {step} | {bundle} | {size} | {key} | {_figure(keras_metrics, key)} | "
                f"{_figure(lite, key)} |"
            )
    return lines


def _figure(metrics: dict, key: str) -> str:
    value = metrics.get(key)
    return f"{value:.4f}" if isinstance(value, (int, float)) else "-"


# === CLI ===


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m model.recipes.defaults",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--minilm",
        default=os.environ.get(MINILM_ENV),
        help="the Hugging Face all-MiniLM-L6-v2 folder (config.json, vocab.txt, "
        f"model.safetensors); default ${MINILM_ENV}",
    )
    parser.add_argument("--work", default=DEFAULT_WORK, help="intermediate model directories")
    parser.add_argument("--assets", default=DEFAULT_ASSETS, help="where the bundles go")
    parser.add_argument("--data", default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated steps to run, of {','.join(STEPS)} (default: all)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the commands (and which are done) without running them",
    )
    return parser, parser.parse_args(argv)


def main(argv=None) -> int:
    parser, args = parse_args(sys.argv[1:] if argv is None else argv)
    paths = Paths(args.minilm, args.work, args.assets, args.data)
    steps = plan(paths)
    try:
        chosen = select(steps, args.only)
    except ValueError as e:
        parser.error(str(e))
    problems = missing_inputs(steps, chosen)
    convert = steps[0].commands[0]
    if any(s.name == "convert" for s in chosen) and not os.path.exists(convert.output):
        if not args.minilm:
            problems.append(
                f"step convert needs the all-MiniLM-L6-v2 folder: pass --minilm "
                f"DIR or set {MINILM_ENV}"
            )
        elif not os.path.isdir(args.minilm):
            problems.append(f"--minilm {args.minilm}: no such directory")
    for problem in problems:
        print(f"{'note' if args.dry_run else 'error'}: {problem}", file=sys.stderr)
    if problems and not args.dry_run:
        return 1
    print(f"# interpreter: {sys.executable} (each `python -m` below runs with it)", flush=True)
    rc = run(chosen, args.dry_run, log=lambda line: print(line, flush=True))
    if rc == 0 and not args.dry_run:
        print("\n".join(table(paths)), flush=True)
    return rc


if __name__ == "__main__":
    from model.io.files import exit_with

    exit_with(main())
