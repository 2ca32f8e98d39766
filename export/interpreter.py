"""`TFLiteModel`: a `.tflite` file behind the `predict(x) -> outputs` interface of `model.tasks`.

    from export.interpreter import TFLiteModel
    m = TFLiteModel("bundles/sst2/model.tflite")               # 2 threads
    m.predict({"token_ids": ids, "segment_ids": seg, "padding_mask": mask})  # {"logits": ...}
    task.evaluate(m, examples, tokenizer, seq_len)              # Keras-like outputs, see __call__
    TFLiteModel("bundles/mlm/model.tflite").signature("encoder").predict(x)  # another signature

Imports only numpy, ai_edge_litert and the standard library (`model.io.native_logs`, which
keeps LiteRT's "INFO: Created ... XNNPACK delegate" line off stderr): the edge runtime uses it.

The project's exports have a dynamic signature, every input (-1, -1) (multiple
choice: (-1, choices, -1)): `predict` resizes the inputs to exactly what it is
given, so one sentence runs at its own length with no padding. A file with a
fixed length or batch (e.g. from another exporter) works too: inputs are
padded to the fixed shape (rows in chunks of the fixed batch) and every output
axis as long as the fixed length is sliced back to the real length.

A file may hold several signatures (a pre-training bundle's "encoder" beside
its "serving_default"); `signature(key)` is the same file's other signature,
on the same interpreter (the weights are loaded once) and taking turns with
it.
"""

from __future__ import annotations

import copy
import json
import os
import threading

import numpy as np
from ai_edge_litert.interpreter import Interpreter

from model.io.native_logs import quiet_litert

SIGNATURE = "serving_default"
# Inputs whose last axis is the token axis (mask_positions' is not).
SEQUENCE_INPUTS = ("token_ids", "segment_ids", "padding_mask")


class TFLiteModel:
    """One LiteRT model and one of its signatures (`serving_default` unless told).

    Args:
        path: the `.tflite` file.
        num_threads: CPU threads of the interpreter.
        max_seq_length: the longest token axis `predict` accepts; None reads
            `max_seq_length` from a `bundle.json` beside the file, if any.
        signature: the signature `predict` runs.

    Attributes:
        signature_key: that signature's key.
        signatures: every signature key of the file, sorted.
        input_details: {input name: LiteRT tensor details (shape_signature, dtype, ...)}.
        output_names: the output names, sorted.
    """

    def __init__(
        self,
        path: str,
        num_threads: int = 2,
        max_seq_length: int | None = None,
        signature: str = SIGNATURE,
    ):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such .tflite file")
        self.path = path
        try:
            self.interpreter = Interpreter(model_path=path, num_threads=num_threads)
            quiet_litert(self.interpreter.allocate_tensors)  # now, its INFO line kept off
        except (ValueError, RuntimeError) as e:
            raise ValueError(f"{path}: not a loadable LiteRT model ({e})") from None
        self.signatures = sorted(self.interpreter.get_signature_list())
        self.max_seq_length = max_seq_length or _bundle_max_length(path)
        # LiteRT interpreters are not thread-safe; a Gradio app calls from several threads.
        # Every signature of the file runs on this one interpreter, so they share the lock.
        self._lock = threading.Lock()
        self._bind(signature)

    def signature(self, key: str) -> TFLiteModel:
        """The same file's signature `key` (same interpreter and lock, same limits)."""
        other = copy.copy(self)
        other._bind(key)
        return other

    def _bind(self, key: str) -> None:
        if key not in self.signatures:
            raise ValueError(f"{self.path}: no {key!r} signature (found {self.signatures})")
        self.signature_key = key
        self._runner = self.interpreter.get_signature_runner(key)
        self.input_details = self._runner.get_input_details()
        self.output_details = self._runner.get_output_details()
        self.output_names = sorted(self.output_details)
        reference = next(
            (self.input_details[n] for n in SEQUENCE_INPUTS if n in self.input_details), None
        )
        shape = [int(d) for d in reference["shape_signature"]] if reference else []
        # A fixed token axis / batch axis (-1 is dynamic); None when dynamic.
        self.fixed_length = shape[-1] if shape and shape[-1] > 0 else None
        self.fixed_batch = shape[0] if shape and shape[0] > 0 else None

    # === Prediction ===

    def predict(self, x: dict) -> dict[str, np.ndarray]:
        """Outputs by name for inputs `x` ({name: (batch, ..., length) array}).

        Inputs are cast to the model's dtypes; a missing or unknown input, a
        batch size that differs between inputs or a token axis longer than
        `max_seq_length` (or the fixed length) raises ValueError naming it.
        """
        inputs = self._check(x)
        batch = len(next(iter(inputs.values())))
        length = next((inputs[n].shape[-1] for n in SEQUENCE_INPUTS if n in inputs), None)
        if self.fixed_length is not None and length != self.fixed_length:
            inputs = {
                n: _pad_axis(v, -1, self.fixed_length) if n in SEQUENCE_INPUTS else v
                for n, v in inputs.items()
            }
        step = self.fixed_batch or batch
        chunks = []
        for start in range(0, batch, step):
            part = {n: v[start : start + step] for n, v in inputs.items()}
            if self.fixed_batch is not None:
                part = {n: _pad_axis(v, 0, self.fixed_batch) for n, v in part.items()}
            with self._lock:
                try:
                    out = self._runner(**part)
                except (ValueError, RuntimeError) as e:
                    shapes = {n: v.shape for n, v in part.items()}
                    raise ValueError(
                        f"{self.path}: inference failed for inputs {shapes}: {e}"
                    ) from None
            rows = min(step, batch - start)
            chunks.append({n: np.array(out[n][:rows]) for n in self.output_names})
        outputs = {
            n: np.concatenate([c[n] for c in chunks]) if len(chunks) > 1 else chunks[0][n]
            for n in self.output_names
        }
        if self.fixed_length is not None and length is not None and length != self.fixed_length:
            outputs = {n: _cut_axes(v, self.fixed_length, length) for n, v in outputs.items()}
        return outputs

    def __call__(self, x: dict):
        """Outputs shaped as the Keras model returns them: the array itself for a
        one-output model (classifiers, taggers, multiple choice), else the dict.
        This is the form `model.tasks.*.evaluate` reads, e.g.
        `task.evaluate(TFLiteModel(path), examples, tokenizer, seq_len)`."""
        outputs = self.predict(x)
        return next(iter(outputs.values())) if len(outputs) == 1 else outputs

    def _check(self, x: dict) -> dict[str, np.ndarray]:
        missing = sorted(set(self.input_details) - set(x))
        unknown = sorted(set(x) - set(self.input_details))
        if missing or unknown:
            raise ValueError(
                f"{self.path}: inputs {sorted(x)} do not match the model's "
                f"{sorted(self.input_details)} (missing {missing}, unknown {unknown})"
            )
        inputs = {}
        rows = {name: len(np.asarray(x[name])) if np.ndim(x[name]) else 0 for name in x}
        if len(set(rows.values())) > 1:
            raise ValueError(f"{self.path}: inputs have different numbers of rows {rows}")
        for name, detail in self.input_details.items():
            value = np.asarray(x[name])
            rank = len(detail["shape_signature"])
            if value.ndim != rank:
                raise ValueError(
                    f"{self.path}: input {name!r} has shape {value.shape}; the "
                    f"model takes rank {rank} ({_shape(detail)})"
                )
            if name in SEQUENCE_INPUTS:
                limit = self.fixed_length or self.max_seq_length
                if limit is not None and value.shape[-1] > limit:
                    raise ValueError(
                        f"{self.path}: input {name!r} has {value.shape[-1]} tokens; "
                        f"this model takes at most {limit}"
                    )
            if np.issubdtype(value.dtype, np.integer) and value.size and value.min() < 0:
                raise ValueError(
                    f"{self.path}: input {name!r} holds {value.min()}; ids are 0 or more"
                )
            inputs[name] = np.ascontiguousarray(value, dtype=detail["dtype"])
        if not next(iter(rows.values())):
            raise ValueError(f"{self.path}: an empty batch (0 rows) has no outputs")
        return inputs


def _shape(detail) -> list[int]:
    return [int(d) for d in detail["shape_signature"]]


def _pad_axis(a: np.ndarray, axis: int, size: int) -> np.ndarray:
    """`a` zero-padded along `axis` to `size` (0 is [PAD] and a masked position)."""
    axis = axis % a.ndim
    missing = size - a.shape[axis]
    if missing <= 0:
        return a
    pad = [(0, 0)] * a.ndim
    pad[axis] = (0, missing)
    return np.pad(a, pad)


def _cut_axes(a: np.ndarray, padded: int, length: int) -> np.ndarray:
    """Every axis after the batch axis that is `padded` long, cut to `length`."""
    index = tuple(
        slice(0, length) if i > 0 and n == padded else slice(None) for i, n in enumerate(a.shape)
    )
    return a[index]


def _bundle_max_length(path: str) -> int | None:
    info = os.path.join(os.path.dirname(os.path.abspath(path)), "bundle.json")
    try:
        with open(info, encoding="utf-8") as f:
            value = json.load(f).get("max_seq_length")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None
