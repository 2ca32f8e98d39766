"""Latency of the app: from `python -m app` to the first answer, then p50/p95 per view.

    PYTHONPATH=. python bench/app_latency.py --models assets/models [--requests 50] [--tokens 128]

Starts `python -m app --models DIR` in a fresh process on a free loopback port, as a user would,
and times how long until a request is answered (gradio_client connecting and calling the first
view that has a model). Then, per view, sends `--requests` requests one at a time through
gradio_client, each input `--tokens` WordPieces long once packed (`[CLS] ... [SEP]`; cut with the
model's own tokenizer; QA: question + context in one window), after `--warmup` unmeasured ones.
"app" is the whole round trip (HTTP, queue, model, turning the answer into the view's HTML and
tables); "model" is the same model's runtime call alone, in this process. Prints a markdown table
(goal: app p95 < 200 ms at 128 tokens), the app process's CPU time per request, and the
machine's load average, since other jobs on the CPU slow every wall-clock number down.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import threading
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from app import models  # noqa: E402  (numpy only)
from app.ui import EXAMPLES  # noqa: E402  (gradio is imported only by ui.build)

QUESTION = "Which team won the game and what was the final score?"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def text_of(tokenizer, length: int, mask_at: int | None = None, source: str | None = None) -> str:
    """Words of `source` (default: the example paragraph), repeated, making `length` WordPieces
    (fewer by a few when a word would straddle the end), with [MASK] replacing word `mask_at`."""
    source = (source or EXAMPLES["answer"][0][1]).split()
    words, count, i = [], 0, 0
    while True:
        word = source[i % len(source)]
        pieces = len(tokenizer.encode([word])[0])
        if count + pieces > length:
            break
        words.append(word)
        count, i = count + pieces, i + 1
    if mask_at is not None:
        words[min(mask_at, len(words) - 1)] = "[MASK]"
    return " ".join(words)


def inputs(view: str, tokenizer, tokens: int) -> tuple:
    """The arguments of one request to `view`'s endpoint, `tokens` WordPieces once packed."""
    body = tokens - 2  # [CLS] ... [SEP]
    if view == "fill_mask":
        return text_of(tokenizer, body, mask_at=body // 2), 5
    if view == "attention":
        return text_of(tokenizer, body), "", 1, 1, None
    if view == "sentiment":
        return (text_of(tokenizer, body),)
    if view == "answer":
        question = text_of(
            tokenizer, min(len(tokenizer.encode([QUESTION])[0]), tokens // 4), source=QUESTION
        )
        used = len(tokenizer.encode([question])[0])
        return question, text_of(tokenizer, tokens - used - 3), 20
    if view in ("entities", "replaced_tokens"):
        return (text_of(tokenizer, body),)
    raise ValueError(view)


def model_call(slot, args: tuple):
    """The runtime call `view`'s endpoint makes, without the app around it."""
    m, view = slot.model, slot.view.key
    if view == "fill_mask":
        return lambda: m.fill_mask(args[0], top_k=args[1])
    if view == "attention":
        return lambda: m.attention(args[0], None)
    if view == "sentiment":
        return lambda: m.classify(args[0])
    if view == "answer":
        return lambda: m.answer(args[0], args[1], n_best=args[2])
    if view == "replaced_tokens":
        return lambda: m.detect_replaced(args[0])
    return lambda: m.tag(args[0])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentiles(seconds: list[float]) -> tuple[float, float, float]:
    ms = sorted(1000 * s for s in seconds)
    p95 = ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
    return statistics.median(ms), p95, statistics.fmean(ms)


def timed(fn, n: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def start_app(args):
    """(process, url, start time, output lines, {"at": seconds to "Running on"}) of
    `python -m app`."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "app",
        "--models",
        args.models,
        "--backend",
        args.backend,
        "--port",
        str(port),
    ]
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3")
    began = time.perf_counter()
    process = subprocess.Popen(
        argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines, running = [], {}

    def read():
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if "Running on" in line and "at" not in running:
                running["at"] = time.perf_counter() - began

    threading.Thread(target=read, daemon=True).start()
    return process, f"http://127.0.0.1:{port}/", began, lines, running


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/app_latency.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--models", default=models.DEFAULT_MODELS)
    parser.add_argument("--backend", choices=models.BACKENDS, default="litert")
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for the app")
    args = parser.parse_args(argv)

    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    os.environ["HF_HUB_OFFLINE"] = "1"
    from gradio_client import Client

    process, url, began, lines, running = start_app(args)
    try:
        # Start-up: until a request is answered (the first view with a model, else any).
        slots = models.load_all(args.models, args.backend, warm_up=False)
        ready = [k for k, s in slots.items() if s.ready]
        first = ready[0] if ready else "sentiment"
        probe = inputs(first, slots[first].model.tokenizer, 16) if ready else ("a",)
        client, deadline = None, time.perf_counter() + args.timeout
        while True:
            if process.poll() is not None or time.perf_counter() > deadline:
                print("\n".join(lines), file=sys.stderr)
                raise SystemExit("python -m app did not start")
            try:
                client = client or Client(url, verbose=False, download_files=False)
                client.predict(*probe, api_name=f"/{first}")
                break
            except Exception:
                time.sleep(0.1)
        first_answer = time.perf_counter() - began

        rows, notes = [], []
        for key, slot in slots.items():
            if not slot.ready:
                rows.append(f"| {slot.view.title} | no model | | | | | | |")
                continue
            request = inputs(key, slot.model.tokenizer, args.tokens)
            cpu = cpu_seconds(process.pid)
            app = timed(
                lambda: client.predict(*request, api_name=f"/{key}"), args.requests, args.warmup
            )
            server_cpu = (cpu_seconds(process.pid) - cpu) / (args.requests + args.warmup)
            status = client.predict(*request, api_name=f"/{key}")[0]
            alone = timed(model_call(slot, request), args.requests, args.warmup)
            a50, a95, amean = percentiles(app)
            m50, m95, _ = percentiles(alone)
            if "⚠️" in status:
                notes.append(f"{slot.view.title}: {status.split('⚠️', 1)[1].strip()}")
            rows.append(
                f"| {slot.view.title} | {args.tokens} | {a50:.0f} | {a95:.0f} | "
                f"{amean:.0f} | {1000 * server_cpu:.0f} | {m50:.0f} | {m95:.0f} |"
            )
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()

    print(
        f"`python -m app --models {args.models} --backend {args.backend}`: "
        f'{running.get("at", float("nan")):.1f} s to "Running on", {first_answer:.1f} s to '
        f"the first answer ({first}); {platform.machine()}, {os.cpu_count()} CPUs, load "
        f"average {os.getloadavg()[0]:.1f} at the end.\n"
    )
    print(
        "| view | tokens | app p50 ms | app p95 ms | app mean ms | app CPU ms/request | "
        "model p50 ms | model p95 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(
        f"\n{args.requests} requests per view, one at a time, after {args.warmup} warm-up "
        f"ones. app: the round trip through gradio_client; app CPU: the app process's CPU "
        f"time per request (what it costs without waiting for the CPU); model: the runtime "
        f"call alone, in this process."
    )
    for note in notes:
        print(f"\nNote, {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
