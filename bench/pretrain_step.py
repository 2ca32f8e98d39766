"""Pre-training step (MLM + NSP, AdamW): the project vs Hugging Face BertForPreTraining on PyTorch.

    PYTHONPATH=. python bench/pretrain_step.py [--presets mini base] [--ceiling-gflops 490 \\
        --ceiling-bf16-gflops 880]
    PYTHONPATH=. python bench/pretrain_step.py --quick      # tiny preset, seconds

Presets (model/config.py) and batches as in the issue: `mini` at batch 32, `base` at batch 8;
sequences of 128 tokens with 20 masked positions (the paper's max_predictions_per_seq at 128),
randomly initialised weights (speed does not depend on them), dropout 0.1, training mode.

Variants, each timed on the same batch:

    project fp32 / fp32+jit / bf16 / bf16+jit
        model/train.py's training path, in process: BertPretrainer(BertEncoder), the losses and
        weighted metrics of `python -m model.train pretrain`, model.training.optimizer.bert_adamw
        (AdamW, weight decay 0.01, global clipnorm 1.0, warm-up + linear decay), compiled
        with jit_compile = --jit, under the Keras dtype policy float32 or mixed_bfloat16;
        `train_on_batch` runs the same compiled train function as `fit`.
    torch fp32 / torch bf16
        transformers.BertForPreTraining (the same sizes; MLM logits at every position, as HF
        computes them; labels -100 except at the masked positions), torch.optim.AdamW
        (weight decay 0.01, eps 1e-6), clip_grad_norm_(1.0); bf16: torch.autocast("cpu",
        torch.bfloat16) around the forward pass.

The batch: real Wikipedia paragraphs as sentence pairs (B the next paragraph, or a random one
for half of them: NSP labels), packed `[CLS] A [SEP] B [SEP]` to 128 tokens (no padding), masked
by model.pretraining.masking.Masker (15 %, at most 20 positions; 80/10/10), labels and weights as
model/pretraining/dataset.py makes them. One repeat = --steps consecutive train steps; figures
are medians over --repeats repeats, after --warmup steps (tracing, XLA compilation).

Model FLOPs per step (common.pretraining_forward_flops, common.training_flops), matmuls only:
    3 * (encoder forward + MLM head at the P masked positions + NSP head)
    encoder forward = B * L * (2*T*(4*H*H + 2*H*I) + 4*T*T*H) + B * 2*H*H (pooler)
    MLM head        = B * 2*P*(H*H + H*V)             (dense, then the tied decoder)
i.e. 6 * (non-embedding matmul weights) * tokens + 12 * L * H * T * tokens + the heads. The
same useful work is counted for every variant (HF's logits at the other 108 positions are not
useful work), so model FLOP utilisation (MFU) = model FLOPs / step seconds / ceiling compares
them directly; "of fp32 ceiling" uses the fp32 ceiling for every row, "of own ceiling" the bf16
ceiling for bf16 rows.
"""

from __future__ import annotations

import argparse
import sys

import common
import numpy as np

PRESET_BATCH = {"mini": 32, "base": 8}
VARIANTS = ("fp32", "fp32+jit", "bf16", "bf16+jit", "torch-fp32", "torch-bf16")


# === The batch ===


def pretraining_batch(
    tokenizer, batch: int, seq_len: int, masked: int, data: str, seed: int = 0
) -> tuple[dict, dict, dict]:
    """(x, y, sample_weight) numpy arrays as model/pretraining/dataset.py yields them."""
    from model.pretraining.masking import Masker, MaskingConfig

    rng = np.random.default_rng(seed)
    texts = common.long_paragraphs(tokenizer, batch + 1, seq_len // 2 + 2, data)
    ids = tokenizer.encode(texts)
    nsp = rng.integers(0, 2, batch)  # 0: B follows A, 1: B is a random paragraph
    packed = []
    for i in range(batch):
        j = (
            i + 1
            if nsp[i] == 0
            else int(rng.choice([k for k in range(batch + 1) if k not in (i, i + 1)] or [i + 1]))
        )
        packed.append(tokenizer.pack(ids[i], ids[j], seq_len))
    token_ids, segment_ids, padding_mask = (np.stack(a) for a in zip(*packed))
    masker = Masker(tokenizer.vocabulary, MaskingConfig(max_predictions=masked))
    seeds = np.stack([np.full(batch, seed), np.arange(batch)], axis=1)
    masked_ids, positions, labels, weights = masker.mask_batch(token_ids, seeds)
    x = {
        "token_ids": masked_ids,
        "segment_ids": segment_ids.astype(np.int32),
        "padding_mask": padding_mask.astype(np.int32),
        "mask_positions": positions,
    }
    scale = weights.size / max(weights.sum(), 1.0)
    y = {"mlm": labels, "nsp": nsp.astype(np.int32)[:, None]}
    sample_weight = {"mlm": (weights * scale).astype(np.float32), "nsp": np.ones(batch, np.float32)}
    return x, y, sample_weight


# === Project ===


def project_model(config, precision: str, jit: bool, total_steps: int):
    """The model of `python -m model.train pretrain`, compiled as it compiles it."""
    import keras

    from model.heads.pretrainer import BertPretrainer
    from model.networks.encoder import BertEncoder
    from model.training.optimizer import bert_adamw, create_optimizer_variables

    keras.backend.clear_session()
    keras.mixed_precision.set_global_policy(precision)
    keras.utils.set_random_seed(0)
    model = BertPretrainer(BertEncoder.from_config_object(config), next_sentence=True)
    model.compile(
        optimizer=bert_adamw(1e-4, min(10_000, total_steps // 10), total_steps, 0.01),
        loss={
            "mlm": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            "nsp": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        },
        weighted_metrics={
            "mlm": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
            "nsp": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        },
        jit_compile=jit,
    )
    create_optimizer_variables(model)
    return model


def project_step(config, precision: str, jit: bool, batch_arrays, total_steps: int):
    """A no-argument callable running one train step; the policy is reset to float32 by
    `reset_policy` afterwards."""
    import tensorflow as tf

    model = project_model(config, precision, jit, total_steps)
    x, y, sw = tf.nest.map_structure(tf.constant, batch_arrays)
    return lambda: model.train_on_batch(x, y, sample_weight=sw)


def reset_policy():
    import keras

    keras.mixed_precision.set_global_policy("float32")
    keras.backend.clear_session()


# === Hugging Face on PyTorch ===


def torch_step(config, batch_arrays, threads: int, bf16: bool):
    torch = common.torch_threads(threads)
    import transformers

    x, y, _ = batch_arrays
    torch.manual_seed(0)
    hf_config = transformers.BertConfig(
        vocab_size=config.vocabulary_size,
        hidden_size=config.hidden_dim,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        intermediate_size=config.intermediate_dim,
        hidden_act="gelu",
        hidden_dropout_prob=config.dropout,
        attention_probs_dropout_prob=config.dropout,
        max_position_embeddings=config.max_sequence_length,
        type_vocab_size=config.num_segments,
        layer_norm_eps=config.layer_norm_epsilon,
    )
    model = transformers.BertForPreTraining(hf_config).train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01
    )
    labels = np.full(x["token_ids"].shape, -100, np.int64)
    rows = np.arange(len(labels))[:, None]
    real = y["mlm"] != 0
    labels[np.broadcast_to(rows, real.shape)[real], x["mask_positions"][real]] = y["mlm"][real]
    inputs = {
        "input_ids": torch.from_numpy(x["token_ids"].astype(np.int64)),
        "token_type_ids": torch.from_numpy(x["segment_ids"].astype(np.int64)),
        "attention_mask": torch.from_numpy(x["padding_mask"].astype(np.int64)),
        "labels": torch.from_numpy(labels),
        "next_sentence_label": torch.from_numpy(y["nsp"][:, 0].astype(np.int64)),
    }

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.detach().item()

    return step


# === Main ===


def measure(step, steps: int, repeats: int, warmup: int) -> common.Timing:
    """Seconds per step: each repeat runs `steps` steps; returned per step."""
    for _ in range(warmup):
        step()
    block = common.time_repeats(lambda: [step() for _ in range(steps)], repeats, warmup=0)
    return common.summarize(s / steps for s in block.seconds)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/pretrain_step.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--presets",
        nargs="+",
        default=None,
        help="model/config.py presets (default mini base; --quick tiny)",
    )
    parser.add_argument(
        "--batch",
        type=int,
        nargs="+",
        default=None,
        help="batch per preset (default: mini 32, base 8; --quick 4)",
    )
    parser.add_argument("--seq-len", type=int, default=None, help="default 128 (--quick 32)")
    parser.add_argument("--masked", type=int, default=None, help="default 20 (--quick 5)")
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="train steps per timed repeat (default 3; --quick 1)",
    )
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--vocab", default=common.VOCAB)
    parser.add_argument(
        "--ceiling-gflops",
        type=float,
        default=None,
        help="fp32 ceiling (bench/ceiling.py); default: measured here",
    )
    parser.add_argument("--ceiling-bf16-gflops", type=float, default=None)
    parser.add_argument("--data", default=common.DATA_DIR)
    args = common.parse(parser, argv, warmup=3)
    args.presets = args.presets or (["tiny"] if args.quick else ["mini", "base"])
    args.batch = args.batch or [4 if args.quick else PRESET_BATCH.get(p, 8) for p in args.presets]
    if len(args.batch) != len(args.presets):
        parser.error("give one --batch per preset")
    args.seq_len = args.seq_len or (32 if args.quick else 128)
    args.masked = args.masked or (5 if args.quick else 20)
    args.steps = args.steps or (1 if args.quick else 3)
    return args


def ceilings_gflops(args) -> dict[str, float]:
    """{"float32": GFLOP/s, "bfloat16": GFLOP/s}: given by the flags, else measured here."""
    import ceiling as ceiling_bench

    size = 256 if args.quick else 4096
    given = {"float32": args.ceiling_gflops, "bfloat16": args.ceiling_bf16_gflops}
    return {
        dtype: value or ceiling_bench.measure(dtype, size, max(args.repeats, 1), args.warmup)[0]
        for dtype, value in given.items()
    }


def measure_variants(args, preset: str, config, arrays) -> dict:
    """{variant: its Timing, or why it failed} for one preset and batch."""
    torch_ok = common.installed("torch") and common.installed("transformers")
    total_steps = args.warmup + args.repeats * args.steps + 1
    results = {}
    for variant in args.variants:
        print(f"{preset}: {variant}", file=sys.stderr, flush=True)
        try:
            if variant.startswith("torch"):
                if not torch_ok:
                    raise RuntimeError("torch/transformers not installed")
                step = torch_step(config, arrays, args.threads, bf16=variant == "torch-bf16")
            else:
                precision = "mixed_bfloat16" if variant.startswith("bf16") else "float32"
                step = project_step(
                    config, precision, variant.endswith("+jit"), arrays, total_steps
                )
            results[variant] = measure(step, args.steps, args.repeats, args.warmup)
        except Exception as e:
            results[variant] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        finally:
            if not variant.startswith("torch"):
                reset_policy()
    return results


def tokens_per_second(results: dict, variant: str, tokens: int) -> float | None:
    t = results.get(variant)
    return tokens / t.median if isinstance(t, common.Timing) else None


def variants_table(results: dict, tokens: int, flops: float, ceilings: dict) -> str:
    hf_rate = tokens_per_second(results, "torch-fp32", tokens)
    rows = []
    for variant, t in results.items():
        if not isinstance(t, common.Timing):
            rows.append([variant, f"failed: {t}"])
            continue
        own = ceilings["bfloat16" if "bf16" in variant else "float32"]
        achieved = flops / t.median / 1e9
        rows.append(
            [
                variant,
                common.ms_cell(t),
                common.fmt(tokens / t.median),
                f"{common.fmt(tokens / t.max)}-{common.fmt(tokens / t.min)}",
                common.fmt(achieved),
                f"{100 * achieved / ceilings['float32']:.0f} %",
                f"{100 * achieved / own:.0f} %",
                f"{tokens / t.median / hf_rate:.2f}x" if hf_rate else "-",
            ]
        )
    header = [
        "variant",
        "ms per step (min-max)",
        "tokens/s",
        "tokens/s range",
        "model GFLOP/s",
        "of fp32 ceiling",
        "of own ceiling",
        "vs torch-fp32",
    ]
    return common.table(header, rows)


def goal_lines(preset: str, results: dict, tokens: int, flops: float, ceilings: dict) -> list:
    """The preset's goals: best tokens/s vs torch, fp32 utilisation (base), bf16 vs fp32."""

    def best(variants):
        return max(tokens_per_second(results, v, tokens) or 0 for v in variants) or None

    best_fp32, best_bf16 = best(("fp32", "fp32+jit")), best(("bf16", "bf16+jit"))
    lines = [
        common.goal_line(
            f"`{preset}`: the project's best tokens/s vs HF torch fp32",
            common.ratio(
                best(("fp32", "fp32+jit", "bf16", "bf16+jit")),
                tokens_per_second(results, "torch-fp32", tokens),
            ),
            {"mini": 3.0, "base": 2.5}.get(preset, 3.0),
            "x",
        )
    ]
    if preset in ("base", "tiny"):
        mfu = 100 * best_fp32 / tokens * flops / 1e9 / ceilings["float32"] if best_fp32 else None
        lines.append(common.goal_line(f"`{preset}`: fp32 model FLOP utilisation", mfu, 70, "%"))
    lines.append(
        common.goal_line(
            f"`{preset}`: best mixed_bfloat16 vs best fp32",
            common.ratio(best_bf16, best_fp32),
            1.5,
            "x",
        )
    )
    return lines


def main(argv=None) -> int:
    args = parse_args(argv)
    common.tensorflow_threads(args.threads)
    from model.config import BertConfig
    from model.text.wordpiece import WordPieceTokenizer

    ceilings = ceilings_gflops(args)
    tokenizer = WordPieceTokenizer(args.vocab)
    seq_len, masked = args.seq_len, args.masked
    sections, goals = [], []
    for preset, batch in zip(args.presets, args.batch):
        config = BertConfig.preset(preset, vocabulary_size=tokenizer.vocabulary_size)
        arrays = pretraining_batch(tokenizer, batch, seq_len, masked, args.data)
        flops = common.training_flops(
            common.pretraining_forward_flops(config, batch, seq_len, masked)
        )
        results = measure_variants(args, preset, config, arrays)
        tokens = batch * seq_len
        sections.append(
            f"### `{preset}` ({config.num_layers} layers, hidden {config.hidden_dim}), batch "
            f"{batch} x {seq_len} tokens, {masked} masked positions: "
            f"{flops / 1e9:.1f} model GFLOP per step\n\n"
            + variants_table(results, tokens, flops, ceilings)
        )
        goals += goal_lines(preset, results, tokens, flops, ceilings)
    body = (
        f"Ceilings: fp32 {common.fmt(ceilings['float32'])} GFLOP/s, bf16 "
        f"{common.fmt(ceilings['bfloat16'])} GFLOP/s"
        + (" (given)" if args.ceiling_gflops else " (measured here)")
        + f". {args.steps} step(s) per repeat, median of {args.repeats} repeats after "
        f"{args.warmup} warm-up steps; tokens = batch x seq_len (no padding in these "
        f"batches). Model FLOPs: 3 x (encoder + MLM head at the masked positions + NSP "
        f"head) matmuls (see the module docstring).\n\n"
        + "\n\n".join(sections)
        + "\n\n"
        + "\n".join(goals)
    )
    common.publish(args, "Pre-training step (MLM + NSP, AdamW)", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
