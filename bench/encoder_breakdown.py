"""Where the encoder's time goes: the Keras encoder at batch 32 x 128 beside its parts alone.

    PYTHONPATH=. python bench/encoder_breakdown.py [--model runs/defaults/minilm] [--ceiling-gflops G]
    PYTHONPATH=. python bench/encoder_breakdown.py --quick       # tiny random encoder, seconds

`encoder_inference.py` reports one number per runtime; this script splits the project's
(TensorFlow backend, XLA, float32) forward pass into the work it is made of, each part
compiled alone with XLA on tensors of the model's own shapes, chained over the layers and
summed at the end (a sum, not one element: XLA would slice an elementwise chain down to the
one element asked for), so XLA can neither skip nor merge the repeats:

    full encoder     the project's encoder (model_dir.load), jit-compiled call
    projections      per layer: Q, K, V and output (4 x H x H) and the feed-forward
                     (H x I, I x H) matmuls on (batch * T, H)
    attention bmm    per layer: scores (T x dh @ dh x T) and values (T x T @ T x dh) for
                     batch * heads
    softmax          per layer, over (batch, heads, T, T)
    GELU (erf)       per layer, over (batch, T, I): the exact GELU BERT uses
    GELU (tanh)      the same with the tanh approximation, for comparison
    LayerNorm        twice per layer, over (batch, T, H)

"sum of parts" next to "full encoder" shows how much of the real forward pass the parts
explain; the matmul parts' GFLOP/s against the ceiling show how fast oneDNN/XLA runs this
model's matrix shapes (smaller and thinner than the ceiling's 4096^3). Median of --repeats
calls after warm-up, min-max.
"""

from __future__ import annotations

import argparse
import os
import sys

import common
import numpy as np


def parts(config, batch: int, seq_len: int, seed: int = 0):
    """{name: (callable, matmul FLOPs)} for every part, on random tensors of the model's shapes."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    L, H, I = config.num_layers, config.hidden_dim, config.intermediate_dim  # noqa: E741
    heads = config.num_heads
    dh = H // heads

    def rand(*shape):
        return tf.constant(rng.standard_normal(shape, dtype=np.float32) * 0.05)

    tokens = batch * seq_len
    h0 = rand(tokens, H)
    w = [
        dict(q=rand(H, H), k=rand(H, H), v=rand(H, H), o=rand(H, H), i=rand(H, I), f=rand(I, H))
        for _ in range(L)
    ]
    q0, k0, v0 = (rand(batch * heads, seq_len, dh) for _ in range(3))
    s0 = rand(batch, heads, seq_len, seq_len)
    g0 = rand(batch, seq_len, I)
    n0 = rand(batch, seq_len, H)
    gamma, beta = tf.ones((H,)), tf.zeros((H,))

    def jit(fn):
        return tf.function(fn, jit_compile=True)

    @jit
    def projections():
        h = h0
        for p in w:
            h = (h @ p["q"] + h @ p["k"] + h @ p["v"]) @ p["o"]
            h = (h @ p["i"]) @ p["f"]
        return tf.reduce_sum(h)

    @jit
    def attention():
        q = q0
        for _ in range(L):
            scores = tf.matmul(q, k0, transpose_b=True)
            q = tf.matmul(scores, v0)
        return tf.reduce_sum(q)

    @jit
    def softmax():
        s = s0
        for _ in range(L):
            s = tf.nn.softmax(s, axis=-1)
        return tf.reduce_sum(s)

    def gelu(approximate):
        @jit
        def run():
            g = g0
            for _ in range(L):
                g = tf.nn.gelu(g, approximate=approximate)
            return tf.reduce_sum(g)

        return run

    @jit
    def layernorm():
        x = n0
        for _ in range(2 * L):
            mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
            x = tf.nn.batch_normalization(x, mean, var, beta, gamma, 1e-12)
        return tf.reduce_sum(x)

    flops_proj = L * (common.matmul_flops(tokens, H, H) * 4 + common.matmul_flops(tokens, I, H) * 2)
    flops_attn = L * 2 * batch * heads * common.matmul_flops(seq_len, seq_len, dh)
    return {
        "projections": (projections, flops_proj),
        "attention bmm": (attention, flops_attn),
        "softmax": (softmax, 0),
        "GELU (erf)": (gelu(False), 0),
        "LayerNorm": (layernorm, 0),
        "GELU (tanh)": (gelu(True), 0),
    }


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/encoder_breakdown.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model", default=None, help=f"model directory (default {common.MINILM_DIR})"
    )
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument(
        "--ceiling-gflops",
        type=float,
        default=None,
        help="fp32 ceiling (default: measured here with ceiling.py's matmul)",
    )
    return common.parse(parser, argv, warmup=2)


def ceiling_gflops(args) -> float:
    """The fp32 ceiling: given, else one square matmul timed here."""
    if args.ceiling_gflops is not None:
        return args.ceiling_gflops
    import ceiling as ceiling_script

    size = 1024 if args.quick else 4096
    t = common.time_repeats(ceiling_script.matmul_fn("float32", size), args.repeats, warmup=1)
    return common.matmul_flops(size, size, size) / t.median / 1e9


def breakdown_table(results: dict, ceiling: float) -> str:
    """A row per part (its share of the full encoder's time and of the ceiling), and before
    the last (GELU tanh, an alternative to the exact GELU timed among the parts) the parts'
    sum."""
    full_s = results["full encoder"][0].median
    summed = sum(
        t.median for name, (t, _) in results.items() if name not in ("full encoder", "GELU (tanh)")
    )
    rows = []
    for name, (t, flops) in results.items():
        rows.append(
            [
                name,
                common.ms_cell(t),
                f"{100 * t.median / full_s:.0f} %",
                common.fmt(flops / t.median / 1e9) if flops else "-",
                f"{100 * flops / t.median / 1e9 / ceiling:.0f} %" if flops else "-",
            ]
        )
    rows.insert(
        len(rows) - 1,
        [
            "sum of parts (without GELU tanh)",
            f"{summed * 1e3:.0f}",
            f"{100 * summed / full_s:.0f} %",
            "-",
            "-",
        ],
    )
    header = ["part", "ms (min-max)", "of full encoder", "GFLOP/s", "of fp32 ceiling"]
    return common.table(header, rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    common.tensorflow_threads(args.threads)
    import tensorflow as tf

    from model.checkpoints import model_dir as model_dirs
    from model.config import BertConfig
    from model.text.tokenizer import WordPieceTokenizer

    model_dir = args.model or (
        common.tiny_model_dir(
            os.path.join(common.quick_dir("breakdown"), "tiny-encoder"), common.VOCAB
        )
        if args.quick
        else common.MINILM_DIR
    )
    batch, seq_len = (4, 32) if args.quick else (args.batch, args.seq_len)
    config = BertConfig.from_dict(model_dirs.read_info(model_dir)["encoder"])
    tokenizer = WordPieceTokenizer(os.path.join(model_dir, "vocab.txt"))
    texts = common.long_paragraphs(tokenizer, batch, seq_len)
    x = {k: tf.constant(v) for k, v in common.pack_texts(tokenizer, texts, seq_len).items()}
    encoder = model_dirs.load(model_dir)

    @tf.function(jit_compile=True)
    def full():
        return tf.reduce_sum(encoder(x, training=False)["sequence_output"])

    ceiling = ceiling_gflops(args)
    timed = {"full encoder": (full, common.encoder_flops(config, batch, seq_len))}
    timed.update(parts(config, batch, seq_len))
    results = {}
    for name, (fn, flops) in timed.items():
        print(f"{name}", file=sys.stderr, flush=True)
        results[name] = (common.time_repeats(fn, args.repeats, warmup=args.warmup), flops)
    body = "\n".join(
        [
            f"Model {model_dir} ({config.num_layers} layers, hidden {config.hidden_dim}, "
            f"{config.num_heads} heads, feed-forward {config.intermediate_dim}); batch {batch} x "
            f"{seq_len}, float32, every part jit-compiled alone (XLA) on tensors of the model's "
            f"shapes, chained over the layers. Median of {args.repeats} calls after "
            f"{args.warmup} warm-up(s); fp32 ceiling {ceiling:.1f} GFLOP/s.",
            "",
            breakdown_table(results, ceiling),
            "",
        ]
    )
    common.publish(args, "Encoder inference: where the time goes", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
