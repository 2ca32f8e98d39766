"""Finding and loading the app's models: one per view, from the sub-folders of `--models DIR`.

    python -m app.models [DIR] [--backend {litert,keras}]    # what each view would load, and why

A sub-folder is a model when it holds `bundle.json` (LiteRT backend, the default: a bundle written
by `python -m export`) or `config.json` (Keras backend: a model directory of `model.train`). Its
"task" picks the view (see `VIEWS`); when several fit, the folder with the planned name wins, then
one fine-tuned on the view's data set, then the first by name. A view with no model of its task
falls back to a model of its `fallback` tasks that serves its method: the Attention view to the
fill-mask bundle, whose "encoder" signature draws the maps (bundle.json "methods"; a Keras
pre-training model always can), so assets/models needs no encoder bundle; failing that, to an
ELECTRA bundle's (its discriminator's encoder). Views on the same folder
share one loaded model. A view with no model, or whose model fails to load or to answer a test
sentence, gets a message saying what is missing and how to make it; the app starts anyway.

`OPTIONAL_VIEWS` are shown only when a model for them is there: with none, `load_all` gives them
no slot, so the app has no tab and no endpoint for them and is otherwise unchanged. Today one:
Replaced tokens (ELECTRA's discriminator, planned folder assets/models/electra: a bundle that
`python -m export` writes from an ELECTRA run; the Keras backend also takes the run directory,
task "electra_pretraining", whose generator lets the view corrupt a sentence).

The LiteRT path imports only `export.runtime` (numpy + ai_edge_litert): no TensorFlow. The Keras
path loads a model directory with `export.keras_runtime`, which wraps the Keras model in a
`predict` callable that returns what a bundle's model returns, so both backends answer through
the same `runtime.EdgeModel` methods.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from export import keras_runtime

log = logging.getLogger("app")

BACKENDS = ("litert", "keras")
MARKER = {"litert": "bundle.json", "keras": "config.json"}
DEFAULT_MODELS = "assets/models"


@dataclass(frozen=True)
class View:
    """One tab of the app: its API name, title and the model it needs."""

    key: str  # the endpoint's api_name
    title: str
    task: str  # the bundle/config "task" it needs
    folder: str  # the planned folder name under assets/models
    finetuned: tuple = ()  # preferred "finetuned_task" values
    what: str = ""  # the model, in words
    train_hint: str = ""  # how to make a model directory for it
    method: str = ""  # the runtime.EdgeModel method the view calls
    fallback: tuple = ()  # other tasks whose models may serve `method` (see the docstring)


VIEWS = (
    View(
        "fill_mask",
        "Masked words",
        "pretraining",
        "mlm",
        (),
        'a masked-language model (task "pretraining")',
        "python -m model.train pretrain ... (or python -m model.convert a BERT checkpoint)",
        "fill_mask",
    ),
    View(
        "attention",
        "Attention",
        "encoder",
        "encoder",
        (),
        'an encoder (task "encoder") or a masked-language model or ELECTRA discriminator with '
        'its encoder (a pretraining or replaced_token_detection bundle with an "encoder" '
        "signature, which python -m export adds)",
        "python -m model.convert --from FORMAT CHECKPOINT --to keras DIR --task encoder",
        "attention",
        ("pretraining", "replaced_token_detection"),
    ),
    View(
        "sentiment",
        "Sentiment",
        "classifier",
        "sst2",
        ("sst2",),
        'a sentence classifier (task "classifier", e.g. fine-tuned on SST-2)',
        "python -m model.train finetune --task sst2 ...",
        "classify",
    ),
    View(
        "answer",
        "Question answering",
        "question_answerer",
        "squad",
        ("squad1", "squad2"),
        'a question answerer (task "question_answerer", fine-tuned on SQuAD)',
        "python -m model.train finetune --task squad1 ...",
        "answer",
    ),
    View(
        "entities",
        "Named entities",
        "token_classifier",
        "conll2003",
        ("conll2003",),
        'a token classifier (task "token_classifier", fine-tuned on CoNLL-2003)',
        "python -m model.train finetune --task conll2003 ...",
        "tag",
    ),
)
# Shown only when their model is present (the module docstring).
OPTIONAL_VIEWS = (
    View(
        "replaced_tokens",
        "Replaced tokens",
        "replaced_token_detection",
        "electra",
        (),
        'ELECTRA\'s discriminator (a bundle of task "replaced_token_detection"; one exported '
        'from an ELECTRA pre-training run also has its generator, a "generator" signature)',
        "python -m model.train pretrain --objective electra ...",
        "detect_replaced",
    ),
)
VIEW = {v.key: v for v in VIEWS + OPTIONAL_VIEWS}


@dataclass
class Slot:
    """What one view runs on: a loaded model, or the reason there is none."""

    view: View
    model: object | None = None  # a runtime.EdgeModel
    path: str | None = None
    info: dict = field(default_factory=dict)
    problem: str | None = None  # user-facing: why there is no model, how to get one
    # Served beyond this machine (a --share link, a --host other than loopback): the page
    # names no server path and no server error; `problem` and the paths stay in the log.
    public: bool = False
    load_seconds: float = 0.0
    layers_heads: tuple | None = None  # attention view: (num_layers, num_heads)
    # A LiteRT interpreter must not run two calls at once: requests for one model take turns
    # (different views' models still run in parallel, up to --concurrency jobs).
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def ready(self) -> bool:
        return self.model is not None

    def describe(self, public: bool | None = None) -> str:
        """One Markdown line for the top of the view (`public`: as visitors from elsewhere see
        it; None: as this slot is served)."""
        public = self.public if public is None else public
        if not self.ready:
            if public:
                return "**No model for this view.** The server's log says why."
            return f"**No model for this view.** {self.problem}"
        info = self.info
        parts = [info.get("task", "?")]
        if info.get("finetuned_task"):
            parts.append(f"fine-tuned on {info['finetuned_task']}")
        if info.get("task") != self.view.task:  # a fallback: e.g. attention from a pre-trainer
            parts.append(f"{self.view.method}() through its encoder")
        if "corrupt" in getattr(self.model, "methods", ()):
            parts.append("with its generator")
        if info.get("backend") == "keras":
            parts.append("a Keras model")
        elif info.get("quantization"):
            parts.append(QUANTIZATION_WORDS.get(info["quantization"], info["quantization"]))
        parts.append(f"reads {self.model.max_seq_length} WordPieces at a time")
        name = os.path.basename(os.path.normpath(self.path)) if public else self.path
        line = f"Model: `{name}` ({', '.join(parts)})"
        card = info.get("card")  # what it does and where it fails, from its model card
        return f"{line}  \n{card}" if card else line


# A bundle's "quantization" in words (export's --quantize).
QUANTIZATION_WORDS = {
    "float32": "a LiteRT model, float32",
    "float16": "a LiteRT model, float16 weights",
    "dynamic": "a LiteRT model, int8 weights (dynamic-range quantised)",
    "int8": "a LiteRT model, int8 weights and activations",
}


# === Discovery ===


def discover(models_dir: str, backend: str) -> tuple[dict, list[str]]:
    """({task: [(folder path, info dict)]}, problems) for every model folder of `models_dir`."""
    found, problems = {}, []
    if not os.path.isdir(models_dir):
        return found, problems
    marker = MARKER[backend]
    for name in sorted(os.listdir(models_dir)):
        path = os.path.join(models_dir, name)
        file = os.path.join(path, marker)
        if not os.path.isfile(file):
            continue
        try:
            info = _read_info(path, file, backend)
        except (OSError, ValueError) as e:
            problems.append(str(e))
            continue
        task = info.get("task")
        if backend == "keras":
            task = keras_runtime.SERVED_AS.get(task, task)
        found.setdefault(task, []).append((path, info))
    return found, problems


def _read_info(path: str, file: str, backend: str) -> dict:
    """A bundle's bundle.json, or a model directory's config.json checked as the commands
    check it (`model_info.read_info`: a known task, valid encoder fields, a bare BertConfig
    as an encoder, another format's folder named with the command that converts it)."""
    if backend == "keras":
        from model.checkpoints.model_info import read_info

        return read_info(path)
    from model.io.files import read_json_object

    return read_json_object(file, "bundle")


def offers(info: dict, method: str, backend: str) -> bool:
    """Whether the model `info` describes serves `method`: its task's methods, and a bundle's
    other signatures' (bundle.json "methods"; older bundles have only their task's). A Keras
    pre-training or ELECTRA model serves its encoder's methods too (`keras_runtime.load`)."""
    from export.bundle import ENCODER_SIGNATURE_TASKS
    from export.runtime import methods_of

    task = info.get("task")
    if backend == "keras":
        task = keras_runtime.SERVED_AS.get(task, task)
        encoder = methods_of("encoder") if task in ENCODER_SIGNATURE_TASKS else []
        return method in methods_of(task) + encoder
    methods = info.get("methods")
    return method in (methods if isinstance(methods, list) else methods_of(task))


def candidates_for(view: View, found: dict, backend: str) -> list:
    """The models that may serve `view`, best first: its own task's, else the fallback tasks'
    that offer its method, in the order their own view picks them (so the Attention view
    takes the very model the Masked words view does)."""
    own = choose(view, found.get(view.task, []))
    if own:
        return own
    owners = {v.task: v for v in VIEWS + OPTIONAL_VIEWS}
    return [
        c
        for task in view.fallback
        for c in choose(owners[task], found.get(task, []))
        if offers(c[1], view.method, backend)
    ]


def choose(view: View, candidates: list) -> list:
    """`candidates` ordered best first for `view` (a model that reads one text, planned folder
    name, fine-tuned task, name): the views send one text, which a model fine-tuned on a pair
    task (MNLI, MRPC...) refuses."""
    return sorted(
        candidates,
        key=lambda c: (
            _reads_pairs(c[1]),
            os.path.basename(c[0]) != view.folder,
            bool(view.finetuned) and c[1].get("finetuned_task") not in view.finetuned,
            os.path.basename(c[0]),
        ),
    )


def _reads_pairs(info: dict) -> bool:
    """Whether a model was fine-tuned on a GLUE task of sentence pairs."""
    from model.tasks import glue

    return glue.reads_pairs(info.get("finetuned_task")) is True


def missing_message(view: View, models_dir: str, backend: str) -> str:
    """What the view lacks and the command that makes it."""
    target = os.path.join(models_dir, view.folder)
    where = (
        f"`{models_dir}` does not exist"
        if not os.path.isdir(models_dir)
        else f'`{models_dir}` has no {MARKER[backend]} folder with task "{view.task}"'
    )
    if backend == "litert":
        how = (
            f"Export one with `python -m export --model MODEL_DIR --quantize dynamic "
            f"--out {target}` "
            f'(MODEL_DIR: a model directory of task "{view.task}", made with '
            f"`{view.train_hint}`), "
            f"or start the app with `--models` pointing at a folder of bundles."
        )
        other = candidates_for(view, discover(models_dir, "keras")[0], "keras")
        if other:
            how += f" `--backend keras` would load the Keras model `{other[0][0]}`."
    else:
        how = (
            f"Put a model directory (config.json, vocab.txt, model.weights.h5) in `{target}`, "
            f"e.g. from `{view.train_hint}`."
        )
        other = candidates_for(view, discover(models_dir, "litert")[0], "litert")
        if other:
            how += f" The default `--backend litert` would load the bundle `{other[0][0]}`."
    unable = [
        (path, task)
        for task in view.fallback
        for path, info in discover(models_dir, backend)[0].get(task, [])
        if not offers(info, view.method, backend)
    ]
    if unable:
        how += (
            f" (`{unable[0][0]}` cannot serve it: a {unable[0][1]} bundle exported without "
            f'an "encoder" signature; export it again with `python -m export`.)'
        )
    return f"This view needs {view.what}: {where}. {how}"


# === Loading ===


def load_all(
    models_dir: str = DEFAULT_MODELS,
    backend: str = "litert",
    num_threads: int | None = None,
    warm_up: bool = True,
) -> dict[str, Slot]:
    """{view key: Slot} for every view, and for each optional view a model is found for;
    never raises for a missing or broken model."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    found, problems = discover(models_dir, backend)
    for p in problems:
        log.warning("%s", p)
    slots = {}
    loaded = {}  # path -> the first slot that loaded it: views on one folder share its model
    for view in VIEWS + OPTIONAL_VIEWS:
        slot = Slot(view)
        candidates = candidates_for(view, found, backend)
        if not candidates and view in OPTIONAL_VIEWS:
            continue  # hidden: no tab, no endpoint
        if not candidates:
            slot.problem = missing_message(view, models_dir, backend)
        for path, info in candidates[:1]:
            slot.path, slot.info = path, info
            start = time.perf_counter()
            try:
                shared = loaded.get(path)
                if shared is not None and shared.model is not None:
                    # One model, one lock: its calls take turns whichever view makes them.
                    slot.model, slot.lock = shared.model, shared.lock
                else:
                    slot.model = load_one(path, backend, num_threads)
                    loaded[path] = slot
                slot.info = dict(getattr(slot.model, "info", None) or info)
                if warm_up:
                    slot.layers_heads = warm(view, slot.model)
            except Exception as e:  # a broken model must not stop the other views
                log.warning("%s: cannot serve %s: %s: %s", path, view.key, type(e).__name__, e)
                slot.model = None
                slot.problem = (
                    f"`{path}` could not be loaded or failed on a test sentence "
                    f"({type(e).__name__}: {e})."
                )
            slot.load_seconds = time.perf_counter() - start
        slots[view.key] = slot
    return slots


def load_one(path: str, backend: str, num_threads: int | None = None):
    """The runtime.EdgeModel of one model folder."""
    if backend == "litert":
        from export import runtime

        if num_threads is None:
            return runtime.load(path)
        try:
            return runtime.load(path, num_threads=num_threads)
        except TypeError:  # a runtime whose load() takes no thread count
            return runtime.load(path)
    return keras_runtime.load(path)


def warm(view: View, model) -> tuple | None:
    """Runs the model once on a short input (first-call costs paid at start-up, and a broken
    model found before anyone asks); the attention view's (num_layers, num_heads)."""
    if view.key == "fill_mask":
        model.fill_mask("the cat sat on the [MASK] .")
    elif view.key == "attention":
        attention = np.asarray(model.attention("the cat sat on the mat .")["attention"])
        return tuple(int(d) for d in attention.shape[:2])
    elif view.key == "sentiment":
        model.classify("the cat sat on the mat .")
    elif view.key == "answer":
        model.answer("where did the cat sit ?", "the cat sat on the mat .")
    elif view.key == "entities":
        model.tag("the cat sat on the mat .")
    elif view.key == "replaced_tokens":
        model.detect_replaced("the cat sat on the mat .")
    return None


# === CLI ===


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m app.models", description=__doc__.split("\n")[0]
    )
    parser.add_argument("models", nargs="?", default=DEFAULT_MODELS)
    parser.add_argument("--backend", choices=BACKENDS, default="litert")
    args = parser.parse_args(argv)
    slots = load_all(args.models, args.backend)
    for key, slot in slots.items():
        print(f"{key:10s} {slot.describe()}")
    for line in hidden_views(slots, args.models):
        print(line)
    return 0


def hidden_views(slots: dict, models_dir: str) -> list[str]:
    """A line for each optional view left out of `slots` (no model for it in `models_dir`)."""
    return [
        f"{view.key} view hidden: no {view.task} model in {models_dir} (it shows "
        f"{view.what}; planned folder {os.path.join(models_dir, view.folder)})"
        for view in OPTIONAL_VIEWS
        if view.key not in slots
    ]


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sys.exit(main())
