"""`export.keras_runtime`: a model directory served through the edge runtime's methods, its
outputs the Keras model's own (what the app's Keras backend and a notebook use)."""

from __future__ import annotations

import numpy as np

from model.checkpoints import model_dir
from tests.helpers import make_init


def test_a_classifier_directory_answers_as_its_bundle_would(tmp_path):
    from export import keras_runtime
    from model.heads.classifier import BertClassifier
    from model.tasks.base import pack_rows

    init = make_init(tmp_path)
    labels = {0: "negative", 1: "positive"}
    classifier = BertClassifier(model_dir.load(init), num_labels=2, id2label=labels)
    directory = str(tmp_path / "clf")
    model_dir.save(classifier, directory, f"{init}/vocab.txt")

    served = keras_runtime.load(directory)
    assert served.methods == ["classify"]
    result = served.classify("the cat sat")
    assert sorted(result["scores"]) == ["negative", "positive"]
    # the probabilities are the softmax of the Keras model's logits on the same pieces
    tokenizer = served.tokenizer
    x = pack_rows(tokenizer, tokenizer.encode(["the cat sat"]), None, 16)
    logits = np.asarray(classifier.predict_on_batch(x))[0]
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    got = [result["scores"]["negative"], result["scores"]["positive"]]
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert result["label"] == labels[int(np.argmax(expected))]
