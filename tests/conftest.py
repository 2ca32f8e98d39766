"""pytest setup: tests marked `slow` run only with `--runslow`.

python -m pytest -q            # the fast tier
python -m pytest -q --runslow  # everything (docs/architecture.md: "Tests and linter")
"""

from __future__ import annotations

import gc
import os
import re
import time

import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--runslow",
        action="store_true",
        default=False,
        help="also run tests marked @pytest.mark.slow",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a slow test, run only with --runslow")
    # XLA's CPU code generated without LLVM's optimisation passes, in this session's
    # processes (both backends, children included; set before either reads it): the tests'
    # models are tiny, so their programs spend far longer compiling than running (the JAX
    # smoke tables ~20 % faster in all). The programs compute the same, only run slower.
    # The user's own XLA_FLAGS are kept.
    os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
    share_the_cores()
    # Python's cyclic garbage collector, in the test processes only, runs after 50,000 new
    # objects instead of 700: tracing Keras models makes millions of short-lived objects, and
    # with the 0.5-1 million that a worker's fixtures keep alive, collecting took ~10 % of a
    # worker's time (15 s of 156, four training files one after the other; 3 s of 150 after).
    gc.set_threshold(50_000, 20, 20)


_started: dict[str, float] = {}


def pytest_runtest_setup(item):
    _started[item.nodeid] = time.perf_counter()


def pytest_runtest_teardown(item, nextitem):
    # The young generations collected after every test of a second or more (those that
    # train), so that what it left as cyclic garbage dies young. A tf.data iterator Keras
    # abandoned in a cycle is freed by the collector, and its C++ destructor waits for one
    # of tf.data's threads while holding the GIL: whichever later test's allocation set off
    # the collection stalled 10-60 s, asleep (py-spy: IteratorResource::~IteratorResource
    # under EagerTensor_dealloc). Only old garbage waited that long, never a fresh iterator
    # (likely tf.data's autotuning thread, whose period doubles up to 60 s). Each of four
    # fast-tier runs had one or two such stalls (a test of 5.7 s of CPU took 59 s); in
    # three runs with this collection, none over 2 s.
    started = _started.pop(item.nodeid, None)  # None: skipped before this hook's setup ran
    if started is not None and time.perf_counter() - started >= 1.0:
        gc.collect(1)


def share_the_cores():
    """Under pytest-xdist, each worker's TensorFlow (and oneDNN's OpenMP) gets its share of
    the cores as threads, in this process and its children: by default every process sizes
    its pools to all the cores, so two workers (plus their commands) ran twice the threads
    there were cores (docs/architecture.md: what that cost is within the machine's noise).
    Threads change the order of a few sums, not what is computed; every process of a session
    has the same setting. The user's own settings are kept."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2:
        return
    from model.io.cpus import usable_cpus  # light: no TensorFlow

    threads = str(max(1, usable_cpus() // workers))
    for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(name, threads)


# A test skipped for want of the real data beside the repository (its reason names
# ../shared/data): CI sets BERT_REQUIRE_DATA=1, and there the skip is a failure, so that a
# checkout without the data cannot pass by testing less.
NEEDS_SHARED_DATA = re.compile(r"shared[/\\]data")


def _require_data(report) -> None:
    """A skip for want of the real data made a failure, under BERT_REQUIRE_DATA=1."""
    if not report.skipped or hasattr(report, "wasxfail"):  # an expected failure stays one
        return
    if os.environ.get("BERT_REQUIRE_DATA") != "1":
        return
    reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if NEEDS_SHARED_DATA.search(reason):
        report.outcome = "failed"
        report.longrepr = f"BERT_REQUIRE_DATA=1, and the test needs the real data: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    _require_data((yield).get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):  # a module skipped whole
    _require_data((yield).get_result())


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow; run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(tmp_path_factory):
    """JAX's persistent compilation cache, one for the session's JAX processes (the
    KERAS_BACKEND=jax children, the JAX-only environment's commands; both workers): a
    program compiled once is read back by the next process that builds it (another
    table's row of the same size, a resumed run). Programs are keyed by what they compute,
    so the results are the same; only the compile is skipped. A cache the user set is kept."""
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        yield
        return
    from tests.helpers import session_root

    cache = os.path.join(session_root(tmp_path_factory), "jax-compilation-cache")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = cache
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # tiny models compile fast
    yield
    for name in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"):
        os.environ.pop(name, None)
