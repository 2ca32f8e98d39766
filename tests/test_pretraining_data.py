"""model.pretraining.instances: document-aware segment pairs (google-research's algorithm)
and RoBERTa's packed inputs (FULL-SENTENCES, DOC-SENTENCES).

Token ids here are positions in one running counter, so an id tells which
document (and where in it) a token came from.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

from model.pretraining.instances import (
    InstanceConfig,
    SentencePacker,
    _truncate_pair,
    create_instances_from_document,
)
from tests.helpers import BERT_VOCAB, SHARED_DATA

ENWIKI_SHARD = os.path.join(SHARED_DATA, "pretrain", "enwiki-2015", "AA", "wiki_00.gz")


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


@pytest.fixture(scope="module")
def wiki_documents():
    """The tokenised documents of one real Wikipedia shard, as `model.data` reads them."""
    from model.pretraining.build import tokenized_documents
    from model.text.tokenizer import WordPieceTokenizer

    tokenizer = WordPieceTokenizer(BERT_VOCAB)
    documents = list(tokenized_documents([ENWIKI_SHARD], "auto", tokenizer))
    return documents, tokenizer.sep_id


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


def google_truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """google-research/bert create_pretraining_data.py's `truncate_seq_pair`, as written there."""
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_num_tokens:
            break
        trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        assert len(trunc_tokens) >= 1
        if rng.random() < 0.5:
            del trunc_tokens[0]
        else:
            trunc_tokens.pop()


def test_truncation_is_googles_token_for_token():
    """The same tokens kept, and the same draws taken (the next draw agrees), as the
    reference's one-at-a-time deletion, for segments of every relative length."""
    cases = random.Random(0)
    for _ in range(300):
        a = list(range(cases.randint(1, 300)))
        b = list(range(1000, 1000 + cases.randint(1, 300)))
        budget = cases.randint(2, 400)
        seed = cases.randint(0, 2**31)
        ours, theirs = random.Random(seed), random.Random(seed)
        got_a, got_b, want_a, want_b = list(a), list(b), list(a), list(b)
        _truncate_pair(got_a, got_b, budget, ours)
        google_truncate_seq_pair(want_a, want_b, budget, theirs)
        assert (got_a, got_b) == (want_a, want_b)
        assert ours.random() == theirs.random()


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


def test_one_document_corpus_draws_random_next_from_itself():
    """A pool of one document (one book, a text without blank lines): NotNext segments come
    from the document itself, as google-research's do (all were IsNext before, an NSP task
    with one answer)."""
    docs, owner = make_documents(1, sentences=(60, 60), tokens=(5, 10))
    instances = all_instances(docs, InstanceConfig(max_seq_length=32))
    share = np.mean([inst.is_random_next for _, inst in instances])
    assert len(instances) >= 20 and 0.3 < share < 0.7, share
    assert all(owner[t] == 0 for _, inst in instances for t in inst.second)


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


# === RoBERTa's FULL-SENTENCES and DOC-SENTENCES (SentencePacker) ===

SEP = 3  # below the running counter's ids, so a separator is never a text token


def pack(documents, inputs, max_seq_length, separator=SEP):
    packer = SentencePacker(InstanceConfig(max_seq_length, inputs=inputs), separator)
    return [inst for doc in documents for inst in packer.add(doc)] + packer.finish()


def check_packed(documents, instances, max_seq_length, separator, cross_documents):
    """Every property of packed inputs, walking the sentences in order beside them.

    Each input is whole consecutive sentences (a sentence over the whole
    length cut to its head) with `separator` exactly between sentences of two
    documents and nowhere else; nothing is lost or reordered; each input but
    the last ends only because the next sentence (with its separator, if it
    starts a document) would not have fit, or, without `cross_documents`,
    because its document ended.
    """
    max_tokens = max_seq_length - 2
    sentences = [(d, s.tolist()[:max_tokens]) for d, doc in enumerate(documents) for s in doc]
    sentences = [(d, s) for d, s in sentences if s]
    i = 0
    for inst in instances:
        assert inst.second == [] and not inst.is_random_next
        assert 0 < len(inst.first) <= max_tokens
        start, expected = i, []
        while i < len(sentences) and len(expected) < len(inst.first):
            d, tokens = sentences[i]
            if expected and d != sentences[i - 1][0]:
                expected.append(separator)
            expected += tokens
            i += 1
        assert inst.first == expected
        if not cross_documents:
            assert sentences[start][0] == sentences[i - 1][0]
        if i < len(sentences):  # not the last input: the next sentence did not fit
            d, tokens = sentences[i]
            boundary = d != sentences[i - 1][0]
            if cross_documents:
                assert len(inst.first) + boundary + len(tokens) > max_tokens
            elif not boundary:
                assert len(inst.first) + len(tokens) > max_tokens
    assert i == len(sentences)


@pytest.mark.parametrize("max_seq_length", [8, 32, 128])
def test_full_sentences_fill_the_length_with_a_separator_between_documents(max_seq_length):
    # Short documents of sentences up to the whole length: some cut, many boundaries.
    docs, owner = make_documents(80, sentences=(1, 6), tokens=(1, max_seq_length), seed=2)
    assert any(len(s) > max_seq_length - 2 for doc in docs for s in doc)
    instances = pack(docs, "full-sentences", max_seq_length)
    check_packed(docs, instances, max_seq_length, SEP, cross_documents=True)
    crossing = [inst for inst in instances if SEP in inst.first]
    assert len(crossing) >= 5  # inputs do run on into the next document
    for inst in crossing:
        assert inst.first[0] != SEP and inst.first[-1] != SEP
        parts = " ".join(map(str, inst.first)).split(f" {SEP} ")
        owners = [{owner[int(t)] for t in part.split()} for part in parts]
        assert all(len(o) == 1 for o in owners)
        # Consecutive documents of the stream, in order.
        firsts = [min(o) for o in owners]
        assert firsts == list(range(firsts[0], firsts[0] + len(firsts)))


def test_full_sentences_are_full_on_average(corpus):
    docs, _ = corpus
    instances = pack(docs, "full-sentences", 64)
    check_packed(docs, instances, 64, SEP, cross_documents=True)
    # Sentences of 4..16 tokens: an input wastes less than one sentence.
    lengths = [len(inst.first) for inst in instances[:-1]]
    assert min(lengths) >= 62 - 16 and np.mean(lengths) > 62 - 8


@pytest.mark.parametrize("max_seq_length", [8, 32, 128])
def test_doc_sentences_never_cross_a_document(max_seq_length):
    docs, owner = make_documents(80, sentences=(1, 6), tokens=(1, max_seq_length), seed=2)
    instances = pack(docs, "doc-sentences", max_seq_length)
    check_packed(docs, instances, max_seq_length, SEP, cross_documents=False)
    for inst in instances:
        assert SEP not in inst.first
        assert len({owner[t] for t in inst.first}) == 1


def test_a_sentence_longer_than_an_input_keeps_its_head():
    long = np.arange(1000, 1100, dtype=np.int32)
    short = np.arange(2000, 2005, dtype=np.int32)
    for inputs in ("full-sentences", "doc-sentences"):
        instances = pack([[short, long, short + 10]], inputs, 32)
        assert [inst.first for inst in instances] == [
            short.tolist(),
            long[:30].tolist(),
            (short + 10).tolist(),
        ]


def test_packing_needs_no_randomness_and_no_nsp():
    docs, _ = make_documents(30, sentences=(2, 10), tokens=(3, 20), seed=4)
    assert pack(docs, "full-sentences", 64) == pack(docs, "full-sentences", 64)
    config = InstanceConfig(64, inputs="full-sentences")
    assert config.next_sentence is False and config.packed
    with pytest.raises(ValueError, match="SentencePacker"):
        create_instances_from_document(docs, 0, config, random.Random(0))
    with pytest.raises(ValueError, match="SentencePacker makes"):
        SentencePacker(InstanceConfig(64, inputs="segments"), SEP)


@pytest.mark.skipif(
    not os.path.isfile(ENWIKI_SHARD), reason="no ../shared/data/pretrain/enwiki-2015"
)
@pytest.mark.parametrize("max_seq_length", [32, 128])
def test_packing_real_wikipedia_text(wiki_documents, max_seq_length):
    documents, sep_id = wiki_documents
    for inputs, cross in (("full-sentences", True), ("doc-sentences", False)):
        instances = pack(documents, inputs, max_seq_length, sep_id)
        check_packed(documents, instances, max_seq_length, sep_id, cross_documents=cross)
        assert any(sep_id in inst.first for inst in instances) == cross


# === segment-pairs: ELECTRA's inputs ===


@pytest.fixture(scope="module")
def long_documents():
    """Documents of 200-300 sentences: about 20 instances of 128 tokens each, so the short
    last one of a document weighs little."""
    return make_documents(60, sentences=(200, 300), tokens=(4, 16), seed=1)


def segment_pairs(docs, max_seq_length=128, short_seq_prob=0.0, seed=0, tails=False):
    """(document, instance) pairs of `segment-pairs`, without each document's last (its
    leftover text, however short) unless `tails`."""
    config = InstanceConfig(max_seq_length, short_seq_prob, inputs="segment-pairs")
    found = all_instances(docs, config, seed)
    last = {d: i for i, (d, _) in enumerate(found)}
    return [(d, inst) for i, (d, inst) in enumerate(found) if tails or last[d] != i]


def test_segment_pairs_are_a_documents_sentences_split_in_two(corpus):
    """Each instance holds whole sentences of one document, in order in A and in B, each
    sentence once, B mostly after A (no NSP: never another document), and fits with [CLS] A
    [SEP] B [SEP]. As google-research/electra's ExampleBuilder, a short sentence after one
    that went to B still joins A while A stays under half the target."""
    docs, owner = corpus
    starts = {int(s[0]): len(s) for doc in docs for s in doc}
    instances = segment_pairs(docs, 64, tails=True)
    for d, inst in instances:
        assert {owner[t] for t in inst.first + inst.second} == {d} and not inst.is_random_next
        assert len(inst.first) + len(inst.second) + (3 if inst.second else 2) <= 64
        for segment in (inst.first, inst.second):
            assert segment == sorted(set(segment))  # in reading order, nothing twice
            assert not segment or segment[0] in starts  # from a sentence's start
        assert not set(inst.first) & set(inst.second)
    after = np.mean([i.first[-1] < i.second[0] for _, i in instances if i.second])
    assert 0.7 < after < 1, after  # 0.82 here; 0.81 on Wikipedia at 128 tokens


def test_segment_pairs_split_near_the_middle_and_one_in_ten_is_one_segment(long_documents):
    """A holds about half the target (within a sentence of it), 10 % of the instances are A
    alone (the reference's share, as classification inputs are), and they are gathered up to
    the whole length and cut to fit."""
    docs, _ = long_documents
    instances = [inst for _, inst in segment_pairs(docs)]
    n, alone = len(instances), np.mean([not inst.second for inst in instances])
    assert n > 1000 and abs(alone - 0.10) < 4 * (0.1 * 0.9 / n) ** 0.5, (n, alone)
    pairs = [inst for inst in instances if inst.second]
    half = (128 - 3) // 2
    assert all(abs(len(inst.first) - half) < 16 for inst in pairs)  # sentences of 4-16 tokens
    assert all(len(i.first) + len(i.second) == 125 for i in pairs)
    assert all(len(i.first) == 126 for i in instances if not i.second)


def test_segment_pairs_short_seq_prob_draws_shorter_targets(long_documents):
    """`short_seq_prob` of the time the target is a random length from 5 up to the whole."""
    docs, _ = long_documents

    def short_share(p):
        instances = segment_pairs(docs, short_seq_prob=p)
        return np.mean([len(i.first) + len(i.second) < 100 for _, i in instances])

    assert short_share(0.0) == 0
    assert 0.6 < short_share(1.0) < 0.9  # a random length from 5 to 128: 100 or more 22 %
    assert 0.02 < short_share(0.05) < 0.07


class ScriptedDraws(random.Random):
    """`random()` returns the given values in turn: each draw of the split rule chosen."""

    def __init__(self, *draws):
        super().__init__(0)
        self.draws = list(draws)

    def random(self):
        return self.draws.pop(0)


def test_split_segments_follows_electras_rule_draw_for_draw():
    """google-research/electra's `_create_example`: one draw for A alone (< 0.1), then a
    sentence goes to A while A is empty or stays under (target - 3) // 2 with it; one that
    crosses the half goes to A on a draw < 0.5 only while B is empty; a later short one that
    fits still joins A. The test's sentences: 8, 6, 3 and 9 tokens, target 31: half 14."""
    from model.pretraining.instances import _split_segments

    chunk = [list(range(0, 8)), list(range(8, 14)), list(range(14, 17)), list(range(17, 26))]
    a, b = _split_segments(chunk, 31, ScriptedDraws(0.05))  # A alone: no other draw
    assert (a, b) == (list(range(26)), [])
    # 8 in A; 8 + 6 = 14 crosses, coin 0.7: B; 8 + 3 = 11 fits: A; 11 + 9 crosses, B not empty
    draws = ScriptedDraws(0.5, 0.7)
    a, b = _split_segments(chunk, 31, draws)
    assert (a, b) == ([*range(0, 8), *range(14, 17)], [*range(8, 14), *range(17, 26)])
    assert draws.draws == []  # no draw beyond the two
    a, b = _split_segments(chunk, 31, ScriptedDraws(0.5, 0.3))  # coin 0.3: the 6 joins A
    assert (a, b) == (list(range(0, 14)), list(range(14, 26)))  # 14 + 3 is not under 14: B


# === InstanceConfig: inputs and next_sentence ===


def test_inputs_and_next_sentence_resolve_each_other():
    resolved = lambda **kw: (lambda c: (c.inputs, c.next_sentence))(InstanceConfig(64, **kw))
    assert resolved() == ("sentence-pairs", True)
    assert resolved(next_sentence=True) == ("sentence-pairs", True)
    assert resolved(next_sentence=False) == ("segments", False)
    for inputs in ("segments", "segment-pairs", "full-sentences", "doc-sentences"):
        assert resolved(inputs=inputs) == (inputs, False)
        assert resolved(inputs=inputs, next_sentence=False) == (inputs, False)
        with pytest.raises(ValueError, match="contradicts"):
            InstanceConfig(64, inputs=inputs, next_sentence=True)
    with pytest.raises(ValueError, match="contradicts"):
        InstanceConfig(64, inputs="sentence-pairs", next_sentence=False)
    with pytest.raises(ValueError, match="inputs must be one of"):
        InstanceConfig(64, inputs="sentences")
    # The positional form of before `inputs` existed means the same.
    assert InstanceConfig(64, 0.1, False) == InstanceConfig(64, 0.1, inputs="segments")
