"""`python -m export.report`: every quantization of a fine-tuned model, scored on its real dev set.

    python -m export.report --model runs/ft/sst2 --data ../shared/data/glue/SST-2/dev.tsv \\
        --output runs/export-sst2.md
    python -m export.report --model runs/ft/squad1 --data ../shared/data/squad/dev-v1.1.json \\
        --max-examples 500            # a quick look; the default is the whole file
    python -m export.report --model runs/electra --variants float32,dynamic,int8 \\
        --data ../shared/data/wikitext-2-raw/wiki.valid.raw   # ELECTRA: replaced tokens, raw text

For each variant (default: float32, float16, dynamic, int8, int8 with float
LayerNorm `int8+float_ln`, and int8 traced with Keras' own -1e9 attention
mask, `int8@-1e9`, to show what the clipped mask value changes) the model is
converted and verified exactly as `python -m export` does (a variant that
fails verification is still scored, marked "refused"; --bundles DIR keeps the
verified ones as bundles), then:

  metric    the task's dev metric (`model.tasks.<task>.evaluate` with
            `TFLiteModel` as its `predict`), in points, and its change
            from the float Keras model scored by the same code
  size      the .tflite file, and its fraction of the float32 file
  latency   p50 and p90 of one batch-1 call at --latency-seq-len (128)
            tokens, --threads (2) LiteRT threads, after --warmup (10) calls,
            over --runs (100, at least 50) timed calls; the Keras row times
            `predict_on_batch` the same way

and prints a markdown table (also written to --output). Calibration (int8) and
verification use the model's dev examples, as `python -m export` does.

An ELECTRA model directory (either task) is scored on replaced-token
detection instead: --data is raw held-out text (one text a line), corrupted
as ELECTRA's pre-training corrupts it (`export.examples.replaced_tokens`:
15 % of the WordPieces chosen, 85 % of them [MASK] and 15 % kept, then the
run's Keras generator's samples written in, or random vocabulary tokens for a
discriminator alone; the card says which), and the table gives the
discriminator's AUC and its accuracy on replaced and on original tokens
(`export.detection`) in place of the dev metric.
Latency depends on the machine and its load: compare rows of one report.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

from model.config import stored
from model.io.files import check_output, check_paths, exit_on_sigterm
from model.io.flags import non_negative_int, positive_int
from model.io.native_logs import import_tensorflow_quietly

DEFAULT_VARIANTS = "float32,float16,dynamic,int8,int8+float_ln,int8@-1e9"
MIN_RUNS = 50


def parse_args(argv):
    from export.__main__ import DEFAULT_CALIBRATION_EXAMPLES

    p = argparse.ArgumentParser(
        prog="python -m export.report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, help="a fine-tuned (or an ELECTRA) model directory")
    p.add_argument(
        "--data",
        required=True,
        help="the labelled dev file to score on (ELECTRA: held-out raw text)",
    )
    p.add_argument(
        "--task",
        default=None,
        help="task whose reader and metric to use (default: the model's finetuned_task)",
    )
    p.add_argument(
        "--output", "--out", dest="out", default=None, help="also write the markdown report here"
    )
    p.add_argument(
        "--variants",
        default=DEFAULT_VARIANTS,
        help="comma-separated QUANTIZATION[@MASK_VALUE] (default %(default)s)",
    )
    p.add_argument(
        "--max-examples",
        type=positive_int,
        default=None,
        help="score only the first N dev examples (default: all)",
    )
    p.add_argument(
        "--calibration-examples",
        type=positive_int,
        default=None,
        help=f"int8 variants: real examples calibrated on (default {DEFAULT_CALIBRATION_EXAMPLES})",
    )
    p.add_argument("--batch-size", type=positive_int, default=32, help="evaluation batch size")
    p.add_argument("--latency-seq-len", type=positive_int, default=128)
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--warmup", type=non_negative_int, default=10)
    p.add_argument(
        "--runs",
        type=positive_int,
        default=100,
        help="timed runs per variant (at least 50; default 100)",
    )
    p.add_argument(
        "--bundles",
        default=None,
        help="also keep each verified variant as a bundle in DIR/<variant>",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also show TensorFlow's C++ start-up log lines (as does setting "
        "TF_CPP_MIN_LOG_LEVEL yourself)",
    )
    args = p.parse_args(argv)
    if args.runs < MIN_RUNS:
        p.error(f"--runs must be at least {MIN_RUNS}")
    return args


def parse_variants(text: str) -> list[tuple[str, str, float, tuple]]:
    """[(label, quantization, mask value, float ops)] of "int8,int8+float_ln,int8@-1e9"."""
    from export.convert import DEFAULT_MASK_VALUE, FLOAT_LAYERNORM_OPS, QUANTIZATIONS

    variants = []
    for label in (v.strip() for v in text.split(",") if v.strip()):
        quantization, _, mask = label.partition("@")
        quantization, plus, option = quantization.partition("+")
        if quantization not in QUANTIZATIONS:
            raise ValueError(f"--variants: unknown quantization {quantization!r} in {label!r}")
        if plus and (option != "float_ln" or quantization != "int8"):
            raise ValueError(f"--variants: {label!r}: only int8 takes an option, +float_ln")
        float_ops = FLOAT_LAYERNORM_OPS if plus else ()
        try:
            value = float(mask) if mask else DEFAULT_MASK_VALUE
        except ValueError:
            raise ValueError(
                f"--variants: mask value {mask!r} in {label!r} is not a number"
            ) from None
        variants.append((label, quantization, value, float_ops))
    return variants


def latency(predict, x: dict, runs: int = 100, warmup: int = 10) -> tuple[float, float]:
    """(p50, p90) in milliseconds of `predict(x)` after `warmup` untimed calls."""
    for _ in range(warmup):
        predict(x)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        predict(x)
        times.append(time.perf_counter() - start)
    ms = np.asarray(times) * 1e3
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 90))


def in_points(task, metrics: dict) -> tuple[str, float]:
    """(name, value in points, 0-100) of the task's main metric."""
    name = task.main_metric
    if name not in metrics:  # e.g. MNLI's "matched_accuracy" on one file is "accuracy"
        name = next((k for k in metrics if name.endswith(k)), None)
        if name is None:
            raise ValueError(
                f"task {task.name}: metric {task.main_metric!r} not in {sorted(metrics)}"
            )
    value = float(metrics[name])
    return name, value if task.name.startswith("squad") else 100.0 * value


def run(args, log=None) -> str:
    """The markdown report (see the module docstring)."""
    from export.__main__ import load

    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    variants = parse_variants(args.variants)
    model, info, tokenizer = load(args.model)
    task = _task(args, info)
    if task is None:
        return run_replaced_tokens(args, (model, info, tokenizer), variants, log)
    seq_len = info.get("max_seq_length") or task.default_seq_len
    examples = task.read_gold(args.data)
    if args.max_examples:
        examples = examples[: args.max_examples]
    timing_len = min(args.latency_seq_len, stored(info["encoder"], "max_sequence_length"))
    timing_x = {k: v[:1] for k, v in task.encode(examples[:1], tokenizer, timing_len).x.items()}

    log(f"scoring the Keras model on {len(examples)} examples of {args.data}")
    metric, keras_row = _keras_row(args, task, model, examples, tokenizer, seq_len, timing_x)
    score = lambda lite: in_points(  # noqa: E731
        task, task.evaluate(lite, examples, tokenizer, seq_len, batch_size=args.batch_size)
    )[1]
    rows, float32_size, notes = score_variants(
        args, variants, (model, info, tokenizer), seq_len, timing_x, timing_len, score, log
    )
    return markdown(
        args,
        task,
        metric,
        len(examples),
        seq_len,
        timing_len,
        [keras_row] + rows,
        float32_size,
        notes,
    )


def _task(args, info: dict):
    """The task the report scores on (--task, or the one the model was fine-tuned on),
    set to read as the model was fine-tuned; None for an ELECTRA model (replaced-token
    detection, no --task)."""
    from export.bundle import ELECTRA_TASKS
    from model import tasks

    if info.get("task") in ELECTRA_TASKS:
        if args.task:
            raise ValueError(
                f"--task {args.task}: {args.model} is an ELECTRA model ({info.get('task')}), "
                f"scored on replaced-token detection only"
            )
        return None
    task_name = args.task or info.get("finetuned_task")
    if not task_name:
        raise ValueError(f"{args.model}: config.json names no finetuned_task; give --task")
    task = tasks.get(task_name)
    task.read_as(info)  # as it was fine-tuned
    if info.get("task") != task.head:
        raise ValueError(
            f"{args.model}: a {info.get('task')!r} model; task {task.name} needs a "
            f"{task.head!r} one"
        )
    return task


def _keras_row(args, task, model, examples, tokenizer, seq_len: int, timing_x) -> tuple:
    """(the metric's name, the Keras float32 model's row): its score, latency, size."""
    start = time.time()
    metric, keras_points = in_points(
        task,
        task.evaluate(
            model.predict_on_batch, examples, tokenizer, seq_len, batch_size=args.batch_size
        ),
    )
    keras_seconds = time.time() - start
    keras_latency = latency(model.predict_on_batch, timing_x, args.runs, args.warmup)
    weights = os.path.getsize(os.path.join(args.model, "model.weights.h5"))
    row = (
        "Keras float32 (model.weights.h5)",
        weights,
        keras_points,
        None,
        keras_latency,
        "reference",
        keras_seconds,
    )
    return metric, row


def score_variants(args, variants, loaded, seq_len, timing_x, timing_len, score, log):
    """Converts and verifies each variant as `python -m export` does, then `score(lite)`
    (a `TFLiteModel`) and times it. Returns (rows (label, size, score, verification,
    (p50, p90), status, seconds), the float32 file's size, notes on refused variants)."""
    from export import bundle
    from export.__main__ import DEFAULT_CALIBRATION_EXAMPLES, build
    from export.interpreter import TFLiteModel
    from export.verify import VerificationError

    rows, notes, float32_size = [], [], None
    for label, quantization, mask_value, float_ops in variants:
        with tempfile.TemporaryDirectory(prefix="export-report-") as tmp:
            status = "verified"
            try:
                result = build(
                    args.model,
                    tmp,
                    quantization,
                    args.data,
                    args.calibration_examples or DEFAULT_CALIBRATION_EXAMPLES,
                    seq_len=seq_len,
                    mask_value=mask_value,
                    threads=args.threads,
                    loaded=loaded,
                    log=log,
                    float_ops=float_ops,
                )
                verification = result["verification"]
            except VerificationError as e:
                status, verification, result = "refused", e.report, None
                notes.append(f"{label}: refused: {'; '.join(e.report['problems'])}")
            path = bundle.model_path(tmp)
            size = os.path.getsize(path)
            if quantization == "float32" and float32_size is None:
                float32_size = size
            log(f"scoring {label} ({size / 1e6:.1f} MB)")
            lite = TFLiteModel(
                path, num_threads=args.threads, max_seq_length=max(seq_len, timing_len)
            )
            start = time.time()
            value = score(lite)
            seconds = time.time() - start
            timing = latency(lite.predict, timing_x, args.runs, args.warmup)
            rows.append((label, size, value, verification, timing, status, seconds))
            if args.bundles and result is not None:
                with bundle.staging(os.path.join(args.bundles, label.replace("@", "_mask"))) as d:
                    shutil.copyfile(path, bundle.model_path(d))
                    bundle.write_files(d, os.path.join(args.model, "vocab.txt"), result)
    return rows, float32_size, notes


# === ELECTRA: replaced-token detection ===


def run_replaced_tokens(args, loaded, variants, log) -> str:
    """The markdown card of an ELECTRA model directory: its discriminator's AUC and
    accuracies on replaced and on original tokens, held-out text of --data corrupted as in
    pre-training (`export.examples.replaced_tokens`), for the Keras model and every variant."""
    from export import convert, examples
    from export.bundle import DEFAULT_SEQ_LEN
    from export.detection import detection_scores

    model, info, tokenizer = loaded
    seq_len = info.get("max_seq_length") or DEFAULT_SEQ_LEN
    sampler = convert.keras_generator(model, info.get("task"))  # the run's own corrupts
    log(f"corrupting {args.data} as in ELECTRA's pre-training")
    held_out = examples.replaced_tokens(
        tokenizer, seq_len, args.max_examples, args.data, sampler, batch_size=args.batch_size
    )
    # The discriminator alone (an ElectraPretrainer's call would corrupt its input again).
    discriminator = model.discriminator() if hasattr(model, "discriminator") else model
    keras_predict = lambda x: discriminator.predict_on_batch(x)["rtd"]  # noqa: E731
    timing_len = min(args.latency_seq_len, stored(info["encoder"], "max_sequence_length"))
    timing_x = _at_length(held_out.corrupted.row(0), timing_len)

    log(f"scoring the Keras model on {len(held_out)} rows of {args.data}")
    start = time.time()
    keras_scores = detection_scores(keras_predict, held_out, args.batch_size)
    keras_seconds = time.time() - start
    keras_latency = latency(discriminator.predict_on_batch, timing_x, args.runs, args.warmup)
    weights = os.path.getsize(os.path.join(args.model, "model.weights.h5"))
    keras_row = (
        "Keras float32 (model.weights.h5)",
        weights,
        keras_scores,
        None,
        keras_latency,
        "reference",
        keras_seconds,
    )
    score = lambda lite: detection_scores(  # noqa: E731
        lambda x: lite.predict(x)["rtd"], held_out, args.batch_size
    )
    rows, float32_size, notes = score_variants(
        args, variants, loaded, seq_len, timing_x, timing_len, score, log
    )
    return detection_markdown(
        args, info, held_out, seq_len, timing_len, [keras_row] + rows, float32_size, notes
    )


def _at_length(x: dict, length: int) -> dict:
    """One row of inputs padded with 0 (or cut) to `length` tokens."""
    out = {}
    for k, v in x.items():
        v = np.asarray(v)[:, :length]
        out[k] = np.pad(v, [(0, 0), (0, length - v.shape[1])])
    return out


def detection_markdown(args, info, held_out, seq_len, timing_len, rows, float32_size, notes) -> str:
    from export.examples import GENERATOR_SAMPLES, SEED

    keras = rows[0][2]
    how = (
        "the Keras generator's samples written in (drawn from its softmax, as in pre-training)"
        if held_out.replacement == GENERATOR_SAMPLES
        else "random vocabulary tokens written in (a discriminator alone has no generator)"
    )
    lines = [
        f"# Export report: {args.model}",
        "",
        f"Replaced-token detection ({info.get('task')}: ELECTRA's discriminator) on "
        f"{len(held_out)} rows of `{args.data}` (sequence length {seq_len}): 15 % of each "
        f"row's WordPieces chosen as pre-training chooses them (85 % [MASK], 15 % kept), then "
        f"{how}, seed {SEED}: {keras['replaced']:,} of {keras['tokens']:,} "
        f"tokens replaced. Latency: batch 1, {timing_len} tokens, {args.threads} threads, "
        f"{args.warmup} warm-up + {args.runs} timed calls.",
        "",
        "| variant | size (MB) | size / float32 | AUC | change vs Keras | replaced acc. (%) | "
        "original acc. (%) | p50 (ms) | p90 (ms) | agreement | verification | eval (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for label, size, scores, verification, (p50, p90), status, seconds in rows:
        fraction = f"{size / float32_size:.1%}" if float32_size and verification else "—"
        change = (
            f"{scores['auc'] - keras['auc']:+.4f}"
            if verification and scores["auc"] is not None and keras["auc"] is not None
            else "—"
        )
        agreement = (
            f"{verification['agreement']:.4f}"
            if verification and verification.get("agreement") is not None
            else "—"
        )
        lines.append(
            f"| {label} | {size / 1e6:.1f} | {fraction} | {_number(scores['auc'], 4)} | "
            f"{change} | {_percent(scores['replaced_accuracy'])} | "
            f"{_percent(scores['original_accuracy'])} | {p50:.1f} | {p90:.1f} | {agreement} | "
            f"{status} | {seconds:.0f} |"
        )
    lines += [
        "",
        "AUC: the chance that a replaced token gets a higher logit than an original one "
        "(exact, by ranks; Keras' training metric interpolates 200 thresholds). Accuracies: "
        "a token is called replaced when its probability is above 0.5. Verification compares "
        "the discriminator's logits (and a pre-training run's generator signature) with the "
        "Keras model as `python -m export` does and refuses a variant too far off."
        + variant_notes([row[0] for row in rows]),
        "",
    ]
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines).rstrip() + "\n"


def _number(value, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _percent(value) -> str:
    return "—" if value is None else f"{100 * value:.2f}"


def markdown(args, task, metric, count, seq_len, timing_len, rows, float32_size, notes) -> str:
    keras_points = rows[0][2]
    lines = [
        f"# Export report: {args.model}",
        "",
        f"Task {task.name}, {metric} on {count} examples of `{args.data}` (sequence length "
        f"{seq_len}). Latency: batch 1, {timing_len} tokens, {args.threads} threads, "
        f"{args.warmup} warm-up + {args.runs} timed calls.",
        "",
        f"| variant | size (MB) | size / float32 | {metric} | change vs Keras | p50 (ms) | "
        f"p90 (ms) | agreement | verification | eval (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for label, size, points, verification, (p50, p90), status, seconds in rows:
        fraction = f"{size / float32_size:.1%}" if float32_size and verification else "—"
        change = f"{points - keras_points:+.2f}" if verification else "—"
        agreement = (
            f"{verification['agreement']:.4f}"
            if verification and verification.get("agreement") is not None
            else "—"
        )
        lines.append(
            f"| {label} | {size / 1e6:.1f} | {fraction} | {points:.2f} | {change} | "
            f"{p50:.1f} | {p90:.1f} | {agreement} | {status} | {seconds:.0f} |"
        )
    lines += ["", variant_notes([row[0] for row in rows]).strip(), ""]
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines).rstrip() + "\n"


# What each integer variant is, said under a table that has it.
VARIANT_NOTES = {
    "int8": "`int8`: full integer.",
    "int8+float_ln": "`int8+float_ln`: int8 with LayerNorm's ops and the residual adds left in "
    "float (`--int8-float-layernorm`).",
    "int8@-1e9": "`int8@-1e9`: full int8 traced with Keras' own -1e9 attention mask instead of "
    "the export's clipped value ({mask}).",
}


def variant_notes(labels: list[str]) -> str:
    """The notes of the integer variants among `labels`, after a space; "" for none."""
    from export.convert import DEFAULT_MASK_VALUE

    notes = [VARIANT_NOTES[label] for label in VARIANT_NOTES if label in labels]
    if not notes:
        return ""
    return " " + " ".join(notes).format(mask=f"{DEFAULT_MASK_VALUE:g}") + " See export/convert.py."


def check_early(args) -> None:
    """What needs no framework, before TensorFlow loads: the paths, the model's config.json
    and its task (--task), --variants, and outputs that are not the inputs."""
    from export.__main__ import exportable_task
    from model.checkpoints.model_info import check_model_dir

    check_paths(args.model, args.data)
    info = check_model_dir(args.model)
    if info is not None:
        exportable_task(args.model, info, None, None)  # a tagger, a --bilstm model: said first
        _task(args, info)
    inputs = [("--model", args.model), ("--data", args.data)]
    if args.out:
        check_output(args.out, inputs)
    variants = parse_variants(args.variants)
    if args.calibration_examples is not None and all(v[1] != "int8" for v in variants):
        raise ValueError("--calibration-examples: --variants has no int8 variant to calibrate")
    for label, *_ in variants if args.bundles else ():
        kept = os.path.join(args.bundles, label.replace("@", "_mask"))  # as `run` names it
        check_output(kept, inputs + [("--output", args.out)], "--bundles")


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        check_early(args)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    exit_on_sigterm()
    import_tensorflow_quietly(args.verbose)
    try:
        text = run(args)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(text)
    if args.out:
        from model.io.files import atomic_open

        with atomic_open(args.out) as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
