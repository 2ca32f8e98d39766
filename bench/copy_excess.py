"""Why the fill-mask default guesses words already in its input: the copy excess taken apart.

    python bench/copy_excess.py --model assets/models/mlm --before runs/defaults/minilm

`python -m model.evaluate --task mlm` reports how often the top-1 guess at a masked position
stands elsewhere in the input (`mlm_top1_copy_rate`) beside how often the true word does
(`mlm_gold_copy_rate`); the difference is the copy excess. This scores the same masked
positions of WikiText-2 valid (same instances, masks and seed) and asks where the excess comes
from and whether the encoder's geometry explains it:

1. The excess split by position: right guesses add nothing (guess = true word); wrong ones
   split by what the guess is (one of the text's most frequent WordPieces, or a rarer word) and
   how far its nearest copy stands from the masked position. Each row's share of the excess
   sums to the whole.
2. The words most often guessed wrongly while in view.
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


def top1_guesses(directory: str, max_seq_length: int):
    """guess(x) -> (batch, P) the pre-trainer's best guess at x["mask_positions"]."""
    from model.evaluate import load_mlm, mlm_hits

    predict, _ = load_mlm(directory, max_seq_length)

    def guess(x, labels):
        hits, _ = mlm_hits(predict(x), labels)
        return np.asarray(hits["top1_id"])

    return guess


def position_rows(data: dict, guesses: np.ndarray, special: np.ndarray, mask_id: int) -> dict:
    """One entry per weighted masked position: right; whether the guess and the true word
    stand in view and in the next instance's text (`model.evaluate.copy_hits`, as the
    evaluation counts them); the guess's nearest distance in view; whether the guess is
    one of the text's most frequent pieces; whether the position shows [MASK]."""
    from model.evaluate import copy_hits, instance_text

    ids, pad, pos = data["token_ids"], data["padding_mask"], data["mask_positions"]
    gold, text = data["labels"], instance_text(data)
    other = (np.roll(text, -1, 0), np.roll(pad, -1, 0))
    hits = {k: v > 0 for k, v in copy_hits(guesses, gold, ids, pad, pos, other).items()}
    seq = np.arange(ids.shape[1])
    at = (ids[:, None, :] == guesses[..., None]) & (seq[None, None, :] != pos[..., None])
    at &= pad[:, None, :] > 0
    distance = np.where(at, np.abs(seq[None, None, :] - pos[..., None]), 10**6).min(-1)
    counts = np.bincount(text[(pad > 0) & ~special[text]], minlength=len(special))
    frequent = np.zeros(len(special), bool)
    frequent[np.argsort(-counts)[:FREQUENT]] = True
    rows = {
        "right": guesses == gold,
        "guess_in": hits["top1_copy"],
        "gold_in": hits["gold_copy"],
        "guess_other": hits["top1_chance"],
        "gold_other": hits["gold_chance"],
        "near": distance <= 2,
        "frequent": frequent[guesses],
        "shows_mask": np.take_along_axis(ids, pos, 1) == mask_id,
        "guess": guesses,
    }
    return {k: v[data["weights"] > 0] for k, v in rows.items()}


def excess_table(rows: dict) -> str:
    """The copy excess by group of positions; the groups after "wrong" split it (shares
    sum to its), the last two split all positions by what they show."""
    n = len(rows["right"])
    guess_in, gold_in, near = rows["guess_in"], rows["gold_in"], rows["near"]
    wrong, rare = ~rows["right"], ~rows["frequent"]
    groups = [
        ("all", np.ones(n, bool)),
        ("right (guess = true word)", rows["right"]),
        ("wrong", wrong),
        (f"wrong, guess one of the text's {FREQUENT} most frequent pieces", wrong & ~rare),
        ("wrong, rarer guess within 2 tokens", wrong & rare & guess_in & near),
        ("wrong, rarer guess 3 or more tokens away", wrong & rare & guess_in & ~near),
        ("wrong, rarer guess not in view", wrong & rare & ~guess_in),
        ("positions that show [MASK]", rows["shows_mask"]),
        ("positions that show a word (random or own)", ~rows["shows_mask"]),
    ]
    total = (guess_in.sum() - gold_in.sum()) / n
    table = []
    for name, g in groups:
        k = g.sum()
        part = (guess_in[g].sum() - gold_in[g].sum()) / n

        def pct(a):
            return f"{100 * a[g].mean():.1f} %" if k else ""

        table.append(
            [name, f"{k:,} ({100 * k / n:.1f} %)", pct(guess_in), pct(rows["guess_other"])]
            + [pct(gold_in), pct(rows["gold_other"]), f"{100 * part:+.2f}"]
            + [f"{100 * part / total:.0f} %" if total else ""]
        )
    head = ["positions", "count", "top-1 in view", "top-1 in the next sequence"]
    head += ["true word in view", "true word in the next sequence", "excess (points)", "share"]
    return common.table(head, table)


def chance_line(rows: dict) -> str:
    """The copy excess with each word's chance of being in view taken out."""
    pct = {k: 100 * rows[k].mean() for k in ("guess_in", "guess_other", "gold_in", "gold_other")}
    guess, gold = pct["guess_in"] - pct["guess_other"], pct["gold_in"] - pct["gold_other"]
    return (
        f"Copy excess {pct['guess_in'] - pct['gold_in']:+.2f} points; of it "
        f"{pct['guess_other'] - pct['gold_other']:+.2f} is chance (the guesses are commoner "
        f"words: in the next sequence {pct['guess_other']:.2f} % against the true words' "
        f"{pct['gold_other']:.2f} %), {guess - gold:+.2f} copying beyond it (top-1 in view "
        f"{guess:+.2f} points above its chance, the true word {gold:+.2f})."
    )


def copied_words(rows: dict, vocabulary: list[str], top: int = 15) -> str:
    in_view = rows["guess_in"] & ~rows["right"]
    counts = collections.Counter(rows["guess"][in_view].tolist())
    n = in_view.sum()
    return ", ".join(f"`{vocabulary[i]}` {100 * c / n:.1f} %" for i, c in counts.most_common(top))


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
    nearest = np.where(context[:, None], at_mask, -np.inf).argmax(-1)  # (B, P)
    nearest_word = np.take_along_axis(ids, nearest, 1)
    same_as_guess = (ids[:, None, :] == guesses[..., None]) & context[:, None]
    return {
        "mask": rows.sum(),
        "mask_ctx": mask_ctx[rows].sum(),
        "mask_cross": mask_cross[rows].sum(),
        "tokens": context.sum(),
        "token_ctx": token_ctx[context].sum(),
        "nearest_is_guess": (nearest_word == guesses)[rows].sum(),
        "random_is_guess": (same_as_guess.sum(-1) / n_ctx[:, None])[rows].sum(),
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
        ("cosine of a `[MASK]` state to the tokens of another sequence", "mask_cross", "mask"),
        (
            "the context token nearest the `[MASK]` state is the model's top-1 guess",
            "nearest_is_guess",
            "mask",
        ),
        ("a random context token is the model's top-1 guess", "random_is_guess", "mask"),
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
    from model.evaluate import load_mlm, masked_instances

    _, tokenizer = load_mlm(args.model, args.seq_len)
    vocabulary = list(tokenizer.vocabulary)
    special = np.array([t.startswith("[") and t.endswith("]") for t in vocabulary])
    mask_id = vocabulary.index("[MASK]")
    data = masked_instances(
        tokenizer, args.data, args.seq_len, args.max_predictions, args.seed, "auto"
    )
    if args.quick:
        data = {k: v[:64] for k, v in data.items()}
    guess = top1_guesses(args.model, args.seq_len)
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
