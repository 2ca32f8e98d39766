"""Which Keras backend a command will run on, checked before Keras is imported.

On a GPU machine with JAX and no TensorFlow, Keras still picks TensorFlow unless told
otherwise, and fails deep inside an import (`No module named 'tensorflow'`). The
commands call these first, so that such a machine gets one line with the fix.
"""

from __future__ import annotations

import importlib.util
import json
import os


def keras_backend() -> str:
    """The backend Keras will pick: KERAS_BACKEND, else keras.json's (KERAS_HOME or
    ~/.keras), else "tensorflow" (Keras's own order)."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json"), encoding="utf-8") as f:
            return str(json.load(f).get("backend") or "tensorflow")
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def has_tensorflow() -> bool:
    return importlib.util.find_spec("tensorflow") is not None


def check_keras_backend() -> None:
    """Raises SystemExit (one line) when Keras would pick TensorFlow and it is not installed."""
    if keras_backend() == "tensorflow" and not has_tensorflow():
        jax = importlib.util.find_spec("jax") is not None
        raise SystemExit(
            "error: Keras would run on TensorFlow, which is not installed here"
            + (
                "; set KERAS_BACKEND=jax (JAX is)"
                if jax
                else "; install it, or JAX with KERAS_BACKEND=jax"
            )
        )
