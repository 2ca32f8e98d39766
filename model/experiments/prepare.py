"""Everything a table reads, in one directory made beforehand on any machine.

    python -m model.experiments pretraining-tasks --scale gpu --prepare runs/gpu-input
    python -m model.experiments pretraining-tasks --scale gpu --data runs/gpu-input --work W

The first command writes DIR; the second runs the table from DIR alone (a GPU
machine with JAX and no TensorFlow needs nothing else, and nothing there
tokenises text):

    DIR/prepared.json               the scale, the tables prepared, what each file holds
    DIR/vocab.txt                   the vocabulary of every id below
    DIR/corpus/train.ids.npz.xz     the scale's pre-training corpora as WordPiece ids
    DIR/corpus/valid.ids.npz.xz     its held-out text (held-out records, masked-LM scores)
    DIR/<the tasks' files>          each task's train and dev file at its path under --data

The corpora are kept as ids (model/pretraining/tokenized.py), not as records:
one file serves every input format and masking of every row, and the records
are made from it where the table runs (`model.data --input ...ids.npz.xz`,
no tokenising, one process per core). Preparing several tables into the same
DIR adds their tasks and keeps the corpus.
"""

from __future__ import annotations

import dataclasses
import os
import shutil

from model.experiments.plan import Work
from model.experiments.scales import Scale
from model.experiments.tables import Table
from model.recipes.runner import read_json

MANIFEST = "prepared.json"
FORMAT = "bert-experiment-input/1"
TRAIN_IDS = "corpus/train.ids.npz.xz"
VALID_IDS = "corpus/valid.ids.npz.xz"


def task_names(table: Table) -> list[str]:
    """The fine-tuning tasks a table's columns read (a feature-based column: CoNLL-2003)."""
    names = []
    for column in table.columns:
        name = column.arg if column.kind == "finetune" else "conll2003"
        if column.kind in ("finetune", "features") and name not in names:
            names.append(name)
    return names


def check_inputs(table: Table, work: Work) -> None:
    """Raises FileNotFoundError naming the first thing `table` reads that `work`'s --data
    lacks (a corpus glob matching no file, the held-out text, a task's train or dev file,
    the vocabulary), before anything runs: a run would otherwise stop there after its
    pre-trainings."""
    import glob

    from model import tasks

    scale = work.scale
    where = f"(--data {work.data})"
    for source in scale.corpora:
        if not glob.glob(work.in_data(source)):
            raise FileNotFoundError(f"{work.in_data(source)}: no corpus file matches {where}")
    if not os.path.isfile(work.in_data(scale.held_out)):
        raise FileNotFoundError(f"{work.in_data(scale.held_out)}: no held-out text {where}")
    if not os.path.isfile(work.vocab):
        raise FileNotFoundError(f"{work.vocab}: no vocabulary file (--vocab)")
    for name in task_names(table):
        data = work.in_data(scale.tasks[name].data)
        try:
            train, dev = tasks.get(name).files(data)
        except FileNotFoundError as e:
            raise FileNotFoundError(f"{e} {where}") from None
        if dev is None:
            raise FileNotFoundError(f"{data}: no dev file for task {name!r} {where}")


def check_tokenising(plan: list, work: Work, table: Table) -> None:
    """Raises ValueError when a records command still to run reads raw text and this machine
    has no TensorFlow to tokenise it (a JAX-only GPU machine given the raw --data): the run
    would stop at its first command, after this check said the inputs were all there."""
    import glob

    from model.io.backend import has_tensorflow
    from model.pretraining.tokenized import is_tokenized

    if has_tensorflow():
        return
    for step in plan:
        for command in step.commands:
            if command.module != "model.data" or command.done():
                continue
            argv = [str(a) for a in command.argv]
            patterns = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--input"]
            paths = [p for pattern in patterns for p in glob.glob(pattern)]
            if not all(is_tokenized(path) for path in paths):
                raise ValueError(
                    f"--data {work.data} holds raw text, and tokenising it needs TensorFlow, "
                    f"not installed here: prepare the input where it is (python -m "
                    f"model.experiments {table.name} --scale {work.scale.name} --prepare DIR) "
                    f"and run here with --data DIR"
                )


def prepare(table: Table, work: Work, out: str) -> dict:
    """Writes (or adds to) the prepared directory `out` for `table`; returns its manifest.
    Its inputs are checked first by the caller (`check_inputs`, before `out` is made)."""
    from model import data as make_data
    from model import tasks
    from model.io.files import write_json
    from model.text.wordpiece import copy_vocabulary, vocabulary_sha256

    manifest = read_json(os.path.join(out, MANIFEST))
    scale = work.scale
    if manifest and manifest.get("scale") != scale.name:
        raise ValueError(
            f"{out}: prepared for --scale {manifest.get('scale')}, not {scale.name}; "
            "prepare another directory"
        )
    os.makedirs(out, exist_ok=True)
    vocab = os.path.join(out, "vocab.txt")
    if not os.path.exists(vocab):
        copy_vocabulary(work.vocab, out)
    elif vocabulary_sha256(vocab) != vocabulary_sha256(work.vocab):
        raise ValueError(f"{out}: prepared with another vocabulary than {work.vocab}")
    for name, sources in ((TRAIN_IDS, scale.corpora), (VALID_IDS, (scale.held_out,))):
        path = os.path.join(out, name)
        if os.path.exists(path):
            continue
        argv = ["--write-ids", "--vocab", vocab, "--output", path]
        for source in sources:
            argv += ["--input", work.in_data(source)]
        if make_data.main(argv) != 0:
            raise ValueError(f"could not write {path} (the error is above)")
    copied = dict(manifest.get("tasks", {}))
    for name in task_names(table):
        t = scale.tasks[name]
        train, dev = tasks.get(name).files(work.in_data(t.data))
        for path in filter(None, (train, dev)):
            target = os.path.join(out, os.path.relpath(path, work.data))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if path != train or not cut_squad(name, path, target, _slice(t.flags)):
                shutil.copyfile(path, target)
        copied[name] = t.data
    manifest = {
        "format": FORMAT,
        "scale": scale.name,
        "tables": sorted(set(manifest.get("tables", [])) | {table.name}),
        "corpora": list(scale.corpora),
        "held_out": scale.held_out,
        "train_ids": TRAIN_IDS,
        "valid_ids": VALID_IDS,
        "tasks": copied,
        "megabytes": round(_size(out) / 1e6, 1),
    }
    write_json(os.path.join(out, MANIFEST), manifest)
    return manifest


def _slice(flags: tuple) -> int | None:
    """The scale's `--max-train-examples` of a task (None: all)."""
    flags = list(flags)
    if "--max-train-examples" in flags:
        return int(flags[flags.index("--max-train-examples") + 1])
    return None


def cut_squad(task: str, source: str, target: str, n: int | None) -> bool:
    """Writes to `target` the SQuAD file `source` cut to what a run reads of it, its first `n`
    questions (SQuAD's training file is most of a table's input otherwise); True when the cut
    file reads as exactly those questions, False (nothing written) for any other task or
    slice, or when it does not (a question skipped as invalid, say)."""
    import json

    from model import tasks
    from model.io.files import atomic_path

    if not task.startswith("squad") or n is None:
        return False
    with open(source, encoding="utf-8") as f:
        dataset = json.load(f)
    articles, left = [], n
    for article in dataset["data"]:
        paragraphs = []
        for paragraph in article["paragraphs"]:
            if left <= 0:
                break
            paragraphs.append({**paragraph, "qas": paragraph["qas"][:left]})
            left -= len(paragraphs[-1]["qas"])
        if paragraphs:
            articles.append({**article, "paragraphs": paragraphs})
        if left <= 0:
            break
    with atomic_path(target) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump({**dataset, "data": articles}, f)
    reader = tasks.get(task)
    if [e.qas_id for e in reader.read(target)] != [e.qas_id for e in reader.read(source)[:n]]:
        os.remove(target)
        return False
    return True


def _size(directory: str) -> int:
    return sum(
        os.path.getsize(os.path.join(root, f))
        for root, _, files in os.walk(directory)
        for f in files
    )


def prepared_work(table: Table, work: Work) -> Work:
    """`work` reading from its `--data` directory when that is a prepared one (the corpora
    as ids, its own vocabulary), after checking it holds what `table` reads; else `work`."""
    manifest = read_json(work.in_data(MANIFEST))
    if not manifest:
        return work
    where = work.data
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{where}/{MANIFEST}: not a prepared directory ({FORMAT})")
    if manifest["scale"] != work.scale.name:
        raise ValueError(
            f"{where}: prepared for --scale {manifest['scale']}, not --scale {work.scale.name}"
        )
    missing = [t for t in task_names(table) if t not in manifest["tasks"]]
    if table.name not in manifest["tables"] and missing:
        raise ValueError(
            f"{where}: prepared for {', '.join(manifest['tables'])}, without the tasks "
            f"{', '.join(missing)} of {table.name}; add them with --prepare {where}"
        )
    scale: Scale = dataclasses.replace(
        work.scale, corpora=(manifest["train_ids"],), held_out=manifest["valid_ids"]
    )
    return dataclasses.replace(work, scale=scale, vocab=work.in_data("vocab.txt"))
