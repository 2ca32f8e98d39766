"""ELECTRA checkpoints in and out of Hugging Face folders: parity with the reference,
exact round trips, a pre-training run written as two folders, loud refusals.

    TF_CPP_MIN_LOG_LEVEL=3 python -m pytest -q tests/test_electra_convert.py

The fixtures (`tests/fixtures/parity/tiny/Electra*`: tiny random ElectraModel,
ElectraForPreTraining and ElectraForMaskedLM with 16-wide embeddings under a
hidden width of 32, and transformers' outputs) are written by
`tests/make_parity_fixtures.py --electra-only` with PyTorch; these tests need
neither torch nor transformers.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings

import numpy as np
import pytest

import model
from model.checkpoints import electra, model_dir, safetensors_io
from model.checkpoints import huggingface as hf_checkpoint
from model.checkpoints.formats import read
from model.config import BertConfig
from model.convert import main
from model.heads.classifier import BertClassifier
from model.heads.electra import ElectraDiscriminator, ElectraPretrainer
from model.heads.pretrainer import BertPretrainer
from model.networks.encoder import BertEncoder
from model.text.wordpiece import load_vocabulary
from tests.helpers import finetune_argv, make_records, pretrain_argv, run_train, write_sst2

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "fixtures", "parity", "tiny")
ARCHITECTURES = sorted(electra.ARCHITECTURES)
FEATURES = ("token_ids", "segment_ids", "padding_mask")
POOLER = ("pooled_dense/kernel", "pooled_dense/bias")

HIDDEN_TOLERANCE = 1e-4  # as BERT's parity tests (tests/test_convert.py), float32
LOGITS_TOLERANCE = 1e-3


def tiny_inputs() -> dict:
    with np.load(os.path.join(TINY, "inputs.npz")) as f:
        return dict(f)


def load_quietly(path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.load(path, **kwargs)


def run_like_reference(m, inputs: dict) -> dict:
    """Our outputs under the names `make_parity_fixtures.py` stored."""
    x = {k: inputs[k] for k in FEATURES}
    out = {"sequence_output": np.asarray(model_dir.encoder_of(m)(x)["sequence_output"])}
    if isinstance(m, ElectraDiscriminator):
        out["rtd"] = np.asarray(m(x)["rtd"])
    elif isinstance(m, BertPretrainer):
        out["mlm"] = np.asarray(m({**x, "mask_positions": inputs["mask_positions"]})["mlm"])
    return out


def tiny_config(**overrides) -> BertConfig:
    fields = dict(
        vocabulary_size=99,
        num_layers=2,
        num_heads=4,
        hidden_dim=32,
        intermediate_dim=37,
        max_sequence_length=40,
        embedding_dim=16,
        lowercase=False,
    )
    return BertConfig(**{**fields, **overrides})


def randomise(m, seed=0):
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


def assert_same_weights(a, b, skip=POOLER):
    wa = {w.path: np.asarray(w.numpy()) for w in a.weights}
    wb = {w.path: np.asarray(w.numpy()) for w in b.weights}
    assert set(wa) == set(wb)
    for path in wa:
        if path not in skip:
            np.testing.assert_array_equal(wa[path], wb[path], err_msg=path)


def copy_hf(arch, tmp_path) -> str:
    dst = tmp_path / arch
    shutil.copytree(os.path.join(TINY, arch), dst)
    return str(dst)


def edit_tensors(directory, edit) -> None:
    path = os.path.join(directory, "model.safetensors")
    tensors = safetensors_io.read(path)
    edit(tensors)
    safetensors_io.write(path, tensors)


# === Parity with the reference implementation ===


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_tiny_electra_parity_with_transformers(arch):
    directory = os.path.join(TINY, arch)
    m, _, notes = read(directory)
    task, options = electra.ARCHITECTURES[arch]
    assert model_dir.describe(m)["task"] == task
    assert all(model_dir.describe(m)[k] == v for k, v in options.items())
    assert model_dir.encoder_of(m).config.embedding_dim == 16
    assert model_dir.encoder_of(m).embeddings_projection is not None
    # No ELECTRA folder holds a pooler: ours is created fresh, and the notes say so.
    assert any(n.startswith("pooled_dense: not in") and "no pooler" in n for n in notes)
    with np.load(os.path.join(directory, "expected.npz")) as f:
        expected = dict(f)
    ours = run_like_reference(m, tiny_inputs())
    for name, want in expected.items():
        tolerance = HIDDEN_TOLERANCE if name.endswith("_output") else LOGITS_TOLERANCE
        assert ours[name].shape == want.shape, name
        diff = float(np.max(np.abs(ours[name] - want)))
        assert diff <= tolerance, f"{arch} {name}: max abs difference {diff}"


# === Round trips ===


@pytest.mark.parametrize("task", ["replaced_token_detection", "masked_lm", "encoder"])
def test_keras_hf_keras_round_trip_is_exact(task, tmp_path):
    encoder = BertEncoder.from_config_object(tiny_config())
    m = randomise(
        {
            "replaced_token_detection": lambda: ElectraDiscriminator(encoder),
            "masked_lm": lambda: BertPretrainer(encoder, next_sentence=False),
            "encoder": lambda: encoder,
        }[task]()
    )
    notes = hf_checkpoint.write(m, str(tmp_path / "hf"), tiny_vocab(tmp_path))
    assert any("pooled_dense not written" in n for n in notes)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    arch = {
        "replaced_token_detection": "ElectraForPreTraining",
        "masked_lm": "ElectraForMaskedLM",
        "encoder": "ElectraModel",
    }[task]
    assert config["architectures"] == [arch] and config["model_type"] == "electra"
    assert (config["embedding_size"], config["hidden_size"]) == (16, 32)
    tensors = safetensors_io.read(str(tmp_path / "hf" / "model.safetensors"))
    assert not any("pooler" in name for name in tensors)
    assert any(name.endswith("embeddings_project.weight") for name in tensors)
    back, _, _ = read(str(tmp_path / "hf"))
    assert type(back) is type(m)
    assert model_dir.encoder_of(back).config == encoder.config
    assert_same_weights(m, back)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_cli_hf_keras_hf_round_trip_keeps_tensors(arch, tmp_path, capsys):
    src = os.path.join(TINY, arch)
    assert main(["--from", "hf", src, "--to", "keras", str(tmp_path / "k")]) == 0
    captured = capsys.readouterr()
    assert "verified equal" in captured.out and "pooled_dense: not in" in captured.err
    info = json.loads((tmp_path / "k" / "config.json").read_text())
    assert info["task"] == electra.ARCHITECTURES[arch][0]
    assert info["encoder"]["embedding_dim"] == 16
    assert main(["--from", "keras", str(tmp_path / "k"), "--to", "hf", str(tmp_path / "hf")]) == 0
    assert "verified equal" in capsys.readouterr().out
    before = safetensors_io.read(os.path.join(src, "model.safetensors"))
    after = safetensors_io.read(str(tmp_path / "hf" / "model.safetensors"))
    assert set(before) == set(after)
    for name in before:
        np.testing.assert_array_equal(before[name], after[name], err_msg=name)
    c_before = json.load(open(os.path.join(src, "config.json")))
    c_after = json.load(open(tmp_path / "hf" / "config.json"))
    for key in (
        "architectures",
        "model_type",
        "embedding_size",
        "hidden_size",
        "hidden_act",
        "intermediate_size",
        "num_attention_heads",
        "vocab_size",
    ):
        assert c_before.get(key) == c_after.get(key), key


# === A pre-training run: the discriminator and the generator, two folders ===


@pytest.fixture(scope="module")
def electra_run(tmp_path_factory):
    """A two-step `--objective electra` run over a factorised tiny config."""
    parent = tmp_path_factory.mktemp("electra")
    records = make_records(parent, "segments", extra=["--inputs", "segments"])
    size = len(load_vocabulary(os.path.join(records, "vocab.txt")))
    config = parent / "config.json"
    BertConfig.preset("tiny", vocabulary_size=size, embedding_dim=16).to_json(str(config))
    output = parent / "run"
    argv = pretrain_argv(records, str(output), steps=2, checkpoint_every=2)
    argv[argv.index("--config") + 1] = str(config)
    assert run_train([*argv, "--objective", "electra", "--generator-size", "0.5"]) == 0
    return str(output)


def test_pretraining_run_writes_discriminator_and_generator(electra_run, tmp_path, capsys):
    out = str(tmp_path / "hf")
    assert main(["--from", "keras", electra_run, "--to", "hf", out]) == 0
    captured = capsys.readouterr()
    assert "verified equal" in captured.out and "two models" in captured.err
    assert json.load(open(os.path.join(out, "config.json")))["architectures"] == [
        "ElectraForPreTraining"
    ]
    generator_config = json.load(open(os.path.join(out, "generator", "config.json")))
    assert generator_config["architectures"] == ["ElectraForMaskedLM"]
    assert (generator_config["embedding_size"], generator_config["hidden_size"]) == (16, 16)

    run = model_dir.load(electra_run)
    assert isinstance(run, ElectraPretrainer)
    discriminator = load_quietly(out)
    assert isinstance(discriminator, ElectraDiscriminator)
    assert discriminator.encoder.config == run.encoder.config
    assert_same_weights(run.discriminator(), discriminator)

    generator = load_quietly(os.path.join(out, "generator"))
    assert isinstance(generator, BertPretrainer) and not generator.next_sentence
    ours = BertPretrainer(run.generator, next_sentence=False)
    ours.masked_lm_head.set_weights(run.masked_lm_head.get_weights())
    assert_same_weights(ours, generator)
    # The generator folder holds the discriminator's embeddings (shared in the run).
    np.testing.assert_array_equal(
        generator.encoder.token_embedding.embeddings.numpy(),
        discriminator.encoder.token_embedding.embeddings.numpy(),
    )


def test_discriminator_alone_from_a_pretraining_run(electra_run, tmp_path):
    out = str(tmp_path / "hf")
    argv = ["--from", "keras", electra_run, "--to", "hf", out]
    assert main([*argv, "--task", "replaced_token_detection"]) == 0
    assert not os.path.exists(os.path.join(out, "generator"))
    assert_same_weights(model_dir.load(electra_run).discriminator(), load_quietly(out))


def test_finetune_init_from_an_electra_folder(tmp_path, capsys):
    data = write_sst2(tmp_path / "SST-2", train=8, dev=4)
    init = os.path.join(TINY, "ElectraForPreTraining")
    argv = finetune_argv("sst2", data, init, tmp_path / "out", seq_len=16)
    assert run_train(argv) == 0
    assert "pooled_dense: not in" in capsys.readouterr().out
    tuned = model_dir.load(str(tmp_path / "out"))
    assert isinstance(tuned, BertClassifier) and tuned.encoder.config.embedding_dim == 16


# === Refusals and notes, never silence ===


def test_factorised_bert_task_is_refused(tmp_path):
    encoder = BertEncoder.from_config_object(tiny_config())
    for m in (BertPretrainer(encoder), BertClassifier(encoder, num_labels=2)):
        with pytest.raises(ValueError, match=r"factorised embedding\) has no Hugging Face form"):
            hf_checkpoint.write(m, str(tmp_path / "hf"), tiny_vocab(tmp_path))
    assert not os.path.exists(tmp_path / "hf" / "model.safetensors")


def test_causal_electra_is_refused(tmp_path):
    m = ElectraDiscriminator(BertEncoder.from_config_object(tiny_config(causal=True)))
    with pytest.raises(ValueError, match="causal"):
        hf_checkpoint.write(m, str(tmp_path / "hf"), tiny_vocab(tmp_path))


def test_generator_with_approximate_gelu_is_refused(tmp_path):
    config = tiny_config(activation="gelu_approximate")
    m = BertPretrainer(BertEncoder.from_config_object(config), next_sentence=False)
    with pytest.raises(ValueError, match="always applies the exact GELU"):
        hf_checkpoint.write(m, str(tmp_path / "hf"), tiny_vocab(tmp_path))


def test_missing_tensor_is_named(tmp_path):
    d = copy_hf("ElectraForPreTraining", tmp_path)
    edit_tensors(d, lambda t: t.pop("electra.embeddings_project.weight"))
    with pytest.raises(ValueError, match=r"missing tensor 'electra\.embeddings_project\.weight'"):
        model.load(d)
    d = copy_hf("ElectraForMaskedLM", tmp_path / "2")
    edit_tensors(d, lambda t: t.pop("generator_predictions.LayerNorm.bias"))
    with pytest.raises(
        ValueError,
        match=r"missing tensor 'generator_predictions\.LayerNorm\.bias' \(needed by masked_lm_head\)",
    ):
        model.load(d)


def test_untied_generator_decoder_is_refused(tmp_path):
    d = copy_hf("ElectraForMaskedLM", tmp_path)

    def untie(tensors):
        tensors["generator_lm_head.weight"] = (
            tensors["electra.embeddings.word_embeddings.weight"] + 1
        )

    edit_tensors(d, untie)
    with pytest.raises(ValueError, match=r"'generator_lm_head\.weight' differs"):
        model.load(d)


def test_tied_generator_decoder_equal_to_the_embedding_loads(tmp_path):
    d = copy_hf("ElectraForMaskedLM", tmp_path)

    def tie(tensors):
        tensors["generator_lm_head.weight"] = tensors["electra.embeddings.word_embeddings.weight"]

    edit_tensors(d, tie)
    assert_same_weights(load_quietly(d), load_quietly(os.path.join(TINY, "ElectraForMaskedLM")))


def test_embedding_size_that_does_not_match_is_named(tmp_path):
    d = copy_hf("ElectraModel", tmp_path)
    config = json.load(open(os.path.join(d, "config.json")))
    config["embedding_size"] = 32  # then no projection: its tensors are unexpected
    json.dump(config, open(os.path.join(d, "config.json"), "w"))
    with pytest.raises(ValueError, match=r"embeddings\.word_embeddings\.weight' has shape"):
        model.load(d)


@pytest.mark.filterwarnings("ignore:.*(pooled_dense. not in|dropped 4 tensors)")
def test_other_task_heads_need_allow_new_heads(tmp_path):
    d = os.path.join(TINY, "ElectraForPreTraining")
    with pytest.raises(ValueError, match=r"logits is not in the source.*--allow-new-heads"):
        model.load(d, task="classifier", num_labels=3)
    with pytest.warns(UserWarning, match=r"logits: not in .*created fresh"):
        m = model.load(d, task="classifier", num_labels=3, allow_new_heads=True)
    assert isinstance(m, BertClassifier) and m.encoder.config.embedding_dim == 16


@pytest.mark.filterwarnings("ignore:.*pooled_dense. not in")
def test_explicit_encoder_task_drops_the_discriminator_head(tmp_path):
    d = os.path.join(TINY, "ElectraForPreTraining")
    with pytest.warns(UserWarning, match=r"dropped 4 tensors .*discriminator_predictions"):
        m = model.load(d, task="encoder")
    assert isinstance(m, BertEncoder)
    with pytest.raises(ValueError, match=r"masked_lm_head is not in the source"):
        model.load(d, task="masked_lm")


def test_pretraining_task_on_an_electra_folder_is_refused():
    with pytest.raises(ValueError, match="holds one model"):
        hf_checkpoint.read(os.path.join(TINY, "ElectraForPreTraining"), "electra_pretraining")


def test_cli_help_documents_electra(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "ElectraForPreTraining" in out and "DST/generator" in out
    assert "replaced_token_detection" in out
