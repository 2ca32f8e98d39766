"""TensorFlow's C++ start-up lines, kept off a command's output.

Importing TensorFlow writes lines such as

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 ... port.cc:153] oneDNN custom operations are on. ...
    I0000 ... cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
    E0000 ... cuda_platform.cc:52] failed call to cuInit: ...

straight to file descriptor 2, before `TF_CPP_MIN_LOG_LEVEL` is read, so the
variable alone does not silence them. `import_tensorflow_quietly()` imports
TensorFlow (and finds its devices, which logs the CUDA lines) with descriptor 2
pointed at a temporary file, then passes on every line that is not one of these
start-up lines: a real error still reaches the user. Every command calls it
once, after its flags are parsed (so `--help` never imports TensorFlow).

One more comes later, mid-run, once a process: `E0000 ... util.cc:131] oneDNN
supports DT_INT64 only on platforms with AVX-512. Falling back to the default
Eigen-based implementation`, when oneDNN's graph pass first meets an int64
Transpose (Keras's TensorFlow `take_along_axis` transposes int64 indices, so
every masked-LM model has one). It is a notice, not an error, and TensorFlow
prints it once a process (`absl::call_once`): the import spends it on a
two-by-three int64 transpose while descriptor 2 is captured.

The lines come back with the command's `--verbose`, or when the user sets
`TF_CPP_MIN_LOG_LEVEL` themselves: the user's choice wins.

The same call makes this project's own warnings (a checkpoint's notes, a tokenizer setting it
reads otherwise) one `warning: ...` line each, not Python's `path:line: UserWarning: ...` and
the source line that raised it; other libraries' warnings keep their form.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import threading

# Start-up lines of TensorFlow 2.21's native libraries on a machine without a
# GPU (and the CPU-feature notice, which continues on a second line).
STARTUP_LINES = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called"
    r"|^[IWE]\d{4} [\d:. ]+\d+ (port|cudart_stub|cpu_feature_guard|cuda_platform|cuda_executor"
    r"|cuda_dnn|cuda_fft|cuda_blas|computation_placer)\.cc:\d+\]"
    r"|^E\d{4} [\d:. ]+\d+ util\.cc:\d+\] oneDNN supports DT_\w+ only on platforms with AVX-512"
    r"|^To enable the following instructions: .* rebuild TensorFlow with the appropriate "
    r"compiler flags\.$"
)


def import_tensorflow_quietly(verbose: bool = False, setup=None) -> None:
    """Imports TensorFlow with its C++ start-up lines filtered from stderr.

    Does nothing with `verbose`, when the user has set TF_CPP_MIN_LOG_LEVEL,
    when TensorFlow is already imported, or under KERAS_BACKEND=jax (whose
    runs import no TensorFlow). Otherwise also sets TF_CPP_MIN_LOG_LEVEL=2,
    so TensorFlow's later C++ INFO and WARNING lines stay off too.
    `setup()` runs just before the first op (which initialises TensorFlow's logical
    devices), its output not filtered: `--cpu-replicas` splits the CPU there, and
    `model.train` makes a multi-worker strategy (which configures collective ops).
    """
    plain_warnings()
    if verbose or "TF_CPP_MIN_LOG_LEVEL" in os.environ or "tensorflow" in sys.modules:
        return
    if os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"

    def start():
        import tensorflow as tf

        tf.config.list_physical_devices()  # device discovery logs the CUDA lines now

    def first_op():
        import tensorflow as tf

        tf.function(tf.transpose)(tf.zeros((2, 3), tf.int64))  # the oneDNN notice, now

    try:
        _filtered(start)
    except ImportError:
        return  # a command that needs TensorFlow says so itself
    if setup is not None:
        setup()  # in the open: a multi-worker strategy may wait for its peers here
    _filtered(first_op)


# LiteRT's one line an interpreter, when it first allocates its tensors (ai-edge-litert 2.3
# has no switch for its C++ logger).
LITERT_LINES = re.compile(r"^INFO: Created TensorFlow Lite XNNPACK delegate for CPU\.$")


_CAPTURING = threading.RLock()


def _filtered(step, lines: re.Pattern = STARTUP_LINES):
    """Runs `step()` with stderr (the file descriptor: TensorFlow's C++ writes there) captured,
    then prints what it wrote but the `lines` (TensorFlow's start-up lines), whether or not it
    raised; returns what `step()` returns."""
    with _CAPTURING:  # one capture at a time: two threads' would leave descriptor 2 closed
        return _captured(step, lines)


def _captured(step, lines: re.Pattern):
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            return step()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", errors="replace")
            kept = [line for line in text.splitlines() if not lines.search(line)]
            if kept:
                print("\n".join(kept), file=sys.stderr)


def quiet_litert(step):
    """`step()` (one that allocates a LiteRT interpreter's tensors) without LiteRT's "INFO:
    Created TensorFlow Lite XNNPACK delegate for CPU." line on stderr (a notice that says
    nothing the user can act on, on every load); anything else it writes there is passed on.
    Returns what `step()` returns."""
    try:
        os.fstat(2)
    except OSError:  # no stderr to keep it off (a daemon's closed descriptor 2)
        return step()
    return _filtered(step, LITERT_LINES)


class ProjectWarning(UserWarning):
    """What this project warns of (a checkpoint's notes, a setting it reads otherwise)."""


def plain_warnings() -> None:
    """Formats `ProjectWarning`s as `warning: MESSAGE` (see the module docstring)."""
    import warnings

    original = warnings.formatwarning
    if getattr(original, "plain", False):
        return

    def formatwarning(message, category, filename, lineno, line=None):
        if issubclass(category, ProjectWarning):
            return f"warning: {message}\n"
        return original(message, category, filename, lineno, line)

    formatwarning.plain = True
    warnings.formatwarning = formatwarning
