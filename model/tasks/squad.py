"""SQuAD v1.1 and v2.0 (the paper's sections 4.2, 4.3) as google-research/bert's `run_squad.py`.

    python -m model.train finetune --task squad1 --init runs/base --output runs/squad1 \\
        --data ../shared/data/squad/train-v1.1.reconstructed.json   # dev-v1.1.json beside it
    python -m model.evaluate --task squad1 --model runs/squad1 \\
        --data ../shared/data/squad/dev-v1.1.json

    python -m model.tasks.squad make-v2-train --negative-ratio 0.5 --seed 0 \\
        --input ../shared/data/squad/train-v1.1.reconstructed.json \\
        --output runs/squad2-data/train-v2.0.json \\
        --dev ../shared/data/squad/dev-v2.0.reconstructed.json  # copied in as dev-v2.0.json
    python -m model.tasks.squad negatives-report \\
        --input ../shared/data/squad/train-v1.1.reconstructed.json \\
        --dev ../shared/data/squad/dev-v2.0.reconstructed.json   # how each kind of negative looks
    python -m model.train finetune --task squad2 --data runs/squad2-data --init runs/base \\
        --output runs/squad2 --epochs 2 --batch-size 48
    python -m model.evaluate --task squad2 --model runs/squad2 \\
        --data ../shared/data/squad/dev-v2.0.reconstructed.json
    python -m model.tasks.squad_metric DATA.json runs/squad2/predictions.json \\
        --na-prob-file runs/squad2/null_odds.json      # the official v2.0 script's numbers

The model (`model.heads.question_answerer.BertQuestionAnswerer`) is the paper's: a
start vector and an end vector dotted with every token's final hidden state.

The pipeline, one module each: `squad_examples` (the official JSON read strictly into
questions on paragraphs), `squad_windows` (the sliding windows the model reads, and the
training labels), `squad_answers` (the logits back to answers in the context's own
characters, n-best lists and SQuAD v2.0's null answer); this module is the task over them
(reading, encoding, the head, the loss, the official metrics) and the data tools' command line.

SQuAD v2.0 training data. There is no SQuAD v2.0 training set offline, so
`make_v2_train` (in `model.tasks.squad_negatives`) builds one from v1.1: by
default each unanswerable question is a v1.1 question paired with another
paragraph of the same article that does not contain any of its answers.
These negatives are a proxy for the real SQuAD 2.0 ones: those were written
by crowd workers to look answerable from their own paragraph (with a
plausible answer in it), whereas a question moved to another paragraph is
usually off-topic there, so it is easier to reject. Expect a model trained
on them to answer many of the real dev set's unanswerable questions (a low
NoAns score). `--negatives answer-removed,entity-swap` adds harder kinds:
the question's own paragraph without the sentence holding its answer, and
the question with an entity swapped for one the paragraph never mentions;
`negatives-report` measures how each kind looks.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import shutil
import sys

from model.io.files import check_output, load_json
from model.io.flags import non_negative_float
from model.tasks import dev_units, squad_metric
from model.tasks.base import Encoded, Task, predict_in_batches
from model.tasks.squad_answers import (
    MAX_ANSWER_LENGTH,
    N_BEST_SIZE,
    SquadPredictions,
    postprocess,
    split_logits,
)
from model.tasks.squad_examples import SquadExample, read_squad
from model.tasks.squad_negatives import (
    DEFAULT_NEGATIVE_RATIO,
    DEFAULT_NEGATIVES,
    NEGATIVE_KINDS,
    build_v2_train,
    make_v2_train,
    negatives_report,
    parse_negatives,
    question_ids,
    report_table,
)
from model.tasks.squad_windows import DOC_STRIDE, MAX_QUERY_LENGTH, encode_squad

# === The tasks ===


@functools.cache
def span_loss():
    """Cross-entropy over positions of one logits output, halved, so the
    two outputs' sum is google-research's (start loss + end loss) / 2."""
    import keras

    class HalfSpanLoss(keras.losses.Loss):
        def call(self, y_true, y_pred):
            return 0.5 * keras.losses.sparse_categorical_crossentropy(
                y_true, y_pred, from_logits=True
            )

    return HalfSpanLoss


class SquadTask(Task):
    """SQuAD extractive QA; `Squad1Task` and `Squad2Task` set the version.

    Args:
        doc_stride, max_query_length, n_best_size, max_answer_length: as in
            google-research's run_squad.py (128, 64, 20, 30).
        null_threshold: v2.0: answer "" when null score - best span score
            exceeds this (tune it with `best_f1_thresh` of a dev evaluation).
        skip_invalid: skip (and count in `self.skipped`) malformed questions
            instead of stopping at the first.
    """

    head = "question_answerer"
    main_metric = "f1"
    default_seq_len = 384
    # The paper: 3 epochs at 5e-5, batch 32 (v1.1); 2 epochs at 5e-5, batch 48 (v2.0).
    default_learning_rate = 5e-5
    default_epochs = 3.0
    default_batch_size = 32
    version_2 = False
    train_names: tuple[str, ...] = ()
    dev_names: tuple[str, ...] = ()

    def __init__(
        self,
        doc_stride: int = DOC_STRIDE,
        max_query_length: int = MAX_QUERY_LENGTH,
        n_best_size: int = N_BEST_SIZE,
        max_answer_length: int = MAX_ANSWER_LENGTH,
        null_threshold: float = 0.0,
        skip_invalid: bool = False,
    ):
        self.doc_stride = doc_stride
        self.max_query_length = max_query_length
        self.n_best_size = n_best_size
        self.max_answer_length = max_answer_length
        self.null_threshold = null_threshold
        self.skip_invalid = skip_invalid
        self.skipped: list[str] = []

    # === Data ===

    def read(
        self, path: str, skip_invalid: bool | None = None, spans: bool = True
    ) -> list[SquadExample]:
        skip = self.skip_invalid if skip_invalid is None else skip_invalid
        examples, self.skipped = read_squad(path, self.version_2, skip, spans)
        if self.skipped:
            print(
                f"warning: {path}: skipped {len(self.skipped)} invalid question(s); the first: "
                f"{self.skipped[0]}",
                file=sys.stderr,
            )
        return examples

    def read_gold(self, path: str) -> list[SquadExample]:
        """A dev file, scored by its answers' texts as the official scripts score them: an
        `answer_start` that does not place its text (third-party files' offsets are often
        off by a few characters) keeps its question."""
        return self.read(path, spans=False)

    def files(self, data: str) -> tuple[str, str | None]:
        """`--data` a directory holding one of `train_names` (and perhaps one
        of `dev_names`), or a train file (its dev file looked for beside it)."""
        if os.path.isdir(data):
            folder, train = data, _first(data, self.train_names)
            if train is None:
                hint = (
                    " (make one from v1.1 with `python -m model.tasks.squad make-v2-train`)"
                    if self.version_2
                    else ""
                )
                raise FileNotFoundError(
                    f"{data}: no training file for task {self.name!r}: "
                    f"looked for {list(self.train_names)}{hint}"
                )
        elif os.path.isfile(data):
            train, folder = data, os.path.dirname(os.path.abspath(data))
        else:
            raise FileNotFoundError(f"{data}: no such file or directory")
        dev = _first(folder, self.dev_names)
        if dev is not None and os.path.samefile(dev, train):
            dev = None
        return train, dev

    def encode(
        self, examples: list[SquadExample], tokenizer, seq_len: int, training: bool = False
    ) -> Encoded:
        encoded = encode_squad(
            examples, tokenizer, seq_len, self.doc_stride, self.max_query_length, training
        )
        if encoded.meta.skipped:
            print(
                f"warning: {encoded.meta.skipped} training question(s) left out: the answer "
                f"text is not in the context words at answer_start",
                file=sys.stderr,
            )
        return encoded

    # === Model ===

    def build_model(self, encoder, dropout: float = 0.1):
        from model.heads.question_answerer import BertQuestionAnswerer

        # The paper's head has no dropout of its own; `dropout` is the encoder's.
        return BertQuestionAnswerer(encoder)

    def loss(self):
        loss = span_loss()
        return {"start_logits": loss(name="start_loss"), "end_logits": loss(name="end_loss")}

    # === Metric ===

    def predict(
        self, predict, examples: list[SquadExample], tokenizer, seq_len: int, batch_size: int = 64
    ) -> SquadPredictions:
        """Answers to `examples` by the model behind `predict`."""
        if not examples:
            raise ValueError("no examples to evaluate")
        encoded = self.encode(examples, tokenizer, seq_len)
        start, end = split_logits(
            predict_in_batches(predict, encoded.x, batch_size, sequence_outputs=True)
        )
        return postprocess(
            examples,
            encoded.meta,
            encoded.x["token_ids"],
            start,
            end,
            tokenizer.vocabulary,
            tokenizer.lowercase,
            self.n_best_size,
            self.max_answer_length,
            self.version_2,
            self.null_threshold,
        )

    def evaluate(
        self,
        predict,
        examples: list[SquadExample],
        tokenizer,
        seq_len: int,
        batch_size: int = 64,
        output_dir: str | None = None,
    ) -> dict:
        """The official script's metrics of the model's answers to `examples`;
        with `output_dir`, also predictions.json, nbest_predictions.json (and
        for v2.0 null_odds.json) there, as google-research writes them."""
        predictions = self.predict(predict, examples, tokenizer, seq_len, batch_size)
        metrics = self.score(examples, predictions)
        if output_dir is not None:
            write_predictions(output_dir, predictions, self.version_2)
            if not self.version_2:  # v2.0's F1 is at a threshold tuned on the same questions
                dev_units.write(output_dir, units_v1(examples, predictions.predictions), metrics)
        return metrics

    def score(self, examples: list[SquadExample], predictions: SquadPredictions) -> dict:
        gold = _gold(examples)
        return {**squad_metric.evaluate_v1(gold, predictions.predictions), "total": len(gold)}


def units_v1(examples: list[SquadExample], predictions: dict[str, str]) -> dict:
    """Each question's F1 and exact match in percent, as `squad_metric.evaluate_v1` sums them
    (`model/tasks/dev_units.py`; an unanswered question scores 0)."""
    scores = {"f1": [], "exact_match": []}
    for qid, truths in _gold(examples).items():
        answer = predictions.get(qid)
        for name, metric in (
            ("f1", squad_metric.f1_score),
            ("exact_match", squad_metric.exact_match_score),
        ):
            best = (
                0
                if answer is None
                else squad_metric.metric_max_over_ground_truths(metric, answer, truths)
            )
            scores[name].append(100.0 * best)
    return {name: dev_units.mean(values) for name, values in scores.items()}


def _gold(examples: list[SquadExample]) -> dict[str, list[str]]:
    """`{question id: [answer texts]}`: what the official scripts score against."""
    return {e.qas_id: [a["text"] for a in e.answers] for e in examples}


class Squad1Task(SquadTask):
    """SQuAD v1.1: every question has an answer in its paragraph."""

    name = "squad1"
    train_names = ("train-v1.1.json", "train-v1.1.reconstructed.json")
    dev_names = ("dev-v1.1.json", "dev-v1.1.reconstructed.json")


class Squad2Task(SquadTask):
    """SQuAD v2.0: questions may have no answer; a [CLS] null score decides."""

    name = "squad2"
    version_2 = True
    default_epochs = 2.0
    default_batch_size = 48
    train_names = ("train-v2.0.json", "train-v2.0.from-v1.1.json", "train-v2.0.reconstructed.json")
    dev_names = ("dev-v2.0.json", "dev-v2.0.reconstructed.json")

    def score(self, examples: list[SquadExample], predictions: SquadPredictions) -> dict:
        """The official v2.0 metrics at `null_threshold`, the best threshold
        (found on the best non-null answers, see the module docstring), and
        the always-no-answer baseline."""
        gold = _gold(examples)
        odds = predictions.null_odds
        metrics = squad_metric.evaluate_v2(
            gold, predictions.predictions, odds, na_prob_thresh=self.null_threshold
        )
        exact_raw, f1_raw = squad_metric.get_raw_scores(gold, predictions.best_non_null)
        has_ans = {qid: bool(answers) for qid, answers in gold.items()}
        squad_metric.find_all_best_thresh(
            metrics, predictions.best_non_null, exact_raw, f1_raw, odds, has_ans
        )
        _no_answer_threshold(metrics, odds, has_ans, len(exact_raw))
        baseline = squad_metric.evaluate_v2(gold, {qid: "" for qid in gold})
        metrics["null_threshold"] = self.null_threshold
        metrics["always_no_answer_exact"] = baseline["exact"]
        metrics["always_no_answer_f1"] = baseline["f1"]
        return metrics


TASKS = {"squad1": Squad1Task, "squad2": Squad2Task}


def _no_answer_threshold(metrics: dict, odds: dict, has_ans: dict, scored: int) -> None:
    """Where no threshold beats "no answer everywhere", the official sweep leaves 0.0, which
    says that for probabilities; for null odds (any sign) it is a threshold below them all."""
    everywhere = 100.0 * sum(not has_ans[qid] for qid in has_ans) / scored
    for key in ("exact", "f1"):
        if metrics[f"best_{key}"] == everywhere and odds:
            metrics[f"best_{key}_thresh"] = min(odds.values()) - 1.0


def _first(folder: str, names: tuple[str, ...]) -> str | None:
    for name in names:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    return None


def write_predictions(output_dir: str, predictions: SquadPredictions, version_2: bool) -> None:
    from model.io.files import write_json

    os.makedirs(output_dir, exist_ok=True)
    write_json(os.path.join(output_dir, "predictions.json"), predictions.predictions)
    write_json(os.path.join(output_dir, "nbest_predictions.json"), predictions.nbest)
    if version_2:
        write_json(os.path.join(output_dir, "null_odds.json"), predictions.null_odds)


# === Command line ===


def main(argv=None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        _check_outputs(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.command == "negatives-report":
        return _negatives_report(args)
    if args.command == "split-dev":
        return _split_dev(args)
    return _make_v2_train(args)


def _check_outputs(args) -> None:
    """No output is an input (make-v2-train --output equal to --input overwrote the v1.1
    file), and split-dev's two outputs differ."""
    inputs = [(flag, getattr(args, flag[2:], None)) for flag in ("--input", "--dev", "--real")]
    if args.command == "make-v2-train":
        check_output(args.output, inputs)
    elif args.command == "split-dev":
        check_output(args.tune, inputs, "--tune")
        check_output(args.report, inputs + [("--tune", args.tune)], "--report")
    elif args.out:
        check_output(args.out, inputs)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m model.tasks.squad", description="SQuAD data tools.")
    sub = p.add_subparsers(dest="command", required=True)
    make = sub.add_parser(
        "make-v2-train",
        help="a SQuAD v2.0-format train set from v1.1 (proxy negatives)",
        description=inspect.cleandoc(make_v2_train.__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    make.add_argument("--input", required=True, help="SQuAD v1.1 train JSON")
    make.add_argument("--output", required=True, help="v2.0-format JSON to write")
    make.add_argument(
        "--negatives",
        default=DEFAULT_NEGATIVES,
        help=f"kinds of unanswerable questions, comma-separated, from {', '.join(NEGATIVE_KINDS)}; "
        f"KIND=RATIO gives a kind its own ratio (default {DEFAULT_NEGATIVES})",
    )
    make.add_argument(
        "--negative-ratio",
        type=non_negative_float,
        default=None,
        help=f"unanswerable questions per answerable one, split evenly between the kinds "
        f"(default {DEFAULT_NEGATIVE_RATIO}; not with KIND=RATIO)",
    )
    make.add_argument("--seed", type=int, default=0)
    make.add_argument(
        "--real",
        default=None,
        help="a SQuAD v2.0 file whose questions (answerable and not, e.g. written by people) "
        "join the made ones; it must share no paragraph with --dev",
    )
    make.add_argument(
        "--real-repeat",
        type=int,
        default=None,
        help="how many times --real's questions stand in the output (default 1), each copy "
        "with its own id (only with --real)",
    )
    make.add_argument(
        "--dev",
        default=None,
        help="a SQuAD v2.0 dev file to copy beside --output as dev-v2.0.json, "
        "making that folder a complete --data for --task squad2",
    )
    report = sub.add_parser(
        "negatives-report",
        help="how each kind of made negative looks (yield, question/context word overlap)",
        description=inspect.cleandoc(negatives_report.__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("--input", required=True, help="SQuAD v1.1 train JSON")
    report.add_argument("--dev", default=None, help="SQuAD v2.0 dev JSON (its real negatives)")
    report.add_argument("--seed", type=int, default=0)
    report.add_argument(
        "--output",
        "--out",
        dest="out",
        default=None,
        help="also write the numbers to this JSON file",
    )
    report.add_argument(
        "--markdown", action="store_true", help="print a Markdown table instead of JSON"
    )
    split = sub.add_parser(
        "split-dev",
        help="a dev file's articles in two halves: one to tune the null threshold on, "
        "one to report",
        description=inspect.cleandoc(split_articles.__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    split.add_argument("--input", required=True, help="a SQuAD v1.1 or v2.0 JSON")
    split.add_argument("--tune", required=True, help="JSON to write the 1st, 3rd, ... articles to")
    split.add_argument("--report", required=True, help="JSON for the 2nd, 4th, ... articles")
    return p


def _make_v2_train(args) -> int:
    """`make-v2-train`: the v2.0-format train set, its summary printed as JSON."""
    try:
        ratios = parse_negatives(args.negatives, args.negative_ratio)
        # Read through the strict reader first: a malformed input stops here.
        examples, _ = read_squad(args.input, version_2=False)
        if args.dev is not None:
            read_squad(args.dev, version_2=True)
        dataset, made = build_v2_train(load_json(args.input), seed=args.seed, negatives=ratios)
        real = _real_questions(args.real, args.real_repeat, args.dev, question_ids(dataset["data"]))
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    from model.io.files import atomic_path, write_json

    if real is not None:
        dataset["data"] += real["data"]
    write_json(args.output, dataset)
    if args.dev is not None:
        dev = os.path.join(os.path.dirname(os.path.abspath(args.output)), "dev-v2.0.json")
        if not os.path.exists(dev) or not os.path.samefile(dev, args.dev):
            with atomic_path(dev) as tmp:
                shutil.copyfile(args.dev, tmp)
    summary = {
        "output": args.output,
        "answerable": len(examples),
        "unanswerable": sum(made.values()),
        "seed": args.seed,
        "negative_ratio": sum(ratios.values()),
    }
    if args.negatives != DEFAULT_NEGATIVES:  # the default prints what it always printed
        summary["negatives"] = {kind: {"ratio": ratios[kind], "made": made[kind]} for kind in made}
    if real is not None:
        summary["real"] = {"path": args.real, "repeat": real["repeat"], **real["counts"]}
    print(json.dumps(summary))
    return 0


def _real_questions(
    path: str | None, repeat: int | None, dev: str | None, made_ids: set[str]
) -> dict | None:
    """`--real`'s articles `repeat` times (copies after the first with ids `<id>-copy<k>`)
    and how many questions of each kind it holds; refused when it shares a paragraph
    with `dev` (the threshold would be tuned on questions trained on), or a question id
    with the made set (`made_ids`: predictions are keyed by id)."""
    if path is None:
        if repeat is not None:
            raise ValueError("--real-repeat repeats --real's questions: give --real FILE")
        return None
    repeat = 1 if repeat is None else repeat
    if repeat < 1:
        raise ValueError(f"--real-repeat must be at least 1, not {repeat}")
    examples, _ = read_squad(path, version_2=True)  # strict: stops at a bad question
    if dev is not None:
        shared = {e.paragraph.context for e in examples} & {
            e.paragraph.context for e in read_squad(dev, version_2=True)[0]
        }
        if shared:
            raise ValueError(
                f"{path} shares {len(shared)} paragraph(s) with --dev {dev}, e.g. "
                f"{next(iter(shared))[:60]!r}...: tune the threshold on other articles "
                "(python -m model.tasks.squad split-dev)"
            )
    data = load_json(path)["data"]
    clash = sorted(question_ids(data) & made_ids)
    if clash:
        raise ValueError(
            f"{path}: {len(clash)} question id(s) also in --input's set, e.g. {clash[0]!r}: "
            "ids must be unique (predictions are keyed by them)"
        )
    copies = [data] + [_renamed(data, f"-copy{k}") for k in range(2, repeat + 1)]
    unanswerable = sum(e.is_impossible for e in examples)
    counts = {"answerable": len(examples) - unanswerable, "unanswerable": unanswerable}
    data = [article for copy in copies for article in copy]
    return {"data": data, "counts": counts, "repeat": repeat}


def _renamed(articles: list, suffix: str) -> list:
    """`articles` with every question id given `suffix` (the rest shared, unchanged)."""
    return [
        {
            **article,
            "paragraphs": [
                {**para, "qas": [{**qa, "id": qa["id"] + suffix} for qa in para["qas"]]}
                for para in article["paragraphs"]
            ],
        }
        for article in articles
    ]


def split_articles(dataset: dict) -> tuple[dict, dict]:
    """A SQuAD dataset's articles dealt into two halves, alternately (the 1st, 3rd, ...
    article to the first): a threshold tuned on one half is reported on the other, which
    shares no paragraph with it. Both keep the file's other fields."""
    articles = dataset["data"]
    return {**dataset, "data": articles[0::2]}, {**dataset, "data": articles[1::2]}


def _split_dev(args) -> int:
    from model.io.files import write_json

    try:
        examples, _ = read_squad(args.input, version_2=True)  # strict: stops at a bad question
        tune, report = split_articles(load_json(args.input))
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not report["data"]:
        print(
            f"error: {args.input}: {len(tune['data'])} article(s); a split needs two, one to "
            f"tune on and one to report",
            file=sys.stderr,
        )
        return 1
    summary = {"input": args.input, "questions": len(examples)}
    for name, path, part in (("tune", args.tune, tune), ("report", args.report, report)):
        write_json(path, part)
        questions = [q for a in part["data"] for para in a["paragraphs"] for q in para["qas"]]
        summary[name] = {
            "path": path,
            "articles": len(part["data"]),
            "questions": len(questions),
            "unanswerable": sum(bool(q.get("is_impossible")) for q in questions),
        }
    print(json.dumps(summary))
    return 0


def _negatives_report(args) -> int:
    try:
        read_squad(args.input, version_2=False)
        if args.dev is not None:
            read_squad(args.dev, version_2=True)
        train = load_json(args.input)
        dev = load_json(args.dev) if args.dev is not None else None
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    rows = negatives_report(train, dev, args.seed)
    if args.out is not None:
        from model.io.files import write_json

        write_json(args.out, {"input": args.input, "dev": args.dev, "seed": args.seed, **rows})
    print(report_table(rows) if args.markdown else json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
