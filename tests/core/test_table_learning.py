"""Racer's per-step native glue (issue 44): the table's learning from a
verified tree, and the step's feed, in one call (the automaton's `learn_rows`, drafting/top_k.py's
`learn_top_k`) against its step-by-step reference, and `retrieve_nodes`
against `retrieve`'s tree. Both must leave the automaton and the drafts
exactly as the reference does."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from racer_core.drafting.automaton import Automaton
from racer_core.drafting.top_k import learn_top_k, reference_learn_top_k

VOCAB = 60


def _automaton(k: int) -> Automaton:
    automaton = Automaton(max_nodes=200, min_depth=1, ngram=4)
    automaton.init_logits(VOCAB, k)
    return automaton


def _tree(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Random tokens and parents (a parent before its child; now and then -1 past the root)."""
    tokens = rng.integers(0, VOCAB, size=size).astype(np.int64)
    parents = np.array([-1] + [int(rng.integers(-1, i)) if rng.random() < 0.1 else int(rng.integers(0, i))
                               for i in range(1, size)], dtype=np.int64)
    return tokens, parents


def _logits(rng: np.random.Generator, rows: int, levels: int) -> torch.Tensor:
    """Random rows; few `levels` make ties (left to torch) frequent."""
    values = rng.integers(0, levels, size=(rows, VOCAB)) if levels else rng.standard_normal((rows, VOCAB))
    return torch.from_numpy(values.astype(np.float32))


def _same_state(a: Automaton, b: Automaton) -> None:
    """The same pair rows and the same drafts under every root, with and without a previous token."""
    assert a.pair_snapshot() == b.pair_snapshot()
    for root in range(VOCAB):
        for prev in (-1, (root * 7) % VOCAB):
            assert a.retrieve(root, 16, prev_token=prev).same_as(b.retrieve(root, 16, prev_token=prev))


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 12), steps=st.integers(1, 4),
       levels=st.sampled_from([0, 3, 40, 1000]))
def test_learn_top_k_equals_its_reference(seed: int, k: int, steps: int, levels: int) -> None:
    rng = np.random.default_rng(seed)
    native, reference = _automaton(k), _automaton(k)
    for _ in range(steps):
        tokens, parents = _tree(rng, int(rng.integers(1, 12)))
        logits = _logits(rng, len(tokens), levels)
        prev = int(rng.integers(-1, VOCAB))
        # the step's text fed in the same call, or not (a drafter without the trie)
        fed = rng.integers(0, 12, size=int(rng.integers(1, 5))).tolist() if rng.random() < 0.7 else None
        learned = learn_top_k(native, logits, tokens, parents, prev, fed)
        expected = reference_learn_top_k(reference, logits, tokens, parents, prev, fed)
        assert learned.dtype == expected.dtype and learned.shape == expected.shape
        np.testing.assert_array_equal(learned, expected)
        np.testing.assert_array_equal(expected, torch.topk(logits, k, dim=-1).indices.numpy())
    _same_state(native, reference)


def test_learn_rows_feeds_after_learning() -> None:
    """learn_rows with `fed`: what learn_rows then feed leave, the state and the drafts."""
    rng = np.random.default_rng(13)
    one, two = _automaton(3), _automaton(3)
    for automaton in (one, two):
        automaton.feed([1, 2, 3, 1, 2, 4])
    tokens, parents = np.array([2, 3, 7], dtype=np.int64), np.array([-1, 0, 1], dtype=np.int64)
    rows = _logits(rng, 3, 0).numpy()
    top = one.learn_rows(rows, tokens, parents, 1, [2, 3])
    np.testing.assert_array_equal(top, two.learn_rows(rows, tokens, parents, 1))
    two.feed([2, 3])
    assert one.state_path() == two.state_path() and one.snapshot() == two.snapshot()
    _same_state(one, two)


def test_learn_rows_learns_and_answers_torchs_ids() -> None:
    rng = np.random.default_rng(3)
    automaton = _automaton(4)
    tokens, parents = np.array([5, 9, 11], dtype=np.int64), np.array([-1, 0, 0], dtype=np.int64)
    logits = _logits(rng, 3, 0)
    top = automaton.learn_rows(logits.numpy(), tokens, parents, 2)
    np.testing.assert_array_equal(top, torch.topk(logits, 4, dim=-1).indices.numpy())
    pairs = dict(automaton.pair_snapshot())
    assert pairs[(2, 5)] == tuple(top[0]) and pairs[(5, 9)] == tuple(top[1]) and pairs[(5, 11)] == tuple(top[2])


def _refused(automaton: Automaton, logits: object, tokens: object, parents: object, prev: object) -> None:
    """learn_rows answers None and learns nothing, its `fed` left unfed."""
    before = (automaton.pair_snapshot(), automaton.snapshot(), automaton.state_path(),
              [automaton.retrieve(t, 8).tokens.tolist() for t in range(VOCAB)])
    assert automaton.learn_rows(logits, tokens, parents, prev, [4, 5, 6]) is None
    assert (automaton.pair_snapshot(), automaton.snapshot(), automaton.state_path(),
            [automaton.retrieve(t, 8).tokens.tolist() for t in range(VOCAB)]) == before


def test_learn_rows_refuses_what_it_cannot_answer_alone() -> None:
    rng = np.random.default_rng(5)
    automaton = _automaton(3)
    tokens, parents = np.array([1, 2, 3], dtype=np.int64), np.array([-1, 0, 1], dtype=np.int64)
    rows = _logits(rng, 3, 0).numpy()
    tied = rows.copy()
    tied[1, :] = 1.0  # every value equal: torch orders them
    _refused(automaton, tied, tokens, parents, 0)
    _refused(automaton, rows.astype(np.float64), tokens, parents, 0)
    _refused(automaton, np.asfortranarray(rows), tokens, parents, 0)
    _refused(automaton, rows[:2], tokens, parents, 0)  # a row short
    _refused(automaton, rows, tokens, np.array([-1, 0, 3], dtype=np.int64), 0)  # a parent past the tree
    _refused(automaton, rows, tokens, parents.astype(np.int32), 0)
    _refused(automaton, rows, tokens, parents, VOCAB)  # not a token
    _refused(automaton, rows, tokens, parents, -2)
    _refused(automaton, rows, tokens, parents, 0.0)
    _refused(automaton, rows[:, :3], tokens, parents, 0)  # rows no longer than k


def test_bad_tokens_raise_as_the_reference_does() -> None:
    rng = np.random.default_rng(9)
    logits = _logits(rng, 2, 0)
    parents = np.array([-1, 0], dtype=np.int64)
    for tokens in (np.array([1, VOCAB], dtype=np.int64), np.array([-3, 1], dtype=np.int64)):
        with pytest.raises(ValueError) as native:
            learn_top_k(_automaton(2), logits, tokens, parents, -1)
        with pytest.raises(ValueError) as reference:
            reference_learn_top_k(_automaton(2), logits, tokens, parents, -1)
        assert str(native.value) == str(reference.value)
    good = np.array([1, 2], dtype=np.int64)
    for fed in ([3, VOCAB], [-1], [3, "4"]):  # a bad fed token: raised after the table learned, as the reference
        native, reference = _automaton(2), _automaton(2)
        with pytest.raises((ValueError, TypeError)) as raised:
            learn_top_k(native, logits, good, parents, -1, fed)
        with pytest.raises((ValueError, TypeError)) as expected:
            reference_learn_top_k(reference, logits, good, parents, -1, fed)
        assert type(raised.value) is type(expected.value) and str(raised.value) == str(expected.value)
        _same_state(native, reference)


def test_learn_top_k_takes_other_tensors_through_torch() -> None:
    rng = np.random.default_rng(11)
    tokens, parents = np.array([4, 8], dtype=np.int64), np.array([-1, 0], dtype=np.int64)
    for logits in (_logits(rng, 2, 0).double(), _logits(rng, 2, 0).requires_grad_(), _logits(rng, 2, 0).t().t()):
        native, reference = _automaton(3), _automaton(3)
        np.testing.assert_array_equal(learn_top_k(native, logits, tokens, parents, 1),
                                      reference_learn_top_k(reference, logits, tokens, parents, 1))
        _same_state(native, reference)


SOURCES = bytes([0, 7, 9, 7])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), budget=st.integers(1, 64))
def test_retrieve_nodes_is_retrieves_tree(seed: int, budget: int) -> None:
    rng = np.random.default_rng(seed)
    automaton = _automaton(3)
    automaton.feed(rng.integers(0, 12, size=200).tolist())  # a small alphabet: long matches
    for _ in range(3):
        tokens, parents = _tree(rng, 6)
        reference_learn_top_k(automaton, _logits(rng, 6, 0), tokens, parents, -1)
    for root in range(0, VOCAB, 7):
        prev = int(rng.integers(-1, 12))
        tree = automaton.retrieve(root, budget, prev_token=prev)
        columns = automaton.retrieve_nodes(root, budget, prev, SOURCES)
        expected = (tree.tokens, tree.parents, tree.position_ids, tree.attn_mask,
                    np.frombuffer(SOURCES, dtype=np.uint8)[tree.sources], tree.context, tree.rank, tree.share)
        for got, want in zip(columns, expected, strict=True):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


def test_retrieve_nodes_checks_its_arguments() -> None:
    automaton = _automaton(2)
    with pytest.raises(ValueError, match="source_of_bits must be 4 bytes"):
        automaton.retrieve_nodes(1, 8, -1, b"\x00\x01")
    with pytest.raises(ValueError) as native:
        automaton.retrieve_nodes(-1, 8, -1, SOURCES)
    with pytest.raises(ValueError) as reference:
        automaton.retrieve(-1, 8, prev_token=-1)
    assert str(native.value) == str(reference.value)
