"""Masked-LM scores of a pre-trainer on any raw text (`python -m model.evaluate --task mlm`):
instances made and masked exactly as for pre-training, with a fixed seed, so a model and its
bundle are scored on the same masked positions; top-1/top-5 accuracy, loss and perplexity,
the copy rates, NSP accuracy. Framework-free but for `masked_lm_predict` (Keras models).
"""

from __future__ import annotations

import collections

MAX_PREDICTIONS = 20  # masked positions an instance at most (--max-predictions' default)


def evaluate_mlm(
    predict,
    tokenizer,
    path: str,
    max_seq_length: int = 128,
    max_predictions: int = MAX_PREDICTIONS,
    seed: int = 12345,
    batch_size: int = 32,
    corpus_format: str = "auto",
) -> dict:
    """Masked-LM and NSP metrics of a pre-trainer on instances made from `path`.

    predict: `predict(inputs) -> {name: array}` on int32 `token_ids`,
        `segment_ids`, `padding_mask` (batch, max_seq_length) and
        `mask_positions` (batch, max_predictions): a Keras `BertPretrainer`'s
        `predict_on_batch` (outputs `mlm` logits, `nsp` logits) or a bundle's
        `TFLiteModel.predict` (outputs `topk_ids`/`topk_probs`, `nsp_probs`).

    The instances, masks and seed do not depend on `predict`, so a model and
    its bundle are scored on the same masked positions. From logits: top-1,
    top-5, loss and perplexity. From top-k outputs: top-1, and top-5 when
    k >= 5; no loss or perplexity (they need the gold word's probability,
    which is not in the top k when the model gets it wrong); `mlm_top_k`
    says which k. `nsp_accuracy` when the model has an NSP head.
    """
    import numpy as np

    data = masked_instances(tokenizer, path, max_seq_length, max_predictions, seed, corpus_format)
    mask_id = list(tokenizer.vocabulary).index("[MASK]")
    totals = collections.Counter()
    top_k = has_nsp = None
    # the next instance as the model sees it, for the copy rates a word has by chance
    data["next_ids"] = np.roll(data["token_ids"], -1, 0)
    data["next_mask"] = np.roll(data["padding_mask"], -1, 0)
    for start in range(0, len(data["labels"]), batch_size):
        batch = {name: column[start : start + batch_size] for name, column in data.items()}
        x = {k: batch[k] for k in ("token_ids", "segment_ids", "padding_mask", "mask_positions")}
        out = predict(x)
        hits, top_k = mlm_hits(out, batch["labels"])
        hits.update(
            copy_hits(
                hits.pop("top1_id"),
                batch["labels"],
                x["token_ids"],
                x["padding_mask"],
                x["mask_positions"],
                other=(batch["next_ids"], batch["next_mask"]),
            )
        )
        w = batch["weights"]
        # The positions that show [MASK] (80 %); the others show a random word or their own.
        shows_mask = np.take_along_axis(x["token_ids"], x["mask_positions"], 1) == mask_id
        for name, value in hits.items():
            totals[name] += float((value * w).sum())
            if name in ("top1", "top5"):
                totals[f"{name}_mask_only"] += float((value * w * shows_mask).sum())
        totals["count"] += float(w.sum())
        totals["mask_count"] += float((w * shows_mask).sum())
        nsp = out.get("nsp", out.get("nsp_probs"))  # logits or probabilities: same argmax
        has_nsp = nsp is not None
        if has_nsp:
            totals["nsp_correct"] += float((np.argmax(nsp, -1) == batch["nsp_labels"]).sum())
    return mlm_metrics(totals, top_k, len(data["labels"]), has_nsp)


def masked_instances(
    tokenizer, path: str, max_seq_length: int, max_predictions: int, seed: int, corpus_format: str
) -> dict:
    """Pre-training instances of `path`'s text, masked as BERT's objective masks them
    (instance i with `default_rng([seed, i])`): {name: (instances, ...) array}."""
    import numpy as np

    from model.pretraining.build import generate_instances, instance_features
    from model.pretraining.instances import InstanceConfig
    from model.pretraining.masking import Masker, MaskingConfig

    masker = Masker(tokenizer.vocabulary, MaskingConfig(max_predictions=max_predictions))
    instances = generate_instances(
        [path],
        tokenizer,
        InstanceConfig(max_seq_length),
        seed=seed,
        corpus_format=corpus_format,
        pool_tokens=10**12,
    )
    rows = []
    for i, inst in enumerate(instances):
        feats = instance_features(inst, tokenizer, max_seq_length)
        masked, pos, labels, weights = masker(feats["input_ids"], np.random.default_rng([seed, i]))
        rows.append(
            (masked, feats["segment_ids"], feats["input_mask"], pos, labels, weights)
            + (feats["next_sentence_labels"][0],)
        )
    if not rows:
        raise ValueError(f"{path}: no text to make evaluation instances from")
    names = ("token_ids", "segment_ids", "padding_mask", "mask_positions", "labels", "weights")
    return dict(zip((*names, "nsp_labels"), (np.stack(c) for c in zip(*rows))))


def mlm_metrics(totals: dict, top_k: int | None, instances: int, has_nsp: bool) -> dict:
    """`evaluate_mlm`'s metrics from its weighted sums over the masked positions."""
    import numpy as np

    count, mask_count = totals["count"], totals["mask_count"]
    metrics = {
        f"mlm_{name}_accuracy": totals[name] / count for name in ("top1", "top5") if name in totals
    }
    for name in ("top1", "top5"):
        if mask_count and f"{name}_mask_only" in totals:
            metrics[f"mlm_{name}_accuracy_mask_only"] = totals[f"{name}_mask_only"] / mask_count
    for name in ("top1", "gold"):
        metrics[f"mlm_{name}_copy_rate"] = totals[f"{name}_copy"] / count
        metrics[f"mlm_{name}_chance_copy_rate"] = totals[f"{name}_chance"] / count
    # how much more often the guess is in view than the true word; and beyond chance
    metrics["mlm_copy_excess"] = metrics["mlm_top1_copy_rate"] - metrics["mlm_gold_copy_rate"]
    metrics["mlm_copy_excess_beyond_chance"] = metrics["mlm_copy_excess"] - (
        metrics["mlm_top1_chance_copy_rate"] - metrics["mlm_gold_chance_copy_rate"]
    )
    if "nll" in totals:
        metrics["mlm_loss"] = totals["nll"] / count
        metrics["mlm_perplexity"] = float(np.exp(totals["nll"] / count))
    else:
        metrics["mlm_top_k"] = top_k
    metrics.update(
        {"masked_positions": int(count), "mask_token_positions": int(mask_count)}
        | {"instances": instances}
    )
    if has_nsp:
        metrics["nsp_accuracy"] = totals["nsp_correct"] / instances
    return metrics


def mlm_hits(out: dict, gold):
    """({"top1", "top5"[, "nll"]}: (batch, P) float arrays, k or None) for one
    batch of a pre-trainer's outputs and the gold ids (batch, P).

    `mlm` logits: the gold word's rank (how many words score strictly higher)
    and its negative log-likelihood. `topk_ids` (batch, P, k), best first:
    whether the gold id is among the first 1 and 5 (top5 only when k >= 5).
    Both give "top1_id", the best guess's id (batch, P).
    """
    import numpy as np

    if "mlm" in out:
        logits = np.asarray(out["mlm"])  # (batch, P, vocab)
        if logits.dtype != np.float64:
            logits = logits.astype(np.float32, copy=False)  # half precision's exp is too coarse
        gold_logit = np.take_along_axis(logits, gold[..., None], -1)  # (batch, P, 1)
        rank = (logits > gold_logit).sum(-1)  # 0 = the best guess
        top = logits.max(-1, keepdims=True)
        # log-sum-exp with the sum in float64: as exact as float64 throughout, 6x faster
        log_total = np.log(np.exp(logits - top).sum(-1, dtype=np.float64)) + top[..., 0]
        nll = log_total - gold_logit[..., 0]
        hits = {"top1": (rank < 1) * 1.0, "top5": (rank < 5) * 1.0, "nll": nll}
        return {**hits, "top1_id": logits.argmax(-1)}, None
    if "topk_ids" in out:
        ids = np.asarray(out["topk_ids"])  # (batch, P, k), best first
        k = ids.shape[-1]
        found = ids == gold[..., None]  # (batch, P, k)
        hits = {"top1": found[..., 0] * 1.0, "top1_id": ids[..., 0]}
        if k >= 5:
            hits["top5"] = found[..., :5].any(-1) * 1.0
        return hits, k
    raise ValueError(
        f"the model's outputs {sorted(out)} have neither masked-LM logits (mlm) "
        f"nor top-k predictions (topk_ids); is it a pre-training model?"
    )


def copy_hits(top1_id, gold, token_ids, padding_mask, positions, other=None) -> dict:
    """{"top1_copy", "gold_copy"}: (batch, P) floats, 1 where the best guess (the
    true word) stands elsewhere in the same input as the model sees it (masked;
    its own position left out). A model that copies context words guesses a word
    already in view far more often than the true words are in view.

    other: (token_ids, padding_mask) of unrelated input, row for row (`evaluate_mlm`
    passes the next instance, masked as the model sees it; instances are shuffled over the
    whole file): adds {"top1_chance", "gold_chance"}, 1 where the word stands anywhere in
    it. A common word ("the", ",") is in view by chance that often, so a model that
    guesses common words when unsure copies without copying."""
    import numpy as np

    seq = np.arange(token_ids.shape[1])
    elsewhere = (seq[None, None, :] != positions[..., None]) & (padding_mask[:, None, :] > 0)

    def in_view(ids):
        return ((token_ids[:, None, :] == ids[..., None]) & elsewhere).any(-1) * 1.0

    hits = {"top1_copy": in_view(top1_id), "gold_copy": in_view(gold)}
    if other is not None:
        other_ids, other_mask = other
        for name, ids in (("top1", top1_id), ("gold", gold)):
            found = (other_ids[:, None, :] == ids[..., None]) & (other_mask[:, None, :] > 0)
            hits[f"{name}_chance"] = found.any(-1) * 1.0
    return hits


def masked_lm_predict(model):
    """predict(x) -> {"mlm": logits[, "nsp"]} at x["mask_positions"]: a BERT pre-trainer's own
    outputs; SpanBERT's head over its encoder (its boundary inputs left out); ELECTRA's
    generator and its head."""
    from model.heads.pretrainer import BertPretrainer

    if isinstance(model, BertPretrainer):
        return model.predict_on_batch
    import keras

    encoder = getattr(model, "generator", None) or model.encoder

    def predict(x):
        inputs = {k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")}
        sequence = encoder(inputs, training=False)["sequence_output"]
        logits = model.masked_lm_head(sequence, mask_positions=x["mask_positions"])
        return {"mlm": keras.ops.convert_to_numpy(logits)}

    return predict
