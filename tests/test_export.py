"""`python -m export`, its bundles, `TFLiteModel` and `model.evaluate` on a bundle (tiny models).

PYTHONPATH=. TF_CPP_MIN_LOG_LEVEL=3 python -m pytest -q tests/test_export.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import leftovers, random_encoder_inputs, write_sst2, write_task_vocab

TASK_INFOS = {
    "classifier": {
        "task": "classifier",
        "num_labels": 3,
        "id2label": {"0": "neg", "1": "neu", "2": "pos"},
    },
    "token_classifier": {"task": "token_classifier", "num_labels": 5},
    "question_answerer": {"task": "question_answerer"},
    "multiple_choice": {"task": "multiple_choice", "num_choices": 4},
    "pretraining": {"task": "pretraining", "next_sentence": True},
    "encoder": {"task": "encoder"},
}
CONTRACT_OUTPUTS = {
    "classifier": {"logits": [-1, 3]},
    "token_classifier": {"logits": [-1, -1, 5]},
    "question_answerer": {"start_logits": [-1, -1], "end_logits": [-1, -1]},
    "multiple_choice": {"logits": [-1, 4]},
    "pretraining": {"topk_ids": [-1, -1, 5], "topk_probs": [-1, -1, 5], "nsp_probs": [-1, 2]},
    "encoder": {
        "sequence_output": [-1, -1, 32],
        "pooled_output": [-1, 32],
        "attention_probs": [-1, 2, 2, -1, -1],
    },
}


def make_model_dir(parent, name: str, info: dict, extra: dict | None = None) -> str:
    """A `tiny` model directory of `info`'s task, the same weights every run. A
    larger initializer range than BERT's 0.02 makes a random model's outputs
    differ between inputs."""
    import keras

    from model.checkpoints import model_dir
    from model.config import BertConfig
    from model.text.tokenizer import load_vocabulary

    directory = os.path.join(str(parent), name)
    vocab = write_task_vocab(os.path.join(str(parent), f"{name}-vocab.txt"))
    config = BertConfig.preset(
        "tiny", vocabulary_size=len(load_vocabulary(vocab)), initializer_range=0.2
    )
    keras.utils.set_random_seed(0)
    model = model_dir.build_model({**info, "encoder": config.to_dict()})
    fields = {
        k: v
        for k, v in info.items()
        if k not in ("task", "num_labels", "next_sentence", "num_choices", "id2label")
    }
    model_dir.save(model, directory, vocab, {**fields, **(extra or {})})
    return directory


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    parent = tmp_path_factory.mktemp("models")
    return {task: make_model_dir(parent, task, info) for task, info in TASK_INFOS.items()}


@pytest.fixture(scope="module")
def bundles(models, tmp_path_factory):
    """A float32 bundle of every task (built-in sentences verify them)."""
    parent = tmp_path_factory.mktemp("bundles")
    return {task: (str(parent / task), export(models[task], parent / task)) for task in models}


@pytest.fixture(scope="module")
def sst2(tmp_path_factory):
    """A classifier "fine-tuned" on SST-2: finetuned_task, max_seq_length and
    a metrics.json naming its dev file, as `python -m model.train finetune` writes."""
    parent = tmp_path_factory.mktemp("sst2")
    data = write_sst2(os.path.join(str(parent), "data"), train=4, dev=40)
    directory = make_model_dir(
        parent,
        "model",
        {"task": "classifier", "num_labels": 2, "id2label": {"0": "0", "1": "1"}},
        {"finetuned_task": "sst2", "max_seq_length": 24},
    )
    with open(os.path.join(directory, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump({"dev_files": {"": os.path.join(data, "dev.tsv")}}, f)
    return directory, os.path.join(data, "dev.tsv")


def quiet(message):
    pass


def export(model_dir, out, quantization="float32", **kwargs) -> dict:
    from export.__main__ import export_bundle

    return export_bundle(str(model_dir), str(out), quantization, log=quiet, **kwargs)


def keras_reference(model_dir, x):
    from export import convert
    from model.checkpoints import model_dir as model_dirs

    info = model_dirs.read_info(model_dir)
    fn, _, _ = convert.serving(
        model_dirs.load(model_dir), info["task"], next_sentence=info.get("next_sentence", False)
    )
    return convert.keras_outputs(fn, x)


# === Every task ===


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(TASK_INFOS))
def test_every_task_exports_a_verified_self_contained_bundle(models, bundles, task):
    from pathlib import Path

    from export import bundle
    from export.interpreter import TFLiteModel

    out, info = bundles[task]
    out = Path(out)
    assert sorted(os.listdir(out)) == sorted(
        ["model.tflite", "vocab.txt", "bundle.json"]
        + (["label_map.json"] if task == "classifier" else [])
    )
    stored = bundle.read_info(str(out))
    assert stored == json.loads(json.dumps(info))
    assert stored["task"] == task and stored["quantization"] == "float32"
    assert stored["max_seq_length"] == 128 and stored["lowercase"] is True
    assert stored["outputs"] == CONTRACT_OUTPUTS[task]
    assert stored[bundle.FILES] == bundle.file_record(str(out))  # checked on every read
    assert all(shape[0] == -1 and shape[-1] == -1 for shape in stored["inputs"].values())
    v = stored["verification"]
    assert v["passed"] and v["data"] == "built-in sentences"
    assert all(o["finite"] and o["relative_error"] < 1e-4 for o in v["outputs"].values())
    if task == "classifier":
        with open(out / "label_map.json", encoding="utf-8") as f:
            assert json.load(f) == {"id2label": TASK_INFOS[task]["id2label"]}
    if task == "pretraining":
        assert stored["top_k"] == 5
    with (
        open(out / "vocab.txt", encoding="utf-8") as f,
        open(os.path.join(models[task], "vocab.txt"), encoding="utf-8") as g,
    ):
        assert f.read() == g.read()

    # Any batch and length: the signature is dynamic.
    x = random_encoder_inputs(3, 11, 60, seed=1, lengths=[11, 7, 4])
    if task == "multiple_choice":
        x = {k: np.stack([v] * 4, axis=1) for k, v in x.items()}  # (3, 4, 11)
    if task == "pretraining":
        x["mask_positions"] = np.array([[1, 5], [2, 3], [1, 2]], np.int32)
    out_lite = TFLiteModel(bundle.model_path(str(out))).predict(x)
    reference = keras_reference(models[task], x)
    assert sorted(out_lite) == sorted(reference)
    for name, expected in reference.items():
        got = out_lite[name]
        if name == "attention_probs":  # only real (query, key) pairs are meaningful
            mask = x["padding_mask"]
            real = mask[:, None, None, :, None] * mask[:, None, None, None, :]
            got, expected = got * real, expected * real
        if task in ("token_classifier", "question_answerer") or name == "sequence_output":
            real = x["padding_mask"].astype(bool)
            got, expected = got[real], expected[real]
        if name == "topk_ids":
            np.testing.assert_array_equal(got[..., 0], expected[..., 0])
        else:
            np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "quantization",
    [
        pytest.param("float16", marks=pytest.mark.slow),
        "dynamic",
        "int8",
        pytest.param("int8+float_ln", marks=pytest.mark.slow),
    ],
)
def test_quantized_exports_verify_and_shrink(models, tmp_path, quantization, monkeypatch):
    from export import verify
    from export.convert import FLOAT_LAYERNORM_OPS

    quantization, _, option = quantization.partition("+")
    # A random tiny classifier's logits are nearly tied, so int8 flips more of
    # its decisions than a trained model's (0.875 here): verify at 0.85.
    monkeypatch.setitem(
        verify.THRESHOLDS, "int8", verify.Thresholds(max_relative_error=0.30, min_agreement=0.85)
    )
    float_ops = FLOAT_LAYERNORM_OPS if option else ()
    info = export(
        models["classifier"],
        tmp_path / "bundle",
        quantization,
        calibration_examples=16,
        float_ops=float_ops,
    )
    float32_size = os.path.getsize(os.path.join(models["classifier"], "model.weights.h5"))
    assert info["conversion"]["size_bytes"] < 0.8 * float32_size
    v = info["verification"]
    assert v["passed"] and v["agreement"] >= 0.85
    assert v["quantization"] == quantization
    calibration = info["conversion"]["calibration"]
    if quantization == "int8":
        assert calibration == {"examples": 16, "data": "built-in sentences"}
        assert info["conversion"]["float_ops"] == list(float_ops)
    else:
        assert calibration is None


def test_clipped_attention_mask_is_what_keeps_int8_accurate(models, tmp_path):
    """Traced with Keras' -1e9, the int8 attention loses its scale (the range of
    the masked scores spans 1e9); -120 keeps it."""
    from export.__main__ import build
    from export.verify import VerificationError

    def relative_error(quantization, mask_value):
        directory = tmp_path / f"{quantization}{mask_value}"
        directory.mkdir()
        try:
            report = build(
                models["token_classifier"],
                str(directory),
                quantization,
                calibration_examples=16,
                mask_value=mask_value,
                log=quiet,
            )["verification"]
        except VerificationError as e:
            report = e.report
        return report["outputs"]["logits"]["relative_error"]

    # (float32 with -120 matches Keras' -1e9 to rounding: test_every_task_... checks it.)
    assert relative_error("int8", -1e9) > 2 * relative_error("int8", -120.0)


def test_attention_mask_value_is_traced_into_keras_softmax():
    import keras

    from export.convert import attention_mask_value

    scores = np.array([[1.0, 2.0, 3.0]], np.float32)
    mask = np.array([[True, True, False]])
    softmax = keras.layers.Softmax()
    with attention_mask_value(-5.0):
        clipped = np.asarray(softmax(scores, mask=mask))
    exact = np.asarray(softmax(scores, mask=mask))
    np.testing.assert_allclose(
        exact,
        [[np.exp(1) / (np.exp(1) + np.exp(2)), np.exp(2) / (np.exp(1) + np.exp(2)), 0.0]],
        rtol=1e-6,
    )
    # exp(-5) now takes a (small) share of the normaliser; the masked entry stays 0.
    expected = np.exp([1.0, 2.0]) / np.exp([1.0, 2.0, -5.0]).sum()
    np.testing.assert_allclose(clipped, [[*expected, 0.0]], rtol=1e-6)


# === Refusing bad exports ===


def weightless_to_tflite(
    model,
    task,
    quantization="float32",
    representative=None,
    top_k=5,
    next_sentence=False,
    mask_value=None,
    float_ops=(),
):
    """The wrong way: tf.saved_model.save of a Keras 3 model (no weights in the file)."""
    import tempfile

    import tensorflow as tf

    from export.convert import serving

    fn, signature, _ = serving(model, task, top_k, next_sentence)
    function = tf.function(fn, input_signature=[signature])
    with tempfile.TemporaryDirectory() as saved_model:
        tf.saved_model.save(model, saved_model, signatures=function.get_concrete_function())
        return tf.lite.TFLiteConverter.from_saved_model(saved_model).convert()


@pytest.mark.slow
def test_weightless_export_is_refused_and_nothing_is_written(
    models, bundles, tmp_path, monkeypatch, capsys
):
    import shutil

    from export import bundle, convert
    from export.__main__ import main

    monkeypatch.setattr(convert, "to_tflite", weightless_to_tflite)
    out = tmp_path / "bundle"
    assert main(["--model", models["classifier"], "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "refused, nothing written" in err and "NaN" in err
    assert leftovers(tmp_path, "bundle") == []

    # Over an existing bundle: the old one stays as it was.
    shutil.copytree(bundles["classifier"][0], out)
    before = bundle.read_info(str(out))
    assert main(["--model", models["classifier"], "--out", str(out)]) == 1
    assert bundle.read_info(str(out)) == before
    assert leftovers(tmp_path, "bundle") == ["bundle"]


def test_verification_catches_constant_and_disagreeing_outputs():
    from export.examples import Inputs
    from export.verify import VerificationError, verify

    rng = np.random.default_rng(0)
    x = random_encoder_inputs(16, 8, 50, lengths=rng.integers(3, 9, 16))
    inputs = Inputs(x, "test rows")
    logits = {}

    def reference(batch):  # a deterministic function of the tokens
        key = batch["token_ids"][:, :3].astype(np.float32)
        logits["last"] = np.stack([key.sum(-1), -key.sum(-1) + 50, key[:, 0]], -1)
        return {"logits": logits["last"]}

    verify(
        lambda b: {"logits": reference(b)["logits"] + 1e-5},
        reference,
        inputs,
        "classifier",
        "float32",
    )
    with pytest.raises(VerificationError, match="same for every input"):
        verify(
            lambda b: {"logits": np.ones((len(b["token_ids"]), 3), np.float32)},
            reference,
            inputs,
            "classifier",
            "int8",
        )
    with pytest.raises(VerificationError, match="agreement") as e:
        verify(
            lambda b: {"logits": reference(b)["logits"][:, ::-1].copy()},
            reference,
            inputs,
            "classifier",
            "int8",
        )
    assert e.value.report["agreement"] < 0.85


def test_fine_tuned_model_needs_its_dev_data(tmp_path, capsys):
    from export.__main__ import main

    directory = make_model_dir(
        tmp_path,
        "model",
        {"task": "classifier", "num_labels": 2},
        {"finetuned_task": "sst2", "max_seq_length": 24},
    )
    assert main(["--model", directory, "--out", str(tmp_path / "b")]) == 1
    assert "give --data" in capsys.readouterr().err
    assert leftovers(tmp_path, "b") == []


def test_flags_the_bundle_would_ignore_are_refused_before_it_is_built(models, tmp_path, capsys):
    """--top-k on a bundle without [MASK] predictions, --calibration-examples without int8
    (in export.report: without an int8 variant) and a --task the model was not fine-tuned
    for were passed over, or refused only after TensorFlow and the model had loaded."""
    from export import report
    from export.__main__ import main

    model, out = models["classifier"], str(tmp_path / "b")
    data = write_sst2(tmp_path / "SST-2")
    for flags, said in (
        (["--top-k", "3"], "--top-k: only a masked-LM pre-training run's bundle predicts [MASK]"),
        (["--quantize", "int8", "--calibration-examples", "8", "--top-k", "2"], "--top-k: "),
        (["--generator-signature"], "--generator-signature: only an ELECTRA pre-training run"),
    ):
        assert main(["--model", model, "--out", out, *flags]) == 1
        assert said in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--model", model, "--out", out, "--calibration-examples", "8"])
    assert "--calibration-examples needs --quantize int8" in capsys.readouterr().err
    assert leftovers(tmp_path, "b") == []
    dev = os.path.join(data, "dev.tsv")
    for flags, said in (
        (["--task", "squad1"], "a 'classifier' model; task squad1 needs a 'question_answerer'"),
        (["--task", "nope"], "unknown task 'nope'"),
        (
            ["--task", "sst2", "--variants", "float32,dynamic", "--calibration-examples", "8"],
            "no int8 variant",
        ),
    ):
        assert report.main(["--model", model, "--data", dev, *flags]) == 1
        assert said in capsys.readouterr().err


def test_pretraining_export_on_raw_text_with_top_k(models, tmp_path, capsys):
    from export import bundle
    from export.__main__ import main

    text = tmp_path / "text.txt"
    text.write_text(
        "the cat sat on the mat\n\nthe dog ran fast\ta big red bird sang\n"
        "old man saw the green tree by the river\n",
        encoding="utf-8",
    )
    out = tmp_path / "mlm"
    assert (
        main(
            [
                "--model",
                models["pretraining"],
                "--out",
                str(out),
                "--data",
                str(text),
                "--top-k",
                "3",
            ]
        )
        == 0
    )
    assert "wrote" in capsys.readouterr().out
    info = bundle.read_info(str(out))
    assert info["top_k"] == 3 and info["outputs"]["topk_ids"] == [-1, -1, 3]
    assert info["inputs"]["mask_positions"] == [-1, -1]
    v = info["verification"]
    assert v["data"] == str(text) and v["examples"] == 3 and v["agreement"] == 1.0


# === A fine-tuned model: its dev file, model.evaluate on the bundle ===


@pytest.fixture(scope="module")
def sst2_bundle(sst2, tmp_path_factory):
    out = tmp_path_factory.mktemp("sst2-bundle") / "bundle"
    return str(out), export(sst2[0], out)


def test_model_evaluate_scores_a_bundle_like_its_keras_model(sst2, sst2_bundle, capsys):
    from tests.helpers import run_evaluate

    directory, dev = sst2
    out, info = sst2_bundle
    assert info["finetuned_task"] == "sst2" and info["max_seq_length"] == 24
    assert info["verification"]["data"] == dev  # the dev file metrics.json names
    assert info["id2label"] == {"0": "0", "1": "1"}
    scores = {}
    for name, model in (("keras", directory), ("bundle", str(out))):
        assert run_evaluate(["--task", "sst2", "--model", model, "--data", dev]) == 0
        scores[name] = json.loads(capsys.readouterr().out)
    assert scores["bundle"]["examples"] == scores["keras"]["examples"] == 40
    assert scores["bundle"]["accuracy"] == scores["keras"]["accuracy"]  # float32: same answers


def test_model_evaluate_refuses_a_length_past_the_position_table(sst2, capsys):
    """A --seq-len longer than the position embeddings: one line (a TensorFlow traceback
    about a slice before, or a silent pass where batches stayed short); the task's name in
    any case, as fine-tuning takes it."""
    from tests.helpers import run_evaluate

    directory, dev = sst2
    assert (
        run_evaluate(["--task", "SST-2", "--model", directory, "--data", dev, "--seq-len", "4096"])
        == 1
    )
    assert "--seq-len 4096 exceeds the model's max_sequence_length" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_evaluate(["--task", "sst2", "--model", directory, "--data", dev, "--batch-size", "0"])
    assert "--batch-size: must be at least 1, not 0" in capsys.readouterr().err


def test_model_evaluate_refuses_a_bundle_of_another_task(sst2, sst2_bundle, capsys):
    from tests.helpers import run_evaluate

    out, _ = sst2_bundle
    assert run_evaluate(["--task", "conll2003", "--model", out, "--data", sst2[1]]) == 1
    assert "'classifier' model" in capsys.readouterr().err


# === TFLiteModel ===


@pytest.mark.slow
def test_tflite_model_pads_and_cuts_a_fixed_shape_file(models, tmp_path):
    """A file with a fixed batch and length (not ours, e.g. another exporter's)."""
    import keras
    import tensorflow as tf

    from export.interpreter import TFLiteModel
    from model.checkpoints import model_dir

    model = model_dir.load(models["token_classifier"])
    signature = {
        n: tf.TensorSpec([2, 16], tf.int32, name=n)
        for n in ("token_ids", "segment_ids", "padding_mask")
    }
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        "serve", lambda x: {"logits": model(x, training=False)}, input_signature=[signature]
    )
    archive.write_out(str(tmp_path / "saved"), verbose=False)
    path = tmp_path / "fixed.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_saved_model(str(tmp_path / "saved")).convert())

    lite = TFLiteModel(str(path))
    assert (lite.fixed_batch, lite.fixed_length) == (2, 16)
    x = random_encoder_inputs(3, 10, 60, lengths=[10, 6, 9])
    got = lite(x)  # one output: the array itself, as the Keras model returns
    assert got.shape == (3, 10, 5)
    real = x["padding_mask"].astype(bool)
    np.testing.assert_allclose(got[real], np.asarray(model.predict_on_batch(x))[real], atol=2e-5)
    with pytest.raises(ValueError, match="at most 16"):
        lite.predict(random_encoder_inputs(1, 17, 60))


def test_tflite_model_errors_name_the_tensor(sst2_bundle, tmp_path):
    from export import bundle
    from export.interpreter import TFLiteModel

    path = bundle.model_path(sst2_bundle[0])
    assert TFLiteModel(path).max_seq_length == 24  # bundle.json
    lite = TFLiteModel(path, max_seq_length=16)  # the caller's limit over the bundle's
    x = random_encoder_inputs(2, 8, 60)
    with pytest.raises(ValueError, match=r"missing \['segment_ids'\]"):
        lite.predict({k: v for k, v in x.items() if k != "segment_ids"})
    with pytest.raises(ValueError, match="different numbers of rows .*'padding_mask': 1"):
        lite.predict({**x, "padding_mask": x["padding_mask"][:1]})
    with pytest.raises(ValueError, match="at most 16"):
        lite.predict(random_encoder_inputs(1, 20, 60))
    x_bad = {**x, "token_ids": np.where(x["token_ids"] == x["token_ids"].max(), -1, 0)}
    with pytest.raises(ValueError, match="input 'token_ids' holds -1; ids are 0 or more"):
        lite.predict(x_bad)  # LiteRT read -1 as an id, silently
    # Any integer dtype is cast to the model's int32.
    np.testing.assert_array_equal(
        lite.predict({k: v.astype(np.int64) for k, v in x.items()})["logits"],
        lite.predict(x)["logits"],
    )
    with pytest.raises(FileNotFoundError):
        TFLiteModel(str(tmp_path / "missing.tflite"))


# === Bundle directory ===


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("max_seq_length", "64", "'max_seq_length' must be a whole number, not '64'"),
        ("max_seq_length", True, "'max_seq_length' must be a whole number, not True"),
        ("max_seq_length", 1, "'max_seq_length' must be from 3 to 32768, not 1"),
        ("max_seq_length", 10**9, "'max_seq_length' must be from 3 to 32768, not 1000000000"),
        ("lowercase", "yes", "'lowercase' must be true or false, not 'yes'"),
        ("null_threshold", "high", "'null_threshold' must be a number, not 'high'"),
        ("top_k", 2.5, "'top_k' must be a whole number, not 2.5"),
        ("id2label", ["neg", "pos"], "'id2label' must be an object, not ['neg', 'pos']"),
        ("inputs", None, "'inputs' must be an object, not None"),
    ],
)
def test_a_hand_edited_bundle_json_names_the_field(tmp_path, key, value, message):
    """A field of the wrong type is refused where the bundle is read, naming the file and
    the field (a TypeError deep in the runtime before)."""
    from export import bundle

    info = {"format": 1, "task": "classifier", "max_seq_length": 64, "lowercase": True}
    info |= {"quantization": "dynamic", "inputs": {}, "outputs": {"logits": [-1, 2]}}
    info |= {"top_k": 5, key: value}
    (tmp_path / "bundle.json").write_text(json.dumps(info))
    (tmp_path / "model.tflite").write_bytes(b"")
    (tmp_path / "vocab.txt").write_text("[PAD]\n")
    with pytest.raises(ValueError) as error:
        bundle.read_info(str(tmp_path))
    assert str(error.value) == f"{tmp_path / 'bundle.json'}: {message}"
    valid = {"max_seq_length": 128, "lowercase": False, "inputs": {}}  # the rest: absent
    info[key] = valid.get(key)
    (tmp_path / "bundle.json").write_text(json.dumps(info))
    assert bundle.read_info(str(tmp_path))[key] == valid.get(key)


def _damage(directory, how: str) -> str:
    """Does `how` to the bundle copy `directory`; returns what read_info must say."""
    info_path, model, vocab = (Path(directory) / name for name in BUNDLE_FILES)
    info = json.loads(info_path.read_text())
    if how == "a byte of the weights":
        with open(model, "r+b") as f:
            f.seek(os.path.getsize(model) // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
        return f"{model}: 23,785,648 bytes, sha256 "
    lines = vocab.read_text().splitlines()
    if how == "two vocabulary lines swapped":
        lines[2000], lines[2001] = lines[2001], lines[2000]
        vocab.write_text("\n".join(lines) + "\n")
        return f"{vocab}: 231,508 bytes, sha256 "
    if how == "a files entry without its size":
        del info["files"]["vocab.txt"]["bytes"]
        message = f"{info_path}: 'files' entry 'vocab.txt' must be an object {{\"bytes\": a whole"
    elif how == "files a list":
        info["files"] = []
        message = f"{info_path}: 'files' must be an object, not []"
    elif how == "source a string":
        info["source"] = "x"
        message = f"{info_path}: 'source' must be an object, not 'x'"
    else:
        del info["files"]  # a bundle written before the record: the other checks still hold
    if how == "a shorter vocabulary":
        vocab.write_text("\n".join(lines[:20000]) + "\n")
        message = f"{vocab}: vocabulary has 20000 tokens but the model's (bundle.json's source) token embedding has 30522"
    elif how == "the task edited":
        info["task"] = "token_classifier"
        message = f"{info_path}: a token_classifier bundle has outputs {{'logits': 'rank 3'}}"
    elif how == "a longer max_seq_length":
        info["max_seq_length"] = 4096
        message = f"{info_path}: 'max_seq_length' 4096 is more than the model's 512 positions"
    elif how == "label_map.json disagrees":
        (Path(directory) / "label_map.json").write_text('{"id2label": {"0": "x"}}')
        message = f"{os.path.join(directory, 'label_map.json')}: id2label {{'0': 'x'}} is not"
    info_path.write_text(json.dumps(info))
    return message


BUNDLE_FILES = ("bundle.json", "model.tflite", "vocab.txt")


def _shipped_copy(tmp_path) -> str:
    import shutil

    from export import bundle

    directory = str(tmp_path / "sst2")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shutil.copytree(os.path.join(root, "assets", "models", "sst2"), directory)
    assert set(bundle.read_info(directory)[bundle.FILES]) == {"model.tflite", "vocab.txt"}
    return directory


@pytest.mark.parametrize(
    "how",
    [
        "a byte of the weights",
        "two vocabulary lines swapped",
        "a shorter vocabulary",
        "the task edited",
        "a longer max_seq_length",
        "label_map.json disagrees",
        "a files entry without its size",
        "files a list",
        "source a string",
    ],
)
def test_a_damaged_or_mismatched_bundle_is_refused_on_loading(tmp_path, how):
    """Each loaded before and answered differently, or failed later with an IndexError or
    LiteRT's own message (a probe of damaged files); a malformed record is named, where it
    raised a TypeError naming nothing (a review)."""
    from export import runtime

    directory = _shipped_copy(tmp_path)
    message = _damage(directory, how)
    with pytest.raises(ValueError) as error:
        runtime.load(directory)
    assert str(error.value).startswith(message)


def test_a_files_entry_is_compared_by_size_and_hash_alone(tmp_path):
    """A later exporter's extra key in a "files" entry does not refuse the bundle."""
    from export import bundle

    directory = _shipped_copy(tmp_path)
    info_path = Path(directory) / "bundle.json"
    info = json.loads(info_path.read_text())
    info["files"]["vocab.txt"]["mtime"] = 1.0
    info_path.write_text(json.dumps(info))
    assert bundle.read_info(directory)["files"]["vocab.txt"]["mtime"] == 1.0


def test_bundle_staging_is_atomic(tmp_path):
    from export import bundle

    target = tmp_path / "b"
    with pytest.raises(RuntimeError):
        with bundle.staging(str(target)) as tmp:
            open(os.path.join(tmp, "model.tflite"), "wb").close()
            raise RuntimeError("interrupted")
    assert leftovers(tmp_path, "b") == []
    # A SIGTERM (`timeout`, `kill`) to a command: its half-written bundle is removed too.
    import signal

    from model.io.files import exit_on_sigterm

    restore = exit_on_sigterm()
    try:
        with pytest.raises(SystemExit) as stop:
            with bundle.staging(str(target)) as tmp:
                open(os.path.join(tmp, "model.tflite"), "wb").close()
                os.kill(os.getpid(), signal.SIGTERM)
    finally:
        restore()
    assert stop.value.code == 143 and leftovers(tmp_path, "b") == []
    # A published bundle has a directory's usual permissions (mkdtemp's were 0700).
    with bundle.staging(str(target)) as tmp:
        open(os.path.join(tmp, "bundle.json"), "w").close()
    (tmp_path / "made").mkdir()
    mode = (tmp_path / "made").stat().st_mode & 0o777
    assert mode != 0o700 and target.stat().st_mode & 0o777 == mode
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a bundle"):
        with bundle.staging(str(tmp_path / "other")):
            pass
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"
    with pytest.raises(FileNotFoundError, match="bundle file not found"):
        bundle.read_info(str(tmp_path / "other"))


def test_export_never_deletes_what_is_not_only_a_bundle(tmp_path, monkeypatch, capsys):
    """A folder with a bundle.json among other files is not replaced (it once was, whole);
    nor is the current directory or a folder holding --model, refused before TensorFlow."""
    from export import bundle
    from export.__main__ import main

    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "bundle.json").write_text("{}")
    (victim / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"holds files a bundle does not \(notes.txt, sub\)"):
        bundle.check_output(str(victim))
    for name in ("model.tflite", "vocab.txt", "label_map.json"):  # a bundle's own: replaced
        (tmp_path / "old").mkdir(exist_ok=True)
        (tmp_path / "old" / name).write_text("")
    (tmp_path / "old" / "bundle.json").write_text("{}")
    bundle.check_output(str(tmp_path / "old"))
    project = tmp_path / "project"
    (project / "model").mkdir(parents=True)
    (project / "bundle.json").write_text("{}")
    monkeypatch.chdir(project)
    assert main(["--model", "model", "--out", "."]) == 1
    assert "error: .: holds the current directory, which replacing it" in capsys.readouterr().err
    assert main(["--model", "model", "--out", str(project)]) == 1
    assert "holds the current directory" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    assert main(["--model", "project/model", "--out", "project/model"]) == 1
    assert "project/model: holds the model, which" in capsys.readouterr().err
    assert (victim / "notes.txt").read_text() == "mine" and (project / "model").is_dir()
