"""A pre-training bundle's "encoder" signature: attention maps (and features) from the fill-mask
bundle, so the app needs no separate encoder bundle (tiny models, seconds each).

    PYTHONPATH=. TF_CPP_MIN_LOG_LEVEL=3 python -m pytest -q tests/test_attention_bundle.py
    BERT_EDGE_VENV=/tmp/edge-venv PYTHONPATH=. python -m pytest -q tests/test_attention_bundle.py

One tiny random pre-trainer is exported four times: float32 and dynamic with the signature
(today's default), and without it (`encoder_signature=False`); the float32 one, its bundle.json
stripped of "signatures" and "methods", is a bundle written before signatures existed.
Attention maps are compared with the Keras encoder's `with_attention()` on the same tokens:
float32 to 1e-5 (rounding); dynamic to the relative error export/verify.py allows a dynamic
export (`THRESHOLDS["dynamic"]`, 0.15; measured ~0.01 here) and to 0.05 in any one probability.
A full-int8 export checks that both signatures are calibrated. One test runs the runtime in
the TensorFlow-free environment of tests/test_runtime.py (built
there, or at $BERT_EDGE_VENV).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from tests.test_export import TASK_INFOS, export, make_model_dir
from tests.test_runtime import ROOT, _edge_env, edge_python  # noqa: F401 (a fixture)

TEXT, PAIR = "The cat sat on the mat.", "Where is it?"
FILL = "The cat sat on the [MASK], the dog [MASK] ."
MAX_ABS_DYNAMIC = 0.05


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """{"model": model directory, "float32", "dynamic": bundles with the encoder signature,
    "plain", "plain-dynamic": without it, "old": "plain" as bundles were written before
    signatures}."""
    parent = tmp_path_factory.mktemp("attention")
    directory = make_model_dir(parent, "pretraining", TASK_INFOS["pretraining"])
    out = {"model": directory}
    for name, quantization, signature in (
        ("float32", "float32", None),
        ("dynamic", "dynamic", None),
        ("plain", "float32", False),
        ("plain-dynamic", "dynamic", False),
    ):
        out[name] = str(parent / name)
        export(directory, out[name], quantization, encoder_signature=signature)
    out["old"] = str(parent / "old")
    shutil.copytree(out["plain"], out["old"])
    path = os.path.join(out["old"], "bundle.json")
    with open(path, encoding="utf-8") as f:
        info = json.load(f)
    del info["signatures"], info["methods"]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(info, f)
    return out


def keras_attention(model_dir: str, result: dict) -> np.ndarray:
    """The Keras encoder's attention probabilities (layers, heads, T, T) on the tokens a
    runtime `attention()` result shows."""
    from model.checkpoints import model_dir as model_dirs
    from model.text.tokenizer import load_vocabulary

    vocab = {t: i for i, t in enumerate(load_vocabulary(os.path.join(model_dir, "vocab.txt")))}
    ids = np.array([[vocab[t] for t in result["tokens"]]], np.int32)
    x = {
        "token_ids": ids,
        "segment_ids": np.array([result["segment_ids"]], np.int32),
        "padding_mask": np.ones_like(ids),
    }
    encoder = model_dirs.load(model_dir).encoder.with_attention()
    return np.asarray(encoder(x, training=False)["attention_probs"])[0]


@pytest.mark.slow
def test_bundle_json_lists_signatures_and_methods(bundles):
    from export import bundle, verify

    info = bundle.read_info(bundles["float32"])
    assert info["methods"] == ["fill_mask", "attention", "features"]
    assert sorted(info["signatures"]) == ["encoder", "serving_default"]
    default, encoder = info["signatures"]["serving_default"], info["signatures"]["encoder"]
    # The default signature is the pretraining contract, as before (top level too).
    assert default["task"] == "pretraining" and default["methods"] == ["fill_mask"]
    assert (
        default["outputs"]
        == info["outputs"]
        == {"topk_ids": [-1, -1, 5], "topk_probs": [-1, -1, 5], "nsp_probs": [-1, 2]}
    )
    assert default["inputs"] == info["inputs"] and "verification" not in default
    # The encoder signature is the encoder contract, verified on its own.
    assert encoder["task"] == "encoder" and encoder["methods"] == ["attention", "features"]
    assert encoder["inputs"] == {n: [-1, -1] for n in ("padding_mask", "segment_ids", "token_ids")}
    assert encoder["outputs"] == {
        "attention_probs": [-1, 2, 2, -1, -1],
        "pooled_output": [-1, 32],
        "sequence_output": [-1, -1, 32],
    }
    for name in ("float32", "dynamic"):
        report = bundle.read_info(bundles[name])["signatures"]["encoder"]["verification"]
        limit = verify.THRESHOLDS[name].max_relative_error
        assert report["passed"] and report["quantization"] == name
        assert all(o["relative_error"] <= limit for o in report["outputs"].values())
    plain = bundle.read_info(bundles["plain"])
    assert plain["methods"] == ["fill_mask"] and list(plain["signatures"]) == ["serving_default"]


def buffer_bytes(path: str) -> int:
    """The bytes of every constant buffer (the weights) of a .tflite file."""
    from tensorflow.lite.python import schema_py_generated as schema

    with open(path, "rb") as f:
        model = schema.Model.GetRootAsModel(f.read(), 0)
    return sum(model.Buffers(i).DataLength() for i in range(model.BuffersLength()))


@pytest.mark.slow
@pytest.mark.parametrize("quantization", ["float32", "dynamic"])
def test_the_signature_shares_the_weights(bundles, quantization):
    """The second subgraph adds graph structure (ops, tensors, quantization scales), not a second
    copy of the weights. Measured on the MiniLM-L6 size the file grows by 0.13 % in float32 and
    1.05 % in dynamic (export/convert.py); a tiny model's graph is large next to its weights."""
    plain = os.path.join(
        bundles["plain" if quantization == "float32" else "plain-dynamic"], "model.tflite"
    )
    with_signature = os.path.join(bundles[quantization], "model.tflite")
    assert buffer_bytes(with_signature) <= 1.01 * buffer_bytes(plain)
    assert os.path.getsize(with_signature) > os.path.getsize(plain)


@pytest.mark.slow
@pytest.mark.parametrize("quantization", ["float32", "dynamic"])
def test_attention_from_the_fill_mask_bundle_is_the_keras_encoders(bundles, quantization):
    from export import runtime, verify

    m = runtime.load(bundles[quantization])
    assert m.task == "pretraining" and m.methods == ["fill_mask", "attention", "features"]
    result = m.attention(TEXT, PAIR)
    assert result["tokens"][0] == "[CLS]" and result["segment_ids"][-1] == 1
    got = result["attention"]
    expected = keras_attention(bundles["model"], result)
    assert got.shape == expected.shape == (2, 2, len(result["tokens"]), len(result["tokens"]))
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-3)
    if quantization == "float32":
        np.testing.assert_allclose(got, expected, atol=1e-5)
    else:
        relative = np.sqrt(np.mean((got - expected) ** 2) / np.mean(expected**2))
        assert relative <= verify.THRESHOLDS["dynamic"].max_relative_error, relative
        assert np.abs(got - expected).max() <= MAX_ABS_DYNAMIC
    features = m.features(TEXT)
    assert features["sequence_output"].shape == (len(features["tokens"]), 32)


@pytest.mark.slow
def test_fill_mask_is_unchanged_by_the_signature(bundles):
    from export import runtime

    with_signature = runtime.load(bundles["float32"]).fill_mask(FILL)
    without = runtime.load(bundles["plain"]).fill_mask(FILL)
    assert with_signature == without


@pytest.mark.slow
def test_old_bundles_still_fill_masks_and_say_what_attention_needs(bundles, tmp_path):
    from export import runtime

    old = runtime.load(bundles["old"])
    assert old.methods == ["fill_mask"]
    assert old.fill_mask(FILL) == runtime.load(bundles["plain"]).fill_mask(FILL)
    for method in (old.attention, old.features):
        with pytest.raises(
            ValueError,
            match="needs an encoder bundle \\(or a pretraining or a replaced_token_detection "
            'bundle with an "encoder" signature: this one was exported without it',
        ):
            method(TEXT)
    # bundle.json promising a signature the file lacks is refused when loaded.
    broken = tmp_path / "broken"
    shutil.copytree(bundles["plain"], broken)
    info = json.loads((broken / "bundle.json").read_text())
    info["signatures"]["encoder"] = {"task": "encoder"}
    (broken / "bundle.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match="no 'encoder' signature, which bundle.json lists"):
        runtime.load(str(broken))


EDGE_SCRIPT = r"""
import json, sys
from export import runtime

m = runtime.load(sys.argv[1])
result = m.attention(sys.argv[2], sys.argv[3])
heavy = sorted(name for name in sys.modules if name.split(".")[0] in
               ("tensorflow", "keras", "tensorflow_text", "keras_hub", "jax", "torch"))
print(json.dumps({"methods": m.methods, "attention": result["attention"].tolist(),
                  "heavy_modules": heavy}))
"""


@pytest.mark.slow
def test_attention_signature_in_the_edge_environment(bundles, edge_python):
    """numpy + LiteRT only (export/requirements-edge.txt): the same maps, nothing heavy."""
    from export import runtime

    result = subprocess.run(
        [edge_python, "-c", EDGE_SCRIPT, bundles["dynamic"], TEXT, PAIR],
        capture_output=True,
        text=True,
        timeout=600,
        env=_edge_env(),
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    edge = json.loads(result.stdout)
    assert edge["heavy_modules"] == []
    assert edge["methods"] == ["fill_mask", "attention", "features"]
    expected = runtime.load(bundles["dynamic"]).attention(TEXT, PAIR)["attention"]
    np.testing.assert_allclose(np.asarray(edge["attention"], np.float32), expected, atol=1e-6)


@pytest.mark.slow
def test_app_attention_view_with_only_a_fill_mask_bundle(bundles, tmp_path):
    from app import models, predict

    root = tmp_path / "models"
    shutil.copytree(bundles["dynamic"], root / "mlm")
    slots = models.load_all(str(root))
    fill, attention = slots["fill_mask"], slots["attention"]
    assert attention.ready and attention.path == str(root / "mlm")
    assert attention.model is fill.model and attention.lock is fill.lock  # loaded once
    assert attention.layers_heads == (2, 2)
    assert "attention() through its encoder" in attention.describe()
    out = predict.attention(attention, TEXT, PAIR, 2, 1, None, predict.Limits())
    assert out["status"].startswith("Layer 2, head 1:"), out["status"]
    n = len(out["raw"]["tokens"])
    assert np.asarray(out["raw"]["attention"]).shape == (n, n)
    assert predict.fill_mask(fill, FILL, 3, predict.Limits())["raw"]["masks"]
    assert not slots["sentiment"].ready

    # An older fill-mask bundle cannot: the view says why and what to do.
    shutil.rmtree(root / "mlm")
    shutil.copytree(bundles["old"], root / "mlm")
    slots = models.load_all(str(root))
    assert slots["fill_mask"].ready and not slots["attention"].ready
    message = slots["attention"].describe()
    assert 'exported without an "encoder" signature' in message and "python -m export" in message


@pytest.mark.slow
def test_app_keras_backend_draws_attention_with_a_pretraining_model_directory(bundles, tmp_path):
    from app import models

    root = tmp_path / "models"
    shutil.copytree(bundles["model"], root / "mlm")
    slots = models.load_all(str(root), backend="keras")
    attention = slots["attention"]
    assert attention.ready and attention.model is slots["fill_mask"].model
    result = attention.model.attention(TEXT, PAIR)
    np.testing.assert_allclose(
        result["attention"], keras_attention(bundles["model"], result), atol=1e-6
    )


def test_only_pretraining_and_electra_bundles_take_an_encoder_signature(tmp_path, capsys):
    from export.__main__ import main
    from tests.helpers import leftovers

    directory = make_model_dir(tmp_path, "classifier", TASK_INFOS["classifier"])
    assert main(["--model", directory, "--out", str(tmp_path / "b"), "--encoder-signature"]) == 1
    err = capsys.readouterr().err
    assert "only pretraining and replaced_token_detection bundles have one, not classifier" in err
    assert leftovers(tmp_path, "b") == []


@pytest.mark.slow
def test_int8_calibrates_the_encoder_signature_too(bundles, tmp_path, monkeypatch):
    """Full int8: both signatures calibrated on the same batches ((key, inputs) pairs)."""
    from export import bundle, runtime, verify

    # A random tiny pre-trainer's near-tied top-1 words flip under int8 (0.925 agree), with or
    # without the signature: verify at 0.85, as tests/test_export.py does for int8.
    monkeypatch.setitem(
        verify.THRESHOLDS, "int8", verify.Thresholds(max_relative_error=0.30, min_agreement=0.85)
    )
    export(bundles["model"], tmp_path / "int8", "int8", calibration_examples=16)
    report = bundle.read_info(str(tmp_path / "int8"))["signatures"]["encoder"]["verification"]
    assert report["passed"] and report["outputs"]["attention_probs"]["relative_error"] <= 0.30
    result = runtime.load(str(tmp_path / "int8")).attention(TEXT, PAIR)
    expected = keras_attention(bundles["model"], result)
    relative = np.sqrt(np.mean((result["attention"] - expected) ** 2) / np.mean(expected**2))
    assert relative <= 0.30, relative
