"""`python -m model.evaluate --task mlm` on a pre-training bundle: the same instances and masks as
its Keras model, scored from the bundle's top-k outputs (tiny models, seconds).

    PYTHONPATH=. TF_CPP_MIN_LOG_LEVEL=3 python -m pytest -q tests/test_mlm_bundle.py
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from tests.helpers import run_evaluate, write_corpus
from tests.test_export import TASK_INFOS, export, make_model_dir

SEQ_LEN = "32"


@pytest.fixture(scope="module")
def pretrainer(tmp_path_factory):
    """(model directory, float32 bundle with top 5, float32 bundle with top 3, raw text)."""
    parent = tmp_path_factory.mktemp("mlm")
    directory = make_model_dir(parent, "pretraining", TASK_INFOS["pretraining"])
    export(directory, parent / "bundle")
    export(directory, parent / "bundle-top3", top_k=3)
    text = write_corpus(parent / "text.txt", num_documents=12, sentences=(3, 8), seed=3)
    return directory, str(parent / "bundle"), str(parent / "bundle-top3"), text


def evaluate(model, text, tmp_path, name, *extra) -> dict:
    out = tmp_path / f"{name}.json"
    assert (
        run_evaluate(
            [
                "--task",
                "mlm",
                "--model",
                model,
                "--data",
                text,
                "--max-seq-length",
                SEQ_LEN,
                "--batch-size",
                "8",
                "--out",
                str(out),
                *extra,
            ]
        )
        == 0
    )
    with open(out, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.slow
def test_bundle_scores_top1_top5_like_its_keras_model(pretrainer, tmp_path):
    directory, bundle, _, text = pretrainer
    keras_metrics = evaluate(directory, text, tmp_path, "keras")
    lite = evaluate(bundle, text, tmp_path, "bundle")
    for key in ("instances", "masked_positions"):
        assert lite[key] == keras_metrics[key], key
    assert keras_metrics["masked_positions"] > 100
    # A random model still finds some gold words in its top 5: the equality is not 0 == 0.
    assert keras_metrics["mlm_top5_accuracy"] > 0
    # Exact: float32 LiteRT reorders two words only on a near-tie, which these data do not have.
    for key in ("mlm_top1_accuracy", "mlm_top5_accuracy", "nsp_accuracy"):
        assert lite[key] == keras_metrics[key], key
    # Loss and perplexity need the whole distribution: only the Keras model reports them.
    assert "mlm_loss" in keras_metrics and "mlm_perplexity" in keras_metrics
    assert "mlm_loss" not in lite and "mlm_perplexity" not in lite
    assert lite["mlm_top_k"] == 5 and "mlm_top_k" not in keras_metrics


@pytest.mark.slow
def test_bundle_with_fewer_than_five_predictions_reports_top1_only(pretrainer, tmp_path):
    directory, bundle, top3, text = pretrainer
    lite = evaluate(top3, text, tmp_path, "top3")
    assert lite["mlm_top_k"] == 3
    assert "mlm_top5_accuracy" not in lite
    top5 = evaluate(bundle, text, tmp_path, "top5")
    assert lite["mlm_top1_accuracy"] == top5["mlm_top1_accuracy"]


@pytest.mark.slow
def test_same_seed_same_masks_different_seed_different_figures(pretrainer, tmp_path):
    _, bundle, _, text = pretrainer
    first = evaluate(bundle, text, tmp_path, "a")
    again = evaluate(bundle, text, tmp_path, "b")
    other = evaluate(bundle, text, tmp_path, "c", "--seed", "7")
    assert {k: v for k, v in first.items() if k != "seconds"} == {
        k: v for k, v in again.items() if k != "seconds"
    }
    assert (
        other["masked_positions"] != first["masked_positions"]
        or other["mlm_top5_accuracy"] != first["mlm_top5_accuracy"]
    )


def test_top_k_hits_equal_the_ranks_of_full_logits():
    """The scoring itself: top-k ids taken from logits give the logits' own top-1/top-5."""
    from model.pretraining.masked_lm_scores import mlm_hits

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 4, 50)).astype(np.float32)  # (batch, P, vocab)
    gold = rng.integers(0, 50, size=(6, 4))
    # Half the gold words made the best or a top-5 guess, so both hits and misses occur.
    order = np.argsort(-logits, axis=-1)
    gold[:, :2] = order[:, :2, 0]
    gold[:, 2] = order[:, 2, 3]
    full, k = mlm_hits({"mlm": logits}, gold)
    assert k is None and set(full) == {"top1", "top5", "nll", "top1_id"}
    np.testing.assert_array_equal(full["top1_id"], order[..., 0])
    for top_k in (5, 8):
        top, k = mlm_hits({"topk_ids": order[..., :top_k]}, gold)
        assert k == top_k
        np.testing.assert_array_equal(top["top1"], full["top1"])
        np.testing.assert_array_equal(top["top5"], full["top5"])
        np.testing.assert_array_equal(top["top1_id"], full["top1_id"])
    top, k = mlm_hits({"topk_ids": order[..., :3]}, gold)
    assert k == 3 and set(top) == {"top1", "top1_id"}
    with pytest.raises(ValueError, match="neither masked-LM logits"):
        mlm_hits({"logits": logits}, gold)


def test_copy_rates_count_words_in_view_elsewhere_only():
    """A word counts as copied when it stands at another non-padding position of the
    input as shown; the masked position itself and the padding do not count."""
    from model.pretraining.masked_lm_scores import copy_hits

    token_ids = np.array([[2, 7, 103, 9, 7, 0, 0], [2, 5, 103, 6, 3, 0, 0]])
    padding_mask = (token_ids > 0).astype(np.int32)
    positions = np.array([[2, 1], [2, 4]])  # (batch, P): a [MASK], then a position kept as is
    gold = np.array([[9, 7], [8, 3]])
    top1 = np.array([[7, 4], [0, 6]])  # 0: only the padding holds it
    hits = copy_hits(top1, gold, token_ids, padding_mask, positions)
    # row 0: 7 stands at 1 and 4 (in view); 4 nowhere; 9 at 3; 7 again at 4 (not only at 1)
    # row 1: 0 only in the padding; 6 at 3; 8 nowhere; 3 only at its own position 4
    np.testing.assert_array_equal(hits["top1_copy"], [[1, 0], [0, 1]])
    np.testing.assert_array_equal(hits["gold_copy"], [[1, 1], [0, 0]])
    assert set(hits) == {"top1_copy", "gold_copy"}


def test_chance_rates_look_in_the_other_input_anywhere():
    """With `other` input, a word counts by chance when it stands at any non-padding
    position of that input's row (the masked position's own index included)."""
    from model.pretraining.masked_lm_scores import copy_hits

    token_ids = np.array([[2, 7, 103, 9, 3, 0], [2, 103, 5, 4, 3, 0]])
    positions = np.array([[2, 0], [1, 3]])
    gold = np.array([[8, 0], [6, 4]])
    other = (np.roll(token_ids, -1, 0), np.roll(token_ids > 0, -1, 0))
    top1 = np.array([[4, 0], [9, 103]])  # 0: in the other row's padding only
    hits = copy_hits(top1, gold, token_ids, token_ids > 0, positions, other)
    # row 0 looks in row 1 (2 103 5 4 3): 4 yes, 0 no; gold 8 no, 0 no
    # row 1 looks in row 0 (2 7 103 9 3): 9 yes, 103 yes; gold 6 no, 4 no
    np.testing.assert_array_equal(hits["top1_chance"], [[1, 0], [1, 1]])
    np.testing.assert_array_equal(hits["gold_chance"], [[0, 0], [0, 0]])


@pytest.mark.slow
def test_bundle_errors_name_the_problem(pretrainer, tmp_path, capsys):
    _, bundle, _, text = pretrainer
    assert (
        run_evaluate(
            ["--task", "mlm", "--model", bundle, "--data", text, "--max-seq-length", "512"]
        )
        == 1
    )
    assert "longer than the bundle's max_seq_length 128" in capsys.readouterr().err
    encoder = make_model_dir(tmp_path, "encoder", TASK_INFOS["encoder"])
    export(encoder, tmp_path / "encoder-bundle")
    assert (
        run_evaluate(["--task", "mlm", "--model", str(tmp_path / "encoder-bundle"), "--data", text])
        == 1
    )
    assert "'encoder' bundle has no masked-LM head" in capsys.readouterr().err


def tied_tables(path: str) -> dict[str, tuple[int, int, set]]:
    """{subgraph name: (the token embedding's buffer (the largest GATHER table), how
    many buffers of its shape the subgraph holds, the buffers of the FULLY_CONNECTED
    weights of its shape)} of a `.tflite` file."""
    import numpy as np
    from tensorflow.lite.tools import flatbuffer_utils

    from export.tied_weights import FULLY_CONNECTED, GATHER, _ops

    m = flatbuffer_utils.read_model(path)
    rows = {}
    for g in m.subgraphs:
        table = max(
            (g.tensors[o.inputs[0]] for o in _ops(m, g, GATHER)), key=lambda t: np.prod(t.shape)
        )
        shape = list(table.shape)
        same_shape = {t.buffer for t in g.tensors if list(t.shape) == shape}
        decoders = {
            g.tensors[o.inputs[1]].buffer
            for o in _ops(m, g, FULLY_CONNECTED)
            if list(g.tensors[o.inputs[1]].shape) == shape
        }
        rows[g.name.decode()] = (table.buffer, len(same_shape), decoders)
    return rows


@pytest.mark.slow
def test_dynamic_bundle_stores_the_tied_embedding_once(pretrainer, tmp_path):
    """The fill-mask decoder reads the token embedding's own int8 table (one copy in
    the file, shared with the encoder signature), and the bundle still scores as its
    Keras model."""
    from export import bundle

    directory, _, _, text = pretrainer
    info = export(directory, tmp_path / "dynamic", quantization="dynamic")
    assert info["verification"]["passed"], info["verification"]["problems"]
    tables = tied_tables(bundle.model_path(str(tmp_path / "dynamic")))
    table, copies, decoders = tables["serving_default"]
    assert decoders == {table} and copies == 1
    assert tables["encoder"][:2] == (table, 1)
    lite = evaluate(str(tmp_path / "dynamic"), text, tmp_path, "dynamic")
    keras_metrics = evaluate(directory, text, tmp_path, "keras")
    assert abs(lite["mlm_top1_accuracy"] - keras_metrics["mlm_top1_accuracy"]) < 0.02


def test_only_the_same_weight_is_shared():
    """Two int8 constants are one weight only when every value agrees to within
    their quantization steps: per-tensor against per-row scales of the same floats
    agree, a different table of the same shape does not."""
    import numpy as np

    from export.tied_weights import _same_weight

    def tensor(buffer, scale):
        q = SimpleNamespace(scale=list(np.ravel(scale)), zeroPoint=[0], quantizedDimension=0)
        return SimpleNamespace(buffer=buffer, shape=[4, 3], quantization=q)

    rng = np.random.default_rng(0)
    floats = rng.normal(0, 0.3, size=(4, 3)).astype(np.float32)
    per_tensor = np.abs(floats).max() / 127
    per_row = np.abs(floats).max(1) / 127
    other = rng.normal(0, 0.3, size=(4, 3)).astype(np.float32)
    buffers = [
        np.round(floats / per_tensor),
        np.round(floats / per_row[:, None]),
        np.round(other / per_tensor),
    ]
    model = SimpleNamespace(
        buffers=[SimpleNamespace(data=b.astype(np.int8).view(np.uint8).ravel()) for b in buffers]
    )
    table, rows, different = tensor(0, per_tensor), tensor(1, per_row), tensor(2, per_tensor)
    assert _same_weight(model, table, rows)
    assert not _same_weight(model, table, different)
