"""The official SQuAD v1.1 and v2.0 evaluation scripts, ported line for line.

Exact match (EM) and F1 over answers normalised as the official scripts do:
lower-case, drop ASCII punctuation (`string.punctuation`), drop the articles
a/an/the, collapse whitespace; F1 is the harmonic mean of token precision and
recall with a `Counter` overlap; each question scores the max over its gold
answers. The two versions differ in small ways that are kept here on purpose:

    v1.1  a question missing from the predictions counts 0 and stays in the
          total; F1 is 0 when either side normalises to no tokens.
    v2.0  gold answers that normalise to "" are dropped and a question with
          none left has the single gold answer "" (no answer); F1 is 1 when
          both sides have no tokens; a question missing from the predictions
          is left out of the totals (and of the HasAns/NoAns breakdown, where
          the official script stops with a KeyError); `na_probs` (e.g. `null_odds.json`) above
          `na_prob_thresh` count as predicting no answer, and
          `find_best_thresh` sweeps that threshold (best_exact/best_f1).

Scores are percentages, as the official scripts print them.

    python -m model.tasks.squad_metric dev-v1.1.json predictions.json
    python -m model.tasks.squad_metric dev-v2.0.json predictions.json --na-prob-file null_odds.json
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import string
import sys

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


# === Normalisation (shared by both scripts) ===


def normalize_answer(s: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace."""

    def remove_articles(text):
        return re.sub(_ARTICLES, " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        return "".join(ch for ch in text if ch not in _PUNCTUATION)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


# === evaluate-v1.1.py ===


def f1_score(prediction: str, ground_truth: str) -> float:
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def exact_match_score(prediction: str, ground_truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    return max(metric_fn(prediction, ground_truth) for ground_truth in ground_truths)


def evaluate_v1(gold: dict[str, list[str]], predictions: dict[str, str], warn=None) -> dict:
    """evaluate-v1.1.py's `evaluate`, over `{question id: [gold answer texts]}`
    (use `gold_answers(dataset)` for the official JSON's `data`)."""
    f1 = exact_match = total = 0
    for qid, ground_truths in gold.items():
        total += 1
        if qid not in predictions:
            if warn is not None:
                warn(f"Unanswered question {qid} will receive score 0.")
            continue
        prediction = predictions[qid]
        exact_match += metric_max_over_ground_truths(exact_match_score, prediction, ground_truths)
        f1 += metric_max_over_ground_truths(f1_score, prediction, ground_truths)
    exact_match = 100.0 * exact_match / total
    f1 = 100.0 * f1 / total
    return {"exact_match": exact_match, "f1": f1}


# === evaluate-v2.0.py ===


def get_tokens(s: str) -> list[str]:
    if not s:
        return []
    return normalize_answer(s).split()


def compute_exact(a_gold: str, a_pred: str) -> int:
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold: str, a_pred: str) -> float:
    gold_toks = get_tokens(a_gold)
    pred_toks = get_tokens(a_pred)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        # If either is no-answer, then F1 is 1 if they agree, 0 otherwise
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def get_raw_scores(gold: dict[str, list[str]], preds: dict[str, str], warn=None):
    exact_scores, f1_scores = {}, {}
    for qid, answers in gold.items():
        gold_answers = [a for a in answers if normalize_answer(a)]
        if not gold_answers:
            # For unanswerable questions, only correct answer is empty string
            gold_answers = [""]
        if qid not in preds:
            if warn is not None:
                warn(f"Missing prediction for {qid}")
            continue
        a_pred = preds[qid]
        # Take max over all gold answers
        exact_scores[qid] = max(compute_exact(a, a_pred) for a in gold_answers)
        f1_scores[qid] = max(compute_f1(a, a_pred) for a in gold_answers)
    return exact_scores, f1_scores


def apply_no_ans_threshold(scores, na_probs, qid_to_has_ans, na_prob_thresh):
    new_scores = {}
    for qid, s in scores.items():
        pred_na = na_probs[qid] > na_prob_thresh
        if pred_na:
            new_scores[qid] = float(not qid_to_has_ans[qid])
        else:
            new_scores[qid] = s
    return new_scores


def make_eval_dict(exact_scores, f1_scores, qid_list=None) -> dict:
    if not qid_list:
        total = len(exact_scores)
        return {
            "exact": 100.0 * sum(exact_scores.values()) / total,
            "f1": 100.0 * sum(f1_scores.values()) / total,
            "total": total,
        }
    total = len(qid_list)
    return {
        "exact": 100.0 * sum(exact_scores[k] for k in qid_list) / total,
        "f1": 100.0 * sum(f1_scores[k] for k in qid_list) / total,
        "total": total,
    }


def merge_eval(main_eval: dict, new_eval: dict, prefix: str) -> None:
    for k in new_eval:
        main_eval[f"{prefix}_{k}"] = new_eval[k]


def find_best_thresh(preds, scores, na_probs, qid_to_has_ans):
    """The no-answer threshold on `na_probs` that maximises the total score:
    starting from "no answer everywhere", questions are switched to their
    prediction in increasing `na_probs` order."""
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = num_no_ans
    best_score = cur_score
    best_thresh = 0.0
    qid_list = sorted(na_probs, key=lambda k: na_probs[k])
    for qid in qid_list:
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            if preds[qid]:
                diff = -1
            else:
                diff = 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def find_all_best_thresh(main_eval, preds, exact_raw, f1_raw, na_probs, qid_to_has_ans) -> None:
    best_exact, exact_thresh = find_best_thresh(preds, exact_raw, na_probs, qid_to_has_ans)
    best_f1, f1_thresh = find_best_thresh(preds, f1_raw, na_probs, qid_to_has_ans)
    main_eval["best_exact"] = best_exact
    main_eval["best_exact_thresh"] = exact_thresh
    main_eval["best_f1"] = best_f1
    main_eval["best_f1_thresh"] = f1_thresh


def evaluate_v2(
    gold: dict[str, list[str]],
    preds: dict[str, str],
    na_probs: dict[str, float] | None = None,
    na_prob_thresh: float = 1.0,
    warn=None,
) -> dict:
    """evaluate-v2.0.py's `main` after loading, over `{question id: [gold
    answer texts]}` (an empty list for an unanswerable question)."""
    with_na_probs = na_probs is not None
    if not with_na_probs:
        na_probs = {k: 0.0 for k in preds}
    qid_to_has_ans = {qid: bool(answers) for qid, answers in gold.items()}
    exact_raw, f1_raw = get_raw_scores(gold, preds, warn)
    # The official script stops with a KeyError here when a prediction is
    # missing; the breakdown counts the predicted questions, like the total.
    has_ans_qids = [k for k, v in qid_to_has_ans.items() if v and k in exact_raw]
    no_ans_qids = [k for k, v in qid_to_has_ans.items() if not v and k in exact_raw]
    exact_thresh = apply_no_ans_threshold(exact_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    f1_thresh = apply_no_ans_threshold(f1_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    out_eval = make_eval_dict(exact_thresh, f1_thresh)
    if has_ans_qids:
        merge_eval(
            out_eval, make_eval_dict(exact_thresh, f1_thresh, qid_list=has_ans_qids), "HasAns"
        )
    if no_ans_qids:
        merge_eval(out_eval, make_eval_dict(exact_thresh, f1_thresh, qid_list=no_ans_qids), "NoAns")
    if with_na_probs:
        find_all_best_thresh(out_eval, preds, exact_raw, f1_raw, na_probs, qid_to_has_ans)
    return out_eval


# === The official JSON ===


def gold_answers(dataset: list) -> dict[str, list[str]]:
    """`{question id: [answer texts]}` of the official JSON's `data` list, in file order."""
    return {
        qa["id"]: [a["text"] for a in qa["answers"]]
        for article in dataset
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    }


def is_v2(dataset_json: dict) -> bool:
    """A v2.0 file: its version says so, or a question has `is_impossible`."""
    if str(dataset_json.get("version", "")).lstrip("v").startswith("2"):
        return True
    return any(
        "is_impossible" in qa
        for article in dataset_json["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m model.tasks.squad_metric",
        description="Official SQuAD v1.1 / v2.0 evaluation.",
    )
    p.add_argument("data_file", help="input data JSON file")
    p.add_argument("pred_file", help="model predictions ({question id: answer text})")
    p.add_argument(
        "--na-prob-file",
        "-n",
        default=None,
        help="v2.0: model estimates of probability of no answer (e.g. null_odds.json)",
    )
    p.add_argument(
        "--na-prob-thresh",
        "-t",
        type=float,
        default=1.0,
        help='v2.0: predict "" if no-answer probability exceeds this (default 1.0)',
    )
    p.add_argument(
        "--version",
        choices=("auto", "1.1", "2.0"),
        default="auto",
        help="which official script (default: 2.0 for a v2.0 file or with "
        "--na-prob-file, else 1.1)",
    )
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        # The project's reader of JSON: bounded, past a byte-order mark, errors at file:line.
        from model.io.files import load_json

        dataset_json = load_json(args.data_file)
        preds = load_json(args.pred_file)
        na_probs = load_json(args.na_prob_file) if args.na_prob_file else None
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    problem = _not_scorable(args.data_file, dataset_json, args.pred_file, preds)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    version = args.version
    if version == "auto":
        version = "2.0" if args.na_prob_file or is_v2(dataset_json) else "1.1"
    gold = gold_answers(dataset_json["data"])

    def warn(message):
        print(message, file=sys.stderr)

    if version == "1.1":
        print(json.dumps(evaluate_v1(gold, preds, warn)))
    else:
        print(json.dumps(evaluate_v2(gold, preds, na_probs, args.na_prob_thresh, warn), indent=2))
    return 0


def _not_scorable(data_file: str, dataset_json, pred_file: str, preds) -> str | None:
    """Why the two files cannot be scored (the official scripts stop with a traceback), or
    None: DATA_FILE must be a SQuAD dataset, PRED_FILE a {question id: answer} object
    answering at least one of its questions."""
    order = "the arguments are DATA_FILE PRED_FILE, in that order"
    if not isinstance(dataset_json, dict) or not isinstance(dataset_json.get("data"), list):
        return f'{data_file}: not a SQuAD dataset (no "data" list; {order})'
    try:
        gold = gold_answers(dataset_json["data"])
    except (KeyError, TypeError) as e:
        return f"{data_file}: not a SQuAD dataset ({e!r} missing or of another type)"
    if not isinstance(preds, dict) or not all(isinstance(v, str) for v in preds.values()):
        return f"{pred_file}: not a predictions file ({{question id: answer text}}; {order})"
    if not gold:
        return f"{data_file}: no question to score"
    if not any(qid in gold for qid in preds):
        return (
            f"{pred_file}: none of its {len(preds)} predictions answers a question of "
            f"{data_file} (e.g. {next(iter(gold))!r}): predictions of another dataset?"
        )
    return None


if __name__ == "__main__":
    sys.exit(main())
