"""`python -m export`: a model directory -> a verified LiteRT bundle (`export/bundle.py`).

    python -m export --model runs/ft/sst2 --quantize dynamic --output bundles/sst2
    python -m export --model runs/ft/conll2003 --quantize int8 --output bundles/ner \\
        --calibration-examples 200
    python -m export --model runs/mini --quantize float32 --out bundles/mlm --top-k 10 \\
        --data ../shared/data/wikitext-2-raw/wiki.valid.raw
    python -m export --model runs/minilm --quantize dynamic --output bundles/encoder
    python -m export --model runs/ft/sst2 --quantize int8 --int8-float-layernorm --out b/sst2-int8
    python -m export --model runs/electra --quantize dynamic --output bundles/electra \\
        --data ../shared/data/wikitext-2-raw/wiki.valid.raw

Every task model works: pretraining (top-k words at each [MASK], NSP
probabilities), classifier (also regression), token_classifier,
question_answerer, multiple_choice and encoder (features and attention
probabilities). A pre-training bundle also holds its encoder as a second
signature, "encoder" (`export/convert.py`; ~1 % of the file): the same bundle
serves fill_mask, attention and features (--no-encoder-signature leaves it
out). Either ELECTRA model directory (electra_pretraining, what
`--objective electra` saves, or replaced_token_detection) exports its
discriminator as a "replaced_token_detection" bundle (detect_replaced), with
the discriminator's encoder as its "encoder" signature too; a pre-training
run's also holds its generator as a third signature, "generator" (corrupt;
--no-generator-signature leaves it out). Steps:

  1. load the model directory (weights checked by name and shape);
  2. read real examples (`export/examples.py`: --data, else the fine-tuned
     model's dev file from metrics.json, else built-in sentences for encoder
     and pre-training models; ELECTRA's corrupted as in its pre-training);
  3. convert (`export/convert.py`); int8 calibrates on --calibration-examples
     real examples, different ones from those verified on when there are enough;
  4. verify the new file against the Keras model on --verify-examples examples
     (`export/verify.py`); the "encoder" signature too, against the Keras
     encoder's outputs on the same texts unmasked, with the same thresholds
     (the "generator" signature: on the same texts masked);
  5. only if it passes, publish the bundle under --out (built in a hidden
     temporary directory and renamed; a failed export writes nothing there).
     --out is replaced whole, so it must be absent, empty, or a bundle and
     nothing else, and never the current directory or a folder holding --model
     (refused before anything is converted).

Exit status 0 on success, 1 when the export is refused (the reason is printed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

from export.bundle import DEFAULT_SEQ_LEN, check_output
from export.convert import DEFAULT_MASK_VALUE, DEFAULT_TOP_K, FLOAT_LAYERNORM_OPS, QUANTIZATIONS
from model.checkpoints.model_info import check_model_dir
from model.config import stored
from model.io.files import check_paths, check_stageable, exit_on_sigterm, held_by
from model.io.flags import positive_int
from model.io.native_logs import import_tensorflow_quietly

DEFAULT_CALIBRATION_EXAMPLES = 100
DEFAULT_VERIFY_EXAMPLES = 64
CALIBRATION_BATCH = 8


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model", required=True, help="model directory (config.json, vocab.txt, model.weights.h5)"
    )
    p.add_argument(
        "--quantize",
        default="float32",
        choices=QUANTIZATIONS,
        help="float32 (default), or a smaller variant checked against it; dynamic (int8 "
        "weights) is the one docs/export.md measures best for the edge",
    )
    p.add_argument("--output", "--out", dest="out", required=True, help="bundle directory to write")
    p.add_argument(
        "--data",
        default=None,
        help="examples to verify and calibrate on: a file in the fine-tuned task's "
        "format, or raw text (one text per line) for other models",
    )
    p.add_argument(
        "--calibration-examples",
        type=positive_int,
        default=None,
        help=f"int8: real examples the activation ranges are calibrated on (default "
        f"{DEFAULT_CALIBRATION_EXAMPLES})",
    )
    p.add_argument("--verify-examples", type=positive_int, default=DEFAULT_VERIFY_EXAMPLES)
    p.add_argument(
        "--seq-len",
        type=positive_int,
        default=None,
        help="the bundle's max_seq_length (default: the model's fine-tuning length, "
        f"else {DEFAULT_SEQ_LEN})",
    )
    p.add_argument(
        "--top-k",
        type=positive_int,
        default=None,
        help=f"pretraining: predictions kept per [MASK] (default {DEFAULT_TOP_K})",
    )
    p.add_argument(
        "--mask-value",
        type=float,
        default=DEFAULT_MASK_VALUE,
        help="masked attention score traced into the file (Keras' own is -1e9; "
        "see export/convert.py)",
    )
    p.add_argument(
        "--int8-float-layernorm",
        action="store_true",
        help="int8: keep LayerNorm's ops (and the residual adds) in float; full "
        "integer int8 is too coarse for most trained BERTs (export/convert.py)",
    )
    p.add_argument(
        "--encoder-signature",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="pretraining and ELECTRA: also write the encoder's outputs (attention "
        'probabilities, features) as a second signature, "encoder" (default: on)',
    )
    p.add_argument(
        "--generator-signature",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ELECTRA pre-training runs: also write the generator (its masked-LM logits, "
        'which runtime.corrupt() samples from) as a second signature, "generator" '
        "(default: on)",
    )
    p.add_argument(
        "--threads", type=positive_int, default=2, help="LiteRT threads for verification"
    )
    p.add_argument(
        "--card",
        default=None,
        help='one line of what the model does and where it fails (bundle.json "card"; the '
        "app shows it under the model's name)",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also show TensorFlow's C++ start-up log lines (as does setting "
        "TF_CPP_MIN_LOG_LEVEL yourself)",
    )
    args = p.parse_args(argv)
    if args.seq_len is not None and args.seq_len < 8:
        p.error("--seq-len must be at least 8")
    for flag, given in (
        ("--int8-float-layernorm", args.int8_float_layernorm),
        ("--calibration-examples", args.calibration_examples is not None),
    ):
        if given and args.quantize != "int8":
            p.error(f"{flag} needs --quantize int8")
    return args


def check_task_flags(args, info: dict | None) -> None:
    """ValueError for a flag the model's bundle would ignore or refuse, said before TensorFlow
    loads: --top-k without [MASK] predictions, and `exportable_task`'s refusals. `info`: the model directory's
    config.json (None: not ours, left to its reader and `_job`)."""
    if info is None:
        return
    task = exportable_task(args.model, info, args.encoder_signature, args.generator_signature)
    if args.top_k is not None and task != "pretraining":
        raise ValueError(
            f"--top-k: only a masked-LM pre-training run's bundle predicts [MASK] tokens, "
            f"not {args.model} ({info.get('task', 'encoder')}); leave it out"
        )


def export_bundle(
    model_dir: str, out: str, quantization: str = "float32", card: str | None = None, **options
) -> dict:
    """Converts, verifies and publishes one bundle under `out`; returns its bundle.json.

    card: one line of what the model does and where it fails (bundle.json "card"; the
        app shows it under the model's name).
    options: `build`'s keyword arguments (data, seq_len, top_k, loaded, log, ...).
    Raises `export.verify.VerificationError` (nothing written under `out`) when
    the new file does not match the Keras model.
    """
    from export import bundle

    with bundle.staging(out) as tmp:
        result = build(model_dir, tmp, quantization, **options)
        if card:
            result["card"] = card
        bundle.write_files(tmp, os.path.join(model_dir, "vocab.txt"), result)
    return result


def build(
    model_dir: str,
    directory: str,
    quantization: str = "float32",
    data: str | None = None,
    calibration_examples: int = DEFAULT_CALIBRATION_EXAMPLES,
    verify_examples: int = DEFAULT_VERIFY_EXAMPLES,
    seq_len: int | None = None,
    top_k: int = DEFAULT_TOP_K,
    mask_value: float = DEFAULT_MASK_VALUE,
    threads: int = 2,
    loaded=None,
    log=None,
    float_ops=(),
    encoder_signature: bool | None = None,
    generator_signature: bool | None = None,
) -> dict:
    """Writes `directory`/model.tflite, verifies it and returns the bundle.json
    it would get. On a failed verification the file stays there (the report
    scores refused variants too) and VerificationError is raised.

    loaded: (model, info, tokenizer) already in memory; None loads `model_dir`.
    encoder_signature: the "encoder" signature; None: for pretraining and ELECTRA models.
    generator_signature: the "generator" signature; None: for ELECTRA
    pre-training runs (whose bundle is a "replaced_token_detection" one)."""
    from export import bundle, convert
    from export.interpreter import TFLiteModel

    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    job = _job(model_dir, loaded or load(model_dir), encoder_signature, generator_signature)
    job.seq_len = check_seq_len(
        seq_len or job.info.get("max_seq_length") or DEFAULT_SEQ_LEN, job.info
    )
    kwargs = _signature_options(job, top_k)
    functions = convert.signatures(job.model, job.task, **kwargs)
    int8 = quantization == "int8"
    needed = verify_examples + (calibration_examples if int8 else 0)
    rows, inputs = _examples(job, needed, data)
    verified = range(min(verify_examples, len(inputs)))
    calibrated = calibration_rows(len(inputs), verify_examples, calibration_examples)
    checked, calibration = inputs.take(verified), inputs.take(calibrated)
    calibrating = f", calibrating on {len(calibration)} examples of {calibration.source}"
    log(f"converting {model_dir} ({job.task}) to {quantization}" + (calibrating if int8 else ""))
    start = time.time()
    tflite = convert.to_tflite(
        job.model,
        job.task,
        quantization,
        mask_value=mask_value,
        float_ops=float_ops,
        representative=_representative(job, calibration, rows, calibrated),
        **kwargs,
    )
    seconds = time.time() - start
    path = os.path.join(directory, bundle.MODEL)
    with open(path, "wb") as f:
        f.write(tflite)
    lite = TFLiteModel(path, num_threads=threads, max_seq_length=job.seq_len)
    log(f"verifying {len(tflite) / 1e6:.1f} MB on {len(checked)} examples of {checked.source}")
    electra_rows = None if rows is None else rows.take(verified)
    report, reports = _verify(
        job, lite, functions, checked, electra_rows, quantization, data, verify_examples
    )
    result = bundle_info(
        job.info, model_dir, lite, quantization, job.seq_len, top_k, report, reports, job.task
    )
    result["conversion"] = {
        "attention_mask_value": mask_value,
        "seconds": round(seconds, 1),
        "size_bytes": len(tflite),
        "calibration": {"examples": len(calibration), "data": calibration.source} if int8 else None,
        "float_ops": list(float_ops) if int8 else None,
    }
    return result


@dataclasses.dataclass
class _Job:
    """What one `build` exports: the loaded model directory, the bundle's task (an ELECTRA
    directory's `source_task` exports its discriminator) and signatures, its length."""

    model_dir: str
    model: object
    info: dict
    tokenizer: object
    source_task: str
    task: str
    electra: bool
    encoder_signature: bool
    generator_signature: bool
    seq_len: int = 0


def _job(model_dir: str, loaded, encoder_signature, generator_signature) -> _Job:
    """The export of `loaded` (model, info, tokenizer), refused with the reason where
    LiteRT or the bundle's task cannot hold it; None signatures: the task's default."""
    from export import bundle

    model, info, tokenizer = loaded
    task = exportable_task(model_dir, info, encoder_signature, generator_signature)
    source_task = info.get("task", "encoder")
    electra = source_task in bundle.ELECTRA_TASKS
    if encoder_signature is None:
        encoder_signature = task in bundle.ENCODER_SIGNATURE_TASKS
    if generator_signature is None:
        generator_signature = source_task == "electra_pretraining"
    return _Job(
        model_dir, model, info, tokenizer, source_task, task, electra,
        encoder_signature, generator_signature,
    )  # fmt: skip


def exportable_task(model_dir: str, info: dict, encoder, generator) -> str:
    """The bundle task `model_dir` (its config.json `info`) exports as; ValueError where LiteRT
    cannot hold it, or --encoder-signature or --generator-signature (`encoder`, `generator`:
    True given, None the default) asks for a signature it has not."""
    from export import bundle

    if info.get("task") == "feature_tagger":
        raise ValueError(
            f"{model_dir}: a feature-based tagger (python -m model.feature_tagger), whose "
            f"BiLSTM over frozen features has no LiteRT export; score it with python -m "
            f"model.evaluate --task conll2003"
        )
    if info.get("bilstm_units") is not None:
        # The converter's built-in ops cannot unroll an LSTM over a dynamic batch and length.
        raise ValueError(
            f"{model_dir}: a model fine-tuned with --bilstm ({info['bilstm_units']} units) "
            f"cannot be exported to LiteRT (its LSTM needs TensorFlow ops the edge runtime "
            f"lacks); evaluate it with python -m model.evaluate instead"
        )
    source = info.get("task", "encoder")
    # Both ELECTRA model directories export their discriminator.
    task = bundle.REPLACED_TOKEN_TASK if source in bundle.ELECTRA_TASKS else source
    if encoder and task not in bundle.ENCODER_SIGNATURE_TASKS:
        raise ValueError(
            f"--encoder-signature: only {' and '.join(bundle.ENCODER_SIGNATURE_TASKS)} bundles "
            f"have one, not {task} bundles"
        )
    if generator and source != "electra_pretraining":
        raise ValueError(
            f"--generator-signature: only an ELECTRA pre-training run (task "
            f"electra_pretraining) has a generator, not {model_dir} ({source})"
        )
    return task


def _signature_options(job: _Job, top_k: int) -> dict:
    """`convert.signatures`' and `convert.to_tflite`'s options for `job`."""
    options = dict(
        top_k=top_k,
        next_sentence=job.task == "pretraining" and job.info.get("next_sentence", True),
    )
    # Only when on: a `convert.to_tflite` stand-in may not know them.
    if job.encoder_signature:
        options["encoder_signature"] = True
    if job.generator_signature:
        options["generator_signature"] = True
    return options


def _examples(job: _Job, needed: int, data: str | None):
    """(ELECTRA's replaced-token rows or None, the model's inputs): `needed` real examples
    (`export/examples.py`) to verify and calibrate on."""
    from export import convert, examples

    if not job.electra:
        return None, examples.load(
            job.info, job.tokenizer, job.seq_len, needed, data, job.model_dir
        )
    # Text corrupted as in pre-training: the run's own generator draws the replacements
    # (whether or not the bundle keeps it), a discriminator alone gets random tokens.
    sampler = convert.keras_generator(job.model, job.source_task)
    rows = examples.replaced_tokens(job.tokenizer, job.seq_len, needed, data, sampler)
    return rows, rows.corrupted


def _representative(job: _Job, calibration, rows, calibrated: range):
    """int8's calibration batches: `calibration`'s inputs; with a generator signature,
    the discriminator's (corrupted text; its encoder signature's too) beside the generator's
    (the same rows masked)."""
    from export import bundle

    def representative():
        if not (job.electra and job.generator_signature):
            return (x for _, x in calibration.batches(CALIBRATION_BATCH))
        masked = rows.masked.take(calibrated)
        # The encoder signature is the discriminator's encoder: calibrated on what it reads.
        readers = [bundle.DEFAULT_SIGNATURE] + [bundle.ENCODER_SIGNATURE] * job.encoder_signature
        return (
            {**dict.fromkeys(readers, x), bundle.GENERATOR_SIGNATURE: m}
            for (_, x), (_, m) in zip(
                calibration.batches(CALIBRATION_BATCH), masked.batches(CALIBRATION_BATCH)
            )
        )

    return representative


def _verify(job: _Job, lite, functions: dict, checked, rows, quantization: str, data, texts: int):
    """(the default signature's verification report, {other signature: its report}):
    the file against the Keras model on `checked` (ELECTRA: its replaced-token `rows`);
    the encoder signature on the first `texts` texts of `data` unmasked."""
    from export import bundle, convert, examples, verify

    fn = functions[bundle.DEFAULT_SIGNATURE][0]
    report = verify.verify(
        lite.predict, lambda x: convert.keras_outputs(fn, x), checked, job.task, quantization
    )
    if job.electra:
        report["replaced_tokens"] = {
            "corruption": rows.replacement,
            "replaced": int(rows.labels.sum()),
            "tokens": int(checked.x["padding_mask"].sum()),
        }
    reports = {}
    if job.encoder_signature:
        # The texts the default signature was verified on, without their [MASK]s.
        plain = examples.load(
            {**job.info, "task": "encoder"}, job.tokenizer, job.seq_len, texts, data,
            job.model_dir,
        )  # fmt: skip
        reports[bundle.ENCODER_SIGNATURE] = verify_signature(
            lite, functions, bundle.ENCODER_SIGNATURE, "encoder", plain, quantization
        )
    if job.generator_signature:
        # The same texts as the generator saw them in pre-training: masked.
        reports[bundle.GENERATOR_SIGNATURE] = verify_signature(
            lite,
            functions,
            bundle.GENERATOR_SIGNATURE,
            bundle.GENERATOR_SIGNATURE,
            rows.masked,
            quantization,
        )
    return report, reports


def verify_signature(lite, functions: dict, key: str, task: str, inputs, quantization: str):
    """The verification report of the file's signature `key` (the contract of `task`)
    against its Keras serving function; VerificationError names the signature."""
    from export import convert, verify
    from export.verify import VerificationError

    fn = functions[key][0]
    try:
        return verify.verify(
            lite.signature(key).predict,
            lambda x: convert.keras_outputs(fn, x),
            inputs,
            task,
            quantization,
        )
    except VerificationError as e:
        raise VerificationError(f"signature {key!r}: {e}", {"signature": key, **e.report}) from None


def load(model_dir: str):
    """(Keras model, config.json info, tokenizer) of a model directory."""
    from model.checkpoints import model_dir as model_dirs
    from model.text.tokenizer import WordPieceTokenizer

    info = model_dirs.read_info(model_dir)
    model = model_dirs.load(model_dir)
    vocab = os.path.join(model_dir, model_dirs.VOCAB)
    tokenizer = WordPieceTokenizer(vocab, lowercase=stored(info["encoder"], "lowercase"))
    return model, info, tokenizer


def check_seq_len(seq_len: int, info: dict) -> int:
    limit = stored(info["encoder"], "max_sequence_length")
    if seq_len > limit:
        raise ValueError(
            f"--seq-len {seq_len} is longer than the model's {limit} position embeddings"
        )
    return seq_len


def calibration_rows(available: int, verified: int, wanted: int) -> range:
    """Rows after the verified ones when there are enough, else the last `wanted`."""
    if available - verified >= wanted:
        return range(verified, verified + wanted)
    return range(max(0, available - wanted), available)


def bundle_info(
    info: dict,
    model_dir: str,
    lite,
    quantization: str,
    seq_len: int,
    top_k: int,
    report: dict,
    signature_reports: dict | None = None,
    task: str | None = None,
) -> dict:
    """bundle.json (the contract in export/README.md). `report` is the default
    signature's verification, `signature_reports` {key: report} the others';
    `task` the bundle's, when not the model directory's own (ELECTRA's)."""
    from export import bundle
    from export.runtime import methods_of

    task = task or info.get("task", "encoder")
    shape = lambda d: [int(n) for n in d["shape_signature"]]  # noqa: E731
    signatures = {}
    for key in [bundle.DEFAULT_SIGNATURE] + [
        k for k in lite.signatures if k != bundle.DEFAULT_SIGNATURE
    ]:
        runner = lite.signature(key)
        # Every other signature is named after the task whose outputs it has.
        signature_task = task if key == bundle.DEFAULT_SIGNATURE else key
        signatures[key] = {
            "task": signature_task,
            "methods": methods_of(signature_task),
            "inputs": {n: shape(d) for n, d in sorted(runner.input_details.items())},
            "outputs": {n: shape(runner.output_details[n]) for n in runner.output_names},
        }
        if key != bundle.DEFAULT_SIGNATURE:
            signatures[key]["verification"] = (signature_reports or {}).get(key)
    result = bundle.describe(info, task, seq_len, quantization, top_k)
    result.update(
        {
            "methods": list(dict.fromkeys(m for s in signatures.values() for m in s["methods"])),
            "inputs": signatures[bundle.DEFAULT_SIGNATURE]["inputs"],
            "outputs": signatures[bundle.DEFAULT_SIGNATURE]["outputs"],
            "signatures": signatures,
            "verification": report,
            "source": {"model_dir": os.path.normpath(model_dir), "config": info},  # as given
        }
    )
    return result


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    exit_on_sigterm()  # a stopped export leaves no half-written bundle beside the real one
    try:
        check_paths(args.model, files=(args.data,))
        check_task_flags(args, check_model_dir(args.model))
        held = held_by(args.out, {"the current directory": os.getcwd(), "the model": args.model})
        if held:
            raise FileExistsError(f"{args.out}: holds {held}, which replacing it would delete")
        check_output(args.out)
        check_stageable(args.out)
    except (FileNotFoundError, FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    import_tensorflow_quietly(args.verbose)
    from export.verify import VerificationError

    try:
        info = export_bundle(
            args.model,
            args.out,
            args.quantize,
            data=args.data,
            calibration_examples=args.calibration_examples or DEFAULT_CALIBRATION_EXAMPLES,
            verify_examples=args.verify_examples,
            seq_len=args.seq_len,
            top_k=DEFAULT_TOP_K if args.top_k is None else args.top_k,
            mask_value=args.mask_value,
            threads=args.threads,
            float_ops=FLOAT_LAYERNORM_OPS if args.int8_float_layernorm else (),
            encoder_signature=args.encoder_signature,
            generator_signature=args.generator_signature,
            card=args.card,
        )
    except VerificationError as e:
        print(f"error: refused, nothing written to {args.out}: {e}", file=sys.stderr)
        print(json.dumps(e.report, indent=2), file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:  # a disk filled meanwhile, too
        print(f"error: {e}", file=sys.stderr)
        return 1
    v = info["verification"]
    errors = ", ".join(f"{n} {o['relative_error']:.2g}" for n, o in v["outputs"].items())
    agreement = "n/a" if v["agreement"] is None else f"{v['agreement']:.4f}"
    print(
        f"wrote {args.out} ({info['task']}, {args.quantize}, "
        f"{info['conversion']['size_bytes'] / 1e6:.1f} MB): verified on {v['examples']} "
        f"examples, agreement {agreement}, relative error {errors}"
    )
    for key, signature in info["signatures"].items():
        report = signature.get("verification")
        if report:
            errors = ", ".join(
                f"{n} {o['relative_error']:.2g}" for n, o in report["outputs"].items()
            )
            print(
                f"  signature {key!r} ({', '.join(signature['methods'])}): verified on "
                f"{report['examples']} examples, relative error {errors}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
