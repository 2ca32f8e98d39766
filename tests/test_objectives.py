"""`python -m model.train pretrain --objective {bert,roberta,spanbert,ltr,electra}`: each objective
trains from the same command, learns, is saved and reloaded, and refuses records it cannot use."""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import pytest

from model import objectives
from model.checkpoints import model_dir
from model.networks.encoder import BertEncoder
from model.pretraining.dataset import pretraining_dataset
from model.pretraining.pydataset import PretrainingPyDataset
from model.text.wordpiece import load_vocabulary
from model.training.optimizer import create_optimizer_variables
from tests.helpers import make_records, pretrain_argv, run_train

# The record format each objective trains on (python -m model.data --inputs ...).
INPUTS = {
    "bert": "sentence-pairs",
    "roberta": "full-sentences",
    "spanbert": "segments",
    "ltr": "segments",
    "electra": "segment-pairs",
}
# What the saved config.json says the model is.
TASKS = {
    "bert": "pretraining",
    "roberta": "pretraining",
    "spanbert": "span_pretraining",
    "ltr": "causal_lm",
    "electra": "electra_pretraining",
}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    parent = tmp_path_factory.mktemp("data")
    return {
        inputs: make_records(parent, inputs, extra=["--inputs", inputs])
        for inputs in sorted(set(INPUTS.values()))
    }


def objective_for(name: str, records_dir: str, seq_len: int = 32):
    vocabulary = load_vocabulary(os.path.join(records_dir, "vocab.txt"))
    return objectives.get(name)(vocabulary, objectives.ObjectiveOptions(seq_len=seq_len))


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_every_objective_trains_saves_and_reloads(name, records, tmp_path):
    output = tmp_path / "run"
    argv = pretrain_argv(records[INPUTS[name]], str(output), steps=6, checkpoint_every=3)
    assert run_train([*argv, "--objective", name]) == 0
    with open(output / "config.json", encoding="utf-8") as f:
        info = json.load(f)
    assert info["task"] == TASKS[name] and info["objective"] == name
    assert info["encoder"]["causal"] is (name == "ltr")
    with open(output / "train_summary.json", encoding="utf-8") as f:
        summary = json.load(f)
    assert summary["steps"] == 6 and summary["objective"] == name
    reloaded = model_dir.load(str(output))
    assert (
        type(reloaded).__name__
        == type(
            objective_for(name, records[INPUTS[name]]).build_model(
                BertEncoder.from_config_object(reloaded.encoder.config)
            )
        ).__name__
    )


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_every_objective_overfits_one_batch(name, records):
    """The objective's own batch, its model and losses: 60 steps on that one batch
    take the loss far below where it started."""
    keras.utils.set_random_seed(0)
    directory = records[INPUTS[name]]
    objective = objective_for(name, directory)
    x, y, sw = next(
        iter(
            pretraining_dataset(
                directory,
                8,
                transform=objective.batches,
                next_sentence=objective.next_sentence,
                seed=1,
            )
        )
    )
    config = objective.encoder_config(
        BertEncoder.from_preset("tiny", vocabulary_size=len(objective.vocabulary)).config
    ).replace(dropout=0.0)
    model = objective.build_model(BertEncoder.from_config_object(config))
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=objective.losses(),
        loss_weights=objective.loss_weights(),
        weighted_metrics=objective.metrics(),
        jit_compile=False,  # XLA's compile of a tiny model takes longer than its 60 steps
    )
    create_optimizer_variables(model)  # its first step traced once, not twice
    first = model.evaluate(x, y, sample_weight=sw, verbose=0, return_dict=True)["loss"]
    for _ in range(60):
        model.train_on_batch(x, y, sample_weight=sw)
    last = model.evaluate(x, y, sample_weight=sw, verbose=0, return_dict=True)["loss"]
    assert last < 0.3 * first, (first, last)


@pytest.mark.parametrize("name", ["roberta", "spanbert", "ltr", "electra"])
def test_the_pyDataset_gives_the_tf_data_batches(name, records):
    """The JAX backend's pipeline (numpy) runs the same transform on the same examples."""
    directory = records[INPUTS[name]]
    objective = objective_for(name, directory)
    keras.utils.set_random_seed(7)  # sets TensorFlow's graph seed, as a run does
    args = dict(transform=objective.batches, next_sentence=objective.next_sentence, seed=7)
    tf_batches = pretraining_dataset(directory, 4, start_step=3, **args)
    py_batches = PretrainingPyDataset(directory, 4, start_step=3, graph_seed=7, **args)
    for step, tf_batch in zip(range(2), tf_batches):
        py_batch = py_batches[step]
        for tf_part, py_part in zip(tf_batch, py_batch):
            assert sorted(tf_part) == sorted(py_part)
            for key in tf_part:
                np.testing.assert_array_equal(tf_part[key].numpy(), py_part[key], err_msg=key)


def test_roberta_masks_differ_across_epochs_and_repeat_for_a_seed(records):
    directory = records["full-sentences"]
    with open(os.path.join(directory, "dataset.json"), encoding="utf-8") as f:
        num = json.load(f)["num_instances"]
    objective = objective_for("roberta", directory)

    def epoch(seed, index):
        """{original sequence: its masked positions} over the whole epoch `index`."""
        x, y, _ = next(
            iter(
                pretraining_dataset(
                    directory,
                    num,  # one batch is one epoch
                    transform=objective.batches,
                    next_sentence=False,
                    seed=seed,
                    start_step=index,
                )
            )
        )
        ids, positions = x["token_ids"].numpy().copy(), x["mask_positions"].numpy()
        np.put_along_axis(ids, positions, y["mlm"].numpy(), axis=1)  # the unmasked text
        return {tuple(row): tuple(p) for row, p in zip(ids, positions)}

    first, again, second = epoch(3, 0), epoch(3, 0), epoch(3, 1)
    assert first == again  # the same seed, epoch and example: the same masks
    assert first.keys() == second.keys()  # every example once an epoch
    changed = sum(first[k] != second[k] for k in first)
    assert changed > 0.8 * len(first)  # fresh masks the next epoch


@pytest.mark.parametrize(
    "name, inputs",
    [("spanbert", "sentence-pairs"), ("roberta", "segments"), ("bert", "full-sentences")],
)
def test_an_objective_refuses_records_of_another_format(name, inputs, records, tmp_path, capsys):
    argv = pretrain_argv(records[inputs], str(tmp_path / "run"), steps=2)
    assert run_train([*argv, "--objective", name]) == 1
    err = capsys.readouterr().err
    assert f"--objective {name} trains on" in err and "python -m model.data --inputs" in err


# Which record formats each objective trains on (True) or refuses (False), as check_records
# reads them from dataset.json; "bert-no-nsp" is --objective bert --no-nsp.
ACCEPTS = {
    "bert": {"sentence-pairs"},
    "bert-no-nsp": {"sentence-pairs", "segments", "segment-pairs"},
    "roberta": {"full-sentences", "doc-sentences"},
    "spanbert": {"segments"},
    "ltr": {"segments", "full-sentences", "doc-sentences"},
    "electra": {"segment-pairs", "segments", "full-sentences", "doc-sentences"},
}


@pytest.mark.parametrize("name", sorted(ACCEPTS))
def test_each_objective_takes_its_formats_and_refuses_the_others(name):
    from model.pretraining.instances import INPUT_FORMATS

    options = objectives.ObjectiveOptions(seq_len=32, next_sentence=name == "bert")
    objective = objectives.get(name.split("-")[0])(["[PAD]", "[MASK]"], options)
    for inputs in INPUT_FORMATS:
        info = {"input_format": inputs}
        if inputs in ACCEPTS[name]:
            objective.check_records("records", info)
        else:
            with pytest.raises(ValueError, match=f"records: records of {inputs} inputs"):
                objective.check_records("records", info)
    if name == "bert":  # the records --no-nsp would take: said
        with pytest.raises(ValueError, match="or on these with --no-nsp"):
            objective.check_records("records", {"input_format": "segment-pairs"})


def test_a_run_resumes_only_on_records_of_its_own_format(records, tmp_path, capsys):
    """ELECTRA on single segments (still taken), its summary saying so; the same --output
    with segment-pairs records is another run's examples: refused, naming both formats."""
    output = tmp_path / "run"
    argv = pretrain_argv(records["segments"], str(output), steps=2, checkpoint_every=1)
    assert run_train([*argv, "--objective", "electra"]) == 0
    with open(output / "train_summary.json", encoding="utf-8") as f:
        assert json.load(f)["input_format"] == "segments"
    argv = pretrain_argv(records["segment-pairs"], str(output), steps=4, checkpoint_every=1)
    capsys.readouterr()
    assert run_train([*argv, "--objective", "electra"]) != 0
    assert "records of segments (this command: segment-pairs)" in capsys.readouterr().err
