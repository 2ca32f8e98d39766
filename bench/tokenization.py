"""Tokenization to model inputs on 20 MB of real Wikipedia: the project's tokenizers vs HF's.

    PYTHONPATH=. python bench/tokenization.py [--megabytes 20] [--vocab VOCAB]
    PYTHONPATH=. python bench/tokenization.py --quick          # 0.2 MB, seconds

Text: the paragraphs of pretrain/enwiki-2015/AA/wiki_*.gz (WikiExtractor output; the <doc ...>
and </doc> lines and empty lines dropped), in file order, until --megabytes MB of UTF-8. Every
paragraph becomes one row of model inputs: `[CLS] ... [SEP]`, truncated to --seq-len (128)
tokens, padded; (rows, seq_len) int32 token_ids, segment_ids and padding_mask.

    project-tf       model.text.tokenizer.WordPieceTokenizer (tensorflow-text), the path of GLUE
                     training and evaluation: tokenizer.encode_flat (one graph call, one
                     shard per thread; ids in one array, no Python lists), then
                     model.tasks.base.pack_rows (tokenizer.pack_batch, numpy)
    project-tf-ids   model.tasks.base.encode_texts alone (4,096 texts per call): ids as Python
                     lists without [CLS]/[SEP], truncation or padding (the list API's cost)
    project-py       model.text.wordpiece.WordPieceTokenizer (pure Python, the edge runtime's), the
                     same encode_flat + pack_rows
    hf-tokenizers    Hugging Face `tokenizers` (Rust): BertWordPieceTokenizer(vocab, lowercase,
                     strip_accents, clean_text, handle_chinese_chars) with truncation and
                     padding to seq_len, encode_batch (its thread pool: RAYON_NUM_THREADS =
                     --threads), ids, type ids and attention masks into numpy
    transformers     transformers.BertTokenizer (transformers 5: the `tokenizers` backend;
                     built with vocab=dict, since vocab_file= is silently ignored), called on
                     the list with padding="max_length", truncation=True, return_tensors="np"

Each repeat starts from a fresh tokenizer (untimed), so no cache carries over (the pure-Python
one caches words), after one untimed warm-up on the first MB. MB/s = UTF-8 MB of text / median
seconds; tokens/s = non-padding tokens of the output ([CLS]/[SEP] included) / median seconds.
Agreement: share of rows whose token_ids (all seq_len of them) equal hf-tokenizers'.
"""

from __future__ import annotations

import argparse
import os
import sys

import common
import numpy as np

TOKENIZERS = ("project-tf", "project-tf-ids", "project-py", "hf-tokenizers", "transformers")
WARMUP_BYTES = 2**20


# === The tokenizers: setup() -> tokenizer, run(tokenizer, texts) -> outputs ===


def project_setup(kind: str, vocab: str, lowercase: bool):
    if kind == "tf":
        from model.text.tokenizer import WordPieceTokenizer
    else:
        from model.text.wordpiece import WordPieceTokenizer
    return lambda: WordPieceTokenizer(vocab, lowercase=lowercase)


def project_run(seq_len: int, ids_only: bool = False):
    from model.tasks.base import encode_texts, pack_rows

    def run(tokenizer, texts):
        if ids_only:
            return {"ids": encode_texts(tokenizer, texts)}
        return pack_rows(tokenizer, tokenizer.encode_flat(texts), None, seq_len)

    return run


def hf_tokenizers_setup(vocab: str, lowercase: bool, seq_len: int):
    from tokenizers import BertWordPieceTokenizer

    def setup():
        tok = BertWordPieceTokenizer(
            vocab,
            lowercase=lowercase,
            strip_accents=lowercase,
            clean_text=True,
            handle_chinese_chars=True,
        )
        tok.enable_truncation(seq_len)
        tok.enable_padding(length=seq_len)
        return tok

    return setup


def hf_tokenizers_run(tokenizer, texts):
    encodings = tokenizer.encode_batch(texts)
    return {
        "token_ids": np.array([e.ids for e in encodings], np.int32),
        "segment_ids": np.array([e.type_ids for e in encodings], np.int32),
        "padding_mask": np.array([e.attention_mask for e in encodings], np.int32),
    }


def transformers_setup(vocab: str, lowercase: bool):
    from transformers import BertTokenizer

    from model.text.wordpiece import load_vocabulary

    tokens = load_vocabulary(vocab)

    def setup():
        tok = BertTokenizer(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=lowercase)
        if len(tok.get_vocab()) != len(tokens):
            raise RuntimeError(f"transformers' BertTokenizer did not take {vocab}")
        return tok

    return setup


def transformers_run(seq_len: int):
    def run(tokenizer, texts):
        out = tokenizer(
            texts, padding="max_length", truncation=True, max_length=seq_len, return_tensors="np"
        )
        return {
            "token_ids": out["input_ids"].astype(np.int32),
            "segment_ids": out["token_type_ids"].astype(np.int32),
            "padding_mask": out["attention_mask"].astype(np.int32),
        }

    return run


# === Measuring ===


def agreement(out: dict, reference: dict) -> float | None:
    """Share of rows whose token_ids equal the reference's (None without token_ids)."""
    if "token_ids" not in out or reference is None:
        return None
    a, b = out["token_ids"], reference["token_ids"]
    if a.shape != b.shape:
        return 0.0
    return float((a == b).all(axis=1).mean())


def count_tokens(out: dict) -> int:
    if "padding_mask" in out:
        return int(out["padding_mask"].sum())
    return sum(len(row) for row in out["ids"])


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/tokenization.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--megabytes",
        type=float,
        default=None,
        help="MB of Wikipedia text (default 20; --quick 0.2)",
    )
    parser.add_argument("--vocab", default=common.VOCAB)
    parser.add_argument("--cased", action="store_true", help="a cased vocabulary")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--tokenizers", nargs="+", choices=TOKENIZERS, default=list(TOKENIZERS))
    parser.add_argument("--data", default=common.DATA_DIR)
    return common.parse(parser, argv, warmup=1)


def plans(args) -> dict:
    """{tokenizer: (setup, run, label), or None when its library is not installed}."""
    lowercase = not args.cased
    out = {}
    project = {
        "project-tf": ("tf", False, "tensorflow-text, encode + pack"),
        "project-tf-ids": ("tf", True, "tensorflow-text, ids only"),
        "project-py": ("py", False, "pure Python (edge), encode + pack"),
    }
    for name, (kind, ids_only, label) in project.items():
        if name in args.tokenizers:
            setup = project_setup(kind, args.vocab, lowercase)
            out[name] = (setup, project_run(args.seq_len, ids_only=ids_only), label)
    if "hf-tokenizers" in args.tokenizers:
        out["hf-tokenizers"] = (
            (
                hf_tokenizers_setup(args.vocab, lowercase, args.seq_len),
                hf_tokenizers_run,
                "HF tokenizers (Rust)",
            )
            if common.installed("tokenizers")
            else None
        )
    if "transformers" in args.tokenizers:
        out["transformers"] = (
            (
                transformers_setup(args.vocab, lowercase),
                transformers_run(args.seq_len),
                "transformers BertTokenizer",
            )
            if common.installed("transformers")
            else None
        )
    return out


def warm_up_texts(texts: list[str], size: int) -> list[str]:
    """The first lines, up to WARMUP_BYTES or a quarter of the text."""
    warm, total = [], 0
    for t in texts:
        warm.append(t)
        total += len(t.encode("utf-8"))
        if total >= min(WARMUP_BYTES, size // 4):
            break
    return warm


def measure(args, planned: dict, texts: list[str], warm: list[str]) -> dict:
    """{tokenizer: {"label", "timing", "out"} or {"error"}}."""
    size = sum(len(t.encode("utf-8")) for t in texts)
    results = {}
    for name, plan in planned.items():
        if plan is None:
            results[name] = {"error": "not installed"}
            continue
        setup, run, label = plan
        print(f"{name}: {len(texts)} lines, {size / 1e6:.1f} MB", file=sys.stderr, flush=True)
        try:
            for _ in range(args.warmup):
                run(setup(), warm)
            holder = {}

            def once(tokenizer):
                holder["out"] = run(tokenizer, texts)

            timing = common.time_repeats(once, args.repeats, warmup=0, setup=setup)
            results[name] = {"label": label, "timing": timing, "out": holder["out"]}
        except Exception as e:
            results[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    return results


def hf_reference(results: dict) -> tuple:
    """HF tokenizers' output and median seconds, what the others are compared with (None,
    None when it did not run)."""
    hf = results.get("hf-tokenizers", {})
    return hf.get("out"), hf["timing"].median if "timing" in hf else None


def results_table(results: dict, texts: list[str], size: int) -> str:
    reference, hf_time = hf_reference(results)
    rows = []
    for name, r in results.items():
        if "error" in r:
            rows.append([name, f"failed: {r['error']}"])
            continue
        t, out = r["timing"], r["out"]
        same = agreement(out, reference)
        rows.append(
            [
                name,
                r["label"],
                f"{t.median:.2f} ({t.spread(1, 2)})",
                f"{size / 1e6 / t.median:.2f}",
                common.fmt(count_tokens(out) / t.median),
                f"{len(texts) / t.median:,.0f}",
                f"{common.ratio(hf_time, t.median):.2f}x" if hf_time else "-",
                f"{100 * same:.3f} %" if same is not None else "-",
            ]
        )
    header = [
        "tokenizer",
        "what",
        "seconds (min-max)",
        "MB/s",
        "tokens/s",
        "lines/s",
        "speed vs hf-tokenizers",
        "rows identical to hf-tokenizers",
    ]
    return common.table(header, rows)


def goals(results: dict) -> list[str]:
    """The project tokenizer's speed and agreement against HF tokenizers; the edge one's
    agreement."""
    reference, hf_time = hf_reference(results)
    project = results.get("project-tf", {})
    speed = common.ratio(hf_time, project["timing"].median) if "timing" in project else None
    same = agreement(project["out"], reference) if "out" in project else None
    lines = [
        common.goal_line("project tokenizer (project-tf) speed vs HF tokenizers", speed, 10, "x"),
        common.goal_line(
            "project tokenizer rows identical to HF tokenizers",
            100 * same if same is not None else None,
            99.9,
            "%",
        ),
    ]
    edge = results.get("project-py", {})
    python_same = agreement(edge["out"], reference) if "out" in edge else None
    if python_same is not None:
        lines.append(
            f"- project-py (edge) rows identical to HF tokenizers: {100 * python_same:.3f} %"
        )
    return lines


def main(argv=None) -> int:
    args = parse_args(argv)
    # Before `tokenizers` starts its (global, lazily built) thread pool.
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    if "project-tf" in args.tokenizers or "project-tf-ids" in args.tokenizers:
        common.tensorflow_threads(args.threads)
    megabytes = args.megabytes or (0.2 if args.quick else 20)
    texts = common.wikipedia_lines(int(megabytes * 1e6), args.data)
    size = sum(len(t.encode("utf-8")) for t in texts)
    warm = warm_up_texts(texts, size)
    results = measure(args, plans(args), texts, warm)
    body = [
        f"{len(texts):,} paragraphs, {size / 1e6:.1f} MB of English Wikipedia "
        f"(enwiki-2015/AA), vocabulary {args.vocab}, seq_len {args.seq_len}; median of "
        f"{args.repeats} repeats after {args.warmup} warm-up run(s) on the first "
        f"{sum(len(t.encode('utf-8')) for t in warm) / 1e6:.1f} MB.",
        "",
        results_table(results, texts, size),
        "",
        *goals(results),
    ]
    common.publish(args, "Tokenization to model inputs", "\n".join(body))
    if all("error" in r for r in results.values()):
        print("error: every tokenizer failed (see the table)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
