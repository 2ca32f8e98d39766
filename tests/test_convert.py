"""Checkpoint conversion: parity with the reference, exact round trips, loud errors.

    PYTHONPATH=. python -m pytest tests/test_convert.py

Parity fixtures (tiny random Hugging Face models and their reference outputs,
all-MiniLM-L6-v2's outputs on real sentences) are written by
`tests/make_parity_fixtures.py` with PyTorch; these tests need neither torch
nor transformers. The MiniLM test runs only where its weights are
(`BERT_MINILM_DIR`, default where .ci/run unpacks them: .ci-cache/minilm/...).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings

import numpy as np
import pytest

import model
from model.checkpoints import formats, model_dir, safetensors_io
from model.checkpoints import google as google_checkpoint
from model.checkpoints import huggingface as hf_checkpoint
from model.checkpoints.formats import read
from model.config import BertConfig
from model.convert import main
from model.heads.pretrainer import BertPretrainer
from model.networks.encoder import BertEncoder
from tests.helpers import MINILM_DIR, SHARED_DATA

HERE = os.path.dirname(os.path.abspath(__file__))
PARITY = os.path.join(HERE, "fixtures", "parity")
TINY = os.path.join(PARITY, "tiny")
GOOGLE_INDEX = os.path.join(HERE, "fixtures", "google_bert_mini_index.json")
REAL_INDEX_DIR = os.path.join(SHARED_DATA, "google-bert-ckpt-index")
MINILM = MINILM_DIR
FEATURES = ("token_ids", "segment_ids", "padding_mask")

HIDDEN_TOLERANCE = 1e-4  # the bounds, float32
LOGITS_TOLERANCE = 1e-3
# transformers builds these without a pooler, so ours has to be created fresh.
NO_POOLER = ("BertForMaskedLM", "BertForTokenClassification", "BertForQuestionAnswering")


def tiny_inputs() -> dict:
    with np.load(os.path.join(TINY, "inputs.npz")) as f:
        return dict(f)


def run_like_reference(arch: str, m, inputs: dict) -> dict:
    """Our outputs under the names `make_parity_fixtures.py` stored."""
    x = {k: inputs[k] for k in FEATURES}
    if arch == "BertForMultipleChoice":
        return {"logits": np.asarray(m({k: np.stack([v, v[::-1]]) for k, v in x.items()}))}
    encoder = model_dir.encoder_of(m)
    out = {k: np.asarray(v) for k, v in encoder(x).items()}
    if arch in ("BertForPreTraining", "BertForMaskedLM"):
        heads = m({**x, "mask_positions": inputs["mask_positions"]})
        out.update({k: np.asarray(v) for k, v in heads.items()})
    elif arch == "BertForQuestionAnswering":
        out.update({k: np.asarray(v) for k, v in m(x).items()})
    elif arch != "BertModel":
        out["logits"] = np.asarray(m(x))
    return out


def load_quietly(path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.load(path, **kwargs)


def tiny_pretrainer(activation="gelu_approximate", seed=0) -> BertPretrainer:
    encoder = BertEncoder.from_config_object(
        BertConfig(
            vocabulary_size=99,
            num_layers=2,
            num_heads=4,
            hidden_dim=32,
            intermediate_dim=37,
            max_sequence_length=40,
            activation=activation,
            lowercase=False,
        )
    )
    m = BertPretrainer(encoder)
    # Distinct values everywhere: LayerNorm gains and biases are 1 and 0 at init.
    rng = np.random.default_rng(seed)
    for w in m.weights:
        w.assign(rng.normal(size=w.shape).astype("float32"))
    return m


def tiny_vocab(tmp_path, size=99) -> str:
    path = tmp_path / "vocab.txt"
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(size - 5)]
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return str(path)


def assert_same_weights(a, b, skip=()):
    wa = {w.path: np.asarray(w.numpy()) for w in a.weights}
    wb = {w.path: np.asarray(w.numpy()) for w in b.weights}
    assert set(wa) == set(wb)
    for path in wa:
        if path not in skip:
            np.testing.assert_array_equal(wa[path], wb[path], err_msg=path)


def copy_hf(arch, tmp_path):
    dst = tmp_path / arch
    shutil.copytree(os.path.join(TINY, arch), dst)
    return str(dst)


# === Parity with the reference implementation ===


@pytest.mark.parametrize("arch", NO_POOLER)
def test_a_folder_without_a_pooler_reads_with_a_fresh_one_and_says_so(arch):
    """transformers builds these without a pooler: reading them needs no --allow-new-heads
    (`finetune --init` reads without it), and the note names the fresh pooler."""
    _, _, notes = read(os.path.join(TINY, arch))
    assert any(n.startswith("pooled_dense: not in") and arch in n for n in notes), notes


@pytest.mark.parametrize("arch", sorted(hf_checkpoint.ARCHITECTURES))
def test_tiny_parity_with_transformers(arch):
    directory = os.path.join(TINY, arch)
    m = load_quietly(directory, allow_new_heads=arch in NO_POOLER)
    with np.load(os.path.join(directory, "expected.npz")) as f:
        expected = dict(f)
    ours = run_like_reference(arch, m, tiny_inputs())
    for name, want in expected.items():
        tolerance = HIDDEN_TOLERANCE if name.endswith("_output") else LOGITS_TOLERANCE
        diff = float(np.max(np.abs(ours[name] - want)))
        assert ours[name].shape == want.shape, name
        assert diff <= tolerance, f"{arch} {name}: max abs difference {diff}"


@pytest.mark.skipif(
    not os.path.isfile(os.path.join(MINILM, "model.safetensors")),
    reason="all-MiniLM-L6-v2 weights not present (set BERT_MINILM_DIR)",
)
def test_minilm_parity_on_real_sentences(tmp_path):
    # The command; --no-verify because the test compares outputs itself.
    assert (
        main(["--from", "hf", MINILM, "--to", "keras", str(tmp_path / "minilm"), "--no-verify"])
        == 0
    )
    m = model.load(str(tmp_path / "minilm"))
    with np.load(os.path.join(PARITY, "minilm", "inputs.npz")) as f:
        inputs = dict(f)
    with np.load(os.path.join(PARITY, "minilm", "expected.npz")) as f:
        expected = f["sequence_output"]
    got = np.asarray(m(inputs)["sequence_output"])
    assert float(np.max(np.abs(got - expected))) <= HIDDEN_TOLERANCE


# === Round trips ===


def test_keras_hf_keras_round_trip_is_exact(tmp_path):
    m = tiny_pretrainer(activation="gelu")
    vocab = tiny_vocab(tmp_path)
    hf_checkpoint.write(m, str(tmp_path / "hf"), vocab)
    back, vocab_back, notes = read(str(tmp_path / "hf"))
    assert type(back) is BertPretrainer and back.next_sentence and notes == []
    assert back.encoder.config == m.encoder.config
    assert_same_weights(m, back)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["BertForPreTraining"] and config["hidden_act"] == "gelu"


def test_keras_google_keras_round_trip_is_exact(tmp_path):
    m = tiny_pretrainer(activation="gelu_approximate")
    google_checkpoint.write(m, str(tmp_path / "g"), tiny_vocab(tmp_path))
    back, _, notes = read(str(tmp_path / "g"))
    assert type(back) is BertPretrainer and back.next_sentence and notes == []
    assert back.encoder.config == m.encoder.config
    assert_same_weights(m, back)


def test_both_formats_name_every_weight_once():
    # One table (model.checkpoints.bert_names) names the weights for both formats.
    m = tiny_pretrainer(activation="gelu_approximate")
    ours = sorted(w.path for w in m.weights)
    for entries in (google_checkpoint.weight_entries(m), hf_checkpoint.weight_entries(m, "bert.")):
        assert sorted(e.variable.path for e in entries) == ours
        assert len({e.name for e in entries}) == len(ours)


@pytest.mark.parametrize("arch", sorted(hf_checkpoint.ARCHITECTURES))
def test_hf_keras_hf_round_trip_keeps_tensors_and_labels(arch, tmp_path):
    src = os.path.join(TINY, arch)
    assert (
        main(
            ["--from", "hf", src, "--to", "keras", str(tmp_path / "k"), "--no-verify"]
            + (["--allow-new-heads"] if arch in NO_POOLER else [])
        )
        == 0
    )
    assert (
        main(
            [
                "--from",
                "keras",
                str(tmp_path / "k"),
                "--to",
                "hf",
                str(tmp_path / "hf"),
                "--no-verify",
            ]
        )
        == 0
    )
    before = safetensors_io.read(os.path.join(src, "model.safetensors"))
    after = safetensors_io.read(str(tmp_path / "hf" / "model.safetensors"))
    assert set(before) == set(after)
    for name in before:
        np.testing.assert_array_equal(before[name], after[name], err_msg=name)
    c_before = json.load(open(os.path.join(src, "config.json")))
    c_after = json.load(open(tmp_path / "hf" / "config.json"))
    for key in ("architectures", "hidden_act", "hidden_size", "vocab_size", "id2label", "label2id"):
        assert c_before.get(key) == c_after.get(key), key


def test_dot_keras_file_loads_safely(tmp_path):
    m = load_quietly(os.path.join(TINY, "BertForSequenceClassification"))
    path = str(tmp_path / "m.keras")
    m.save(path)
    back = model.load(path)
    assert type(back).__name__ == "BertClassifier" and back.id2label == m.id2label
    assert_same_weights(m, back)


def test_a_keras_file_written_by_convert_is_read_back_and_checked(tmp_path, capsys):
    source = os.path.join(TINY, "BertForSequenceClassification")
    out = str(tmp_path / "m.keras")
    assert main(["--from", "hf", source, "--to", "keras", out]) == 0
    written = len(load_quietly(source).weights)
    assert f"{written} verified equal after reading back" in capsys.readouterr().out


# === The Google mapping against a real released checkpoint ===


def test_google_writer_matches_real_bert_mini_index(tmp_path):
    import tensorflow as tf

    with open(GOOGLE_INDEX, encoding="utf-8") as f:
        real = json.load(f)
    config = BertConfig.from_dict(real["bert_config"])
    assert config.activation == "gelu_approximate"  # Google's "gelu" is the tanh form
    m = BertPretrainer(BertEncoder.from_config_object(config))
    google_checkpoint.write(m, str(tmp_path), tiny_vocab(tmp_path, config.vocabulary_size))
    written = tf.train.load_checkpoint(
        str(tmp_path / "bert_model.ckpt")
    ).get_variable_to_shape_map()
    assert {k: list(v) for k, v in written.items()} == real["variables"]


@pytest.mark.skipif(
    not os.path.isdir(REAL_INDEX_DIR),
    reason=f"{REAL_INDEX_DIR} absent: ../shared/data is not beside the repository",
)
def test_committed_index_fixture_is_the_real_index(tmp_path):
    import tensorflow as tf

    # The .index alone gives names and shapes (the weights are not available offline).
    shutil.copy(os.path.join(REAL_INDEX_DIR, "bert_model.ckpt.index"), tmp_path)
    names = tf.train.load_checkpoint(str(tmp_path / "bert_model.ckpt")).get_variable_to_shape_map()
    with open(GOOGLE_INDEX, encoding="utf-8") as f:
        assert {k: list(v) for k, v in names.items()} == json.load(f)["variables"]
    with open(os.path.join(REAL_INDEX_DIR, "bert_config.json"), encoding="utf-8") as f:
        assert BertConfig.from_dict(json.load(f)) == BertConfig.from_dict(
            json.load(open(GOOGLE_INDEX))["bert_config"]
        )


def test_google_refuses_exact_gelu(tmp_path):
    with pytest.raises(ValueError, match="exact"):
        google_checkpoint.write(
            tiny_pretrainer(activation="gelu"), str(tmp_path / "g"), tiny_vocab(tmp_path)
        )


def test_google_skips_optimizer_state_and_says_so(tmp_path):
    m = tiny_pretrainer()
    tensors = {
        **__import__("model.checkpoints.mapping", fromlist=["export"]).export(
            google_checkpoint.weight_entries(m)
        ),
        "global_step": np.array(7, np.int64),
        "bert/pooler/dense/bias/adam_m": np.zeros(32, "f"),
    }
    google_checkpoint.write_checkpoint(str(tmp_path / "bert_model.ckpt"), tensors)
    (tmp_path / "bert_config.json").write_text(
        json.dumps({**m.encoder.config.to_google_dict(), "do_lower_case": False})
    )
    tiny_vocab(tmp_path)
    back, _, notes = read(str(tmp_path))
    assert_same_weights(m, back)
    assert any("global_step" in n for n in notes)


# === Valid folders that differ from transformers' current output ===


def edit_config(folder: str, **changes) -> None:
    """`changes` into the folder's config.json; a value of None removes the key."""
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    for key, value in changes.items():
        config.pop(key, None) if value is None else config.__setitem__(key, value)
    with open(path, "w") as f:
        json.dump(config, f)


def test_legacy_layer_norm_names_read_as_transformers_reads_them(tmp_path):
    """bert-base-uncased's own model.safetensors names LayerNorm's tensors gamma and beta."""
    folder = copy_hf("BertForPreTraining", tmp_path)
    weights = os.path.join(folder, "model.safetensors")
    tensors = safetensors_io.read(weights)
    legacy = {
        n.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
            "LayerNorm.bias", "LayerNorm.beta"
        ): a
        for n, a in tensors.items()
    }
    assert legacy.keys() != tensors.keys()
    safetensors_io.write(weights, legacy)
    assert_same_weights(model.load(folder), model.load(os.path.join(TINY, "BertForPreTraining")))


def test_an_old_config_without_model_type_or_architectures_is_read_as_hugging_faces(tmp_path):
    # Its "gelu" is transformers' exact GELU (Google's would be the tanh form).
    folder = copy_hf("BertForSequenceClassification", tmp_path)
    edit_config(folder, model_type=None, architectures=None)
    m = model.load(folder, task="classifier")
    assert model_dir.encoder_of(m).config.activation == "gelu"


def test_a_label_count_without_label_names_is_read(tmp_path):
    folder = copy_hf("BertForSequenceClassification", tmp_path)
    edit_config(folder, id2label=None, label2id=None, num_labels=3)
    assert model.load(folder).num_labels == 3


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"hidden_act": "gelu_fast"}, None),  # the tanh form under another name
        ({"hidden_act": "gelu_python"}, None),  # the exact one
        ({"hidden_act": "quick_gelu"}, "config.json: hidden_act 'quick_gelu'"),
        ({"position_embedding_type": "relative_key"}, "config.json: position_embedding_type"),
        ({"problem_type": "multi_label_classification"}, "config.json: problem_type multi_"),
    ],
)
def test_settings_this_project_cannot_build_stop_naming_the_file(tmp_path, changes, message):
    folder = copy_hf("BertForSequenceClassification", tmp_path)
    edit_config(folder, **changes)
    if message is None:
        expected = {"gelu_fast": "gelu_approximate", "gelu_python": "gelu"}[changes["hidden_act"]]
        assert model_dir.encoder_of(model.load(folder)).config.activation == expected
        return
    with pytest.raises(ValueError, match=re.escape(message)):
        model.load(folder)


def test_a_file_in_the_folder_names_the_folder_and_casing_is_warned(tmp_path):
    folder = copy_hf("BertModel", tmp_path)
    with pytest.raises(ValueError, match="a file; pass the model folder that holds it"):
        model.load(os.path.join(folder, "model.safetensors"))
    for lowercase, strip in ((True, False), (False, True)):
        # a byte-order mark (a Windows editor's save) is read past, as transformers' json does not
        with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8-sig") as f:
            json.dump({"do_lower_case": lowercase, "strip_accents": strip}, f)
        expected = f"do_lower_case {str(lowercase).lower()} but strip_accents {str(strip).lower()}"
        with pytest.warns(UserWarning, match=expected):
            assert model.load(folder).config.lowercase is lowercase


def test_vocab_rescues_a_folder_that_ships_only_tokenizer_json(tmp_path):
    folder = copy_hf("BertModel", tmp_path)
    vocab = str(tmp_path / "vocab.txt")
    shutil.move(os.path.join(folder, "vocab.txt"), vocab)
    with pytest.raises(FileNotFoundError, match="vocab.txt"):
        read(folder)
    out = str(tmp_path / "k")
    assert main(["--from", "hf", folder, "--to", "keras", out, "--vocab", vocab]) == 0
    assert os.path.isfile(os.path.join(out, "vocab.txt"))
    # tokenizer.json alone, as transformers 5 saves a folder: its WordPiece vocabulary is read.
    tokens = open(vocab, encoding="utf-8").read().splitlines()
    tokenizer = {"model": {"type": "WordPiece", "vocab": {t: i for i, t in enumerate(tokens)}}}
    (tmp_path / "BertModel" / "tokenizer.json").write_text(json.dumps(tokenizer))
    _, made, _ = read(folder)
    assert open(made, encoding="utf-8").read().splitlines() == tokens
    tokenizer["model"]["type"] = "BPE"
    (tmp_path / "BertModel" / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(ValueError, match=r"tokenizer.json: not a WordPiece tokenizer \('BPE'\)"):
        read(folder)


# === Errors, never silence ===


def test_missing_tensor_is_named(tmp_path):
    d = copy_hf("BertModel", tmp_path)
    tensors = safetensors_io.read(os.path.join(d, "model.safetensors"))
    del tensors["encoder.layer.1.attention.self.key.bias"]
    safetensors_io.write(os.path.join(d, "model.safetensors"), tensors)
    with pytest.raises(
        ValueError, match=r"missing tensor 'encoder\.layer\.1\.attention\.self\.key\.bias'"
    ):
        model.load(d)


def test_unexpected_tensor_is_named(tmp_path):
    d = copy_hf("BertModel", tmp_path)
    tensors = safetensors_io.read(os.path.join(d, "model.safetensors"))
    tensors["encoder.layer.7.output.dense.weight"] = np.zeros((2, 2), "float32")
    safetensors_io.write(os.path.join(d, "model.safetensors"), tensors)
    with pytest.raises(
        ValueError, match=r"unexpected tensor 'encoder\.layer\.7\.output\.dense\.weight'"
    ):
        model.load(d)


def test_shape_that_does_not_match_config_is_named(tmp_path):
    d = copy_hf("BertModel", tmp_path)
    config = json.load(open(os.path.join(d, "config.json")))
    config["intermediate_size"] = 40
    json.dump(config, open(os.path.join(d, "config.json"), "w"))
    with pytest.raises(
        ValueError, match=r"'encoder\.layer\.0\.intermediate\.dense\.weight' has shape"
    ):
        model.load(d)


def test_vocabulary_size_mismatch_names_the_file(tmp_path):
    d = copy_hf("BertModel", tmp_path)
    with open(os.path.join(d, "vocab.txt"), "a", encoding="utf-8") as f:
        f.write("extra\n")
    with pytest.raises(ValueError, match=r"vocab\.txt: vocabulary has 100 tokens"):
        model.load(d)


def test_truncated_safetensors_names_the_file(tmp_path):
    d = copy_hf("BertModel", tmp_path)
    path = os.path.join(d, "model.safetensors")
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) - 100])
    with pytest.raises(ValueError, match=r"model\.safetensors: truncated file: tensor '"):
        model.load(d)


def test_pickled_pytorch_weights_are_refused(tmp_path):
    d = copy_hf("BertModel", tmp_path)
    os.remove(os.path.join(d, "model.safetensors"))
    open(os.path.join(d, "pytorch_model.bin"), "wb").write(b"not read")
    with pytest.raises(ValueError, match="pytorch_model.bin: refusing to read a pickled"):
        model.load(d)


def test_absent_head_needs_allow_new_heads_and_is_reported(tmp_path):
    d = os.path.join(TINY, "BertModel")
    with pytest.raises(ValueError, match=r"masked_lm_head is not in the source.*--allow-new-heads"):
        model.load(d, task="pretraining")
    with pytest.warns(UserWarning, match=r"masked_lm_head: not in .*created fresh"):
        m = model.load(d, task="pretraining", allow_new_heads=True)
    assert type(m) is BertPretrainer


def test_unused_head_stops_unless_task_is_explicit(tmp_path):
    d = os.path.join(TINY, "BertForPreTraining")
    tensors = safetensors_io.read(os.path.join(d, "model.safetensors"))
    c = copy_hf("BertForPreTraining", tmp_path)
    config = json.load(open(os.path.join(c, "config.json")))
    config["architectures"] = ["BertForMaskedLM"]
    json.dump(config, open(os.path.join(c, "config.json"), "w"))
    with pytest.raises(ValueError, match=r"unexpected tensor 'cls\.seq_relationship\.weight'"):
        model.load(c)
    with pytest.warns(UserWarning, match=r"dropped 7 tensors"):
        m = model.load(c, task="encoder")
    np.testing.assert_array_equal(
        m.token_embedding.embeddings.numpy(), tensors["bert.embeddings.word_embeddings.weight"]
    )


def test_keras_dir_load_is_strict(tmp_path):
    m = tiny_pretrainer()
    model_dir.save(m, str(tmp_path / "k"), tiny_vocab(tmp_path))
    info = json.loads((tmp_path / "k" / "config.json").read_text())
    info["encoder"]["intermediate_dim"] = 40
    (tmp_path / "k" / "config.json").write_text(json.dumps(info))
    with pytest.raises(
        ValueError, match=r"transformer_layer_0/feedforward_intermediate_dense/vars/0"
    ):
        model.load(str(tmp_path / "k"))
    info["encoder"]["intermediate_dim"] = 37
    info["next_sentence"] = False
    (tmp_path / "k" / "config.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match=r"unexpected tensor next_sentence_head/vars/0"):
        model.load(str(tmp_path / "k"))


def test_truncated_keras_weights_name_the_file(tmp_path):
    m = tiny_pretrainer()
    model_dir.save(m, str(tmp_path / "k"), tiny_vocab(tmp_path))
    path = tmp_path / "k" / "model.weights.h5"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"model\.weights\.h5: truncated or corrupt"):
        model.load(str(tmp_path / "k"))


def test_truncated_google_data_names_the_tensor(tmp_path):
    google_checkpoint.write(tiny_pretrainer(), str(tmp_path), tiny_vocab(tmp_path))
    data = tmp_path / "bert_model.ckpt.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:1000])
    with pytest.raises(ValueError, match=r"bert_model\.ckpt: cannot read tensor '"):
        model.load(str(tmp_path))


def test_keras_source_with_another_task(tmp_path):
    m = tiny_pretrainer()
    model_dir.save(m, str(tmp_path / "k"), tiny_vocab(tmp_path))
    with pytest.warns(UserWarning, match=r"dropped .*masked_lm_head/output_bias"):
        encoder = model.load(str(tmp_path / "k"), task="encoder")
    assert_same_weights(m.encoder, encoder)
    with pytest.raises(ValueError, match=r"needs logits/bias, logits/kernel.*--allow-new-heads"):
        model.load(str(tmp_path / "k"), task="classifier", num_labels=2)


def test_unrecognised_folder_says_what_it_expected(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match=r"not a recognised model folder"):
        model.load(str(tmp_path))


def test_load_refuses_options_it_would_ignore(tmp_path):
    """A misspelt option (num_label=2) and num_labels without a task were swallowed, and
    num_choices=0 built a model of no choices; the missing num_labels names the argument."""
    from model.checkpoints import model_dir
    from model.networks.encoder import BertEncoder

    directory = str(tmp_path / "encoder")
    model_dir.save(
        BertEncoder.from_preset("tiny", vocabulary_size=99), directory, tiny_vocab(tmp_path)
    )
    cases = [
        ({"task": "classifier"}, "or from model.load(..., num_labels=N)"),
        ({"task": "classifier", "num_label": 2}, "unknown option(s) num_label; a task head"),
        ({"num_labels": 2}, "num_labels size(s) a new head: name its task too"),
        ({"task": "multiple_choice", "num_choices": 0}, "num_choices must be a positive integer"),
    ]
    for options, said in cases:
        with pytest.raises(ValueError, match=re.escape(said)):
            model.load(directory, allow_new_heads=True, **options)


def test_a_bundle_where_a_model_directory_is_read_is_named_so(tmp_path):
    """`finetune --init`, `convert`, `export --model` on a LiteRT bundle: "not a recognised
    model folder" or "is it a model directory?" before."""
    from model.checkpoints import model_dir

    for name in ("bundle.json", "model.tflite", "vocab.txt"):
        (tmp_path / name).write_text("{}")
    for reader in (model.load, model_dir.read_info):
        with pytest.raises(ValueError, match=r"a LiteRT bundle \(python -m export's output\)"):
            reader(str(tmp_path))


# === CLI ===


def test_cli_hf_to_keras_with_new_classifier_head(tmp_path, capsys):
    code = main(
        [
            "--from",
            "hf",
            os.path.join(TINY, "BertModel"),
            "--to",
            "keras",
            str(tmp_path / "k"),
            "--task",
            "classifier",
            "--num-labels",
            "4",
        ]
    )
    assert code == 1 and "--allow-new-heads" in capsys.readouterr().err
    code = main(
        [
            "--from",
            "hf",
            os.path.join(TINY, "BertModel"),
            "--to",
            "keras",
            str(tmp_path / "k"),
            "--task",
            "classifier",
            "--num-labels",
            "4",
            "--allow-new-heads",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0 and "logits: not in" in captured.err and "verified equal" in captured.out
    m = model.load(str(tmp_path / "k"))
    assert type(m).__name__ == "BertClassifier" and m.num_labels == 4


def test_cli_help_documents_the_formats(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "--allow-new-heads" in out and "BertForMultipleChoice" in out


def test_overwrite_replaces_the_folder_and_a_short_vocabulary_writes_nothing(tmp_path, capsys):
    """--overwrite of a Keras directory with a Hugging Face folder: the old weights go (they
    stayed beside the new ones, and `model.load` read them); a --vocab that does not fit the
    embedding is refused before anything is written (a whole folder was left before)."""
    source = os.path.join(TINY, "BertModel")
    old = tmp_path / "old"
    assert main(["--from", "hf", source, "--to", "keras", str(old)]) == 0
    (old / "metrics.json").write_text("{}")  # a run's record: said gone, not silently
    capsys.readouterr()
    assert main(["--from", "hf", source, "--to", "hf", str(old), "--overwrite"]) == 0
    assert not (old / "model.weights.h5").exists() and (old / "model.safetensors").exists()
    assert formats.detect_format(str(old)) == "hf"
    gone = "was replaced whole; gone from it: metrics.json, model.weights.h5"
    assert gone in capsys.readouterr().err
    short = tmp_path / "short.txt"
    short.write_text("\n".join(open(tiny_vocab(tmp_path)).read().split()[:50]) + "\n")
    capsys.readouterr()
    for fmt in ("hf", "google", "keras"):
        out = tmp_path / f"short-{fmt}"
        assert main(["--from", "hf", source, "--to", fmt, str(out), "--vocab", str(short)]) == 1
        assert "short.txt: vocabulary has 50 tokens" in capsys.readouterr().err
        assert not out.exists() and not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_a_google_folder_without_casing_reads_the_casing_its_name_or_vocabulary_shows(tmp_path):
    """Google's bert_config.json states no casing: a release folder named cased_... (as
    google-research's validate_case_matches_checkpoint reads it) or a vocabulary of capitals
    is read cased, with a note (uncased before, silently)."""
    m = tiny_pretrainer(activation="gelu_approximate")
    plain = tiny_vocab(tmp_path)  # w0, w1, ...: no capitals
    capitals = tmp_path / "capitals.txt"
    capitals.write_text(open(plain).read().replace("w", "W"))
    for name, vocab, note in (
        ("cased_L-2_H-32_A-4", plain, "as the folder's name says"),
        ("uncased_L-2_H-32_A-4", capitals, None),
        ("mine", capitals, "words of"),
        ("mine-too", plain, None),
    ):
        folder = tmp_path / name
        google_checkpoint.write(m, str(folder), str(vocab))
        config = json.loads((folder / "bert_config.json").read_text())
        config.pop("do_lower_case", None)
        (folder / "bert_config.json").write_text(json.dumps(config))
        back, _, notes = read(str(folder))
        assert back.encoder.config.lowercase is (note is None), name
        assert any(note in n for n in notes) if note else not notes, (name, notes)


def test_an_output_that_holds_the_source_or_the_working_directory_is_refused(
    tmp_path, monkeypatch, capsys
):
    """The output replaces its folder whole: a folder holding the source (a file in it, a
    folder under it) or the working directory ("--to hf .") would be deleted, so it is refused;
    the source folder itself may be rewritten in place."""
    outer, empty = tmp_path / "outer", tmp_path / "empty"
    shutil.copytree(os.path.join(TINY, "BertModel"), outer / "hf")
    empty.mkdir()
    for argv in (
        ["--from", "hf", str(outer / "hf"), "--to", "keras", str(outer), "--overwrite"],
        ["--from", "hf", str(outer / "hf"), "--to", "hf", "."],
    ):
        monkeypatch.chdir(empty if argv[-1] == "." else tmp_path)
        with pytest.raises(SystemExit):
            main(argv)
        assert "which replacing it would delete" in capsys.readouterr().err
    assert (outer / "hf" / "model.safetensors").exists()
    monkeypatch.chdir(tmp_path)
    assert (
        main(["--from", "hf", str(outer / "hf"), "--to", "hf", str(outer / "hf"), "--overwrite"])
        == 0
    )


def _fine_tuned_qa(tmp_path) -> str:
    """A SQuAD 2.0 model directory: the tiny QA model with the fields fine-tuning records."""
    out = str(tmp_path / "qa2")
    assert (
        main(["--from", "hf", copy_hf("BertForQuestionAnswering", tmp_path), "--to", "keras", out])
        == 0
    )
    config = os.path.join(out, "config.json")
    with open(config) as f:
        data = json.load(f)
    data.update(finetuned_task="squad2", max_seq_length=32, null_threshold=-1.5)
    with open(config, "w") as f:
        json.dump(data, f)
    return out


USAGE = {"finetuned_task": "squad2", "max_seq_length": 32, "null_threshold": -1.5}


def test_a_fine_tuned_models_usage_survives_conversion(tmp_path, capsys):
    """How a fine-tuned model is used (its task, length, SQuAD 2.0 threshold) stays through
    ours -> Hugging Face -> ours (it was dropped, and a SQuAD 2.0 model exported from the
    result never answered "no answer"); --task builds the model anew and says what it
    leaves; a .keras file, which has no room for them, says so."""
    qa2 = _fine_tuned_qa(tmp_path)
    hf, back = str(tmp_path / "hf"), str(tmp_path / "back")
    assert main(["--from", "keras", qa2, "--to", "hf", hf]) == 0
    with open(os.path.join(hf, "config.json")) as f:
        data = json.load(f)
    assert data["finetuning_task"] == "squad2" and data["null_threshold"] == -1.5
    assert formats.usage_of(hf) == USAGE
    assert main(["--from", "hf", hf, "--to", "keras", back]) == 0
    assert {k: model_dir.read_info(back).get(k) for k in USAGE} == USAGE
    capsys.readouterr()
    encoder = str(tmp_path / "encoder")
    assert main(["--from", "keras", qa2, "--to", "keras", encoder, "--task", "encoder"]) == 0
    assert "not kept, as the model's task is now encoder, not squad2's question_answerer" in (
        capsys.readouterr().err
    )
    same = str(tmp_path / "same")  # --task naming the model's own head keeps them
    assert main(["--from", "keras", qa2, "--to", "keras", same, "--task", "question_answerer"]) == 0
    assert formats.usage_of(same) == USAGE
    assert formats.usage_of(encoder) == {}
    assert main(["--from", "keras", qa2, "--to", "keras", str(tmp_path / "qa2.keras")]) == 0
    assert f"a .keras file has no room for the source's {USAGE}: not kept" in (
        capsys.readouterr().err
    )
    capsys.readouterr()
    # A Hugging Face task name that is not one of ours is left out, "ner" too (transformers'
    # NER script writes it whatever the dataset).
    for name in ("my-own-task", "ner"):
        with open(os.path.join(hf, "config.json"), "w") as f:
            json.dump({**data, "finetuning_task": name}, f)
        assert formats.usage_of(hf) == {"max_seq_length": 32, "null_threshold": -1.5}
    # A task of the user's own in our directory is written, though not read back as a task.
    with open(os.path.join(qa2, "config.json")) as f:
        ours = json.load(f)
    with open(os.path.join(qa2, "config.json"), "w") as f:
        json.dump({**ours, "finetuned_task": "my-qa"}, f)
    assert main(["--from", "keras", qa2, "--to", "hf", hf, "--overwrite"]) == 0
    with open(os.path.join(hf, "config.json")) as f:
        assert json.load(f)["finetuning_task"] == "my-qa"


def test_a_failed_check_leaves_the_destination_as_it_was(tmp_path, capsys, monkeypatch):
    """The output is checked in its staging folder, before it replaces DST: a failed check
    leaves DST's old files (they were deleted already) and no staging folder; and a weight
    that is NaN is read back as equal (NaN != NaN failed every such model)."""
    source = copy_hf("BertModel", tmp_path)
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "old.txt").write_text("keep")

    def fails(model, fmt, path):
        raise ValueError(f"{path}: verification failed: a weight differs after writing")

    with monkeypatch.context() as m:
        m.setattr(formats, "_verify", fails)
        assert main(["--from", "hf", source, "--to", "hf", str(dst), "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert f"error: {dst}: verification failed" in err and ".tmp-" not in err  # DST named
    assert os.listdir(dst) == ["old.txt"]
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]
    m = load_quietly(source)
    m.weights[0].assign(np.where(np.arange(m.weights[0].shape[-1]) == 0, np.nan, m.weights[0]))
    model_dir.save(m, str(tmp_path / "nan"), os.path.join(source, "vocab.txt"))
    assert main(["--from", "keras", str(tmp_path / "nan"), "--to", "hf", str(tmp_path / "h")]) == 0
    assert "verified equal" in capsys.readouterr().out


def test_sequence_length_is_a_keras_hub_presets_and_fits_the_positions(tmp_path, capsys):
    source = copy_hf("BertModel", tmp_path)
    with pytest.raises(SystemExit):
        main(["--from", "hf", source, "--to", "hf", str(tmp_path / "h"), "--sequence-length", "16"])
    assert "--seq-len is a keras-hub preset's" in capsys.readouterr().err
    positions = load_quietly(source).config.max_sequence_length
    argv = ["--from", "hf", source, "--to", "keras-hub", str(tmp_path / "p")]
    assert main([*argv, "--sequence-length", str(positions + 1)]) == 1
    said = f"a preprocessor length of {positions + 1}: the encoder has {positions}"
    assert said in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a length of 0: the flag's own type refuses it
        main([*argv, "--sequence-length", "0"])
    assert "argument --seq-len/--sequence-length: must be at least 1, not 0" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "p").exists()


def test_a_hugging_face_folder_where_our_model_directory_is_read_says_to_convert_it():
    """It read as a bare BertConfig: evaluate called a BertForSequenceClassification folder
    an 'encoder' model, export missed model.weights.h5."""
    folder = os.path.join(TINY, "BertForSequenceClassification")
    with pytest.raises(
        ValueError, match=r"a Hugging Face folder, not a model directory .*--from hf"
    ):
        model_dir.read_info(folder)
