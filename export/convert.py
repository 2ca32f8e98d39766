"""Keras model -> `.tflite` bytes: the serving function of each task and the quantization variants.

    python -m export --model runs/ft/sst2 --quantize dynamic --out bundles/sst2   # uses this

The path is the one that keeps the weights: `keras.export.ExportArchive`
(tracks every variable) -> SavedModel in a temporary directory that is always
removed -> `tf.lite.TFLiteConverter.from_saved_model`, built-in ops only (no
Flex ops: the LiteRT runtime does not ship them). Never `tf.saved_model.save`
or `from_concrete_functions` on a Keras 3 model: they write a file without its
weights that silently outputs NaN (`tests/test_export.py` checks that
verification refuses one).

Serving functions (the bundle contract, `export/README.md`), every
input int32 with a dynamic batch and length:

    classifier, token_classifier, multiple_choice   {"logits"}
    question_answerer                               {"start_logits", "end_logits"}
    pretraining   + mask_positions -> {"topk_ids" int32, "topk_probs"} (batch, masks, k),
                                      {"nsp_probs"} (batch, 2) with an NSP head
    encoder       {"sequence_output", "pooled_output", "attention_probs"}
                  (BertEncoder.with_attention(): (batch, layers, heads, length, length))
    replaced_token_detection   {"rtd"} (batch, length): ELECTRA's discriminator logits,
                  > 0 "replaced" (an `ElectraDiscriminator`, or an `ElectraPretrainer`'s
                  encoder and replaced-token head: the same weights)
    generator     + mask_positions -> {"mlm"} (batch, masks, vocabulary) float32: an
                  `ElectraPretrainer`'s generator, its masked-LM logits over the whole
                  vocabulary (the runtime samples from their softmax, as pre-training does,
                  so a top-k cut would change the draws)

Each but the last is the file's "serving_default" signature of its task. A
pre-training or ELECTRA bundle also gets an "encoder" signature (`signatures(...,
encoder_signature=True)`): its encoder's serving function (ELECTRA's: the
discriminator's encoder), the encoder contract above, so the fill-mask or
replaced-token bundle draws attention maps and gives features too and no
separate encoder bundle is needed. An ELECTRA bundle exported from a
pre-training run gets a "generator" signature (`generator_signature=True`).
TFLite keeps one subgraph per signature but one copy of every weight buffer
(the converter shares identical constants): measured on the MiniLM-L6 size
(random weights, vocabulary 30,522) the file grows by 0.13 % in float32
(91.44 -> 91.57 MB) and 1.05 % in dynamic (35.89 -> 36.27 MB: each subgraph
keeps its own per-channel quantization scales), and the default signature's
outputs and speed are unchanged (the same numbers, bit for bit).

Quantizations:

    float32   as trained
    float16   weights stored as float16, computed in float32 (half the size)
    dynamic   weights int8 (per channel), activations quantized on the fly; a tied
              decoder shares the token embedding's table (`export.tied_weights`)
    int8      full integer: weights and activations int8, activation ranges
              calibrated on real examples (`representative` batches)

The attention mask. Keras' `Softmax` replaces masked scores by -1e9 before
the softmax (`where(mask, scores, -1e9)`). Exact in float, but in a full-int8
model that tensor's calibrated range then spans 1e9 and every real score
rounds to the same integer. The export traces the model with the masked value
`mask_value` (default -120) instead: exp(-120) underflows to 0 in float32, so
float models are unchanged, while int8 keeps a usable scale. Keras' Softmax
also zeroes the masked probabilities afterwards, so the value only matters
for the normalisation. `python -m export.report` measures the difference.

Full int8 and real BERTs. Per-tensor int8 activations cannot hold both the
large outliers of a trained BERT's residual stream and the small values that
matter, and LayerNorm's variance (MEAN of squares, RSQRT) is where it shows
most (TensorFlow's quantization debugger ranks those ops worst on MiniLM).
`float_ops=FLOAT_LAYERNORM_OPS` (`python -m export --quantize int8
--int8-float-layernorm`) keeps those ops and the residual adds in float
(selective quantization; matmuls, embeddings, GELU and softmax stay int8).
Measured on the MiniLM SST-2 model (`python -m export.report`, 872 dev
sentences; Keras 89.11 %): full int8 83.49 % (logits relative
error 0.43: refused by verification), int8 with float LayerNorm 87.96 %
(verified), full int8 traced with Keras' -1e9 mask 58.49 %; dynamic-range
88.76 % at 26 % of the float32 size and half its latency.
"""

from __future__ import annotations

import contextlib
import tempfile
import warnings

from export.bundle import (
    DEFAULT_SIGNATURE,
    ENCODER_SIGNATURE,
    ENCODER_SIGNATURE_TASKS,
    GENERATOR_SIGNATURE,
    QUANTIZATIONS,
    REPLACED_TOKEN_TASK,
)
from export.interpreter import SEQUENCE_INPUTS
from export.tied_weights import share_tied_embeddings

DEFAULT_MASK_VALUE = -120.0
# LayerNormalization's arithmetic (and with ADD the residual sums it normalises):
# the int8 op types that `--int8-float-layernorm` keeps in float (module docstring).
FLOAT_LAYERNORM_OPS = ("MEAN", "SQUARED_DIFFERENCE", "RSQRT", "SUB", "MUL", "ADD")
DEFAULT_TOP_K = 5


# === Serving functions ===


def serving(model, task: str, top_k: int = DEFAULT_TOP_K, next_sentence: bool = False):
    """(fn, input_signature, model to track): `fn(x)` returns the contract's
    outputs for the Keras `model` of `task`; the signature is a dict of
    `tf.TensorSpec`s with dynamic batch and length."""
    import tensorflow as tf
    from keras import ops

    def spec(name, shape):
        return tf.TensorSpec(shape, tf.int32, name=name)

    signature = {name: spec(name, [None, None]) for name in SEQUENCE_INPUTS}
    tracked = model
    if task == "encoder":
        tracked = model.with_attention()

        def fn(x):
            out = tracked(x, training=False)
            return {k: out[k] for k in ("sequence_output", "pooled_output", "attention_probs")}
    elif task == "pretraining":
        vocabulary_size = model.encoder.config.vocabulary_size
        if not 1 <= top_k <= vocabulary_size:
            raise ValueError(f"top_k must be in 1..{vocabulary_size}, got {top_k}")
        signature["mask_positions"] = spec("mask_positions", [None, None])

        def fn(x):
            out = model(x, training=False)
            probs = ops.softmax(out["mlm"], axis=-1)  # (batch, masks, vocabulary_size)
            values, ids = ops.top_k(probs, k=top_k)  # (batch, masks, k)
            result = {"topk_ids": ops.cast(ids, "int32"), "topk_probs": values}
            if next_sentence:
                result["nsp_probs"] = ops.softmax(out["nsp"], axis=-1)  # (batch, 2)
            return result
    elif task == REPLACED_TOKEN_TASK:
        # An ElectraDiscriminator and an ElectraPretrainer both keep the discriminator as
        # `encoder` + `replaced_token_head`; the pre-trainer's own call would corrupt the input.
        encoder, head = _parts(model, task, "encoder", "replaced_token_head")

        def fn(x):
            sequence = encoder(x, training=False)["sequence_output"]  # (batch, length, hidden)
            return {"rtd": ops.cast(head(sequence), "float32")}  # (batch, length)
    elif task == "generator":
        generator, head = _parts(model, task, "generator", "masked_lm_head")
        signature["mask_positions"] = spec("mask_positions", [None, None])

        def fn(x):
            inputs = {k: x[k] for k in SEQUENCE_INPUTS}
            sequence = generator(inputs, training=False)["sequence_output"]
            logits = head(sequence, mask_positions=x["mask_positions"])  # (batch, masks, vocab)
            return {"mlm": ops.cast(logits, "float32")}
    elif task == "question_answerer":

        def fn(x):
            out = model(x, training=False)
            return {"start_logits": out["start_logits"], "end_logits": out["end_logits"]}
    elif task in ("classifier", "token_classifier", "multiple_choice"):
        if task == "multiple_choice":
            # (batch, choices, length); a fixed number of choices when the model has one.
            signature = {
                name: spec(name, [None, model.num_choices, None]) for name in SEQUENCE_INPUTS
            }

        def fn(x):
            return {"logits": model(x, training=False)}
    else:
        raise ValueError(f"cannot export task {task!r}")
    return fn, signature, tracked


def _parts(model, task: str, *names: str) -> tuple:
    """The sublayers `names` of `model`, or ValueError naming the model that lacks them."""
    missing = [n for n in names if getattr(model, n, None) is None]
    if missing:
        raise ValueError(
            f"cannot export task {task!r} from a {type(model).__name__}: it has no "
            f"{', '.join(missing)} (an ELECTRA model directory has)"
        )
    return tuple(getattr(model, n) for n in names)


def signatures(
    model,
    task: str,
    top_k: int = DEFAULT_TOP_K,
    next_sentence: bool = False,
    encoder_signature: bool = False,
    generator_signature: bool = False,
) -> dict:
    """{signature key: `serving(...)`'s triple}: the task's own under "serving_default"
    and, with `encoder_signature` (pretraining and ELECTRA models), the model's encoder's
    (the encoder contract; ELECTRA's discriminator's) under "encoder"; with `generator_signature` (an ELECTRA
    pre-trainer exported as "replaced_token_detection"), its generator's under "generator"."""
    result = {DEFAULT_SIGNATURE: serving(model, task, top_k, next_sentence)}
    if encoder_signature:
        if task not in ENCODER_SIGNATURE_TASKS:
            raise ValueError(
                f"an {ENCODER_SIGNATURE!r} signature is for "
                f"{' and '.join(ENCODER_SIGNATURE_TASKS)} models, not {task!r} ones"
            )
        result[ENCODER_SIGNATURE] = serving(model.encoder, "encoder")
    if generator_signature:
        if task != REPLACED_TOKEN_TASK:
            raise ValueError(
                f"a {GENERATOR_SIGNATURE!r} signature is for ELECTRA models, not {task!r} ones"
            )
        result[GENERATOR_SIGNATURE] = serving(model, GENERATOR_SIGNATURE)
    return result


def keras_outputs(fn, x: dict) -> dict:
    """The serving function run eagerly by Keras itself (its own -1e9 mask):
    the reference an export is verified against. {name: numpy array}."""
    out = fn({k: _as_int32(v) for k, v in x.items()})
    return {k: v.numpy() if hasattr(v, "numpy") else v for k, v in out.items()}


def keras_generator(model, task: str):
    """`predict(inputs) -> {"mlm": logits}`: the generator of an ELECTRA pre-training run
    (`task` the model directory's, "electra_pretraining"), run by Keras, which corrupts text
    as pre-training does; None for any other model (a discriminator alone has none)."""
    if task != "electra_pretraining":
        return None
    fn = serving(model, "generator")[0]
    return lambda x: keras_outputs(fn, x)


def _as_int32(v):
    import numpy as np

    return np.ascontiguousarray(v, dtype=np.int32)


# === The attention mask value ===


@contextlib.contextmanager
def attention_mask_value(value: float):
    """While active, Keras' masked softmax (and its fused dot-product
    attention, used when attention dropout is 0) fill masked scores with
    `value` instead of -1e9 / -2.4e38. Only for tracing an export: both
    functions are module globals read at call time."""
    import tensorflow as tf
    from keras.src.backend.tensorflow import nn as tf_nn
    from keras.src.layers.activations import softmax

    saved = softmax._large_negative_number, tf_nn._get_large_negative
    softmax._large_negative_number = lambda dtype: value
    tf_nn._get_large_negative = lambda dtype: tf.constant(value, dtype=dtype)
    try:
        yield
    finally:
        softmax._large_negative_number, tf_nn._get_large_negative = saved


# === Conversion ===


def to_tflite(
    model,
    task: str,
    quantization: str = "float32",
    representative=None,
    top_k: int = DEFAULT_TOP_K,
    next_sentence: bool = False,
    mask_value: float | None = DEFAULT_MASK_VALUE,
    float_ops=(),
    encoder_signature: bool = False,
    generator_signature: bool = False,
) -> bytes:
    """The `.tflite` bytes of `model` (see the module docstring).

    Args:
        representative: int8 only: a callable returning an iterable of input
            dicts (real examples, in batches with padding, so the masked value's
            range is calibrated too); with an encoder signature its activations
            are calibrated on the same batches. An item may instead be
            {signature key: input dict}, each signature's own inputs (an ELECTRA
            discriminator reads corrupted text, its generator masked text).
        mask_value: the masked attention score traced into the file; None keeps
            Keras' own -1e9.
        float_ops: int8 only: TFLite op types left in float (selective
            quantization), e.g. `FLOAT_LAYERNORM_OPS`; () is full integer.
        encoder_signature: add the "encoder" signature (`signatures`).
        generator_signature: add the "generator" signature (`signatures`).
    """
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"unknown quantization {quantization!r}; choose from {QUANTIZATIONS}")
    if quantization == "int8" and representative is None:
        raise ValueError("int8 needs a representative dataset of real examples")
    functions = signatures(
        model, task, top_k, next_sentence, encoder_signature, generator_signature
    )
    mask = attention_mask_value(mask_value) if mask_value is not None else contextlib.nullcontext()
    with tempfile.TemporaryDirectory(prefix="export-savedmodel-") as saved_model, mask:
        _write_archive(functions, saved_model)
        converter = _converter(saved_model, quantization, representative, functions)
        with warnings.catch_warnings():
            # int8 calibration runs TensorFlow's own (deprecated) tf.lite.Interpreter.
            warnings.filterwarnings("ignore", message=".*tf.lite.Interpreter is deprecated")
            if quantization == "int8" and float_ops:
                return _selective_int8(converter, list(float_ops))
            result = converter.convert()
    if quantization == "dynamic":  # a tied decoder reads the embedding's own int8 table
        result, _ = share_tied_embeddings(result)
    return result


def _write_archive(functions: dict, saved_model: str) -> None:
    """The signatures' functions as a SavedModel in the folder `saved_model`."""
    import keras

    archive = keras.export.ExportArchive()
    for key, (fn, signature, tracked) in functions.items():
        archive.track(tracked)
        # Named as the TFLite signatures: from_saved_model keeps only "serving_default"
        # of a Keras archive that also has Keras' default "serve" endpoint.
        archive.add_endpoint(key, fn, input_signature=[signature])
    archive.write_out(saved_model, verbose=False)


def _converter(saved_model: str, quantization: str, representative, functions: dict):
    """The TFLite converter of `saved_model`, set for `quantization`."""
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantization != "float32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantization == "float16":
        converter.target_spec.supported_types = [tf.float16]
    if quantization == "int8":
        converter.representative_dataset = lambda: _calibration_samples(representative, functions)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    return converter


def _calibration_samples(representative, functions: dict):
    """The representative batches as the converter takes them: input dicts for
    one signature, (signature key, inputs) pairs (each batch for every
    signature, with only its inputs) for several. A batch given per signature
    ({key: inputs}) gives each signature its own inputs."""
    for batch in representative():
        per_signature = all(isinstance(v, dict) for v in batch.values())
        if per_signature and not set(batch) <= set(functions):
            raise ValueError(
                f"calibration inputs for signatures {sorted(set(batch) - set(functions))} the "
                f"file does not have (it has {sorted(functions)})"
            )
        for key, (_, signature, _) in functions.items():
            x = batch.get(key) if per_signature else batch
            if x is None:
                continue
            x = {k: _as_int32(v) for k, v in x.items() if k in signature}
            yield x if len(functions) == 1 else (key, x)


def _selective_int8(converter, float_ops: list[str]) -> bytes:
    """Calibrated int8 with the op types `float_ops` left in float, through
    TensorFlow's public selective-quantization tool (the quantization debugger;
    its debug dataset is only read by `run()`, which is not called)."""
    import tensorflow as tf

    converter.target_spec.supported_ops = [
        tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
        tf.lite.OpsSet.TFLITE_BUILTINS,
    ]
    debugger = tf.lite.experimental.QuantizationDebugger(
        converter=converter,
        debug_dataset=converter.representative_dataset,
        debug_options=tf.lite.experimental.QuantizationDebugOptions(denylisted_ops=float_ops),
    )
    return debugger.get_nondebug_quantized_model()
