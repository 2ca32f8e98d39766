"""The paper's feature-based NER (section 5.3, Table 7): a BiLSTM tagger on frozen BERT features.

    python -m model.feature_tagger --model runs/base --data ../shared/data/conll2003 \\
        --output runs/ner-features

The encoder is not trained. Every word of CoNLL-2003 is represented by its
first WordPiece's hidden states in the chosen layers (default: the last four,
concatenated: the paper's best, 96.1 dev F1 for BERT-base), computed once
(`model.features.layers.LayerFeatures`). The rest of the paper's Table 7:

    --layers=embeddings                   embeddings only (the embedding layer's output)
    --layers=-1,-2,-3,-4 --combine sum    the last four blocks summed ("weighted sum")
    --layers=all --combine sum            every block summed ("weighted sum of all layers")

`--combine sum` adds the layers with equal weights (the paper gives none). A randomly initialised two-layer
BiLSTM (768 units a direction by default) and a Dense classifier are trained
on them, word-level tags with cross-entropy; dev F1 is conlleval's, after
every epoch, and the best epoch is kept. OUTPUT holds

    config.json           {"task": "feature_tagger", "encoder": ..., "layers": ..., "combine": ...,
                           "id2label": ...}
    tagger.weights.h5     the BiLSTM tagger's weights (the encoder stays where --model is)
    metrics.json          best dev metrics, every epoch's, wall time, command
    dev_units.json        the best epoch's dev F1 by sentence (model/tasks/dev_units.py)

`python -m model.evaluate --task conll2003 --model OUTPUT --data FILE` scores
such a directory on any CoNLL-2003 file (`model.features.tagger.evaluate`): the same features
from the encoder config.json names, the saved tagger, conlleval's metrics.
"""

from __future__ import annotations

import argparse
import sys

from model.checkpoints.model_info import check_model_dir, check_model_path
from model.features.layers import COMBINE, DEFAULT_LAYERS
from model.features.tagger import train
from model.io.files import check_paths
from model.io.flags import positive_float, positive_int
from model.io.native_logs import import_tensorflow_quietly


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m model.feature_tagger",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model", required=True, help="the frozen encoder: model directory, HF or Google folder"
    )
    p.add_argument(
        "--data", required=True, help="CoNLL-2003 directory (train.txt, valid.txt) or a train file"
    )
    p.add_argument("--output", required=True)
    p.add_argument(
        "--layers",
        default=",".join(map(str, DEFAULT_LAYERS)),
        help="layers per word (default: %(default)s): block indexes, 'embeddings' (the "
        "embedding layer's output) or 'all' (every block); write --layers=-1,-2 (with '=')",
    )
    p.add_argument(
        "--combine",
        choices=COMBINE,
        default="concat",
        help="concat: the layers side by side; sum: added up, equal weights (default: %(default)s)",
    )
    p.add_argument("--lstm-units", type=positive_int, default=768, help="units per direction")
    p.add_argument("--lstm-layers", type=positive_int, default=2)
    p.add_argument("--dropout", type=float, default=0.0, help="dropout on the LSTM inputs")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--learning-rate", type=positive_float, default=1e-3)
    p.add_argument(
        "--seq-len", "--max-seq-length", dest="max_seq_length", type=positive_int, default=128
    )
    p.add_argument(
        "--max-train-examples",
        type=positive_int,
        default=None,
        help="use only the first N training sentences",
    )
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also show TensorFlow's C++ start-up log lines (as does setting "
        "TF_CPP_MIN_LOG_LEVEL yourself)",
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:  # before TensorFlow starts: a mistyped path or a bad config.json fails at once
        check_paths(args.data)
        check_model_path(args.model)
        check_model_dir(args.model)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    import_tensorflow_quietly(args.verbose)
    try:
        return train(args)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
