"""`python -m app`: the Gradio app over the models of a folder, served on this machine.

    python -m app                                   # bundles of assets/models, 127.0.0.1:7860
    python -m app --models runs/bundles --port 8000
    python -m app --backend keras --models runs/ft  # Keras model directories instead (TensorFlow)
    python -m app --share                           # also ask Gradio for a public link

Binds to 127.0.0.1 unless --host says otherwise. Needs no network: Gradio's analytics and the
Hugging Face Hub are switched off before Gradio is imported, and with --share and no network the
app says why there is no public link and serves locally. Views whose model is missing say so and
how to make it (to visitors of a public link or of a non-loopback --host only that the server's
log says why: they see no server path). Limits are flags: --max-input-chars (per text box),
--concurrency (jobs running at once, all views together), --max-queue (requests waiting),
--sessions (visitors' sessions whose state the server keeps: the attention view's maps).
Prints "Running on <url>" when it answers.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from model.io.flags import positive_int

log = logging.getLogger("app")

# Where `--share` would ask for a tunnel; probed first so that, offline, the app says why there
# is no public link instead of waiting on Gradio's own 30-second attempt.
SHARE_SERVER = "https://api.gradio.app"


def port_number(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be from 1 to 65535, not {value}")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    from app.models import BACKENDS, DEFAULT_MODELS
    from app.predict import Limits

    parser = argparse.ArgumentParser(
        prog="python -m app",
        description="The BERT demo app (masked words, attention, "
        "sentiment, question answering, named entities; replaced tokens with an ELECTRA "
        "model) on local models.",
    )
    parser.add_argument(
        "--models",
        default=DEFAULT_MODELS,
        help="folder whose sub-folders hold the models (default: %(default)s)",
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="litert",
        help="litert: bundles of `python -m export` (no TensorFlow); keras: "
        "model directories (default: %(default)s)",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default: %(default)s; 0.0.0.0 for the network)",
    )
    parser.add_argument("--port", type=port_number, default=7860, help="default: %(default)s")
    parser.add_argument("--share", action="store_true", help="also ask Gradio for a public link")
    parser.add_argument(
        "--max-input-chars",
        type=positive_int,
        default=10_000,
        help="longest text accepted in one box (default: %(default)s)",
    )
    parser.add_argument(
        "--concurrency",
        type=positive_int,
        default=2,
        help="predictions running at once, all views together (default: %(default)s)",
    )
    parser.add_argument(
        "--max-queue",
        type=positive_int,
        default=64,
        help="requests allowed to wait; more are refused (default: %(default)s)",
    )
    parser.add_argument(
        "--sessions",
        type=positive_int,
        default=100,
        help="visitors' sessions whose state the server keeps, the oldest dropped beyond it: "
        "the attention view's maps of a run (layers x heads x tokens^2 x 4 bytes, 4.7 MB for "
        f"the default model at 128 tokens), each kept {Limits.state_minutes} minutes after its "
        "last run (default: %(default)s)",
    )
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="CPU threads of each LiteRT interpreter (default: the runtime's)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also show TensorFlow's C++ start-up log lines (as does setting "
        "TF_CPP_MIN_LOG_LEVEL yourself)",
    )
    return parser.parse_args(argv)


def offline_environment() -> None:
    """Settings that must be in place before gradio (or huggingface_hub) is imported."""
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def share_problem(url: str = SHARE_SERVER, timeout: float = 3.0) -> str | None:
    """Why Gradio could not make a public link (its server unreachable), or None."""
    import httpx

    try:
        httpx.head(url, timeout=timeout)
    except Exception as e:  # no route, no DNS, refused, proxy down: all mean "offline"
        return f"{url} cannot be reached ({type(e).__name__}: {e or 'no answer'})"
    return None


def loopback(host: str) -> bool:
    """Whether --host serves this machine only."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def return_freed_arrays(threshold: int = 1 << 20) -> None:
    """Makes glibc give every block of at least `threshold` bytes its own mapping, returned to
    the system when freed. By default it raises that threshold to the size of each large block
    freed, after which the attention view's 4.7 MB maps of the sessions dropped (--sessions)
    come from the heap and fragment it: over 700 new sessions, 1,474 MB where this keeps
    1,060 MB (docs/reliability.md). No-op without glibc."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, threshold)  # M_MMAP_THRESHOLD, as MALLOC_MMAP_THRESHOLD_ sets it
    except (OSError, AttributeError):  # not glibc (macOS, Windows, musl)
        pass


# No view takes a file, so Gradio's upload route (open to any visitor of a --share link or
# --host 0.0.0.0, unbounded by default) takes next to nothing.
MAX_UPLOAD_BYTES = 1024


def start(slots: dict, args: argparse.Namespace):
    """Builds the app over `slots`, queues and launches it without blocking; the Blocks
    (its `local_url` answers). `args` as `parse_args` returns them."""
    offline_environment()
    import gradio as gr  # noqa: F401  (after offline_environment)

    from app import ui
    from app.predict import Limits

    share = args.share
    if share:
        problem = share_problem()
        if problem:
            log.info("--share: no public link: %s. Serving locally only.", problem)
            share = False
    public = share or not loopback(args.host)  # visitors from elsewhere: no server paths
    for slot in slots.values():
        slot.public = public
    demo = ui.build(slots, Limits(max_chars=args.max_input_chars))
    demo.queue(default_concurrency_limit=args.concurrency, max_size=args.max_queue, api_open=False)
    demo.launch(
        server_name=args.host,
        server_port=args.port,
        share=share,
        css=ui.CSS,
        js=ui.JS,
        theme=ui.theme(),
        prevent_thread_lock=True,
        quiet=True,
        ssr_mode=False,
        show_error=False,
        footer_links=["api"],
        max_file_size=MAX_UPLOAD_BYTES,
        state_session_capacity=args.sessions,
    )
    if share and not demo.share_url:
        log.info(
            "--share: Gradio could not open a public link (its message is above). "
            "Serving locally only."
        )
    elif demo.share_url:
        log.info("Public link: %s", demo.share_url)
    return demo


def serving_problem(args: argparse.Namespace) -> str | None:
    """What stops the app from serving, found before any model loads: a --models folder that
    is not there or is one model's own, or an address and port something else holds."""
    import socket

    if not os.path.isdir(args.models):
        return f"--models {args.models}: no such folder"
    for marker, kind in (("bundle.json", "a bundle"), ("config.json", "a model directory")):
        if os.path.isfile(os.path.join(args.models, marker)):
            parent = os.path.dirname(os.path.abspath(args.models))
            return (
                f"--models {args.models} is one model ({kind}), not a folder of them: pass the "
                f"folder that holds it (--models {parent}), where each view finds its model"
            )
    try:
        with socket.create_server((args.host, args.port)):
            pass
    except OSError as e:
        return (
            f"cannot serve on {args.host}:{args.port} ({e.strerror or e}): another program "
            f"holds it; choose another port with --port"
        )
    return None


def main(argv=None) -> int:
    began = time.perf_counter()
    args = parse_args(argv)
    problem = serving_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    offline_environment()
    return_freed_arrays()
    if args.backend == "keras":  # LiteRT bundles need no TensorFlow
        from model.io.native_logs import import_tensorflow_quietly

        import_tensorflow_quietly(args.verbose)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in ("httpx", "gradio"):
        logging.getLogger(name).setLevel(logging.WARNING)

    from app import models

    slots = models.load_all(args.models, args.backend, args.threads)
    for key, slot in slots.items():
        took = f" ({slot.load_seconds:.2f} s)" if slot.ready else ""
        log.info("%-10s %s%s", key, slot.describe(public=False), took)
    for line in models.hidden_views(slots, args.models):
        log.info("%s", line)
    try:
        demo = start(slots, args)
    except Exception as e:  # port taken, address not available: say so, no traceback
        log.error("cannot serve on %s:%s: %s: %s", args.host, args.port, type(e).__name__, e)
        return 1
    log.info(
        "Running on %s (backend %s; started in %.1f s; tensorflow imported: %s)",
        demo.local_url,
        args.backend,
        time.perf_counter() - began,
        "yes" if "tensorflow" in sys.modules else "no",
    )
    try:
        demo.block_thread()
    except KeyboardInterrupt:
        pass
    finally:
        demo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
