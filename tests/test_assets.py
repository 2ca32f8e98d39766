"""The default models shipped in assets/models: within the size budget, described in
assets/MODEL_CARD.md, served by the app (every view, from its planned folder) through the
TensorFlow-free runtime, and plainly right on easy inputs, so a broken, swapped or
half-copied bundle fails here instead of in front of a user.

The accuracy figures themselves are `python -m model.evaluate` runs on the dev sets (the model
card gives the commands); these checks take seconds.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from app import models as app_models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASSETS = os.path.join(ROOT, "assets")
MODELS = os.path.join(ASSETS, "models")
BUDGET_BYTES = 120 * 10**6  # everything under assets/, the model issue's budget


@pytest.fixture(scope="module")
def slots():
    """The app's views on assets/models, each model loaded once (the runtime's EdgeModel)."""
    return app_models.load_all(MODELS, "litert", num_threads=1)


def model_of(slots, view: str):
    slot = slots[view]
    assert slot.ready, f"{view}: {slot.problem}"
    return slot.model


def test_assets_fit_the_budget():
    total = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(ASSETS) for f in files
    )
    assert 0 < total <= BUDGET_BYTES, f"assets/ holds {total / 1e6:.1f} MB"


def test_every_bundle_loads_byte_for_byte_and_git_never_converts_it():
    """Each bundle's files are those its bundle.json records (read_info checks size and sha256),
    and .gitattributes keeps Git from converting their line endings on checkout (Git for
    Windows' core.autocrlf rewrote vocab.txt, and every bundle was refused)."""
    import subprocess

    from export import bundle

    names = sorted(os.listdir(MODELS))
    for name in names:
        assert set(bundle.read_info(os.path.join(MODELS, name))[bundle.FILES]) == {
            bundle.MODEL,
            bundle.VOCAB,
        }, name
    if not os.path.isdir(os.path.join(ROOT, ".git")):
        pytest.skip("not a Git checkout")
    paths = [
        f"assets/models/{name}/{file}"
        for name in names
        for file in os.listdir(os.path.join(MODELS, name))
    ]
    shown = subprocess.run(
        ["git", "check-attr", "text", "--", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown.splitlines() == [f"{path}: text: unset" for path in paths]


def test_every_bundle_json_lists_its_methods_and_signatures_as_export_writes_them():
    """An edge app reads what a bundle serves from bundle.json: "methods", and each
    signature's task, methods, inputs and outputs (the sst2 and conll2003 bundles, exported
    before those fields were, had neither), as the model.tflite beside it has them."""
    from export import bundle
    from export.interpreter import TFLiteModel
    from export.runtime import methods_of

    for name in sorted(os.listdir(MODELS)):
        info = bundle.read_info(os.path.join(MODELS, name))
        signatures = info.get("signatures") or {}
        default = signatures.get(bundle.DEFAULT_SIGNATURE)
        assert default, f"{name}: bundle.json lists no {bundle.DEFAULT_SIGNATURE} signature"
        assert default["task"] == info["task"], name
        assert (default["inputs"], default["outputs"]) == (info["inputs"], info["outputs"]), name
        lite = TFLiteModel(bundle.model_path(os.path.join(MODELS, name)))
        assert sorted(signatures) == lite.signatures, name
        shape = lambda d: [int(n) for n in d["shape_signature"]]  # noqa: E731
        for key, signature in signatures.items():
            assert signature["methods"] == methods_of(signature["task"]), (name, key)
            runner = lite.signature(key)  # what the file itself holds
            assert signature["inputs"] == {n: shape(d) for n, d in runner.input_details.items()}
            assert signature["outputs"] == {
                n: shape(runner.output_details[n]) for n in runner.output_names
            }, (name, key)
        listed = [m for s in signatures.values() for m in s["methods"]]
        assert info.get("methods") == list(dict.fromkeys(listed)), name


def test_every_view_is_served_by_its_planned_bundle(slots):
    for view in app_models.VIEWS:
        slot = slots[view.key]
        assert slot.ready, f"{view.key}: {slot.problem}"
        # The Attention view has no bundle of its own: the fill-mask bundle's encoder serves it.
        expected = "mlm" if view.key == "attention" else view.folder
        assert os.path.basename(slot.path) == expected, (view.key, slot.path)
        assert slot.info.get("quantization") == "dynamic", (view.key, slot.info.get("quantization"))


def test_the_model_card_describes_every_bundle():
    with open(os.path.join(ASSETS, "MODEL_CARD.md"), encoding="utf-8") as f:
        card = f.read()
    for name in sorted(os.listdir(MODELS)):
        assert f"assets/models/{name}" in card, f"MODEL_CARD.md does not describe {name}"
    assert "python -m model.recipes.defaults" in card


def test_fill_mask_knows_a_capital(slots):
    result = model_of(slots, "fill_mask").fill_mask("Paris is the capital of [MASK].", top_k=5)
    words = [p["token"] for p in result["masks"][0]["predictions"]]
    assert "france" in words, words


def test_attention_maps_are_distributions(slots):
    result = model_of(slots, "attention").attention("The cat sat on the mat.")
    attention = result["attention"]
    assert attention.shape == (6, 12, 9, 9), attention.shape
    np.testing.assert_allclose(attention.sum(-1), 1.0, atol=1e-3)


def test_sentiment_of_plain_reviews(slots):
    model = model_of(slots, "sentiment")
    assert model.classify("A gripping, beautifully acted film.")["label"] == "positive"
    assert model.classify("A dull, lifeless and far too long mess.")["label"] == "negative"


def test_answers_come_from_the_context(slots):
    model = model_of(slots, "answer")
    context = (
        "Marie Curie was a Polish physicist and chemist who worked in Paris. "
        "She won the Nobel Prize twice."
    )
    assert model.answer("Where did Marie Curie work?", context)["text"] == "Paris"
    assert model.answer("How many times did she win the Nobel Prize?", context)["text"] == "twice"


def test_entities_of_a_news_sentence(slots):
    model = model_of(slots, "entities")
    entities = model.tag(
        "Angela Merkel met Emmanuel Macron in Paris on behalf of the European Union."
    )["entities"]
    assert [(e["type"], e["text"]) for e in entities] == [
        ("PER", "Angela Merkel"),
        ("PER", "Emmanuel Macron"),
        ("LOC", "Paris"),
        ("ORG", "European Union"),
    ]


def test_the_replaced_tokens_view_is_the_electra_bundle_with_its_generator(slots):
    """Shown because assets/models has an ELECTRA bundle. Its discriminator is a 21-minute
    run's (the model card: AUC 0.54), so this checks what it answers, not how well."""
    slot = slots["replaced_tokens"]
    assert slot.ready, slot.problem
    assert os.path.basename(slot.path) == "electra", slot.path
    assert slot.info.get("quantization") == "dynamic"
    model = slot.model
    assert {"detect_replaced", "corrupt"} <= set(model.methods)
    text = "The cat sat quietly on the warm windowsill and watched the rain."
    detected = model.detect_replaced(text)
    assert [t["token"] for t in detected["tokens"]] == detected["read"][1:-1]
    assert all(0.0 < t["probability_replaced"] < 1.0 for t in detected["tokens"])
    corrupted = model.corrupt(text, 0.3, seed=1)
    assert corrupted["masked"]  # 30 % of 13 WordPieces
    masked = [i for i, token in enumerate(corrupted["tokens"]) if token["masked"]]
    assert masked == corrupted["masked"]
    for token in corrupted["tokens"]:
        if not token["masked"]:  # the generator writes at the chosen positions only
            assert token["token"] == token["original"] and not token["replaced"], token
    assert corrupted["replaced"] and corrupted["text"] != text
