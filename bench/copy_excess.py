"""Why the fill-mask default guesses words already in its input: the copy excess taken apart.

    python bench/copy_excess.py --model assets/models/mlm --before runs/defaults/minilm

`python -m model.evaluate --task mlm` reports how often the top-1 guess at a masked position
stands elsewhere in the input (`mlm_top1_copy_rate`) beside how often the true word does
(`mlm_gold_copy_rate`); the difference is the copy excess. This scores the same masked
positions of WikiText-2 valid (same instances, masks and seed) and asks where the excess comes
from and whether the encoder's geometry explains it:

1. The excess split by position: right guesses add nothing (guess = true word); wrong ones
   split by what the guess is (one of the text's most frequent WordPieces, or a rarer one).
   Beside the in-view rates, each word's chance of standing in unrelated input (the next
   instance, as `model.evaluate` counts it; the figure beyond chance is also given for the
   instance 2 and 3 ahead, to show how much the choice of instance moves it).
2. The words most often guessed wrongly while in view, and how far the rarer ones stand.
3. The final hidden states at positions that show `[MASK]`, for `--model` (after continued
   pre-training) and `--before` (the encoder it started from, all-MiniLM-L6-v2): their mean
   cosine to the sequence's unmasked tokens, beside the same for an unmasked token and for
   tokens of another sequence (the space's anisotropy); how often the context token nearest
   to the `[MASK]` state is the word the model guesses, against a random context token.

`--model` is a pre-training bundle with an "encoder" signature (the shipped one has it) or a
pre-training model directory; `--before` a model directory or bundle of any encoder of the
same vocabulary. Prints markdown; appends it to the results file unless --no-write.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

import common
import numpy as np
from common import DATA_DIR, REPO_ROOT

VALID = os.path.join(DATA_DIR, "wikitext-2-raw", "wiki.valid.raw")
FREQUENT = 50  # the text's most frequent WordPieces: the, ",", ".", of, and, in, ...


def encoder_states(directory: str):
    """states(x) -> (batch, seq, hidden) final hidden states of the encoder in `directory`
    (a bundle's "encoder" signature, or a model directory's encoder)."""
    from export import bundle

    if bundle.is_bundle(directory):
        from export.interpreter import TFLiteModel

        info = bundle.read_info(directory)
        lite = TFLiteModel(bundle.model_path(directory), max_seq_length=info["max_seq_length"])
        encoder = lite.signature("encoder")
        return lambda x: np.asarray(encoder.predict(x)["sequence_output"], np.float32)
    import keras

    from model.checkpoints import model_dir

    model = model_dir.load(directory)
    encoder = getattr(model, "encoder", model)

    def states(x):
        out = encoder(x, training=False)["sequence_output"]
        return keras.ops.convert_to_numpy(out).astype(np.float32)

    return states


def top1_guesses(predict):
    """guess(x, labels) -> (batch, P) the pre-trainer's best guess at x["mask_positions"]."""
    from model.pretraining.masked_lm_scores import mlm_hits

    def guess(x, labels):
        hits, _ = mlm_hits(predict(x), labels)
        return np.asarray(hits["top1_id"])

    return guess


def instance_text(data: dict) -> np.ndarray:
    """The instances' token ids as the text has them: each masked position's true word put
    back (padding and unweighted slots as they were)."""
    ids, positions = data["token_ids"].copy(), data["mask_positions"]
    shown = np.take_along_axis(ids, positions, 1)
    np.put_along_axis(ids, positions, np.where(data["weights"] > 0, data["labels"], shown), 1)
    return ids


def position_rows(data: dict, guesses: np.ndarray, special: np.ndarray, mask_id: int) -> dict:
    """One entry per weighted masked position: right; whether the guess and the true word
    stand in view and in the instance 1, 2, 3 ahead (`model.pretraining.masked_lm_scores.copy_hits`, as the
    evaluation counts them, shift 1); the guess's nearest distance in view; whether the
    guess is one of the text's most frequent pieces; whether the position shows [MASK]."""
    from model.pretraining.masked_lm_scores import copy_hits

    ids, pad, pos, gold = (
        data[k] for k in ("token_ids", "padding_mask", "mask_positions", "labels")
    )
    rows = {}
    for shift in (1, 2, 3):
        other = (np.roll(ids, -shift, 0), np.roll(pad, -shift, 0))
        hits = copy_hits(guesses, gold, ids, pad, pos, other)
        rows[f"guess_other{shift}"] = hits["top1_chance"] > 0
        rows[f"gold_other{shift}"] = hits["gold_chance"] > 0
    rows["guess_in"], rows["gold_in"] = hits["top1_copy"] > 0, hits["gold_copy"] > 0
    seq = np.arange(ids.shape[1])
    at = (ids[:, None, :] == guesses[..., None]) & (seq[None, None, :] != pos[..., None])
    at &= pad[:, None, :] > 0
    rows["distance"] = np.where(at, np.abs(seq[None, None, :] - pos[..., None]), 10**6).min(-1)
    text = instance_text(data)
    counts = np.bincount(text[(pad > 0) & ~special[text]], minlength=len(special))
    frequent = np.zeros(len(special), bool)
    frequent[np.argsort(-counts)[:FREQUENT]] = True
    rows |= {
        "right": guesses == gold,
        "frequent": frequent[guesses],
        "shows_mask": np.take_along_axis(ids, pos, 1) == mask_id,
        "guess": guesses,
    }
    return {k: v[data["weights"] > 0] for k, v in rows.items()}


def excess_table(rows: dict) -> str:
    """The copy excess and the copying beyond chance by group of positions, as points of
    all positions: "right" and "wrong" split "all", and the two "wrong, ..." rows split
    "wrong" (their shares of the excess sum to 100 %); the last two split all positions by
    what they show."""
    n = len(rows["right"])
    wrong, rare = ~rows["right"], ~rows["frequent"]
    groups = [
        ("all", np.ones(n, bool)),
        ("right (guess = true word)", rows["right"]),
        ("wrong", wrong),
        (f"wrong, guess one of the text's {FREQUENT} most frequent pieces", wrong & ~rare),
        ("wrong, guess a rarer piece", wrong & rare),
        ("positions that show [MASK]", rows["shows_mask"]),
        ("positions that show a word (random or own)", ~rows["shows_mask"]),
    ]
    cols = ("guess_in", "guess_other1", "gold_in", "gold_other1")
    total = (rows["guess_in"].sum() - rows["gold_in"].sum()) / n
    table = []
    for name, g in groups:
        k = g.sum()
        rate = {c: rows[c][g].mean() if k else 0.0 for c in cols}
        part = (rows["guess_in"][g].sum() - rows["gold_in"][g].sum()) / n
        beyond = (
            k
            / n
            * ((rate["guess_in"] - rate["guess_other1"]) - (rate["gold_in"] - rate["gold_other1"]))
        )
        table.append(
            [name, f"{k:,} ({100 * k / n:.1f} %)"]
            + [f"{100 * rate[c]:.1f} %" if k else "" for c in cols]
            + [f"{100 * part:+.2f}", f"{100 * part / total:.0f} %" if total else ""]
            + [f"{100 * beyond:+.2f}"]
        )
    head = ["positions", "count", "top-1 in view", "top-1 in the next instance"]
    head += ["true word in view", "true word in the next instance", "excess (points)", "share"]
    head += ["beyond chance (points)"]
    return common.table(head, table)


def chance_line(rows: dict) -> str:
    """The copy excess with each word's chance of being in view taken out."""
    pct = {k: 100 * v.mean() for k, v in rows.items() if k.startswith(("guess_", "gold_"))}

    def beyond(s):
        return (pct["guess_in"] - pct[f"guess_other{s}"]) - (pct["gold_in"] - pct[f"gold_other{s}"])

    return (
        f"Copy excess {pct['guess_in'] - pct['gold_in']:+.2f} points; of it "
        f"{pct['guess_other1'] - pct['gold_other1']:+.2f} is chance (the guesses are commoner "
        f"words: in the next instance {pct['guess_other1']:.2f} % against the true words' "
        f"{pct['gold_other1']:.2f} %), {beyond(1):+.2f} copying beyond it (top-1 in view "
        f"{pct['guess_in'] - pct['guess_other1']:+.2f} points above its chance, the true word "
        f"{pct['gold_in'] - pct['gold_other1']:+.2f}). With the instance 2 or 3 ahead as the "
        f"chance: {beyond(2):+.2f}, {beyond(3):+.2f}."
    )


def copied_words(rows: dict, vocabulary: list[str], top: int = 15) -> str:
    in_view = rows["guess_in"] & ~rows["right"]
    counts = collections.Counter(rows["guess"][in_view].tolist())
    n = in_view.sum()
    words = ", ".join(f"`{vocabulary[i]}` {100 * c / n:.1f} %" for i, c in counts.most_common(top))
    rare = in_view & ~rows["frequent"]
    near = (rows["distance"][rare] <= 2).mean()
    return (
        f"{words}. Of the rarer pieces guessed wrongly while in view ({rare.sum():,}), "
        f"{100 * near:.1f} % stand within 2 tokens of the masked position."
    )


def state_sums(h: np.ndarray, batch: dict, guesses: np.ndarray, special: np.ndarray) -> dict:
    """Sums over a batch's positions that show [MASK] (and its unmasked tokens) of the
    cosine statistics `state_table` reports."""
    ids, pad, pos = batch["token_ids"], batch["padding_mask"], batch["mask_positions"]
    w = batch["weights"] > 0
    masked = np.zeros(ids.shape, bool)
    np.put_along_axis(masked, pos, w, 1)
    context = (pad > 0) & ~special[ids] & ~masked  # (B, L)
    rows = w & (np.take_along_axis(ids, pos, 1) == batch["mask_id"])  # (B, P)
    hn = h / np.maximum(np.linalg.norm(h, axis=-1, keepdims=True), 1e-12)
    sim = np.einsum("bld,bmd->blm", hn, hn)  # (B, L, L)
    n_ctx = np.maximum(context.sum(-1), 2)
    at_mask = np.take_along_axis(sim, pos[..., None], 1)  # (B, P, L)
    mask_ctx = (at_mask * context[:, None]).sum(-1) / n_ctx[:, None]
    token_ctx = ((sim * context[:, None]).sum(-1) - 1) / (n_ctx[:, None] - 1)  # self left out
    other, other_ctx = np.roll(hn, 1, 0), np.roll(context, 1, 0)
    cross = np.einsum("bpd,bld->bpl", np.take_along_axis(hn, pos[..., None], 1), other)
    mask_cross = (cross * other_ctx[:, None]).sum(-1) / np.maximum(other_ctx.sum(-1), 1)[:, None]
    crossed = rows if len(ids) > 1 else rows & False  # a batch of one has no other sequence
    nearest = np.where(context[:, None], at_mask, -np.inf).argmax(-1)  # (B, P)
    nearest_word = np.take_along_axis(ids, nearest, 1)
    same_as_guess = (ids[:, None, :] == guesses[..., None]) & context[:, None]
    random_is_guess = same_as_guess.sum(-1) / n_ctx[:, None]
    shown = rows & same_as_guess.any(-1)  # the guess stands in the context
    return {
        "mask": rows.sum(),
        "mask_ctx": mask_ctx[rows].sum(),
        "crossed": crossed.sum(),
        "mask_cross": mask_cross[crossed].sum(),
        "tokens": context.sum(),
        "token_ctx": token_ctx[context].sum(),
        "nearest_is_guess": (nearest_word == guesses)[rows].sum(),
        "random_is_guess": random_is_guess[rows].sum(),
        "shown": shown.sum(),
        "nearest_is_shown_guess": (nearest_word == guesses)[shown].sum(),
        "random_is_shown_guess": random_is_guess[shown].sum(),
        "nearest_is_gold": (nearest_word == batch["labels"])[rows].sum(),
    }


def state_table(sums: dict[str, collections.Counter]) -> str:
    names = list(sums)
    lines = [
        ("cosine of a `[MASK]` state to the unmasked tokens of its sequence", "mask_ctx", "mask"),
        (
            "cosine of an unmasked token's state to the others of its sequence",
            "token_ctx",
            "tokens",
        ),
        ("cosine of a `[MASK]` state to the tokens of another sequence", "mask_cross", "crossed"),
        (
            "the context token nearest the `[MASK]` state is the model's top-1 guess",
            "nearest_is_guess",
            "mask",
        ),
        ("a random context token is the model's top-1 guess", "random_is_guess", "mask"),
        (
            "where the guess stands in the context: the nearest token is the guess",
            "nearest_is_shown_guess",
            "shown",
        ),
        ("where it does: a random context token is the guess", "random_is_shown_guess", "shown"),
        (
            "the context token nearest the `[MASK]` state is the true word",
            "nearest_is_gold",
            "mask",
        ),
    ]
    rows = []
    for text, num, den in lines:
        pct = num not in ("mask_ctx", "token_ctx", "mask_cross")
        cells = [s[num] / max(s[den], 1) for s in sums.values()]
        rows.append([text] + [f"{100 * c:.1f} %" if pct else f"{c:.3f}" for c in cells])
    return common.table(["final hidden states", *names], rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=os.path.join(REPO_ROOT, "assets", "models", "mlm"))
    p.add_argument("--before", default=os.path.join(REPO_ROOT, "runs", "defaults", "minilm"))
    p.add_argument("--data", default=VALID)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--max-predictions", type=int, default=20)
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument(
        "--quick", action="store_true", help="rehearsal: 64 instances; not a measurement"
    )
    p.add_argument("--results", default=None)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    if args.results is None:
        directory = common.QUICK_RESULTS_DIR if args.quick else common.RESULTS_DIR
        args.results = common.results_path(directory=directory)
    args.threads = 2  # LiteRT's default (export.interpreter), as model.evaluate runs it
    for flag, path in (("--model", args.model), ("--data", args.data)):
        if not os.path.exists(path):
            p.error(f"{flag} {path}: no such file or directory")
    if args.before and not os.path.exists(args.before):
        print(
            f"note: no --before model at {args.before} (make it as docs/checkpoints.md says); "
            f"the hidden states are compared for --model alone",
            file=sys.stderr,
        )
        args.before = None
    from model.evaluate import load_mlm
    from model.pretraining.masked_lm_scores import masked_instances

    predict, tokenizer = load_mlm(args.model, args.seq_len)
    vocabulary = list(tokenizer.vocabulary)
    special = np.array([t.startswith("[") and t.endswith("]") for t in vocabulary])
    mask_id = vocabulary.index("[MASK]")
    data = masked_instances(
        tokenizer, args.data, args.seq_len, args.max_predictions, args.seed, "auto"
    )
    if args.quick:
        data = {k: v[:64] for k, v in data.items()}
    guess = top1_guesses(predict)
    states = {"after (`--model`)": encoder_states(args.model)}
    if args.before:
        states["before (`--before`)"] = encoder_states(args.before)
    keys = ("token_ids", "segment_ids", "padding_mask", "mask_positions")
    guesses, sums = [], {name: collections.Counter() for name in states}
    for start in range(0, len(data["labels"]), args.batch_size):
        batch = {k: v[start : start + args.batch_size] for k, v in data.items()}
        x = {k: batch[k] for k in keys}
        g = guess(x, batch["labels"])
        guesses.append(g)
        batch["mask_id"] = mask_id
        for name, fn in states.items():
            h = fn({k: x[k] for k in keys[:3]})
            sums[name].update(state_sums(h, batch, g, special))
    rows = position_rows(data, np.concatenate(guesses), special, mask_id)
    n = len(rows["right"])
    body = (
        f"`{os.path.relpath(args.model, REPO_ROOT)}` on `{os.path.basename(args.data)}`: "
        f"{n:,} masked positions ({len(data['labels']):,} instances, seed {args.seed}, "
        f"the positions of `model.evaluate --task mlm`); top-1 {100 * rows['right'].mean():.2f} %.\n\n"
        + excess_table(rows)
        + "\n\n"
        + chance_line(rows)
        + "\n\nWords most often guessed wrongly while in view (share of those guesses): "
        + copied_words(rows, vocabulary)
        + "\n\n"
        + state_table(sums)
    )
    common.publish(args, "Copy excess of the fill-mask model", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
