"""ELECTRA's discriminator as a bundle: `python -m export` on either ELECTRA model directory,
the runtime's `detect_replaced` and `corrupt`, and the report card (tiny models, seconds each).

    PYTHONPATH=. TF_CPP_MIN_LOG_LEVEL=3 python -m pytest -q tests/test_electra_bundle.py
    BERT_EDGE_VENV=/tmp/edge-venv PYTHONPATH=. python -m pytest -q tests/test_electra_bundle.py

One tiny ELECTRA run (`python -m model.train pretrain --objective electra`, 20 steps on
`make_records` segments; `tests/helpers.py` `build_electra`, shared with the app's tests) is
exported float32 and dynamic (its discriminator, and its generator as the "generator"
signature), and its discriminator alone (a replaced_token_detection model directory with the
same weights) float32. The runtime's answers are compared with the Keras models on the same
tokens: float32 to rounding (1e-5 in a probability), dynamic to the relative error
export/verify.py allows a dynamic export (`THRESHOLDS["dynamic"]`, 0.15) and 0.05 in any one
probability, int8 to its 0.30. Stubs (a `predict` computing logits from the token ids) check
what the methods make of a model's outputs: character offsets, the 85 % / 15 % masking, the
rewritten text. One test runs both methods in the TensorFlow-free environment of
tests/test_runtime.py.
"""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from export import runtime
from export.runtime import EdgeModel
from model.text.wordpiece import WordPieceTokenizer
from tests.helpers import build_electra, leftovers
from tests.test_runtime import ROOT, VOCAB, _edge_env, edge_python  # noqa: F401 (a fixture)

TEXT = "The cat sat on the mat, and the dog ran fast."
MAX_ABS_DYNAMIC = 0.05


@pytest.fixture(scope="module")
def electra(tmp_path_factory):
    return build_electra(tmp_path_factory)


@pytest.fixture(scope="module")
def keras_run(electra):
    """(the run's ElectraPretrainer, its discriminator, its tokenizer)."""
    from model.checkpoints import model_dir

    model = model_dir.load(electra["run"])
    tokenizer = WordPieceTokenizer(os.path.join(electra["run"], "vocab.txt"))
    return model, model.discriminator(), tokenizer


def keras_probabilities(discriminator, tokenizer, read: list[str]) -> np.ndarray:
    """The Keras discriminator's P(replaced) of the text's pieces of `read` ([CLS] ... [SEP])."""
    ids = np.array([[tokenizer.token_to_id[t] for t in read]], np.int32)
    x = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": np.ones_like(ids)}
    logits = np.asarray(discriminator(x, training=False)["rtd"], np.float64)[0]
    return runtime.sigmoid(logits)[1:-1]


def keras_edge_model(model, tokenizer, seq_len: int) -> EdgeModel:
    """The runtime over the Keras run's serving functions (the app's Keras backend's way)."""
    from export import convert

    rtd = convert.serving(model, "replaced_token_detection")[0]
    generator = convert.serving(model, "generator")[0]
    return EdgeModel(
        lambda x: convert.keras_outputs(rtd, x),
        tokenizer,
        {"task": "replaced_token_detection", "max_seq_length": seq_len},
        {"generator": lambda x: convert.keras_outputs(generator, x)},
    )


def relative_error(got, expected) -> float:
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.sqrt(np.mean((got - expected) ** 2) / np.mean(expected**2)))


# === The bundles ===


def test_runtime_masking_is_the_objectives():
    """export/runtime.py repeats ELECTRA's rates (its module imports Keras): they must agree."""
    from model.objectives import ObjectiveOptions
    from model.objectives.electra import Electra

    assert runtime.ELECTRA_MASK_TOKEN_RATE == Electra.mask_token_rate
    assert runtime.ELECTRA_RANDOM_TOKEN_RATE == Electra.random_token_rate
    assert runtime.ELECTRA_MASK_RATE == ObjectiveOptions(seq_len=32).mask_rate


@pytest.mark.slow
def test_bundle_json_of_a_run_and_of_a_discriminator(electra):
    from export import bundle, verify

    info = bundle.read_info(electra["float32"])
    vocabulary = len(open(os.path.join(electra["run"], "vocab.txt")).read().split("\n")) - 1
    assert info["task"] == "replaced_token_detection" and info["max_seq_length"] == 32
    assert info["source"]["config"]["task"] == "electra_pretraining"
    assert info["methods"] == ["detect_replaced", "attention", "features", "corrupt"]
    assert runtime.methods_of("replaced_token_detection") == ["detect_replaced"]
    assert runtime.methods_of("generator") == ["corrupt"]
    assert sorted(info["signatures"]) == ["encoder", "generator", "serving_default"]
    assert info["signatures"]["encoder"]["task"] == "encoder"
    assert info["outputs"] == {"rtd": [-1, -1]}
    assert info["inputs"] == {n: [-1, -1] for n in ("padding_mask", "segment_ids", "token_ids")}
    generator = info["signatures"]["generator"]
    assert generator["task"] == "generator" and generator["methods"] == ["corrupt"]
    assert generator["outputs"] == {"mlm": [-1, -1, vocabulary]}
    assert generator["inputs"]["mask_positions"] == [-1, -1]
    for name in ("float32", "dynamic"):
        stored = bundle.read_info(electra[name])
        limit = verify.THRESHOLDS[name].max_relative_error
        signatures = stored["signatures"]
        reports = [stored["verification"]] + [
            signatures[k]["verification"] for k in ("encoder", "generator")
        ]
        for report in reports:
            assert report["passed"] and report["quantization"] == name
            assert report["data"] == electra["text"]
            assert all(o["relative_error"] <= limit for o in report["outputs"].values())
        held_out = stored["verification"]["replaced_tokens"]
        assert held_out["corruption"] == "generator samples"
        # About 15 % of the tokens chosen (never [CLS]/[SEP]), a few draws equal the original.
        assert 0.05 < held_out["replaced"] / held_out["tokens"] < 0.15
    alone = bundle.read_info(electra["discriminator-float32"])
    assert alone["task"] == "replaced_token_detection"
    assert alone["methods"] == ["detect_replaced", "attention", "features"]
    assert sorted(alone["signatures"]) == ["encoder", "serving_default"]
    assert alone["source"]["config"]["task"] == "replaced_token_detection"
    assert alone["verification"]["replaced_tokens"]["corruption"] == "random vocabulary tokens"


@pytest.mark.slow
def test_held_out_rows_are_corrupted_like_pretraining(electra, keras_run):
    """15 % of the real WordPieces chosen (never [CLS], [SEP] or padding), 85 % of those
    masked, every chosen one filled with a draw; the same rows whatever the count or batch."""
    from export import convert, examples

    model, _, tokenizer = keras_run
    generator = convert.serving(model, "generator")[0]
    sampler = lambda x: convert.keras_outputs(generator, x)  # noqa: E731
    rows = examples.replaced_tokens(tokenizer, 32, None, electra["text"], sampler)
    assert rows.replacement == examples.GENERATOR_SAMPLES and len(rows) > 50
    masked, corrupted = rows.masked.x, rows.corrupted.x
    real = rows.masked.mask_weights > 0
    positions = masked["mask_positions"]
    picked = np.take_along_axis(masked["token_ids"], positions, 1)[real]
    assert np.take_along_axis(masked["padding_mask"], positions, 1)[real].all()  # real tokens
    assert 0.75 < np.mean(picked == tokenizer.mask_id) < 0.95  # 85 % [MASK], 15 % kept
    kept = picked[picked != tokenizer.mask_id]
    assert not np.isin(kept, tokenizer.special_ids()).any()  # never [CLS] or [SEP]
    tokens = masked["padding_mask"].sum(1) - 2  # without [CLS] and [SEP]
    # At most ceil(15 % of 32) = 5 a row, as the training pipeline's max_predictions.
    assert np.all(real.sum(1) == np.minimum(5, np.maximum(1, np.round(0.15 * tokens))))
    # Outside the chosen positions the corrupted text is the original; labels mark changes.
    written = np.zeros_like(corrupted["token_ids"], bool)
    np.put_along_axis(written, positions, real, 1)
    assert (rows.labels[~written] == 0).all()
    assert rows.labels.sum() > 0.5 * real.sum()  # most draws differ from the original
    again = examples.replaced_tokens(tokenizer, 32, 9, electra["text"], sampler, batch_size=4)
    np.testing.assert_array_equal(again.corrupted.x["token_ids"], corrupted["token_ids"][:9])
    random = examples.replaced_tokens(tokenizer, 32, None, electra["text"])
    assert random.replacement == examples.RANDOM_TOKENS
    drawn = random.corrupted.x["token_ids"][written]
    assert not np.isin(drawn, tokenizer.special_ids()).any()


# === detect_replaced and corrupt against the Keras models ===


@pytest.mark.slow
@pytest.mark.parametrize("name", ["float32", "dynamic", "discriminator-float32"])
def test_detect_replaced_is_the_keras_discriminators(electra, keras_run, name):
    from export import verify

    _, discriminator, tokenizer = keras_run
    m = runtime.load(electra[name])
    result = m.detect_replaced(TEXT)
    assert result["read"][0] == "[CLS]" and result["read"][-1] == "[SEP]"
    assert [t["token"] for t in result["tokens"]] == result["read"][1:-1]
    assert not result["truncated"]
    for t in result["tokens"]:
        assert TEXT[t["start"] : t["end"]].lower() == t["token"].removeprefix("##")
        assert t["replaced"] == (t["probability_replaced"] > 0.5)
    assert result["replaced"] == [k for k, t in enumerate(result["tokens"]) if t["replaced"]]
    got = [t["probability_replaced"] for t in result["tokens"]]
    expected = keras_probabilities(discriminator, tokenizer, result["read"])
    if name.endswith("float32"):
        np.testing.assert_allclose(got, expected, atol=1e-5)
    else:
        assert relative_error(got, expected) <= verify.THRESHOLDS["dynamic"].max_relative_error
        assert np.abs(np.asarray(got) - expected).max() <= MAX_ABS_DYNAMIC


@pytest.mark.slow
@pytest.mark.parametrize("name", ["float32", "dynamic", "discriminator-float32"])
def test_features_and_attention_are_the_keras_discriminators_encoders(electra, keras_run, name):
    """The "encoder" signature is the discriminator's encoder: the features and attention maps
    the Keras run's encoder gives the same tokens (float32 to rounding, dynamic within its
    verification threshold)."""
    from export import convert, verify

    model, _, tokenizer = keras_run
    m = runtime.load(electra[name])
    features, attention = m.features(TEXT), m.attention(TEXT)
    assert features["tokens"] == attention["tokens"] and features["tokens"][0] == "[CLS]"
    ids = np.array([[tokenizer.token_to_id[t] for t in features["tokens"]]], np.int32)
    x = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": np.ones_like(ids)}
    expected = convert.keras_outputs(convert.serving(model.encoder, "encoder")[0], x)
    pairs = (
        (features["sequence_output"], expected["sequence_output"][0]),
        (features["pooled_output"], expected["pooled_output"][0]),
        (attention["attention"], expected["attention_probs"][0]),
    )
    for got, want in pairs:
        assert got.shape == want.shape
        if name.endswith("float32"):
            np.testing.assert_allclose(got, want, atol=1e-4)
        else:
            assert relative_error(got, want) <= verify.THRESHOLDS["dynamic"].max_relative_error


@pytest.mark.slow
def test_corrupt_is_the_keras_generators(electra, keras_run):
    """The float32 bundle draws what the Keras run draws from the same seed: the same chosen
    positions, the same samples, the same text; the generator's probabilities to rounding."""
    model, _, tokenizer = keras_run
    lite = runtime.load(electra["float32"])
    keras = keras_edge_model(model, tokenizer, lite.max_seq_length)
    for seed in range(5):
        got, expected = lite.corrupt(TEXT, 0.3, seed), keras.corrupt(TEXT, 0.3, seed)
        for key in ("text", "masked", "replaced", "read", "generator_read", "seed"):
            assert got[key] == expected[key], (seed, key)
        np.testing.assert_allclose(
            [t["probability"] or 0.0 for t in got["tokens"]],
            [t["probability"] or 0.0 for t in expected["tokens"]],
            atol=1e-5,
        )
    # And the detection of the corrupted text is the Keras discriminator's.
    result = lite.detect_replaced(got["text"])
    assert [t["probability_replaced"] for t in result["tokens"]] == pytest.approx(
        [t["probability_replaced"] for t in keras.detect_replaced(got["text"])["tokens"]],
        abs=1e-5,
    )


@pytest.mark.slow
def test_corrupt_with_a_dynamic_generator(electra, keras_run):
    """Dynamic: the same positions and masks (they do not depend on the model), each draw's
    probability within the dynamic tolerance of the Keras generator's for that draw."""
    from export import verify

    model, _, tokenizer = keras_run
    lite = runtime.load(electra["dynamic"])
    keras = keras_edge_model(model, tokenizer, lite.max_seq_length)
    got_p, expected_p = [], []
    for seed in range(10):
        got, expected = lite.corrupt(TEXT, 0.3, seed), keras.corrupt(TEXT, 0.3, seed)
        assert got["masked"] == expected["masked"]
        assert got["generator_read"] == expected["generator_read"]
        probs = keras_generator_probabilities(model, tokenizer, got)
        for k in got["masked"]:
            token = tokenizer.token_to_id[got["tokens"][k]["token"]]
            got_p.append(got["tokens"][k]["probability"])
            expected_p.append(probs[got["masked"].index(k), token])
    assert relative_error(got_p, expected_p) <= verify.THRESHOLDS["dynamic"].max_relative_error
    assert np.abs(np.asarray(got_p) - expected_p).max() <= MAX_ABS_DYNAMIC


def keras_generator_probabilities(model, tokenizer, result: dict) -> np.ndarray:
    """The Keras generator's softmax (masks, vocabulary) on what `corrupt` showed it."""
    from export import convert

    fn = convert.serving(model, "generator")[0]
    ids = np.array([[tokenizer.token_to_id[t] for t in result["generator_read"]]], np.int32)
    positions = np.array([[k + 1 for k in result["masked"]]], np.int32)
    x = {
        "token_ids": ids,
        "segment_ids": np.zeros_like(ids),
        "padding_mask": np.ones_like(ids),
        "mask_positions": positions,
    }
    return runtime.softmax(convert.keras_outputs(fn, x)["mlm"][0])


@pytest.mark.slow
def test_the_discriminator_bundle_is_the_runs_discriminator(electra):
    """A discriminator exported alone answers as the run's bundle (the same weights)."""
    run, alone = runtime.load(electra["float32"]), runtime.load(electra["discriminator-float32"])
    text = run.corrupt(TEXT, 0.3, 1)["text"]
    a, b = run.detect_replaced(text), alone.detect_replaced(text)
    assert [t["probability_replaced"] for t in a["tokens"]] == pytest.approx(
        [t["probability_replaced"] for t in b["tokens"]], abs=1e-6
    )
    with pytest.raises(
        ValueError,
        match='corrupt\\(\\) needs a replaced_token_detection bundle with a "generator" signature',
    ):
        alone.corrupt(TEXT)


@pytest.mark.parametrize("encoder_signature", [True, False])
def test_int8_calibration_gives_each_signature_its_own_inputs(encoder_signature):
    """The discriminator and its encoder read corrupted rows, the generator masked ones, with
    or without the encoder signature (--no-encoder-signature once left every input empty);
    inputs for a signature the file lacks are refused, not silently dropped."""
    import types

    from export import convert
    from export.__main__ import _representative

    class Rows:
        def __init__(self, x):
            self.x = x

        def take(self, _):
            return self

        def batches(self, _):
            return iter([(None, self.x)])

    ids = np.array([[2, 5, 3]], np.int32)
    plain = {"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": 1 + 0 * ids}
    masked = {**plain, "token_ids": ids + 1, "mask_positions": np.array([[1]], np.int32)}
    job = types.SimpleNamespace(
        electra=True, generator_signature=True, encoder_signature=encoder_signature
    )
    rows = types.SimpleNamespace(masked=Rows(masked))
    sequence = {name: None for name in plain}
    functions = {"serving_default": (None, sequence, None)}
    if encoder_signature:
        functions["encoder"] = (None, sequence, None)
    functions["generator"] = (None, {**sequence, "mask_positions": None}, None)
    representative = _representative(job, Rows(plain), rows, range(1))
    samples = dict(convert._calibration_samples(representative, functions))
    assert list(samples) == list(functions)
    for key, x in samples.items():
        want = masked if key == "generator" else plain
        assert sorted(x) == sorted(want) and all((x[k] == want[k]).all() for k in want)
    functions.pop("encoder", None)
    job.encoder_signature = True  # inputs for an encoder signature the file lacks
    representative = _representative(job, Rows(plain), rows, range(1))
    with pytest.raises(ValueError, match=r"signatures \['encoder'\] the file does not have"):
        list(convert._calibration_samples(representative, functions))


@pytest.mark.slow
def test_int8_export_verifies_and_answers_within_its_tolerance(
    electra, keras_run, tmp_path, monkeypatch
):
    """Full int8 of all three signatures, calibrated on corrupted (discriminator and its
    encoder) and masked (generator) text. A 20-step model's near-zero logits flip sign under int8 more than a
    trained model's: verified at 0.85 agreement, as tests/test_export.py does for int8."""
    from export import bundle, verify
    from tests.test_export import export

    _, discriminator, tokenizer = keras_run
    monkeypatch.setitem(
        verify.THRESHOLDS, "int8", verify.Thresholds(max_relative_error=0.30, min_agreement=0.85)
    )
    export(electra["run"], tmp_path / "int8", "int8", data=electra["text"])
    info = bundle.read_info(str(tmp_path / "int8"))
    assert info["conversion"]["calibration"]["data"] == electra["text"]
    assert info["signatures"]["generator"]["verification"]["passed"]
    assert info["signatures"]["encoder"]["verification"]["passed"]  # calibrated with the rest
    result = runtime.load(str(tmp_path / "int8")).detect_replaced(TEXT)
    got = [t["probability_replaced"] for t in result["tokens"]]
    expected = keras_probabilities(discriminator, tokenizer, result["read"])
    assert relative_error(got, expected) <= 0.30


# === Refusals ===


@pytest.mark.slow
def test_an_int8_file_too_far_off_is_refused_and_nothing_written(
    electra, tmp_path, monkeypatch, capsys
):
    from export import verify
    from export.__main__ import main

    # As strict as float32: quantization noise alone is "too far off".
    monkeypatch.setitem(verify.THRESHOLDS, "int8", verify.THRESHOLDS["float32"])
    out = tmp_path / "b"
    argv = ["--model", electra["run"], "--quantize", "int8", "--out", str(out)]
    assert main([*argv, "--data", electra["text"], "--calibration-examples", "8"]) == 1
    err = capsys.readouterr().err
    assert "refused, nothing written" in err and "'rtd': relative error" in err
    assert leftovers(tmp_path, "b") == []


@pytest.mark.slow
def test_verification_refuses_flipped_calls_and_a_broken_generator(electra, keras_run):
    """What verify() makes of the rtd and mlm outputs: a discriminator calling the opposite,
    a generator whose best word is another one, are refused on agreement."""
    from export import convert, examples
    from export.verify import VerificationError, verify

    model, _, tokenizer = keras_run
    rows = examples.replaced_tokens(tokenizer, 32, 24, electra["text"])
    rtd = convert.serving(model, "replaced_token_detection")[0]
    reference = lambda x: convert.keras_outputs(rtd, x)  # noqa: E731
    verify(reference, reference, rows.corrupted, "replaced_token_detection", "float32")
    with pytest.raises(VerificationError, match="agreement") as e:
        verify(
            lambda x: {"rtd": -reference(x)["rtd"]},
            reference,
            rows.corrupted,
            "replaced_token_detection",
            "int8",
        )
    assert e.value.report["agreement"] < 0.05
    generator = convert.serving(model, "generator")[0]
    keras_mlm = lambda x: convert.keras_outputs(generator, x)  # noqa: E731
    with pytest.raises(VerificationError, match="agreement"):
        verify(
            lambda x: {"mlm": np.roll(keras_mlm(x)["mlm"], 1, axis=-1)},
            keras_mlm,
            rows.masked,
            "generator",
            "dynamic",
        )


@pytest.mark.slow
def test_generator_signature_needs_an_electra_run(electra, tmp_path, capsys):
    from export.__main__ import main

    out = str(tmp_path / "b")
    assert main(["--model", electra["discriminator"], "--out", out, "--generator-signature"]) == 1
    assert "only an ELECTRA pre-training run (task electra_pretraining) has a generator" in (
        capsys.readouterr().err
    )
    assert leftovers(tmp_path, "b") == []


# === What the methods make of a model's outputs (stubs) ===


@pytest.fixture(scope="module")
def tok():
    return WordPieceTokenizer(VOCAB)


def test_detect_replaced_offsets_on_odd_text(tok):
    """Every piece's characters in the text as written: case, accents, punctuation, a word
    of several pieces, an [UNK] (the whole word)."""
    flagged = {tok.token_to_id[w] for w in ("cafe", "##ffa")}

    def predict(x):
        return {"rtd": np.where(np.isin(x["token_ids"], list(flagged)), 4.0, -4.0)}

    m = EdgeModel(predict, tok, {"task": "replaced_token_detection", "max_seq_length": 32})
    text = "The  Café\u00a0was RUNNING, \u2603 e\u0301t\u00e9! Unaffable"
    result = m.detect_replaced(text)
    spans = [(t["token"], text[t["start"] : t["end"]]) for t in result["tokens"]]
    assert spans == [
        ("the", "The"),
        ("cafe", "Café"),
        ("was", "was"),
        ("running", "RUNNING"),
        (",", ","),
        ("[UNK]", "\u2603"),
        ("et", "e\u0301t\u00e9"),  # normalised shorter than written: the whole word
        ("##e", "e\u0301t\u00e9"),
        ("!", "!"),
        ("una", "Una"),
        ("##ffa", "ffa"),
        ("##ble", "ble"),
    ]
    assert result["replaced"] == [1, 10]
    assert result["tokens"][1]["probability_replaced"] == pytest.approx(1 / (1 + np.exp(-4)))
    assert result["tokens"][0]["probability_replaced"] == pytest.approx(1 / (1 + np.exp(4)))
    long = m.detect_replaced("word " * 50)
    assert long["truncated"] and len(long["tokens"]) == 30 and len(long["read"]) == 32


def generator_stub(tok, word: str, seen: list):
    """A generator that always draws `word`; records the masked inputs it was shown."""
    logits = np.full(tok.vocabulary_size, -30.0)
    logits[tok.token_to_id[word]] = 30.0

    def predict(x):
        seen.append((x["token_ids"][0].copy(), x["mask_positions"][0].copy()))
        return {"mlm": np.tile(logits, (1, x["mask_positions"].shape[1], 1))}

    return predict


def test_corrupt_masks_85_percent_and_writes_the_draws_into_the_text(tok):
    seen = []

    def model(word: str) -> EdgeModel:
        return EdgeModel(
            lambda x: {"rtd": np.zeros(x["token_ids"].shape)},
            tok,
            {"task": "replaced_token_detection", "max_seq_length": 128},
            {"generator": generator_stub(tok, word, seen)},
        )

    m = model("banana")
    assert m.methods == ["detect_replaced", "corrupt"]
    text = "The quick brown fox jumps over the lazy dog near the river bank today."
    masked = kept = 0
    for seed in range(60):
        out = m.corrupt(text, seed=seed)
        ids, positions = seen[-1]
        assert len(positions) == len(out["masked"]) == max(1, round(0.15 * len(out["tokens"])))
        assert [p - 1 for p in positions] == out["masked"]
        masked += int(np.sum(ids[positions] == tok.mask_id))
        kept += int(np.sum(ids[positions] != tok.mask_id))
        assert all(out["tokens"][k]["token"] == "banana" for k in out["masked"])
        assert out["replaced"] == out["masked"]  # "banana" is in no original position
        assert out["text"].count("banana") == len(out["masked"])
        assert all(out["tokens"][k]["probability"] == pytest.approx(1.0) for k in out["masked"])
    assert 0.75 < masked / (masked + kept) < 0.95  # 85 % [MASK], 15 % kept
    # A draw equal to the original is no replacement; the rest of the text is kept as written.
    out = model("the").corrupt("The  CAT, the dog.", rate=1.0, seed=3)
    assert out["masked"] == [0, 1, 2, 3, 4, 5] and out["replaced"] == [1, 2, 4, 5]
    assert out["text"] == "The  thethe the thethe"  # each changed word, in its own place
    # Repeatable with its seed; a new one each call without.
    first = m.corrupt(text, 0.5)
    assert m.corrupt(text, 0.5, first["seed"])["masked"] == first["masked"]


def test_corrupt_and_detect_errors(tok):
    m = EdgeModel(None, tok, {"task": "replaced_token_detection", "max_seq_length": 16})
    with pytest.raises(ValueError, match="corrupt\\(\\) needs a replaced_token_detection bundle"):
        m.corrupt("a cat")
    m = EdgeModel(None, tok, {"task": "classifier", "max_seq_length": 16})
    with pytest.raises(
        ValueError, match="this is a classifier bundle; detect_replaced\\(\\) needs a "
    ):
        m.detect_replaced("a cat")
    m = EdgeModel(
        None,
        tok,
        {"task": "replaced_token_detection", "max_seq_length": 16},
        {"generator": None},
    )
    for kwargs, message in (
        ({"rate": 0}, "rate must be a number above 0"),
        ({"rate": "0.2"}, "rate must be a number"),
        ({"seed": -1}, "seed must be a whole number"),
        ({"seed": 1.5}, "seed must be a whole number"),
    ):
        with pytest.raises(ValueError, match=message):
            m.corrupt("a cat", **kwargs)
    for method in (m.corrupt, m.detect_replaced):
        with pytest.raises(ValueError, match="the text is empty"):
            method("  ")
        with pytest.raises(ValueError, match="no words the model can read"):
            method("\u200b")


def test_auc_is_the_pairwise_ranking_chance():
    from export.detection import auc

    rng = np.random.default_rng(0)
    scores = np.round(rng.normal(size=300), 1)  # ties
    labels = rng.random(300) < 0.2
    pairs = scores[labels][:, None] - scores[~labels][None, :]
    expected = np.mean(pairs > 0) + 0.5 * np.mean(pairs == 0)
    assert auc(scores, labels) == pytest.approx(expected)
    assert auc(scores, np.zeros(300, bool)) is None


# === The command line, the report card, the edge environment ===


@pytest.mark.slow
def test_command_line(electra, capsys):
    assert runtime.main([electra["float32"], "detect_replaced", TEXT]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["read"][0] == "[CLS]" and len(out["tokens"]) == len(out["read"]) - 2
    assert runtime.main([electra["float32"], "corrupt", TEXT, "0.3", "7"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["seed"] == 7 and out["rate"] == 0.3 and out["masked"]
    assert out == json.loads(json.dumps(runtime.load(electra["float32"]).corrupt(TEXT, 0.3, 7)))
    assert runtime.main([electra["float32"], "corrupt", TEXT, "1.5"]) == 1
    assert "rate must be a number above 0 and at most 1, not 1.5" in capsys.readouterr().err
    assert runtime.main([electra["discriminator-float32"], "corrupt", TEXT]) == 1
    assert 'with a "generator" signature' in capsys.readouterr().err


def report_card(model: str, data: str, tmp_path, variants: str) -> str:
    from export.report import main

    out = tmp_path / "card.md"
    argv = ["--model", model, "--data", data, "--variants", variants, "--out", str(out)]
    if "int8" in variants:
        argv += ["--calibration-examples", "16"]
    assert main([*argv, "--runs", "50", "--warmup", "2"]) == 0
    return out.read_text(encoding="utf-8")


def card_rows(card: str) -> dict:
    """{variant: {column: cell}} of a report card's table."""
    lines = [line for line in card.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return {
        cells[0]: dict(zip(header, cells))
        for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])
    }


@pytest.mark.slow
def test_report_card_of_a_run(electra, tmp_path, capsys):
    """float32 scores as the Keras model; every variant has AUC, both accuracies, size and
    latency; int8 is verified like any export (refused when too far off, still scored)."""
    card = report_card(electra["run"], electra["text"], tmp_path, "float32,dynamic,int8")
    print(card)  # the measured numbers, with -s
    assert "the Keras generator's samples written in" in card
    rows = card_rows(card)
    assert list(rows) == ["Keras float32 (model.weights.h5)", "float32", "dynamic", "int8"]
    keras, float32 = rows["Keras float32 (model.weights.h5)"], rows["float32"]
    for column in ("AUC", "replaced acc. (%)", "original acc. (%)"):
        assert float32[column] == keras[column], column
        assert all(row[column] != "—" for row in rows.values()), column
    assert float32["change vs Keras"] == "+0.0000" and float32["verification"] == "verified"
    assert rows["dynamic"]["verification"] == "verified"
    assert rows["int8"]["verification"] in ("verified", "refused")
    assert all(float(row["p50 (ms)"]) > 0 for row in rows.values())
    assert float(rows["dynamic"]["size (MB)"]) <= float(float32["size (MB)"])
    assert "`int8`: full integer." in card and "int8+float_ln" not in card  # run variants only


@pytest.mark.slow
def test_report_card_of_a_discriminator_says_random_tokens(electra, tmp_path):
    card = report_card(electra["discriminator"], electra["text"], tmp_path, "float32")
    assert "random vocabulary tokens written in (a discriminator alone has no generator)" in card
    assert "int8" not in card  # no variant notes for variants not run
    rows = card_rows(card)
    assert rows["float32"]["AUC"] == rows["Keras float32 (model.weights.h5)"]["AUC"]


def evaluate_rtd(model: str, data: str, capsys, *extra) -> dict:
    from model.evaluate import main

    capsys.readouterr()  # what came before
    assert main(["--task", "rtd", "--model", model, "--data", data, *extra]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_evaluate_scores_a_run_and_its_bundles_as_the_report_card(electra, tmp_path, capsys):
    """`python -m model.evaluate --task rtd`: the run's figures are its report card's; its
    float32 bundle, whose generator signature corrupts the same rows, scores the same; a
    discriminator alone is scored on random vocabulary tokens; another model is refused."""
    card = card_rows(report_card(electra["run"], electra["text"], tmp_path, "float32"))
    run = evaluate_rtd(electra["run"], electra["text"], capsys)
    assert f"{run['auc']:.4f}" == card["Keras float32 (model.weights.h5)"]["AUC"]
    assert f"{100 * run['original_accuracy']:.2f}" == card["float32"]["original acc. (%)"]
    assert run["corruption"] == "generator samples" and run["seed"] == 0 and run["rows"] > 0
    bundled = evaluate_rtd(electra["float32"], electra["text"], capsys)
    assert (bundled["replaced"], bundled["tokens"]) == (run["replaced"], run["tokens"])
    assert bundled["auc"] == pytest.approx(run["auc"], abs=1e-3)
    other_seed = evaluate_rtd(electra["float32"], electra["text"], capsys, "--seed", "5")
    assert other_seed["seed"] == 5 and other_seed["auc"] != bundled["auc"]  # other positions
    alone = evaluate_rtd(electra["discriminator-float32"], electra["text"], capsys)
    assert alone["corruption"] == "random vocabulary tokens"

    from model.evaluate import main

    assert (
        main(["--task", "rtd", "--model", ROOT + "/assets/models/sst2", "--data", electra["text"]])
        == 1
    )
    assert "has no replaced-token detection head" in capsys.readouterr().err


EDGE_SCRIPT = r"""
import json, sys
from export import runtime

m = runtime.load(sys.argv[1])
result = {"methods": m.methods, "detect": m.detect_replaced(sys.argv[2]),
          "corrupt": m.corrupt(sys.argv[2], 0.3, 11),
          "pooled": m.features(sys.argv[2])["pooled_output"].tolist()}
result["heavy_modules"] = sorted(name for name in sys.modules if name.split(".")[0] in
                                 ("tensorflow", "keras", "tensorflow_text", "keras_hub", "jax"))
print(json.dumps(result))
"""


@pytest.mark.slow
def test_electra_methods_in_the_edge_environment(electra, edge_python):
    """numpy + LiteRT only (export/requirements-edge.txt): the same answers, nothing heavy."""
    result = subprocess.run(
        [edge_python, "-c", EDGE_SCRIPT, electra["dynamic"], TEXT],
        capture_output=True,
        text=True,
        timeout=600,
        env=_edge_env(),
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    edge = json.loads(result.stdout)
    assert edge["heavy_modules"] == []
    assert edge["methods"] == ["detect_replaced", "attention", "features", "corrupt"]
    m = runtime.load(electra["dynamic"])
    np.testing.assert_allclose(edge["pooled"], m.features(TEXT)["pooled_output"], atol=1e-6)
    assert edge["corrupt"] == json.loads(json.dumps(m.corrupt(TEXT, 0.3, 11)))
    here = m.detect_replaced(TEXT)
    assert [t["probability_replaced"] for t in edge["detect"]["tokens"]] == pytest.approx(
        [t["probability_replaced"] for t in here["tokens"]], abs=1e-6
    )
