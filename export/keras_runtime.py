"""The edge runtime's methods on a Keras model directory, before any export (imports TensorFlow).

    from export import keras_runtime
    m = keras_runtime.load("runs/ft/sst2")   # a model directory that model.train writes
    m.classify("A gorgeous film.")           # what runtime.load(its bundle).classify returns

`load` wraps the Keras model in a `predict` that returns what the bundle's LiteRT model returns
(the export's own serving function, `export.convert.serving`, run eagerly), so the same
`runtime.EdgeModel` methods answer with the same labels, spans and probabilities: the app's Keras
backend serves its views with it, and a notebook compares a model with its bundle through it.
"""

from __future__ import annotations

import os

# Predictions per mask a pre-training model returns (a bundle stores its own "top_k").
TOP_K = 10
# Model directories whose task serves as another's: an ELECTRA pre-training run is a
# discriminator (and its generator), as its bundle is.
SERVED_AS = {"electra_pretraining": "replaced_token_detection"}


def load(directory: str):
    """A model directory (config.json, vocab.txt, model.weights.h5) as a `runtime.EdgeModel`."""
    from export import bundle, runtime
    from model.checkpoints import model_dir
    from model.config import stored
    from model.text.tokenizer import WordPieceTokenizer

    config = model_dir.read_info(directory)
    keras_model = model_dir.load(directory)
    task = config["task"]  # read_info's: an encoder where config.json names none
    seq_len = min(
        config.get("max_seq_length") or bundle.DEFAULT_SEQ_LEN,
        stored(config["encoder"], "max_sequence_length"),
    )
    info = {
        **bundle.describe(config, task, seq_len, None, TOP_K),
        "source": {"model_dir": directory, "config": config},
        "backend": "keras",
    }
    vocab = os.path.join(directory, model_dir.VOCAB)
    tokenizer = WordPieceTokenizer(vocab, lowercase=info["lowercase"])
    next_sentence = bool(config.get("next_sentence", True))
    source_task, signatures = task, {}
    task = info["task"] = SERVED_AS.get(task, task)
    if task in bundle.ENCODER_SIGNATURE_TASKS:
        # A pre-trainer's encoder (ELECTRA's discriminator's), as its bundle's "encoder"
        # signature serves it.
        signatures["encoder"] = predictor(keras_model.encoder, "encoder")
    if source_task == "electra_pretraining":
        signatures["generator"] = predictor(keras_model, "generator")
    predict = predictor(keras_model, task, next_sentence=next_sentence)
    return runtime.EdgeModel(predict, tokenizer, info, signatures or None)


def predictor(keras_model, task: str, top_k: int = TOP_K, next_sentence: bool = False):
    """A `predict(inputs) -> {name: np.ndarray}` with a bundle's outputs for `task`: the export's
    own serving function (top-k probabilities at the masks for pre-training, attention
    probabilities for an encoder, logits otherwise), run eagerly."""
    from export.convert import keras_outputs, serving

    fn, _, _ = serving(keras_model, task, top_k=top_k, next_sentence=next_sentence)
    return lambda inputs: keras_outputs(fn, inputs)
