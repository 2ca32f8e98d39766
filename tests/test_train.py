"""Training: learning at all, kill -9 and resume, bad input, the NaN guard, evaluation, --help.

    PYTHONPATH=. python -m pytest tests/test_train.py

Every run is the `tiny` preset on a few dozen 32-token records made from a
generated corpus: seconds each. The run that gets `kill -9` is a child
`python -m model.train`; the rest call `main(argv)` (or run the module's
`__main__` block) in this process, which saves a TensorFlow start-up per run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from model import evaluate, train
from model.heads.pretrainer import BertPretrainer
from model.networks.encoder import BertEncoder
from model.pretraining import masked_lm_scores
from model.training.checkpointing import ResumableCheckpoint
from model.training.optimizer import (
    WarmupLinearDecay,
    bert_adamw,
    create_optimizer_variables,
)
from tests.helpers import (
    REPO_ROOT,
    assert_same_weights,
    make_records,
    pretrain_argv,
    random_encoder_inputs,
    subprocess_env,
    weights_of,
    write_corpus,
    write_vocab,
)

# 40 steps of 4, a checkpoint every 10, the tiny preset's dropout of 0.1 (so
# the dropout seed state has to survive the restart too), on the CPU in every
# process (a GPU would make the runs differ in the last bits).
RUN = {"steps": 40, "batch_size": 4, "checkpoint_every": 10, "extra": ["--strategy", "cpu"]}
FINAL_FILES = ("model.weights.h5", "config.json", "vocab.txt", "train_summary.json")


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return make_records(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def uninterrupted(records, tmp_path_factory):
    """The output directory of one uninterrupted 40-step run."""
    output = str(tmp_path_factory.mktemp("uninterrupted") / "run")
    assert train.main(pretrain_argv(records, output, **RUN)) == 0
    return output


def checkpoint_steps(output) -> list[int]:
    return [
        step
        for step, _ in ResumableCheckpoint(os.path.join(output, "checkpoints"), 1).checkpoints()
    ]


def sha256(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# === It learns ===


def test_tiny_model_overfits_one_batch():
    keras.utils.set_random_seed(0)
    vocab = 64
    model = BertPretrainer(BertEncoder.from_preset("tiny", vocabulary_size=vocab, dropout=0.0))
    rng = np.random.default_rng(1)
    x = random_encoder_inputs(8, 16, vocab, seed=1)
    x["mask_positions"] = np.stack(
        [np.sort(rng.choice(np.arange(1, 16), 3, replace=False)) for _ in range(8)]
    ).astype("int32")  # (batch, 3)
    y = {
        "mlm": rng.integers(5, vocab, (8, 3)).astype("int32"),
        "nsp": rng.integers(0, 2, (8,)).astype("int32"),
    }
    steps = 40
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(
        optimizer=bert_adamw(1e-2, warmup_steps=0, total_steps=steps, weight_decay=0.0),
        loss={"mlm": loss, "nsp": loss},
    )
    create_optimizer_variables(model)
    # One step per epoch: the history holds each step's loss, the first one
    # taken before any update.
    history = model.fit(
        tf.data.Dataset.from_tensors((x, y)).repeat(),
        steps_per_epoch=1,
        epochs=steps,
        shuffle=False,
        verbose=0,
    ).history["loss"]
    before, after = history[0], history[-1]
    assert before > 4.0  # ~ln(64) + ln(2) at initialisation
    assert after <= 0.1 * before, f"loss {before:.3f} -> {after:.3f}"


def test_learning_rate_schedule():
    s = WarmupLinearDecay(1.0, warmup_steps=4, total_steps=12)
    rates = [float(s(step)) for step in range(14)]
    np.testing.assert_allclose(rates[:5], [0.0, 0.25, 0.5, 0.75, 1.0], atol=1e-6)
    np.testing.assert_allclose(rates[8:], [0.5, 0.375, 0.25, 0.125, 0.0, 0.0], atol=1e-6)
    # No warm-up: the first step gets the peak, not 0.
    np.testing.assert_allclose(
        [float(WarmupLinearDecay(1.0, 0, 4)(t)) for t in range(5)],
        [1.0, 0.75, 0.5, 0.25, 0.0],
        atol=1e-6,
    )


def test_no_weight_decay_on_layer_norm_and_biases():
    model = BertPretrainer(BertEncoder.from_preset("tiny", vocabulary_size=64))
    optimizer = bert_adamw(1e-4, 10, 100)
    optimizer.build(model.trainable_variables)
    decayed = {v.path for v in model.trainable_variables if optimizer._use_weight_decay(v)}
    for v in model.trainable_variables:
        exempt = v.name in ("gamma", "beta") or v.name.endswith("bias")
        assert (v.path not in decayed) == exempt, v.path
    assert "transformer_layer_0/feedforward_intermediate_dense/kernel" in decayed
    assert "masked_lm_head/output_bias" not in decayed


def test_the_time_in_steps_leaves_out_the_checkpoint_saves(records, tmp_path, monkeypatch):
    # A calibration run's budget is its steps' time: a save counted there made a 60-s budget
    # 36 s of steps on a GPU. Here each of the 4 saves takes 0.5 s more than the 40 steps.
    from model.training import checkpointing

    save = checkpointing.ResumableCheckpoint.save

    def slow_save(self, step):
        time.sleep(0.5)
        return save(self, step)

    monkeypatch.setattr(checkpointing.ResumableCheckpoint, "save", slow_save)
    output = str(tmp_path / "run")
    assert train.main(pretrain_argv(records, output, **RUN)) == 0
    with open(os.path.join(output, "train_summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    # the saves happened within the run (2 s), outside its steps' time
    assert summary["seconds_this_run"] - summary["seconds_in_steps"] > 1.5
    assert 0 < summary["median_step_seconds"] <= summary["seconds_in_steps"]
    # The printed speed is the steps' own, the one with the saves beside it (one figure that
    # counted the saves was printed as the steps' before).
    assert summary["tokens_per_second_in_steps"] > 1.5 * summary["tokens_per_second"]


def test_the_median_call_is_the_step_a_calibration_reads():
    """One slow call (compiling's aftermath, a save) among three does not move it."""
    from model.training.pretrain import Throughput

    timing = Throughput()
    assert timing.median_step() is None
    timing.calls = [(20, 0.2), (20, 0.7), (20, 0.18)]
    assert timing.median_step() == pytest.approx(0.01)


# === Checkpoints ===
# Killed with SIGKILL and resumed: tests/test_faults.py (three kills, mid-save too).


def test_stop_at_writes_that_step_and_a_later_run_goes_on_like_an_uninterrupted_one(
    records, uninterrupted, tmp_path, capsys
):
    output = str(tmp_path / "run")
    argv = pretrain_argv(records, output, **RUN)
    assert train.main([*argv, "--stop-at", "25"]) == 0  # between checkpoints, on purpose
    with open(os.path.join(output, "train_summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    assert summary["steps"] == 25 and summary["resumed_from_step"] == 0
    # the time inside the steps leaves out the checkpoint saves between them
    assert 0 < summary["seconds_in_steps"] < summary["seconds_this_run"]
    assert 25 in checkpoint_steps(output)
    stopped = weights_of(os.path.join(output, "model.weights.h5"))
    assert train.main(argv) == 0
    assert "resuming from step 25" in capsys.readouterr().out
    with open(os.path.join(output, "train_summary.json"), encoding="utf-8") as f:
        assert json.load(f)["resumed_from_step"] == 25  # its interval_losses start there
    going_on = weights_of(os.path.join(output, "model.weights.h5"))
    assert any(not np.array_equal(stopped[k], going_on[k]) for k in stopped)  # it went on
    # The schedule spanned --steps all along: the weights of the uninterrupted run.
    assert_same_weights(
        os.path.join(uninterrupted, "model.weights.h5"), os.path.join(output, "model.weights.h5")
    )


def test_a_run_shorter_than_a_checkpoint_interval_counts_its_own_steps(records, tmp_path, capsys):
    """A 6-step run with --checkpoint-every 1000 showed `1000/1000` and then "5 steps"."""
    argv = pretrain_argv(records, str(tmp_path / "run"), steps=6, checkpoint_every=1000)
    assert train.main([*argv, "--strategy", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "6/6" in out and "1000/1000" not in out
    assert "step 6 of 6; " in out and "tokens/s in the 5 steps after the first call" in out
    assert out.count("saved ") == 1


def test_zero_steps_saves_the_initialised_model(records, uninterrupted, tmp_path):
    """A random-initialisation floor: the seed's initial weights, nothing trained, nothing
    compiled."""
    outputs = []
    for name in ("a", "b"):
        outputs.append(str(tmp_path / name))
        argv = pretrain_argv(records, outputs[-1], steps=0, extra=["--strategy", "cpu"])
        assert train.main(argv) == 0
    summary = json.load(open(os.path.join(outputs[0], "train_summary.json")))
    assert (summary["steps"], summary["steps_this_run"]) == (0, 0)
    assert checkpoint_steps(outputs[0]) == []
    assert_same_weights(*(os.path.join(o, "model.weights.h5") for o in outputs))
    floor = weights_of(os.path.join(outputs[0], "model.weights.h5"))
    trained = weights_of(os.path.join(uninterrupted, "model.weights.h5"))
    assert floor.keys() == trained.keys()
    assert all(not np.array_equal(floor[k], trained[k]) for k in floor if "kernel" in k)


def tiny_compiled_pretrainer(seed):
    keras.utils.set_random_seed(seed)
    model = BertPretrainer(BertEncoder.from_preset("tiny", vocabulary_size=64))
    model.compile(
        optimizer=bert_adamw(1e-3, 1, 10),
        loss={"mlm": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
    )
    create_optimizer_variables(model)
    return model


def test_optimizer_variables_created_first_change_nothing_the_steps_compute():
    """`create_optimizer_variables` (the first step traced once, not twice) before three
    steps of BERT's AdamW gives the weights three steps give without it."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 6)).astype("float32"), rng.integers(0, 3, 8)
    weights = []
    for first in (True, False):
        keras.utils.set_random_seed(3)
        inputs = keras.Input((6,))
        hidden = keras.layers.LayerNormalization()(keras.layers.Dense(5)(inputs))
        model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Dropout(0.5)(hidden)))
        model.compile(
            optimizer=bert_adamw(1e-2, 1, 10),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        if first:
            create_optimizer_variables(model)
        assert model.optimizer.built is first
        for _ in range(3):
            model.train_on_batch(x, y)
        weights.append(model.get_weights())
    for a, b in zip(*weights):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_restore_never_loads_a_half_written_checkpoint(tmp_path, monkeypatch):
    directory = str(tmp_path / "checkpoints")
    model = tiny_compiled_pretrainer(seed=1)
    saver = ResumableCheckpoint(directory, every=1, keep=2)
    saver.set_model(model)
    for step in (3, 4, 5):
        saver.save(step)
    assert [s for s, _ in saver.checkpoints()] == [4, 5]  # keep=2
    saved = [v.copy() for v in model.get_weights()]

    # A save that dies half-way leaves nothing under a ckpt-* name ...
    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", disk_full)
    with pytest.raises(OSError):
        saver.save(6)
    monkeypatch.undo()
    assert sorted(os.listdir(directory)) == ["ckpt-00000004", "ckpt-00000005"]
    # ... and what a kill -9 mid-save leaves (a temporary directory; a ckpt-*
    # directory without its state.json) is never read; a damaged complete one
    # is skipped for the one before.
    for name in (".ckpt-00000007.tmp-abc", "ckpt-00000008", "ckpt-00000009"):
        os.makedirs(os.path.join(directory, name))
        with open(os.path.join(directory, name, "model.weights.h5"), "wb") as f:
            f.write(b"\x89HDF truncated")
    with open(os.path.join(directory, "ckpt-00000009", "state.json"), "w") as f:
        f.write('{"step": 9}')

    fresh = tiny_compiled_pretrainer(seed=2)
    loader = ResumableCheckpoint(directory, every=1)
    loader.clean_partial()
    assert not os.path.exists(os.path.join(directory, ".ckpt-00000007.tmp-abc"))
    assert loader.restore(fresh) == 5
    for a, b in zip(saved, fresh.get_weights()):
        np.testing.assert_array_equal(a, b)
    # When nothing loads, restore says so rather than starting over.
    for step in (4, 5):
        os.remove(os.path.join(directory, f"ckpt-{step:08d}", "model.weights.h5"))
    with pytest.raises(ValueError, match="no checkpoint there fits this model"):
        loader.restore(fresh)


def test_resuming_with_another_model_stops_instead_of_starting_over(
    records, uninterrupted, tmp_path, capsys
):
    # Without dropout the model has no seed generators, so no checkpoint fits;
    # starting from scratch would rotate the real checkpoints away.
    output = str(tmp_path / "run")
    shutil.copytree(uninterrupted, output)
    rc = train.main(pretrain_argv(records, output, steps=50, extra=["--dropout", "0.0"]))
    assert rc == 1
    assert "no checkpoint there fits this model" in capsys.readouterr().err
    assert checkpoint_steps(output) == [20, 30, 40]


def test_a_command_training_another_model_into_a_run_is_refused(
    records, uninterrupted, tmp_path, capsys
):
    """Another --config into a finished run's --output: refused before any weight is read,
    naming what differs (it was called "unreadable" three times, then "fits no model")."""
    output = str(tmp_path / "run")
    shutil.copytree(uninterrupted, output)
    argv = pretrain_argv(records, output, steps=50)
    argv[argv.index("tiny")] = "mini"
    assert train.main(argv) == 1
    out, err = capsys.readouterr()
    said = "its checkpoints are of another run (another model: encoder.hidden_dim 32 (this "
    assert said + "command: 256);" in err
    assert "unreadable" not in out + err
    assert checkpoint_steps(output) == [20, 30, 40]


def test_resuming_with_another_batch_size_is_refused(records, uninterrupted, tmp_path, capsys):
    """A resumed run starts at step x batch examples: another --batch-size re-read examples
    already trained on, and said only "resuming from step 40"."""
    output = str(tmp_path / "run")
    shutil.copytree(uninterrupted, output)
    assert train.main(pretrain_argv(records, output, steps=50, batch_size=2)) == 1
    said = "its checkpoints are of another run (other examples at each step: --batch-size 4 (this "
    assert said + "command: 2))" in capsys.readouterr().err
    assert checkpoint_steps(output) == [20, 30, 40]


def test_model_load_reads_a_training_checkpoint_as_finetune_init_does(uninterrupted):
    """`model.load(RUN/checkpoints/ckpt-N)` said "not a recognised model folder", where
    `finetune --init` takes the same path (docs/finetuning.md: any checkpoint model.load reads)."""
    import model

    path = os.path.join(uninterrupted, "checkpoints", "ckpt-00000030")
    from model.training.checkpointing import load_checkpoint

    pretrainer = model.load(path)
    assert isinstance(pretrainer, BertPretrainer)
    for a, b in zip(pretrainer.get_weights(), load_checkpoint(path)[0].get_weights()):
        np.testing.assert_array_equal(a, b)  # the step's weights, as finetune --init reads them
    assert isinstance(model.load(path, task="encoder"), BertEncoder)
    with pytest.raises(ValueError, match=r"a classifier head starts from it with python -m"):
        model.load(path, task="classifier")


def test_checkpoints_record_their_run_and_refuse_another(tmp_path):
    """`run` in state.json: another objective (same shape: --no-nsp's model is RoBERTa's) is
    refused; checkpoints written before runs were recorded still resume."""
    from model.training.checkpointing import run_identity

    directory = str(tmp_path / "checkpoints")
    model = tiny_compiled_pretrainer(seed=1)
    bert = run_identity("--objective bert --no-nsp", model)
    assert bert["model"]["encoder"]["num_layers"] == 2 and "dropout" not in bert["model"]["encoder"]
    saver = ResumableCheckpoint(directory, every=1, run=bert)
    saver.set_model(model)
    saver.save(3)
    roberta = run_identity("--objective roberta", model)
    with pytest.raises(ValueError) as refused:
        ResumableCheckpoint(directory, every=1, run=roberta).restore(model)
    assert str(refused.value) == (
        f"{directory}: its checkpoints are of another run (trains --objective bert --no-nsp "
        "(this command: --objective roberta)); resume with the command that wrote them, or use "
        "a new --output"
    )
    assert ResumableCheckpoint(directory, every=1, run=bert).restore(model) == 3
    state = os.path.join(directory, "ckpt-00000003", "state.json")
    with open(state, "w") as f:
        f.write('{"step": 3}')  # as written before runs were recorded
    assert ResumableCheckpoint(directory, every=1, run=roberta).restore(model) == 3
    # Written before runs recorded the flags that set their examples: resumed without them.
    with open(state, "w") as f:
        f.write(json.dumps({"step": 3, "run": bert}))
    with_reads = run_identity("--objective bert --no-nsp", model, reads={"--batch-size": 8})
    assert ResumableCheckpoint(directory, every=1, run=with_reads).restore(model) == 3


def test_a_model_pretrained_on_cased_records_reads_text_cased(records, tmp_path):
    """The records' casing is the model's (the tiny preset's default is uncased): before, the
    encoder kept the preset's, and fine-tuning, evaluation and export lowercased the text."""
    from model.checkpoints import model_dir

    cased = make_records(tmp_path, "cased", num_documents=4, extra=["--cased"])
    output = tmp_path / "run"
    assert train.main(pretrain_argv(cased, output, steps=0, extra=["--strategy", "cpu"])) == 0
    info = json.load(open(output / "config.json"))
    assert info["encoder"]["lowercase"] is False and "lowercase" not in info
    assert model_dir.load(str(output)).encoder.config.lowercase is False
    # A directory written before keeps its records' casing at the top: the reader moves it in.
    info["lowercase"], info["encoder"]["lowercase"] = False, True
    (output / "config.json").write_text(json.dumps(info))
    assert model_dir.read_info(str(output))["encoder"]["lowercase"] is False
    # Such a config.json configures a run on cased records; and any casing starts from its
    # weights (--init: the casing is the records', a Google config does not state one).
    argv = pretrain_argv(cased, tmp_path / "again", steps=0, extra=["--strategy", "cpu"])
    argv[argv.index("tiny")] = str(output / "config.json")
    assert train.main(argv) == 0
    extra = ["--strategy", "cpu", "--init", str(output)]
    assert train.main(pretrain_argv(records, tmp_path / "uncased", steps=0, extra=extra)) == 0


def test_init_with_another_vocabulary_than_the_records_stops(records, tmp_path, capsys):
    """--init's vocab.txt must be the records': two lines swapped trained each embedding row
    on another word's ids, and the run said nothing."""
    output = tmp_path / "run"
    assert train.main(pretrain_argv(records, output, steps=0, extra=["--strategy", "cpu"])) == 0
    lines = (output / "vocab.txt").read_text(encoding="utf-8").splitlines()
    lines[10], lines[11] = lines[11], lines[10]
    (output / "vocab.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    extra = ["--strategy", "cpu", "--init", str(output)]
    assert train.main(pretrain_argv(records, tmp_path / "again", steps=0, extra=extra)) != 0
    err = capsys.readouterr().err
    assert "its vocabulary" in err and "is not the one the records were made with" in err
    assert not (tmp_path / "again").exists()


@pytest.mark.parametrize("layout", ["config", "model directory"])
def test_a_config_file_naming_the_other_casing_stops(records, tmp_path, capsys, layout):
    from model.config import BertConfig

    config = BertConfig.preset(
        "tiny", vocabulary_size=len(open(records + "/vocab.txt").readlines())
    )
    fields = config.replace(lowercase=False).to_dict()
    if layout == "model directory":  # a run's config.json nests the encoder's
        fields = {"task": "pretraining", "encoder": fields}
    (tmp_path / "cased.json").write_text(json.dumps(fields))
    argv = pretrain_argv(records, tmp_path / "run", steps=0, extra=["--strategy", "cpu"])
    argv[argv.index("tiny")] = str(tmp_path / "cased.json")
    assert train.main(argv) != 0
    assert "lowercase is False, but the records were tokenised uncased" in capsys.readouterr().err


# === Bad input ===


@pytest.fixture
def bad_vocab(tmp_path):
    path = write_vocab(tmp_path / "vocab-without-mask.txt", mask=False)
    with open(path, encoding="utf-8") as f:
        assert "[MASK]" not in f.read().split()
    return path


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing data", r"missing-data-dir\S*: no record files match"),
        ("vocab without [MASK]", r"vocab-without-mask.txt: the vocabulary has no \[MASK\] token"),
        ("another vocab", r"--vocab \S*other-vocab.txt: not the vocabulary \S* was made with"),
        ("cased held-out records", r"records with lowercase False, unlike the training"),
        ("tpu without a TPU", r"--strategy tpu: no TPU found"),
    ],
)
def test_bad_input_fails_early_with_a_message(records, bad_vocab, tmp_path, capsys, case, message):
    output = str(tmp_path / "out")
    data, extra = records, []
    if case == "missing data":
        data = str(tmp_path / "missing-data-dir")
    elif case == "vocab without [MASK]":
        extra = ["--vocab", bad_vocab]
    elif case == "another vocab":  # its ids are not the records' (an IndexError before)
        other = write_vocab(tmp_path / "other-vocab.txt")
        with open(other, "a", encoding="utf-8") as f:
            f.write("extra\n")
        extra = ["--vocab", other]
    elif case == "cased held-out records":  # scored against an uncased run before
        extra = ["--eval-data", make_records(tmp_path, "cased", num_documents=4, extra=["--cased"])]
    else:
        extra = ["--strategy", "tpu"]
    rc = train.main(pretrain_argv(data, output, extra=extra))
    assert rc != 0
    assert re.search(message, capsys.readouterr().err)
    leftovers = os.listdir(output) if os.path.isdir(output) else []
    assert leftovers == [], f"a failed run left {leftovers}"


def run_as_main(module: str, argv, monkeypatch) -> int | str | None:
    """`python -m module argv`, in this process: the exit status it ends with."""
    monkeypatch.setattr(sys, "argv", [f"python -m {module}", *argv])
    with warnings.catch_warnings(), pytest.raises(SystemExit) as exit_:
        # runpy's note that the module is imported already (by this file).
        warnings.filterwarnings("ignore", "'model.* found in sys.modules", RuntimeWarning)
        runpy.run_module(module, run_name="__main__", alter_sys=False)
    return exit_.value.code


def test_tpu_without_tpu_exits_non_zero(records, tmp_path, monkeypatch, capsys):
    # Through the `__main__` block, for the exit status a shell sees.
    output = str(tmp_path / "out")
    code = run_as_main(
        "model.train", pretrain_argv(records, output, extra=["--strategy", "tpu"]), monkeypatch
    )
    assert code not in (0, None)
    assert "--strategy tpu: no TPU found" in capsys.readouterr().err
    assert not any(os.path.exists(os.path.join(output, f)) for f in FINAL_FILES)


# === The NaN guard ===


def test_nan_loss_stops_with_exit_3_and_keeps_the_last_good_checkpoint(
    records, uninterrupted, tmp_path, capsys
):
    # Resume the finished 40-step run for 2 more steps at a learning rate of
    # 1e30: step 41 makes the weights ~1e29, step 42's forward pass overflows
    # to NaN. Step 42 is both the last step and (every 1) a checkpoint step,
    # the two places where a NaN used to slip through.
    output = str(tmp_path / "run")
    shutil.copytree(uninterrupted, output)
    published = sha256(os.path.join(output, "model.weights.h5"))
    assert checkpoint_steps(output) == [20, 30, 40]
    rc = train.main(
        pretrain_argv(
            records,
            output,
            steps=42,
            checkpoint_every=1,
            extra=["--learning-rate", "1e30", "--warmup-steps", "0"],
        )
    )
    err = capsys.readouterr().err
    assert rc == 3, err[-2000:]
    assert re.search(r"training stopped at step 42: the loss is not finite", err)
    assert "last good checkpoint is kept" in err
    assert checkpoint_steps(output) == [30, 40, 41]  # no ckpt-00000042
    for name, value in weights_of(
        os.path.join(output, "checkpoints", "ckpt-00000041", "model.weights.h5")
    ).items():
        assert np.all(np.isfinite(value)), name
    # The published model is the earlier run's, untouched.
    assert sha256(os.path.join(output, "model.weights.h5")) == published


# === Evaluation ===


def test_evaluate_mlm_prints_accuracies(uninterrupted, tmp_path, capsys):
    text = write_corpus(tmp_path / "eval.txt", num_documents=4, sentences=(3, 6), seed=7)
    rc = evaluate.main(
        [
            "--task",
            "mlm",
            "--model",
            uninterrupted,
            "--data",
            text,
            "--max-seq-length",
            "32",
            "--batch-size",
            "8",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    metrics = json.loads(out)  # stdout is the JSON and nothing else
    for key in ("mlm_top1_accuracy", "mlm_top5_accuracy", "nsp_accuracy"):
        assert 0.0 <= metrics[key] <= 1.0, key
    assert metrics["mlm_top1_accuracy"] <= metrics["mlm_top5_accuracy"]
    assert metrics["masked_positions"] > 0 and np.isfinite(metrics["mlm_loss"])
    # a --seq-len past the position table: one line (a TensorFlow traceback before)
    rc = evaluate.main(
        ["--task", "mlm", "--model", uninterrupted, "--data", text, "--seq-len", "4096"]
    )
    assert (
        rc == 1
        and "--seq-len 4096 exceeds the model's max_sequence_length" in capsys.readouterr().err
    )


def test_a_span_or_electra_runs_masked_lm_is_its_head_over_its_encoder():
    """`model.evaluate --task mlm` scores SpanBERT's and ELECTRA's runs (refused before) with
    their head over their encoder (the generator, for ELECTRA), computed as a BERT
    pre-trainer's own forward pass computes it."""
    import types

    from model.config import BertConfig

    config = BertConfig.preset("tiny").replace(vocabulary_size=60, max_sequence_length=16)
    model = BertPretrainer(BertEncoder.from_config_object(config), next_sentence=False)
    rng = np.random.default_rng(0)
    x = {
        "token_ids": rng.integers(5, 60, (3, 16)).astype("int32"),
        "segment_ids": np.zeros((3, 16), "int32"),
        "padding_mask": np.ones((3, 16), "int32"),
        "mask_positions": rng.integers(1, 15, (3, 4)).astype("int32"),
    }
    own = model.predict_on_batch(x)["mlm"]
    for parts in ({"encoder": model.encoder}, {"generator": model.encoder, "encoder": None}):
        other = types.SimpleNamespace(masked_lm_head=model.masked_lm_head, **parts)
        np.testing.assert_allclose(
            masked_lm_scores.masked_lm_predict(other)(x)["mlm"], own, atol=1e-5
        )
    assert masked_lm_scores.masked_lm_predict(model) == model.predict_on_batch


def test_evaluate_mlm_scores_the_mask_positions_apart(tmp_path):
    """A "model" that copies the word it is shown: never right where it sees [MASK] (80 % of
    the predictions), always where it sees the true word (10 %). The mixed accuracy says
    about 10 %, the [MASK]-only accuracy 0."""
    from model.text.wordpiece import WordPieceTokenizer

    vocab = write_vocab(tmp_path / "vocab.txt", extra=40)
    tokenizer = WordPieceTokenizer(vocab)
    text = write_corpus(tmp_path / "eval.txt", num_documents=6, sentences=(4, 8), seed=3)

    def copy_the_input(x):
        shown = np.take_along_axis(x["token_ids"], x["mask_positions"], 1)
        return {"topk_ids": np.repeat(shown[..., None], 5, -1)}

    m = masked_lm_scores.evaluate_mlm(copy_the_input, tokenizer, text, max_seq_length=32)
    assert m["mlm_top1_accuracy_mask_only"] == m["mlm_top5_accuracy_mask_only"] == 0.0
    assert 0.03 < m["mlm_top1_accuracy"] < 0.2
    assert 0.7 < m["mask_token_positions"] / m["masked_positions"] < 0.9


def test_evaluate_mlm_counts_right_guesses_exactly(tmp_path):
    """A "model" that knows the answers, put second in its top 5 and wrong on every third
    next-sentence question: top-1 0, top-5 1, NSP accuracy the share it gets right."""
    from model.text.wordpiece import WordPieceTokenizer

    tokenizer = WordPieceTokenizer(write_vocab(tmp_path / "vocab.txt", extra=40))
    text = write_corpus(tmp_path / "eval.txt", num_documents=6, sentences=(4, 8), seed=3)
    truth = masked_lm_scores.masked_instances(tokenizer, text, 32, 20, 12345, "auto")
    nsp = truth["nsp_labels"]
    assert 0 < nsp.mean() < 1  # both kinds of next sentence
    wrong = np.arange(len(nsp)) % 3 == 0
    seen = 0

    def knows_the_answers(x):
        nonlocal seen
        rows = slice(seen, seen + len(x["token_ids"]))
        seen = rows.stop
        topk = np.zeros((*truth["labels"][rows].shape, 5), "int32")
        topk[..., 1] = truth["labels"][rows]
        guess = np.where(wrong[rows], 1 - nsp[rows], nsp[rows])
        return {"topk_ids": topk, "nsp_probs": np.eye(2)[guess]}

    m = masked_lm_scores.evaluate_mlm(
        knows_the_answers, tokenizer, text, max_seq_length=32, batch_size=8
    )
    assert seen == len(nsp) and m["mlm_top_k"] == 5
    assert m["mlm_top1_accuracy"] == 0.0 and m["mlm_top5_accuracy"] == 1.0
    assert m["nsp_accuracy"] == pytest.approx(1 - wrong.mean())


# === --help ===


@pytest.mark.parametrize("argv", [["--help"], ["pretrain", "--help"]])
def test_help_names_the_main_flags(monkeypatch, capsys, argv):
    assert run_as_main("model.train", argv, monkeypatch) == 0
    out = capsys.readouterr().out
    for flag in ("--strategy", "--mixed-precision", "--jit", "--init-checkpoint"):
        assert flag in out, flag


def test_a_held_out_set_read_more_than_once_is_noted(capsys):
    import types

    from model.training.pretrain import _note_repeated_eval

    args = types.SimpleNamespace(eval_data="held", eval_steps=20, batch_size=32)
    _note_repeated_eval(args, 100)
    out = capsys.readouterr().out
    assert "held holds 100 instances" in out and "6.4 times" in out
    assert "--eval-steps 3 reads each once" in out
    _note_repeated_eval(args, 640)
    assert capsys.readouterr().out == ""
    _note_repeated_eval(args, 20)
    assert "more held-out text would read each once" in capsys.readouterr().out


def test_flags_a_run_would_ignore_are_refused(tmp_path, capsys):
    """Masking flags on records masked when made, ELECTRA's flags on another objective and
    --no-nsp on one without NSP trained as if they were not given."""
    static = make_records(tmp_path, "static", extra=("--masking", "static"))
    argv = pretrain_argv(static, str(tmp_path / "run"), steps=1)
    assert train.main([*argv, "--mask-rate", "0.3", "--whole-word-masking"]) == 1
    err = capsys.readouterr().err
    assert "--mask-rate, --whole-word-masking: " in err and "masked when they were made" in err
    assert not os.path.exists(tmp_path / "run")
    # held-out records masked at run time do take them (RoBERTa static's layout)
    dynamic = make_records(tmp_path, "dynamic")
    assert train.main([*argv, "--eval-data", dynamic, "--mask-rate", "0.3"]) == 0
    capsys.readouterr()
    for flags, said in (
        (["--generator-size", "0.5"], "--generator-size: ELECTRA's (--objective electra)"),
        (["--objective", "roberta", "--no-nsp"], "--no-nsp: --objective bert's"),
    ):
        with pytest.raises(SystemExit):
            train.parse_args([*argv, *flags])
        assert said in capsys.readouterr().err


def test_an_output_holding_what_no_run_of_the_command_wrote_is_refused(
    records, uninterrupted, tmp_path, capsys, monkeypatch
):
    """A model folder, a user's own files or the other command's finished run as --output:
    refused before any framework, nothing in it touched (a fine-tuning into a copy of its
    --init's folder wrote its classifier over the encoder, into a folder of notes beside
    them). A new or empty folder, a run stopped before its first checkpoint (its logs) and
    a run's own folder (its checkpoints say later whether they are this run's) go on."""
    from tests.helpers import finetune_argv, make_init, write_sst2

    init, data = make_init(tmp_path), write_sst2(tmp_path / "SST-2")
    model = shutil.copytree(init, tmp_path / "model")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine\n")
    finished_finetune = tmp_path / "finished"
    finished_finetune.mkdir()
    (finished_finetune / "metrics.json").write_text("{}")
    finetune = lambda output: finetune_argv("sst2", data, init, output)  # noqa: E731
    pretrain = lambda output: pretrain_argv(records, str(output), steps=1)  # noqa: E731
    for argv, said in (
        (finetune(model), f"--output {model} already holds a model (config.json, model.weights"),
        (finetune(notes), f"--output {notes} already holds other files (todo.txt), not a "),
        (pretrain(notes), "other files (todo.txt), not a training run's, which this pretrain"),
        (pretrain(finished_finetune), "holds a finished fine-tuning (or feature tagger) run (metrics.json)"),
        (finetune(uninterrupted), "finished pre-training run (train_summary.json), which this "
         "finetune would write over: name another --output; fine-tune from it with --init"),
    ):  # fmt: skip
        files = [*tmp_path.rglob("*"), *Path(uninterrupted).rglob("*")]
        before = {p: sha256(p) for p in map(str, files) if os.path.isfile(p)}
        assert train.main(argv) == 1, argv
        assert said in capsys.readouterr().err
        assert before == {p: sha256(p) for p in before}  # nothing written over
    assert sorted(os.listdir(notes)) == ["todo.txt"]
    # each seed's own --output (--seeds runs under JAX)
    monkeypatch.setattr(train, "keras_backend", lambda: "jax")
    seeds = finetune(tmp_path / "s{seed}")
    seeds += ["--device-data", "--seeds", "1,2"]
    os.makedirs(tmp_path / "s2" / "docs")
    with pytest.raises(ValueError, match=r"s2 already holds other files \(docs\)"):
        train.check_inputs(train.parse_args(seeds))
    (tmp_path / "s2" / "docs").rmdir()
    trained = finetune_argv("sst2", data, tmp_path / "s1", tmp_path / "s{seed}")
    with pytest.raises(ValueError, match=r"s1 would overwrite --init .*s1: choose another"):
        train.check_inputs(train.parse_args([*trained, "--device-data", "--seeds", "1,2"]))
    (tmp_path / "stopped" / "logs").mkdir(parents=True)
    for output in ("new", "s2", "stopped"):  # new, empty, a run stopped before a checkpoint
        train.check_inputs(train.parse_args(finetune(tmp_path / output)))
    train.check_inputs(train.parse_args(pretrain(uninterrupted)))  # goes on, or says it is done


def test_records_are_checked_against_the_flags_before_any_framework(records, tmp_path):
    """--seq-len other than the records' length, and a text file given as records, were found
    after TensorFlow's import (12 s); check_inputs reads dataset.json (or the records'
    first one) itself."""
    from model.pretraining.records import find_records

    length = find_records(records)[1]["max_seq_length"]
    argv = pretrain_argv(records, str(tmp_path / "run"), steps=1)
    train.check_inputs(train.parse_args([*argv, "--seq-len", str(length)]))
    with pytest.raises(ValueError, match=rf"--seq-len {length * 2} differs from the records' "):
        train.check_inputs(train.parse_args([*argv, "--seq-len", str(length * 2)]))
    text = tmp_path / "corpus.txt"
    text.write_text("Plain text, not records.\n" * 10)
    argv[argv.index(records)] = str(text)
    with pytest.raises(ValueError, match=r"corpus.txt: not a TFRecord file"):
        train.check_inputs(train.parse_args(argv))


LIST_HEAVY_IMPORTS = (
    "import runpy, sys\n"
    "sys.argv = ['model.train', *sys.argv[1:]]\n"
    "try:\n    runpy.run_module('model.train', run_name='__main__', alter_sys=True)\n"
    "except SystemExit as e:\n    code = e.code\n"
    "print(sorted(m for m in sys.modules if m.split('.')[0] in "
    "('tensorflow', 'keras', 'keras_hub', 'jax')))\n"
    "sys.exit(code)\n"
)


def test_the_objective_is_checked_against_the_records_before_any_framework(records, tmp_path):
    """An objective that does not train on the records (SpanBERT on sentence pairs), another
    vocabulary than the records', held-out records of another length: said by the command
    with nothing heavy imported (these waited for TensorFlow, 12 s, before), nothing written."""
    shorter = make_records(tmp_path, "shorter", seq_len=16)
    other_vocab = tmp_path / "other-vocab.txt"
    other_vocab.write_text(Path(records, "vocab.txt").read_text() + "another\n")
    argv = pretrain_argv(records, str(tmp_path / "run"), steps=1)
    for extra, said in (
        (["--objective", "spanbert"], "records of sentence-pairs inputs; --objective spanbert "
         "trains on segments (python -m model.data --inputs segments)"),
        (["--vocab", str(other_vocab)], " was made with (its dataset.json's "
         "vocab_sha256)"),
        (["--eval-data", shorter], "records of 16 tokens, the training records' are 32"),
    ):  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-c", LIST_HEAVY_IMPORTS, *argv, *extra],
            cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr[-2000:]
        assert said in done.stderr and done.stderr.count("\n") == 1, done.stderr[-2000:]
        assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-500:]
    assert not os.path.exists(tmp_path / "run")
