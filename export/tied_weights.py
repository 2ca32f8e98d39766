"""One stored copy of a tied embedding in a dynamic-range (`dynamic`) `.tflite` file.

A masked-LM head decodes with the token embedding itself (`x @ E^T`), and
TFLite's FULLY_CONNECTED takes its weights as (units, inputs): the embedding
table (vocabulary, hidden) as it is. The converter still stores it twice in a
dynamic-range file, since it quantizes the two uses differently: the GATHER
that embeds the tokens gets one int8 scale for the whole table, the decoder
per-row scales. On all-MiniLM-L6-v2's size that is 11.7 MB of a 36.6 MB file.

`share_tied_embeddings` points each such decoder at the gather's table (its
int8 bytes and its one scale) and drops the decoder's own copy. It acts only
where the two are provably the same weight (the same shape, and the same
values to within their quantization steps), and only where the decoder is
hybrid (float input and bias, int8 weights), the one case in which the
weights' scale can change alone; full-integer files fold the weight scale
into the bias and are left as they are. The cost on the CPU-trained fill-mask
model (docs/export.md): WikiText-2 valid top-1 41.51 -> 41.47 %, 36.6 -> 24.5 MB.
"""

from __future__ import annotations

import numpy as np

GATHER = 36  # tflite BuiltinOperator codes
FULLY_CONNECTED = 9
INT8 = 9  # tflite TensorType
FLOAT32 = 0


def share_tied_embeddings(model_bytes: bytes) -> tuple[bytes, int]:
    """(the file with every tied decoder reading its gather's table, how many
    decoders were re-pointed); the bytes are returned unchanged when none was."""
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(model_bytes))
    shared = 0
    for graph in model.subgraphs:
        tables = {}  # shape -> the gather's int8 table tensor
        for op in _ops(model, graph, GATHER):
            table = graph.tensors[op.inputs[0]]
            if table.type == INT8 and _data(model, table) is not None:
                tables[tuple(table.shape)] = table
        for op in _ops(model, graph, FULLY_CONNECTED):
            weights = graph.tensors[op.inputs[1]]
            table = tables.get(tuple(weights.shape))
            if table is None or weights.buffer == table.buffer or not _hybrid(graph, op):
                continue
            if not _same_weight(model, weights, table):
                continue
            model.buffers[weights.buffer].data = None
            weights.buffer, weights.quantization = table.buffer, table.quantization
            shared += 1
    if not shared:
        return model_bytes, 0
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model)), shared


def _ops(model, graph, code: int):
    return [op for op in graph.operators if model.operatorCodes[op.opcodeIndex].builtinCode == code]


def _data(model, tensor):
    data = model.buffers[tensor.buffer].data
    return None if data is None or len(data) == 0 else np.asarray(data, np.uint8).view(np.int8)


def _hybrid(graph, op) -> bool:
    """Float input, int8 weights, float (or no) bias: the weights' scale is free."""
    inputs = list(op.inputs)
    bias_ok = len(inputs) < 3 or inputs[2] < 0 or graph.tensors[inputs[2]].type == FLOAT32
    return (
        graph.tensors[inputs[0]].type == FLOAT32
        and graph.tensors[inputs[1]].type == INT8
        and bias_ok
    )


def _dequantized(model, tensor) -> tuple[np.ndarray, float]:
    """(float values, the largest quantization step) of an int8 constant,
    per-tensor or per-channel (along its quantized dimension)."""
    q = tensor.quantization
    values = _data(model, tensor).astype(np.float32).reshape(tensor.shape)
    scale = np.asarray(q.scale, np.float32)
    zero = np.asarray(q.zeroPoint if q.zeroPoint is not None else 0, np.float32)
    if scale.size > 1:
        shape = [1] * values.ndim
        shape[q.quantizedDimension] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape) if zero.size > 1 else zero
    return (values - zero) * scale, float(scale.max())


def _same_weight(model, a, b) -> bool:
    """Whether two int8 constants hold one float weight: every value within half
    a quantization step of each (what rounding the same float can differ by)."""
    if _data(model, a) is None or _data(model, b) is None:
        return False
    (x, step_x), (y, step_y) = _dequantized(model, a), _dequantized(model, b)
    return bool(np.abs(x - y).max() <= 0.5 * (step_x + step_y) * (1 + 1e-5))
