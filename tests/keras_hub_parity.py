"""A model here against its keras-hub preset, on the sentences of SST-2-style data.

    python tests/keras_hub_parity.py runs/ft/sst2 --data ../shared/data/glue/SST-2/dev.tsv
    python tests/keras_hub_parity.py runs/minilm --data ../shared/data/glue/SST-2/dev.tsv

Converts the model directory (`python -m model.convert --to keras-hub`, into a
temporary folder), then classifies the file's raw sentences twice: keras-hub's
`BertTextClassifier.from_preset` with keras-hub's own preprocessing, and our model
on our tokenizer's ids. Prints the accuracy of each, the predictions that agree,
the largest logit difference, and the rows whose token ids differ (which tells a
tokenizer difference from the GELU's). keras-hub computes the tanh GELU: a model
trained with the exact one moves by that much, and only by that much when the ids agree.
An encoder is compared by its hidden states on the real (non-padding) tokens instead.
`tests/test_keras_hub_preset.py` runs `compare` on a small classifier fine-tuned here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def compare(model_dir: str, data: str, limit: int | None = None, sequence_length: int = 64) -> dict:
    """keras-hub's and our predictions on the first `limit` rows of `data` (SST-2's layout)."""
    import keras_hub

    import model
    from model import tasks
    from model.checkpoints.model_dir import encoder_of
    from model.convert import main as convert
    from model.tasks.base import pack_rows
    from model.text.wordpiece import WordPieceTokenizer

    examples = tasks.get("sst2").read(data)[:limit]
    sentences = [e.text_a for e in examples]
    ours = model.load(model_dir)
    tokenizer = WordPieceTokenizer(
        os.path.join(model_dir, "vocab.txt"), encoder_of(ours).config.lowercase
    )
    x = pack_rows(tokenizer, tokenizer.encode_flat(sentences), None, sequence_length)
    with tempfile.TemporaryDirectory() as tmp:
        preset = os.path.join(tmp, "preset")
        argv = ["--from", "keras", model_dir, "--to", "keras-hub", preset]
        if convert([*argv, "--sequence-length", str(sequence_length)]) != 0:
            raise RuntimeError(f"{model_dir}: conversion to keras-hub failed")
        if ours is encoder_of(ours):
            return _hidden_states(ours, keras_hub.models.Backbone.from_preset(preset), x)
        our_logits = ours.predict(x, batch_size=64, verbose=0)
        classifier = keras_hub.models.BertTextClassifier.from_preset(preset)
        their_ids = np.asarray(classifier.preprocessor(sentences)["token_ids"])
        their_logits = classifier.predict(sentences, batch_size=64, verbose=0)
    labels = np.array([int(e.label) for e in examples])
    ours_predicted, theirs_predicted = our_logits.argmax(-1), their_logits.argmax(-1)
    return {
        "rows": len(sentences),
        "accuracy_ours": float(np.mean(ours_predicted == labels)),
        "accuracy_keras_hub": float(np.mean(theirs_predicted == labels)),
        "agreement": float(np.mean(ours_predicted == theirs_predicted)),
        "max_abs_logit_diff": float(np.max(np.abs(our_logits - their_logits))),
        "rows_with_other_ids": int(np.sum(np.any(their_ids != x["token_ids"], axis=1))),
    }


def _hidden_states(ours, theirs, x: dict) -> dict:
    """Max |difference| of the sequence output on real tokens, and of the pooled output."""
    real = x["padding_mask"].astype(bool)
    diffs = {"sequence_output": 0.0, "pooled_output": 0.0}
    for start in range(0, len(real), 64):
        batch = {k: v[start : start + 64] for k, v in x.items()}
        a, b = ours(batch), theirs(batch)
        for name in diffs:
            d = np.abs(np.asarray(a[name]) - np.asarray(b[name]))
            d = d[real[start : start + 64]] if name == "sequence_output" else d
            diffs[name] = max(diffs[name], float(d.max()))
    return {
        "rows": len(real),
        "real_tokens": int(real.sum()),
        **{f"max_abs_{k}_diff": v for k, v in diffs.items()},
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", help="our classifier's model directory")
    parser.add_argument("--data", required=True, help="SST-2-style tsv (sentence, label)")
    parser.add_argument("--limit", type=int, help="the first N rows only")
    parser.add_argument("--sequence-length", type=int, default=64)
    args = parser.parse_args(argv)
    print(
        json.dumps(compare(args.model_dir, args.data, args.limit, args.sequence_length), indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
