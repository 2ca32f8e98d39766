"""model.pretraining.instances: document-aware segment pairs (google-research's algorithm).

Token ids here are positions in one running counter, so an id tells which
document (and where in it) a token came from.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from model.pretraining.instances import InstanceConfig, create_instances_from_document


def make_documents(
    num_documents: int, sentences: tuple[int, int], tokens: tuple[int, int], seed: int = 0
) -> tuple[list[list[np.ndarray]], dict[int, int]]:
    """Documents of sentences of consecutive ids; also the id -> document map."""
    rng = random.Random(seed)
    docs, owner, next_id = [], {}, 1000
    for d in range(num_documents):
        doc = []
        for _ in range(rng.randint(*sentences)):
            n = rng.randint(*tokens)
            doc.append(np.arange(next_id, next_id + n, dtype=np.int32))
            owner.update({i: d for i in range(next_id, next_id + n)})
            next_id += n
        docs.append(doc)
    return docs, owner


def all_instances(docs, config, seed=0):
    rng = random.Random(seed)
    return [
        (d, inst)
        for d in range(len(docs))
        for inst in create_instances_from_document(docs, d, config, rng)
    ]


@pytest.fixture(scope="module")
def corpus():
    return make_documents(400, sentences=(20, 60), tokens=(4, 16))


@pytest.mark.parametrize("short_seq_prob", [0.1, 1.0])
def test_next_sentence_labels_are_balanced(corpus, short_seq_prob):
    # Short targets used to make most chunks one sentence, which is always NotNext.
    docs, _ = corpus
    instances = all_instances(docs, InstanceConfig(64, short_seq_prob))
    assert len(instances) >= 3000
    share = np.mean([inst.is_random_next for _, inst in instances])
    assert abs(share - 0.5) <= 0.03, share


def test_is_next_continues_and_not_next_comes_from_another_document(corpus):
    docs, owner = corpus
    config = InstanceConfig(max_seq_length=64)
    for d, inst in all_instances(docs, config):
        assert {owner[t] for t in inst.first} == {d}
        second = {owner[t] for t in inst.second}
        if inst.is_random_next:
            assert second and d not in second
        else:
            assert second == {d}
            if len(inst.first) + len(inst.second) < config.max_seq_length - 3:  # not truncated
                tokens = inst.first + inst.second
                assert tokens == list(range(tokens[0], tokens[0] + len(tokens)))


@pytest.mark.parametrize("max_seq_length", [8, 32, 128])
def test_truncation_keeps_every_instance_within_max_seq_length(max_seq_length):
    # Sentences longer than the whole sequence force truncation every time.
    docs, _ = make_documents(20, sentences=(2, 10), tokens=(1, 200), seed=1)
    for short_seq_prob in (0.0, 0.5):
        config = InstanceConfig(max_seq_length=max_seq_length, short_seq_prob=short_seq_prob)
        instances = all_instances(docs, config)
        assert instances
        for _, inst in instances:
            assert inst.first and inst.second
            assert len(inst.first) + len(inst.second) <= max_seq_length - 3


def test_sequences_are_usually_full_and_sometimes_short(corpus):
    docs, _ = corpus
    max_tokens = 64 - 3

    def full_share(short_seq_prob):
        instances = all_instances(docs, InstanceConfig(64, short_seq_prob))
        return np.mean([len(i.first) + len(i.second) >= max_tokens - 5 for _, i in instances])

    assert full_share(0.0) > 0.8
    assert full_share(1.0) < 0.3


def test_without_next_sentence_one_segment_per_instance(corpus):
    docs, owner = corpus
    config = InstanceConfig(max_seq_length=64, next_sentence=False)
    instances = all_instances(docs, config)
    for d, inst in instances:
        assert inst.second == [] and not inst.is_random_next
        assert 0 < len(inst.first) <= 64 - 2
        assert {owner[t] for t in inst.first} == {d}
    lengths = [len(inst.first) for _, inst in instances]
    assert np.mean(lengths) > 0.8 * 62


def test_one_document_corpus_has_no_random_next():
    docs, _ = make_documents(1, sentences=(30, 30), tokens=(5, 10))
    instances = all_instances(docs, InstanceConfig(max_seq_length=32))
    assert instances
    assert not any(inst.is_random_next for _, inst in instances)


def test_same_rng_seed_same_instances(corpus):
    docs, _ = corpus
    docs = docs[:20]
    config = InstanceConfig(max_seq_length=64)
    as_tuples = lambda instances: [(i.first, i.second, i.is_random_next) for _, i in instances]
    assert as_tuples(all_instances(docs, config, 3)) == as_tuples(all_instances(docs, config, 3))
    assert as_tuples(all_instances(docs, config, 3)) != as_tuples(all_instances(docs, config, 4))


def test_max_seq_length_must_leave_room():
    with pytest.raises(ValueError, match="max_seq_length"):
        InstanceConfig(max_seq_length=4)
