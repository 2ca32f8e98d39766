"""keras-hub presets in and out (`python -m model.convert --from/--to keras-hub`).

Random keras-hub models are built and saved by keras-hub itself (no network),
read here, written back, and run again by keras-hub: the outputs must agree.

    PYTHONPATH=. python -m pytest tests/test_keras_hub_preset.py
"""

from __future__ import annotations

import json
import os
import shutil

import keras_hub
import numpy as np
import pytest

import model
from model.checkpoints import keras_hub_preset, model_dir
from model.checkpoints.formats import detect_format
from model.config import GELU_APPROXIMATE, BertConfig
from model.convert import main as convert
from model.heads.classifier import BertClassifier
from model.heads.electra import ElectraDiscriminator
from model.heads.pretrainer import BertPretrainer
from model.heads.token_classifier import BertTokenClassifier
from model.networks.encoder import BertEncoder
from tests.helpers import (
    SHARED_DATA,
    finetune_argv,
    run_train,
    tiny_vocabulary,
    write_sst2,
    write_vocab,
)
from tests.keras_hub_parity import compare

HERE = os.path.dirname(os.path.abspath(__file__))
BERT_VOCAB = os.path.join(HERE, "fixtures", "bert-base-uncased-vocab.txt")
SST2 = os.path.join(SHARED_DATA, "glue", "SST-2")
SHAPE = dict(num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64, max_sequence_length=64)
SAME = 1e-5  # the bound on keras-hub against keras-hub


def keras_hub_backbone(kind: str, vocabulary: list[str]):
    if kind == "electra":
        backbone = keras_hub.models.ElectraBackbone(
            vocab_size=len(vocabulary), embedding_dim=16, **SHAPE
        )
        return backbone, keras_hub.models.ElectraTokenizer(vocabulary=vocabulary, lowercase=True)
    backbone = keras_hub.models.BertBackbone(vocabulary_size=len(vocabulary), **SHAPE)
    return backbone, keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=True)


def probe(vocabulary_size: int) -> dict:
    return keras_hub_preset.probe_inputs(vocabulary_size, 24, rows=3)


def outputs(m, inputs) -> dict:
    return {k: np.asarray(v) for k, v in m(inputs).items()}


@pytest.mark.parametrize("kind", ["bert", "electra"])
def test_keras_hub_backbone_read_here_and_written_back_computes_the_same(tmp_path, kind, capsys):
    vocabulary = tiny_vocabulary()
    original, tokenizer = keras_hub_backbone(kind, vocabulary)
    source = str(tmp_path / "source")
    original.save_to_preset(source)
    tokenizer.save_to_preset(source)
    assert detect_format(source) == "keras-hub"

    assert convert(["--from", "keras-hub", source, "--to", "keras", str(tmp_path / "ours")]) == 0
    err = capsys.readouterr().err
    # keras-hub's tokenizer lowercases without stripping accents unless told; ours does both.
    assert "strip_accents False" in err
    ours = model.load(str(tmp_path / "ours"))
    assert ours.config.activation == GELU_APPROXIMATE
    assert (ours.config.embedding_dim == 16) == (kind == "electra")
    inputs = probe(len(vocabulary))
    expected = outputs(original, inputs)
    for name, value in outputs(ours, inputs).items():
        np.testing.assert_allclose(value, expected[name], atol=SAME, err_msg=name)

    back = str(tmp_path / "back")
    assert convert(["--from", "keras", str(tmp_path / "ours"), "--to", "keras-hub", back]) == 0
    assert "difference| 0.00e+00" in capsys.readouterr().err  # measured by verify
    with open(os.path.join(back, "config.json"), encoding="utf-8") as f:
        assert json.load(f)["registered_name"] == f"keras_hub>{type(original).__name__}"
    again = keras_hub.models.Backbone.from_preset(back)
    for name, value in outputs(again, inputs).items():
        np.testing.assert_allclose(value, expected[name], atol=SAME, err_msg=name)
    assert keras_hub.models.Tokenizer.from_preset(back).strip_accents is True


def test_finetune_starts_from_a_keras_hub_preset(tmp_path):
    vocabulary = tiny_vocabulary()
    backbone, tokenizer = keras_hub_backbone("bert", vocabulary)
    preset = str(tmp_path / "preset")
    backbone.save_to_preset(preset)
    tokenizer.save_to_preset(preset)
    output = tmp_path / "sst2"
    assert run_train(finetune_argv("sst2", write_sst2(tmp_path / "data"), preset, output)) == 0
    tuned = model.load(str(output))
    assert isinstance(tuned, BertClassifier)
    assert (output / "vocab.txt").read_text("utf-8").split() == vocabulary


def test_keras_hub_classifier_and_masked_lm_read_as_our_heads(tmp_path):
    vocabulary = tiny_vocabulary()
    backbone, tokenizer = keras_hub_backbone("bert", vocabulary)
    classifier = keras_hub.models.BertTextClassifier(
        backbone,
        num_classes=3,
        preprocessor=keras_hub.models.BertTextClassifierPreprocessor(tokenizer, 24),
    )
    classifier.save_to_preset(str(tmp_path / "classifier"))
    inputs = probe(len(vocabulary))
    ours = model.load(str(tmp_path / "classifier"))
    assert isinstance(ours, BertClassifier) and ours.num_labels == 3
    np.testing.assert_allclose(np.asarray(ours(inputs)), np.asarray(classifier(inputs)), atol=SAME)

    masked_lm = keras_hub.models.BertMaskedLM(
        backbone, preprocessor=keras_hub.models.BertMaskedLMPreprocessor(tokenizer, 24)
    )
    masked_lm.save_to_preset(str(tmp_path / "masked_lm"))
    ours = model.load(str(tmp_path / "masked_lm"))
    assert isinstance(ours, BertPretrainer) and not ours.next_sentence
    with_positions = {**inputs, "mask_positions": np.array([[1, 5], [2, 3], [0, 7]], "int32")}
    np.testing.assert_allclose(
        np.asarray(ours(with_positions)["mlm"]), np.asarray(masked_lm(with_positions)), atol=SAME
    )
    # Its head computes the exact GELU over a tanh-GELU encoder: no Hugging Face form.
    argv = ["--from", "keras-hub", str(tmp_path / "masked_lm"), "--to", "hf", str(tmp_path / "hf")]
    assert convert(argv) == 1
    # ...and written back, keras-hub reads our masked LM as its own.
    back = str(tmp_path / "masked_lm_back")
    assert (
        convert(["--from", "keras-hub", str(tmp_path / "masked_lm"), "--to", "keras-hub", back])
        == 0
    )
    again = keras_hub.models.BertMaskedLM.from_preset(back)
    np.testing.assert_allclose(
        np.asarray(again(with_positions)), np.asarray(masked_lm(with_positions)), atol=SAME
    )


def test_classifier_fine_tuned_here_gives_keras_hub_the_same_logits_on_sst2(tmp_path):
    """Fine-tuned here (tanh GELU, the real uncased vocabulary), run by
    keras_hub.models.BertTextClassifier.from_preset on raw SST-2 dev sentences."""
    if not os.path.isdir(SST2):
        pytest.skip(f"{SST2} not found")
    config = BertConfig(vocabulary_size=30522, activation=GELU_APPROXIMATE, **SHAPE)
    init = str(tmp_path / "init")
    model_dir.save(BertEncoder.from_config_object(config), init, BERT_VOCAB)
    data = tmp_path / "sst2"
    data.mkdir()
    for name, rows in (("train.tsv", 65), ("dev.tsv", 33)):
        with open(os.path.join(SST2, name), encoding="utf-8") as f:
            (data / name).write_text("".join(f.readline() for _ in range(rows)), "utf-8")
    output = str(tmp_path / "sst2-model")
    assert run_train(finetune_argv("sst2", data, init, output, batch_size=16, seq_len=64)) == 0

    got = compare(output, os.path.join(SST2, "dev.tsv"), limit=300, sequence_length=64)
    assert got["rows_with_other_ids"] == 0  # accents stripped as ours strips them
    assert got["agreement"] == 1.0
    assert got["max_abs_logit_diff"] <= SAME
    assert got["accuracy_ours"] == got["accuracy_keras_hub"]


def test_what_keras_hub_lacks_is_refused_by_name(tmp_path, capsys):
    vocab = write_vocab(tmp_path / "vocab.txt")
    size = len(tiny_vocabulary())
    cases = {
        "token_classifier": (
            BertTokenClassifier(BertEncoder.from_preset("tiny", vocabulary_size=size), 5),
            "no task for our 'token_classifier'",
        ),
        "nsp": (
            BertPretrainer(BertEncoder.from_preset("tiny", vocabulary_size=size)),
            "--task masked_lm",
        ),
        "causal": (
            BertEncoder.from_preset("tiny", vocabulary_size=size, causal=True),
            "no causal",
        ),
    }
    for name, (m, message) in cases.items():
        model_dir.save(m, str(tmp_path / name), vocab)
        code = convert(
            [
                "--from",
                "keras",
                str(tmp_path / name),
                "--to",
                "keras-hub",
                str(tmp_path / f"{name}-hub"),
            ]
        )
        assert code == 1 and message in capsys.readouterr().err, name
        assert not os.path.exists(tmp_path / f"{name}-hub"), "nothing half-written"
    electra = ElectraDiscriminator(
        BertEncoder.from_preset("tiny", vocabulary_size=size, embedding_dim=16)
    )
    model_dir.save(electra, str(tmp_path / "electra"), vocab)
    argv = ["--from", "keras", str(tmp_path / "electra"), "--to", "keras-hub"]
    assert convert([*argv, str(tmp_path / "electra-hub")]) == 1
    assert "over its ElectraBackbone" in capsys.readouterr().err
    assert convert([*argv, str(tmp_path / "electra-hub"), "--task", "encoder"]) == 0
    theirs = keras_hub.models.Backbone.from_preset(str(tmp_path / "electra-hub"))
    assert isinstance(theirs, keras_hub.models.ElectraBackbone)
    # The ways out the errors name: the masked LM without NSP, the encoder alone.
    argv = ["--from", "keras", str(tmp_path / "nsp"), "--to", "keras-hub", str(tmp_path / "mlm")]
    assert convert([*argv, "--task", "masked_lm"]) == 0
    assert "next_sentence_head" in capsys.readouterr().err  # dropped, and said
    argv = ["--from", "keras", str(tmp_path / "token_classifier"), "--to", "keras-hub"]
    assert convert([*argv, str(tmp_path / "encoder"), "--task", "encoder"]) == 0
    assert isinstance(model.load(str(tmp_path / "encoder")), BertEncoder)

    # A keras-hub task with no counterpart here: named; --task encoder reads the backbone.
    embedder = tmp_path / "embedder"
    shutil.copytree(tmp_path / "encoder", embedder)
    (embedder / "task.json").write_text(
        json.dumps({"registered_name": "keras_hub>BertTextEmbedder"})
    )
    argv = ["--from", "keras-hub", str(embedder), "--to", "keras", str(tmp_path / "e")]
    assert convert(argv) == 1
    assert "'BertTextEmbedder' has no counterpart here" in capsys.readouterr().err
    assert convert([*argv[:-1], str(tmp_path / "e2"), "--task", "encoder"]) == 0

    # Another keras-hub backbone: named, not guessed at.
    other = tmp_path / "roberta"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"registered_name": "keras_hub>RobertaBackbone"}))
    (other / "model.weights.h5").write_text("")
    assert convert(["--from", "auto", str(other), "--to", "keras", str(tmp_path / "r")]) == 1
    assert "keras_hub>RobertaBackbone" in capsys.readouterr().err


def test_exact_gelu_model_is_written_with_the_difference_measured(tmp_path, capsys):
    vocab = write_vocab(tmp_path / "vocab.txt")
    encoder = BertEncoder.from_preset("tiny", vocabulary_size=len(tiny_vocabulary()))
    assert encoder.config.activation == "gelu"
    model_dir.save(encoder, str(tmp_path / "exact"), vocab)
    argv = ["--from", "keras", str(tmp_path / "exact"), "--to", "keras-hub", str(tmp_path / "hub")]
    assert convert(argv) == 0
    err = capsys.readouterr().err
    assert "the encoder's 'gelu' (keras-hub: tanh GELU)" in err
    measured = float(err.split("difference| ")[1].split()[0])
    assert 0 < measured < 1e-2


def test_a_truncated_preset_is_refused_naming_it(tmp_path, capsys):
    """A preset whose weights file was cut short: one line naming the preset (an h5py
    OSError traceback before)."""
    vocabulary = tiny_vocabulary()
    backbone, tokenizer = keras_hub_backbone("bert", vocabulary)
    preset = tmp_path / "preset"
    backbone.save_to_preset(str(preset))
    tokenizer.save_to_preset(str(preset))
    weights = preset / "model.weights.h5"
    weights.write_bytes(weights.read_bytes()[:4000])
    assert convert(["--from", "keras-hub", str(preset), "--to", "keras", str(tmp_path / "k")]) == 1
    err = capsys.readouterr().err
    assert f"error: {preset}: keras-hub cannot load this preset (" in err and "Traceback" not in err
    assert not (tmp_path / "k").exists()


def test_a_task_preset_without_its_task_weights_is_refused(tmp_path, capsys):
    """task.json without task.weights.h5: keras-hub's from_preset builds the task with a
    random head and says nothing; here it stops, naming the file (the backbone alone is
    still read with --task encoder)."""
    vocabulary = tiny_vocabulary()
    backbone, tokenizer = keras_hub_backbone("bert", vocabulary)
    preset = tmp_path / "classifier"
    keras_hub.models.BertTextClassifier(
        backbone,
        num_classes=2,
        preprocessor=keras_hub.models.BertTextClassifierPreprocessor(tokenizer, 24),
    ).save_to_preset(str(preset))
    (preset / "task.weights.h5").unlink()
    with pytest.raises(
        ValueError, match=r"task.weights.h5 is missing \(its head would be random\)"
    ):
        model.load(str(preset))
    argv = ["--from", "keras-hub", str(preset), "--to", "keras", str(tmp_path / "k")]
    assert convert(argv) == 1
    assert "task.weights.h5 is missing" in capsys.readouterr().err
    assert not (tmp_path / "k").exists()
    assert convert([*argv[:-1], str(tmp_path / "e"), "--task", "encoder"]) == 0


def test_a_fine_tuned_classifiers_length_is_its_presets(tmp_path, capsys):
    """The preprocessor of a fine-tuned classifier's preset reads the length it was trained
    at (config.json's max_seq_length; it was the encoder's positions), and the note names
    what a preset has no room for."""
    vocab = write_vocab(tmp_path / "vocab.txt")
    size = len(tiny_vocabulary())
    classifier = BertClassifier(BertEncoder.from_preset("tiny", vocabulary_size=size), 2)
    usage = {"finetuned_task": "sst2", "max_seq_length": 20}
    model_dir.save(classifier, str(tmp_path / "sst2"), vocab, extra=usage)
    preset = tmp_path / "preset"
    assert (
        convert(["--from", "keras", str(tmp_path / "sst2"), "--to", "keras-hub", str(preset)]) == 0
    )
    assert "a keras-hub preset has no room for the source's {'finetuned_task': 'sst2'}" in (
        capsys.readouterr().err
    )
    with open(preset / "preprocessor.json") as f:
        assert json.load(f)["config"]["sequence_length"] == 20


def test_a_preset_where_our_model_directory_is_read_says_to_convert_it(tmp_path, capsys):
    """evaluate, export and the app read our model directories (model_dir.read_info): a
    preset there says what it is and how to convert it (it read as a BertConfig with
    'unknown keys'); read as a Hugging Face folder, it names --from keras-hub."""
    vocabulary = tiny_vocabulary()
    backbone, tokenizer = keras_hub_backbone("bert", vocabulary)
    preset = str(tmp_path / "preset")
    backbone.save_to_preset(preset)
    tokenizer.save_to_preset(preset)
    with pytest.raises(ValueError, match="a keras-hub preset, not a model directory of this"):
        model_dir.read_info(preset)
    assert convert(["--from", "hf", preset, "--to", "keras", str(tmp_path / "k")]) == 1
    assert "a keras-hub preset, not a Hugging Face folder (--from keras-hub)" in (
        capsys.readouterr().err
    )
