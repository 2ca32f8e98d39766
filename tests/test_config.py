"""`BertConfig`: presets, parameter counts, JSON in and out, Google's form, loud errors.

PYTHONPATH=. python -m pytest tests/test_config.py            # large is --runslow
"""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from model.config import GELU, GELU_APPROXIMATE, PRESETS, BertConfig
from tests.helpers import SHARED_DATA

GOOGLE_CONFIG = os.path.join(SHARED_DATA, "google-bert-ckpt-index", "bert_config.json")
# The paper's (and Hugging Face's) counts for the encoder with its pooler.
BASE_PARAMETERS = 109_482_240
LARGE_PARAMETERS = 335_141_888


def expected_parameters(c: BertConfig) -> int:
    """BERT's parameter count from its shape alone (embeddings, blocks, pooler)."""
    h, i = c.hidden_dim, c.intermediate_dim
    embeddings = (c.vocabulary_size + c.max_sequence_length + c.num_segments) * h + 2 * h
    attention = 4 * (h * h + h) + 2 * h  # query, key, value, output; LayerNorm
    feedforward = (h * i + i) + (i * h + h) + 2 * h  # two denses; LayerNorm
    pooler = h * h + h
    return embeddings + c.num_layers * (attention + feedforward) + pooler


# === Presets ===


@pytest.mark.parametrize(
    "name, layers, heads, hidden, intermediate",
    [
        ("tiny", 2, 2, 32, 64),
        ("mini", 4, 4, 256, 1024),
        ("small", 4, 8, 512, 2048),
        ("medium", 8, 8, 512, 2048),
        ("base", 12, 12, 768, 3072),
        ("large", 24, 16, 1024, 4096),
        ("minilm-l6", 6, 12, 384, 1536),
        ("electra-small", 12, 4, 256, 1024),
        ("electra-mini", 4, 4, 256, 1024),
    ],
)
def test_preset_shapes(name, layers, heads, hidden, intermediate):
    c = BertConfig.preset(name)
    assert (c.num_layers, c.num_heads, c.hidden_dim, c.intermediate_dim) == (
        layers,
        heads,
        hidden,
        intermediate,
    )
    assert c.hidden_dim % c.num_heads == 0
    if name != "tiny":  # every released size reads bert-base-uncased's vocabulary
        assert (c.vocabulary_size, c.max_sequence_length) == (30522, 512)


def test_presets_are_all_tested():
    assert sorted(PRESETS) == sorted(
        ["tiny", "mini", "small", "medium", "base", "large", "minilm-l6"]
        + ["electra-small", "electra-mini"]
    )


def test_preset_overrides_win_and_leave_the_preset_alone():
    c = BertConfig.preset("base", vocabulary_size=100, dropout=0.0)
    assert (c.vocabulary_size, c.dropout, c.hidden_dim) == (100, 0.0, 768)
    assert BertConfig.preset("base").vocabulary_size == 30522


def test_expected_parameters_formula_gives_the_papers_counts():
    assert expected_parameters(BertConfig.preset("base")) == BASE_PARAMETERS
    assert expected_parameters(BertConfig.preset("large")) == LARGE_PARAMETERS


def test_tiny_encoder_parameter_count_matches_formula():
    from model.networks.encoder import BertEncoder

    encoder = BertEncoder.from_preset("tiny")
    assert encoder.count_params() == expected_parameters(encoder.config)


@pytest.mark.parametrize("name, count", [("base", BASE_PARAMETERS), ("large", LARGE_PARAMETERS)])
def test_paper_sizes_have_the_papers_parameter_counts(monkeypatch, name, count):
    import keras

    from model.networks.encoder import BertEncoder

    # Drawing 335M truncated-normal values takes ~25 s on two busy cores; the
    # count does not depend on the values, so build with zeros (~3 s).
    monkeypatch.setattr(
        keras.initializers, "TruncatedNormal", lambda stddev: keras.initializers.Zeros()
    )
    assert BertEncoder.from_preset(name).count_params() == count


# === JSON ===


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_json_round_trip(tmp_path, name):
    c = BertConfig.preset(name, activation=GELU_APPROXIMATE, lowercase=False)
    path = str(tmp_path / "config.json")
    c.to_json(path)
    assert BertConfig.from_json(path) == c
    assert BertConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c


def test_from_json_reads_a_model_directory_config(tmp_path):
    c = BertConfig.preset("tiny")
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps({"task": "pretraining", "encoder": c.to_dict(), "next_sentence": True})
    )
    assert BertConfig.from_json(str(path)) == c


@pytest.mark.skipif(
    not os.path.isfile(GOOGLE_CONFIG),
    reason=f"{GOOGLE_CONFIG} absent: ../shared/data is not beside the repository",
)
def test_google_bert_config_reads_as_tanh_gelu():
    # Google's modeling.py called its tanh approximation "gelu".
    c = BertConfig.from_json(GOOGLE_CONFIG)
    assert c.activation == GELU_APPROXIMATE
    assert c == BertConfig.preset("mini", activation=GELU_APPROXIMATE)


@pytest.mark.skipif(
    not os.path.isfile(GOOGLE_CONFIG),
    reason=f"{GOOGLE_CONFIG} absent: ../shared/data is not beside the repository",
)
def test_google_form_round_trip():
    with open(GOOGLE_CONFIG, encoding="utf-8") as f:
        google = json.load(f)
    c = BertConfig.from_dict(google)
    assert c.to_google_dict() == google
    assert BertConfig.from_dict(c.to_google_dict()) == c


def test_hugging_face_gelu_is_exact():
    hf = {
        **BertConfig.preset("mini", activation=GELU_APPROXIMATE).to_google_dict(),
        "model_type": "bert",
        "layer_norm_eps": 1e-12,
    }
    assert BertConfig.from_dict(hf).activation == GELU
    assert BertConfig.from_dict({**hf, "hidden_act": "gelu_new"}).activation == GELU_APPROXIMATE


def test_google_form_refuses_exact_gelu():
    with pytest.raises(ValueError, match="exact"):
        BertConfig.preset("base").to_google_dict()


# === Errors ===


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"hidden_dim": 30, "num_heads": 4}, "divisible by num_heads"),
        ({"num_layers": 0}, "num_layers must be a positive integer"),
        ({"vocabulary_size": -5}, "vocabulary_size must be a positive integer"),
        ({"hidden_dim": 32.0}, "hidden_dim must be a positive integer"),
        ({"num_heads": True}, "num_heads must be a positive integer"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
        ({"dropout": -0.1}, r"dropout must be in \[0, 1\)"),
        ({"activation": "swish"}, "activation must be one of"),
        ({"layer_norm_epsilon": 0.0}, "layer_norm_epsilon must be a positive number"),
        ({"initializer_range": -0.02}, "initializer_range must be a positive number"),
    ],
)
def test_invalid_values_raise_clear_errors(changes, message):
    with pytest.raises(ValueError, match=message):
        BertConfig.preset("tiny", **changes)


def test_unknown_preset_names_the_choices():
    with pytest.raises(ValueError, match="Unknown preset 'huge'.*base"):
        BertConfig.preset("huge")


def test_unknown_key_is_named(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**BertConfig.preset("tiny").to_dict(), "hidden_size_typo": 3}))
    with pytest.raises(
        ValueError, match=r"config.json: unknown BertConfig keys \['hidden_size_typo'\]"
    ):
        BertConfig.from_json(str(path))


def test_google_config_missing_key_is_named():
    google = BertConfig.preset("mini", activation=GELU_APPROXIMATE).to_google_dict()
    del google["num_hidden_layers"]
    with pytest.raises(ValueError, match="missing key 'num_hidden_layers'"):
        BertConfig.from_dict(google)


@pytest.mark.parametrize(
    "content, error, message",
    [
        (None, FileNotFoundError, "config file not found"),
        ("{not json", ValueError, "not a JSON config"),
        ("[1, 2]", ValueError, "must be a JSON object"),
        ("[" * 100_000 + "]" * 100_000, ValueError, r"not a JSON config \(nested too deeply\)"),
        ("/dev/zero", ValueError, "not a regular file, where a config file is expected"),
        (" " * 400_000 + "{}", ValueError, "over 300000 bytes, not a config file"),
    ],
)
def test_bad_config_files(tmp_path, content, error, message, monkeypatch):
    """Each refused, naming the file, without reading an endless file (a link to /dev/zero
    was read until memory ran out) or more than the limit of a big one."""
    from model.io import files

    monkeypatch.setattr(files, "MAX_OBJECT_BYTES", 300_000)
    path = tmp_path / "config.json"
    if content == "/dev/zero":
        path.symlink_to("/dev/zero")
    elif content is not None:
        path.write_text(content)
    with pytest.raises(error, match=message):
        BertConfig.from_json(str(path))


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        BertConfig.preset("tiny").hidden_dim = 64


def test_bad_values_name_the_file(tmp_path):
    """A value out of range in a model directory's config.json, in Hugging Face's keys or in
    ours, is refused naming the file, before any model is built."""
    import json

    from model.checkpoints import model_dir

    ours = BertConfig.preset("tiny").to_dict() | {"hidden_dim": 131}
    (tmp_path / "config.json").write_text(json.dumps({"task": "encoder", "encoder": ours}))
    with pytest.raises(ValueError, match=r"config.json: encoder: BertConfig.hidden_dim \(131\)"):
        model_dir.read_info(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"task": "encoder", "encoder": [1]}))
    with pytest.raises(ValueError, match='config.json: "encoder" must be an object'):
        model_dir.read_info(str(tmp_path))
    google = BertConfig.preset("tiny", activation=GELU_APPROXIMATE).to_google_dict()
    with pytest.raises(ValueError, match=r"^bert_config.json: BertConfig.hidden_dim"):
        BertConfig.from_dict(google | {"hidden_size": 131}, "bert_config.json")


@pytest.mark.parametrize(
    "head, message",
    [
        ({"num_labels": -1}, "num_labels must be an integer of at least 1, not -1"),
        ({"num_labels": 2, "id2label": [1, 2]}, 'id2label must be an object {"0": label'),
        ({"num_labels": 2, "id2label": {"zero": "a"}}, "id2label must be an object"),
        ({"num_labels": None}, "num_labels must be an integer of at least 1, not None"),
        ({"num_labels": 2, "dropout": 5}, r"dropout must be a number in \[0, 1\), not 5"),
        ({"num_labels": 2, "bilstm_units": 0}, "bilstm_units must be an integer of at least 1"),
        ({"num_labels": 2, "max_seq_length": 1e9}, "max_seq_length must be an integer"),
        ({"encoder": {"layer_norm_epsilon": float("inf")}}, "layer_norm_epsilon must be a posi"),
    ],
)
def test_bad_head_fields_name_the_file(tmp_path, head, message):
    """A classifier's config.json with a bad head field: refused naming the file, before
    Keras (it failed there with "'list' object has no attribute 'items'" or Keras' own
    message about `rate`; an infinite epsilon was taken)."""
    from model.checkpoints import model_dir

    encoder = BertConfig.preset("tiny").to_dict() | head.pop("encoder", {})
    info = {"task": "classifier", "encoder": encoder, "num_labels": 2, **head}
    (tmp_path / "config.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match=f"config.json: .*{message}"):
        model_dir.read_info(str(tmp_path))


def test_check_model_dir_reads_ours_and_leaves_the_rest(tmp_path):
    """The commands' check before TensorFlow: our model directory's config.json is read in full
    (an unknown task is refused, naming the file); a feature-based tagger, a Hugging Face
    folder, a bundle and a plain file are left to the readers that take them."""
    from model.checkpoints.model_info import check_model_dir

    def folder(name, files):
        path = tmp_path / name
        path.mkdir()
        for file, content in files.items():
            (path / file).write_text(content if isinstance(content, str) else json.dumps(content))
        return str(path)

    encoder = BertConfig.preset("tiny").to_dict()
    ours = folder(
        "ours",
        {
            "config.json": {"task": "classifier", "encoder": encoder, "num_labels": 2},
            "model.weights.h5": "",
        },
    )
    check_model_dir(ours)  # valid: nothing raised
    old = folder(
        "old",
        {
            "config.json": {"task": "encoder", "encoder": encoder, "lowercase": False},
            "model.weights.h5": "",
        },
    )
    check_model_dir(old)  # a run that kept its records' casing at the top
    typo = folder(
        "typo", {"config.json": {"task": "clasifier", "encoder": encoder}, "model.weights.h5": ""}
    )
    with pytest.raises(ValueError, match=r"typo/config.json: unknown task 'clasifier'"):
        check_model_dir(typo)
    listed = folder("listed", {"config.json": [1, 2], "model.weights.h5": ""})
    with pytest.raises(ValueError, match=r"listed/config.json: a config must be a JSON object"):
        check_model_dir(listed)
    tagger = {"task": "feature_tagger", "encoder": "ours"}
    hf = {"model_type": "bert", "hidden_size": 131}
    for name, files in {
        "tagger": {"config.json": tagger, "model.weights.h5": ""},
        "hf": {"config.json": hf, "model.safetensors": ""},
        "bundle": {"bundle.json": {}, "model.tflite": ""},
        "empty": {},
    }.items():
        check_model_dir(folder(name, files))
    check_model_dir(str(tmp_path / "hf" / "config.json"))
    check_model_dir(None)
    folder_config = folder("folder-config", {"model.weights.h5": ""})
    os.mkdir(os.path.join(folder_config, "config.json"))  # a traceback before (a review)
    with pytest.raises(ValueError, match=r"folder-config/config.json: cannot read the config"):
        check_model_dir(folder_config)


def test_check_model_path_takes_a_google_prefix(tmp_path):
    """A Google checkpoint is named by its prefix, which is no file: model.load takes it, and so
    do the commands' checks (extract_features and feature_tagger refused it, a review)."""
    from model.checkpoints.model_info import check_model_path

    (tmp_path / "bert_model.ckpt.index").write_bytes(b"")
    check_model_path(str(tmp_path / "bert_model.ckpt"))
    check_model_path(str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"other.ckpt: no such file or directory"):
        check_model_path(str(tmp_path / "other.ckpt"))
