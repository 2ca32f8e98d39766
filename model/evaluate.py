"""Evaluation: `python -m model.evaluate --task TASK --model DIR --data FILE [--output metrics.json]`.

Prints the task's metrics as JSON.

Tasks:
    mlm   masked-LM top-1/top-5 accuracy over masked positions, masked-LM loss
          and perplexity, and next-sentence accuracy, on instances made from
          any raw text file (`model.pretraining.corpus` formats) exactly as for
          pre-training: 15 % masking, 80/10/10, a fixed seed; top-1/top-5 also
          on the positions that show [MASK] alone (`_mask_only`: a position
          that shows its own word is far easier); how often the top-1 word
          and the true word stand elsewhere in the input (`_copy_rate`) and
          in the next instance, an unrelated input (`_chance_copy_rate`: how
          often a word that common is in view by chance). `mlm_copy_excess`:
          the top-1's copy rate less the true word's (0: it guesses words in
          view no more often than the truth is in view; positive: too often);
          `mlm_copy_excess_beyond_chance`: the same less the chance rates'
          difference, the copying that word frequency does not explain. A pre-training
          bundle keeps only its top-k words at each mask (`top_k` in its
          bundle.json): it is scored on the very same instances and masks,
          top-1 and (k >= 5) top-5 only; loss and perplexity need the whole
          distribution, so they are left out.
    rtd   replaced-token detection, ELECTRA's discriminator (a bundle or model
          directory of either ELECTRA task): the rows of any raw text file
          corrupted as pre-training corrupts them (15 % of the WordPieces
          chosen, 85 % of those [MASK], 15 % kept; then the model's own
          generator's samples written in: the bundle's "generator" signature
          or the run's generator; random vocabulary tokens for a discriminator
          alone), a fixed seed (--seed, default 0 as the report card's); the
          discriminator's AUC of replaced against original tokens (exact, by
          ranks), and its accuracy on replaced and on original tokens.
    cola sst2 mrpc stsb qqp mnli qnli rte wnli conll2003 (ner) swag squad1 squad2
          a model directory written by `python -m model.train finetune`,
          scored on any labelled file in the task's standard format with the
          task's official metric (`model/tasks/`). The sequence length is the
          one the model was fine-tuned with unless --seq-len says.

--model may also be a LiteRT bundle written by `python -m export` (a
directory with bundle.json): it is scored by the same task code through
`export.interpreter.TFLiteModel`, with the bundle's vocabulary, casing and
sequence length.

Long texts (cola, sst2): a text longer than the model's sequence length is read
in overlapping windows whose probabilities are averaged (`model.tasks.glue`, the
code the edge runtime's classify runs too), or with --long-texts truncate only
its beginning, as training reads it. Texts that fit are read the same either
way; sentence pairs are always cut. When a file has long texts, the metrics
count them (`long_examples`) and the windows read (`windows`).

GLUE: --predictions-dir DIR writes DIR/<TASK>.tsv (CoLA.tsv, SST-2.tsv, ...,
MNLI-m.tsv, MNLI-mm.tsv for a *mismatched* file, AX.tsv for the diagnostic set):
`index` and `prediction` columns, as gluebenchmark.com's submission takes them
(a labelled file's: DIR/<TASK>.<file>.tsv, e.g. SST-2.dev.tsv). CoNLL-2003:
DIR/predictions.txt, conlleval's input. With it, --data may be an unlabelled
test file: only the file is written (the metrics say "labelled": false);
without it such a file is refused.

On a labelled file (GLUE's classification tasks, CoNLL-2003, SQuAD v1.1) it also writes
DIR/dev_units.json, the metric by example (model/tasks/dev_units.py: what the experiments'
report resamples), replacing one already there with a note.

SQuAD: --predictions-dir DIR writes predictions.json, nbest_predictions.json
(and null_odds.json for v2.0) there; --skip-invalid leaves out malformed
questions (counted as `skipped`) instead of stopping at the first. squad2
answers "" when null score - best span score exceeds the null threshold: by
default the one fine-tuning tuned on its dev file (`null_threshold` in the
model's config.json; 0 for a model without one), or --null-threshold X.

    python -m model.evaluate --task mlm --model runs/mini \\
        --data ../shared/data/wikitext-2-raw/wiki.valid.raw
    python -m model.evaluate --task mlm --model bundles/mlm \\
        --data ../shared/data/wikitext-2-raw/wiki.valid.raw
    python -m model.evaluate --task rtd --model assets/models/electra \\
        --data ../shared/data/wikitext-2-raw/wiki.valid.raw
    python -m model.evaluate --task sst2 --model runs/sst2 --data ../shared/data/glue/SST-2/dev.tsv
    python -m model.evaluate --task sst2 --model bundles/sst2 \\
        --data ../shared/data/glue/SST-2/dev.tsv
    python -m model.evaluate --task sst2 --model runs/sst2 --predictions-dir runs/sst2/glue \\
        --data ../shared/data/glue/SST-2/test.tsv
    python -m model.tasks.glue make-long-reviews --input ../shared/data/glue/SST-2/dev.tsv \\
        --output runs/sst2-long/dev.tsv --min-wordpieces 200 --max-wordpieces 400 --seed 0
    python -m model.evaluate --task sst2 --model assets/models/sst2 \\
        --data runs/sst2-long/dev.tsv --long-texts truncate
    python -m model.evaluate --task squad2 --model runs/squad2 --predictions-dir runs/squad2/dev \\
        --data ../shared/data/squad/dev-v2.0.reconstructed.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from model.config import stored
from model.io.backend import check_keras_backend
from model.io.files import check_output, check_paths
from model.io.flags import positive_int
from model.io.native_logs import import_tensorflow_quietly
from model.pretraining.masked_lm_scores import MAX_PREDICTIONS
from model.tasks import ALIASES
from model.tasks import TASKS as FINETUNE_TASKS

TASKS = ("mlm", "rtd", *FINETUNE_TASKS, *ALIASES)
MLM_SEED = 12345  # --seed's default for mlm; rtd's is the report card's (export.examples.SEED)


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m model.evaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--task", required=True, type=str.lower, choices=TASKS)
    p.add_argument(
        "--model",
        required=True,
        help="model directory, or a LiteRT bundle directory (python -m export)",
    )
    p.add_argument("--data", required=True, help="evaluation file")
    p.add_argument(
        "--output", "--out", dest="out", default=None, help="also write the metrics JSON here"
    )
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument(
        "--seq-len",
        "--max-seq-length",
        dest="max_seq_length",
        type=positive_int,
        default=None,
        help="mlm: instance length (default 128); other tasks: default the model's",
    )
    g = p.add_argument_group("mlm, rtd")
    g.add_argument(
        "--max-predictions",
        type=positive_int,
        default=None,
        help=f"mlm: masked positions an instance at most (default {MAX_PREDICTIONS})",
    )
    g.add_argument(
        "--seed",
        type=int,
        default=None,
        help=f"the masking's seed (default: mlm {MLM_SEED}, rtd 0)",
    )
    g.add_argument("--format", default=None, help="mlm: corpus format of --data (default auto)")
    g = p.add_argument_group("cola, sst2")
    g.add_argument(
        "--long-texts",
        choices=("windows", "truncate"),
        default=None,
        help="how a text longer than the model's sequence length is read: in "
        "overlapping windows, their probabilities averaged (the default), or cut "
        "to its beginning, as in training",
    )
    g = p.add_argument_group("squad1, squad2, GLUE, conll2003")
    g.add_argument(
        "--predictions-dir",
        default=None,
        help="write the task's prediction files here (SQuAD: predictions.json, "
        "nbest_predictions.json, null_odds.json; GLUE: <TASK>.tsv as the benchmark's "
        "submission takes it; conll2003: predictions.txt; with it an unlabelled test file "
        "is predicted); tasks without any ignore it",
    )
    g.add_argument(
        "--null-threshold",
        type=float,
        default=None,
        help='squad2: answer "" when null score - best span score exceeds this '
        "(default: the model's dev-tuned null_threshold, else 0)",
    )
    g.add_argument(
        "--skip-invalid",
        action="store_true",
        help="skip (and count) malformed questions instead of stopping",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also show TensorFlow's C++ start-up log lines (as does setting "
        "TF_CPP_MIN_LOG_LEVEL yourself)",
    )
    return p.parse_args(argv)


def load_mlm(directory: str, max_seq_length: int):
    """(predict, tokenizer) of a pre-training model directory or bundle, with
    its own vocabulary and casing; checks a bundle takes `max_seq_length`."""
    from export import bundle
    from model.checkpoints import model_dir
    from model.text import tokenizer_class

    info = checked_info("mlm", directory)
    if bundle.is_bundle(directory):
        from export.interpreter import TFLiteModel

        if max_seq_length > info["max_seq_length"]:
            raise ValueError(
                f"{directory}: --seq-len {max_seq_length} is longer than "
                f"the bundle's max_seq_length {info['max_seq_length']}; pass "
                f"--seq-len {info['max_seq_length']} (and the same to its "
                f"model directory to compare)"
            )
        lite = TFLiteModel(bundle.model_path(directory), max_seq_length=info["max_seq_length"])
        lowercase = bool(info["lowercase"])
        predict = lite.predict
    else:
        check_positions(directory, max_seq_length, stored(info["encoder"], "max_sequence_length"))
        from model.pretraining.masked_lm_scores import masked_lm_predict

        predict = masked_lm_predict(model_dir.load(directory))
        lowercase = stored(info["encoder"], "lowercase")
    tokenizer = tokenizer_class()(os.path.join(directory, model_dir.VOCAB), lowercase=lowercase)
    return predict, tokenizer


def check_positions(directory: str, seq_len: int, positions: int | None) -> None:
    """ValueError where --seq-len is longer than the model's position table (a TensorFlow
    traceback otherwise)."""
    if positions and seq_len > positions:
        raise ValueError(
            f"{directory}: --seq-len {seq_len} exceeds the model's max_sequence_length "
            f"{positions} (its position embeddings)"
        )


# The model directories with a masked-LM head: BERT's pre-trainer, SpanBERT's, ELECTRA's
# (its generator's).
MLM_TASKS = ("pretraining", "span_pretraining", "electra_pretraining")


def evaluate_replaced_tokens(
    directory: str,
    path: str,
    batch_size: int = 32,
    seq_len: int | None = None,
    seed: int | None = None,
) -> dict:
    """ELECTRA's discriminator in `directory` (a bundle, or a model directory of either
    ELECTRA task) on the raw text of `path` corrupted by its own generator (random vocabulary
    tokens for a discriminator alone): `export.detection.detection_scores`, with how the text
    was corrupted."""
    from export import bundle, examples
    from export.detection import detection_scores
    from model.checkpoints import model_dir
    from model.text import tokenizer_class

    info = checked_info("rtd", directory)
    if bundle.is_bundle(directory):
        from export.interpreter import TFLiteModel

        length, lowercase = info["max_seq_length"], bool(info["lowercase"])
        lite = TFLiteModel(bundle.model_path(directory), max_seq_length=length)
        discriminate = lambda x: lite.predict(x)["rtd"]  # noqa: E731
        generate = lite.signature("generator").predict if "generator" in lite.signatures else None
    else:
        from export import convert

        model = model_dir.load(directory)
        length, lowercase = info.get("max_seq_length"), stored(info["encoder"], "lowercase")
        generate = convert.keras_generator(model, info["task"])
        if generate is not None:
            model = model.discriminator()  # the pre-trainer's call would corrupt again
        discriminate = lambda x: model.predict_on_batch(x)["rtd"]  # noqa: E731
    seq_len = seq_len or length or bundle.DEFAULT_SEQ_LEN
    if length and seq_len > length:
        raise ValueError(f"{directory}: --seq-len {seq_len} is longer than the model's {length}")
    tokenizer = tokenizer_class()(os.path.join(directory, model_dir.VOCAB), lowercase=lowercase)
    seed = examples.SEED if seed is None else seed
    held_out = examples.replaced_tokens(
        tokenizer, seq_len, None, path, generate, seed=seed, batch_size=batch_size
    )
    scores = detection_scores(discriminate, held_out, batch_size)
    return {
        **scores,
        "rows": len(held_out),
        "corruption": held_out.replacement,
        "seed": seed,
        "max_seq_length": seq_len,
    }


def evaluate_task(
    name: str,
    directory: str,
    path: str,
    batch_size: int = 32,
    seq_len: int | None = None,
    predictions_dir: str | None = None,
    null_threshold: float | None = None,
    skip_invalid: bool = False,
    long_texts: str | None = None,
) -> dict:
    """The metrics of the fine-tuned model in `directory` on the labelled file `path`.

    predictions_dir: where the task writes its prediction files (SQuAD's; GLUE's
        submission file, and then `path` may be unlabelled: a test set).
    null_threshold: squad2 only; None takes the model's stored `null_threshold`.
    skip_invalid: skip malformed examples (tasks with a `skip_invalid` reader
        only); their count is the `skipped` metric.
    long_texts: "windows" or "truncate": how a single-text task (cola, sst2) reads a
        text longer than `seq_len`; None keeps the task's default (windows).
    """
    from export import bundle
    from model import tasks
    from model.checkpoints import model_dir
    from model.features import tagger as feature_tagger
    from model.text import tokenizer_class

    task = tasks.get(name)
    _check_options(task, null_threshold, skip_invalid, long_texts)
    info = checked_info(task.name, directory)
    if info is None:  # the feature-based CoNLL tagger
        return feature_tagger.evaluate(directory, path)
    bundled = bundle.is_bundle(directory)
    info = _bundle_as_info(info) if bundled else info
    trained_on = info.get("finetuned_task")
    if trained_on and trained_on != task.name:
        print(
            f"warning: {directory} was fine-tuned on {trained_on}, not {task.name}", file=sys.stderr
        )
    _configure(task, info, null_threshold, skip_invalid, long_texts)
    seq_len = seq_len or info.get("max_seq_length") or task.default_seq_len
    check_positions(directory, seq_len, info["encoder"].get("max_sequence_length"))
    examples = _examples(task, directory, info, path, predictions_dir)
    predict = _predictor(directory, info, bundled)
    tokenizer = tokenizer_class()(
        os.path.join(directory, model_dir.VOCAB), lowercase=stored(info["encoder"], "lowercase")
    )
    metrics = task.evaluate(
        predict, examples, tokenizer, seq_len, batch_size=batch_size, output_dir=predictions_dir
    )
    if skip_invalid:
        metrics["skipped"] = len(getattr(task, "skipped", ()))
    if getattr(task, "text_b", "") is None:
        metrics["long_texts"] = task.long_texts
    if hasattr(task, "document_context"):
        metrics["document_context"] = task.document_context
    if predictions_dir is not None:
        metrics["predictions_dir"] = predictions_dir
    return metrics


def _examples(task, directory: str, info: dict, path: str, predictions_dir: str | None) -> list:
    """The examples of `path`, read and checked before the model loads: malformed or empty
    files, labels the task needs (a test file only with `predictions_dir`, which must be
    writable), a test file scored by a model fine-tuned on another task."""
    from model.io.files import check_writable_dir

    examples = task.read_gold(path)
    if not examples:
        raise ValueError(f"{path}: no examples to evaluate")
    if predictions_dir is not None:
        check_writable_dir(predictions_dir)
    task.require_labels(examples, predictions_dir)
    trained_on = info.get("finetuned_task")
    if trained_on and trained_on != task.name and task.unlabelled(examples):
        raise ValueError(
            f"{directory} was fine-tuned on {trained_on}, not {task.name}: with no labels to "
            f"show it, its predictions for {path} would be {task.name}'s in name only; "
            f"pass --task {trained_on}"
        )
    return examples


def _configure(task, info: dict, null_threshold, skip_invalid: bool, long_texts) -> None:
    """Sets `task` up to read and score as the model in `info` was trained, and as asked."""
    if long_texts is not None:
        task.long_texts = long_texts
    task.read_as(info)
    if getattr(task, "version_2", False):
        # Fine-tuning stores the threshold tuned on its dev file (best_f1_thresh).
        tuned = info.get("null_threshold")
        chosen = null_threshold if null_threshold is not None else tuned
        task.null_threshold = float(chosen if chosen is not None else task.null_threshold)
    if skip_invalid:
        task.skip_invalid = True


def _predictor(directory: str, info: dict, bundled: bool):
    """batch -> outputs: the LiteRT bundle's interpreter, or the Keras model's predict."""
    if bundled:
        from export import bundle
        from export.interpreter import TFLiteModel

        # Called, a TFLiteModel returns what the Keras model would (an array
        # for one output), the form the tasks read.
        return TFLiteModel(bundle.model_path(directory), max_seq_length=info["max_seq_length"])
    from model.checkpoints import model_dir

    return model_dir.load(directory).predict_on_batch


def _check_options(task, null_threshold, skip_invalid: bool, long_texts) -> None:
    """Refuses the options `task` has no use for."""
    if null_threshold is not None and not getattr(task, "version_2", False):
        raise ValueError(f"--null-threshold: task {task.name} has no null answer (squad2 has)")
    if skip_invalid and not hasattr(task, "skip_invalid"):
        raise ValueError(
            f"--skip-invalid: task {task.name} reads its files strictly and cannot skip examples"
        )
    if long_texts is not None and getattr(task, "text_b", "") is not None:
        raise ValueError(
            f"--long-texts: task {task.name} does not read single texts; only cola and "
            f"sst2 do (sentence pairs are cut, as in training)"
        )


def _check_model(task, directory: str, info: dict) -> None:
    """Refuses a model whose head or labels are not `task`'s; warns when it was
    fine-tuned on another task with the same head."""
    from model.tasks.base import ordered_labels

    if info.get("task") != task.head:
        raise ValueError(
            f"{directory}: holds a {info.get('task')!r} model, but task {task.name} "
            f"needs a {task.head!r} one (python -m model.train finetune --task "
            f"{task.name} makes it)"
        )
    labels = task.labels()
    id2label = info.get("id2label")
    # A model may name its labels as the task does or by the file's values (GLUE's "0"/"1").
    in_file = list(getattr(task, "label_names", None) or labels or [])
    names = ordered_labels(id2label) if id2label else []
    unnamed = names == [f"LABEL_{i}" for i in range(len(names))]  # transformers' defaults
    if labels and names and not unnamed and names not in (labels, in_file):
        raise ValueError(
            f"{directory}: the model's labels {list(id2label.values())} are not "
            f"task {task.name}'s {labels}"
        )
    outputs = info.get("num_labels") or len(id2label or ()) or None
    wanted = len(labels) if labels else 1  # STS-B's regression: one score
    if task.head == "classifier" and outputs and outputs != wanted:
        raise ValueError(
            f"{directory}: the model has {outputs} output(s), task {task.name} needs {wanted} "
            f"({', '.join(labels) if labels else 'a regression score'})"
        )


def checked_info(name: str, directory: str) -> dict | None:
    """The config.json, or a bundle's bundle.json, of `directory`, refused (ValueError) where
    its head cannot be scored on `name` (mlm, rtd or a fine-tuning task): JSON alone, so the
    command checks it before TensorFlow loads, and each evaluation again. None: a feature-based
    tagger (conll2003 alone)."""
    from export import bundle
    from model import tasks
    from model.checkpoints.model_info import read_info
    from model.features import tagger as feature_tagger

    if name not in ("mlm", "rtd") and feature_tagger.is_tagger_dir(directory):
        if tasks.get(name).name != "conll2003":
            raise ValueError(
                f"{directory}: a feature-based tagger scores task conll2003, not {name}"
            )
        return None
    bundled = bundle.is_bundle(directory)
    info = bundle.read_info(directory) if bundled else read_info(directory)
    if name not in ("mlm", "rtd"):
        _check_model(tasks.get(name), directory, _bundle_as_info(info) if bundled else info)
        return info
    if name == "mlm":
        heads = MLM_TASKS
        needs = "masked-LM head (" + (
            "export a pre-training model)" if bundled else f"those of {', '.join(MLM_TASKS)} have)"
        )
    else:
        heads = bundle.ELECTRA_TASKS
        needs = "replaced-token detection head (" + (
            "export an ELECTRA model)"
            if bundled
            else "python -m model.train pretrain --objective electra makes one)"
        )
    if info.get("task") not in heads:
        kind = "bundle" if bundled else "model"
        raise ValueError(f"{directory}: a {info.get('task')!r} {kind} has no {needs}")
    return info


def _bundle_as_info(info: dict) -> dict:
    """A bundle.json read as the config.json fields evaluate_task uses."""
    keys = (
        "task", "finetuned_task", "max_seq_length", "id2label", "null_threshold",
        "document_context",
    )  # fmt: skip
    logits = (info.get("outputs") or {}).get("logits") or [None]
    return {
        **{k: info.get(k) for k in keys},
        "num_labels": logits[-1] if isinstance(logits[-1], int) and logits[-1] > 0 else None,
        "encoder": {"lowercase": info["lowercase"]},
    }


def check_early(args) -> None:
    """What needs no framework, before TensorFlow loads: the paths, --output, the flags
    --task takes, and that the model (its config.json or bundle.json) can be scored on it."""
    from model import tasks

    check_paths(args.model, files=(args.data,))
    if args.out:
        check_output(args.out, [("--model", args.model), ("--data", args.data)])
    corpus = args.task in ("mlm", "rtd")
    given = lambda *flags: [f for f, v in flags if v is not None and v is not False]  # noqa: E731
    if corpus:
        wrong = given(
            ("--null-threshold", args.null_threshold),
            ("--skip-invalid", args.skip_invalid),
            ("--long-texts", args.long_texts),
            ("--predictions-dir", args.predictions_dir),
        )
        if args.task == "rtd":
            wrong += given(("--max-predictions", args.max_predictions), ("--format", args.format))
    else:
        _check_options(
            tasks.get(args.task), args.null_threshold, args.skip_invalid, args.long_texts
        )
        wrong = given(
            ("--max-predictions", args.max_predictions),
            ("--seed", args.seed),
            ("--format", args.format),
        )
    if wrong:
        raise ValueError(f"{', '.join(wrong)}: --task {args.task} takes no such flag; leave it out")
    checked_info(args.task, args.model)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        check_early(args)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    check_keras_backend()  # one line on a machine without TensorFlow, before Keras picks it
    import_tensorflow_quietly(args.verbose)
    start = time.time()
    try:
        if args.task == "rtd":
            metrics = evaluate_replaced_tokens(
                args.model, args.data, args.batch_size, args.max_seq_length, args.seed
            )
            return _report(args, metrics, start)
        if args.task != "mlm":
            metrics = evaluate_task(
                args.task,
                args.model,
                args.data,
                args.batch_size,
                args.max_seq_length,
                args.predictions_dir,
                args.null_threshold,
                args.skip_invalid,
                args.long_texts,
            )
            return _report(args, metrics, start)
        from model.pretraining.masked_lm_scores import evaluate_mlm

        seq_len = args.max_seq_length or 128
        predict, tokenizer = load_mlm(args.model, seq_len)
        metrics = evaluate_mlm(
            predict,
            tokenizer,
            args.data,
            seq_len,
            args.max_predictions or MAX_PREDICTIONS,
            MLM_SEED if args.seed is None else args.seed,
            args.batch_size,
            args.format or "auto",
        )
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return _report(args, metrics, start)


def _report(args, metrics: dict, start: float) -> int:
    metrics = {
        "task": args.task,
        "model": args.model,
        "data": args.data,
        **metrics,
        "seconds": round(time.time() - start, 1),
    }
    print(json.dumps(metrics, indent=2))
    if args.out:
        from model.io.files import write_json

        write_json(args.out, metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
