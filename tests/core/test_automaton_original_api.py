"""The paper-alignment checks again, spelled the way the original RACER's API is
called: `Automaton(max_nodes)` positionally, `update` with plain lists of rows,
`insert(..., freq=N)`, `build()`, `retrieve(token, budget)`, and the draft read
through `tree_candidates`, `candidates`, `retrieve_indices`, `position_ids` and
`attn_mask`. The one difference in form: here `candidates` and
`retrieve_indices` are arrays padded with -1 (the original returns ragged
lists), so the checks drop the padding.
"""

from __future__ import annotations

from typing import Any

import pytest

from racer_core.automaton import Automaton, ReferenceAutomaton

IMPLS = [Automaton, ReferenceAutomaton]


def rows_of(buffer_field: Any) -> list[list[int]]:
    """A padded per-leaf field as ragged lists, as the original returns it."""
    return [[v for v in row if v >= 0] for row in buffer_field.tolist()]


def prefixes(buf: Any) -> set[tuple[int, ...]]:
    return {tuple(path[:i]) for path in rows_of(buf.candidates) for i in range(1, len(path) + 1)}


def table_4ary(impl: Any, vocab: int) -> Any:
    """Token t's row is 4t+1 .. 4t+4, given as lists; many name tokens >= vocab."""
    ac = impl(1)
    ac.init_logits(vocab, 4)
    ac.update(list(range(vocab)), [[4 * t + j for j in range(1, 5)] for t in range(vocab)])
    return ac


def assert_ancestor_mask(buf: Any) -> None:
    """Along each leaf path, node i sees exactly the path's nodes up to i (Eq. 2)."""
    for path in rows_of(buf.retrieve_indices):
        seen = []
        for depth, node in enumerate(path):
            seen.append(node)
            assert buf.position_ids[node] == depth
            assert {j for j, on in enumerate(buf.attn_mask[node].tolist()) if on} == set(seen)


@pytest.mark.parametrize("impl", IMPLS)
def test_figure9_through_the_original_spelling(impl: Any) -> None:
    buf = table_4ary(impl, 1024).retrieve(0, 21)
    assert len(buf.tree_candidates) == 21
    assert {tuple(p) for p in rows_of(buf.candidates)} == {
        (0, 4, 17),
        (0, 1, 5, 21),
        (0, 1, 5, 22),
        (0, 1, 6, 25),
        (0, 1, 7, 29),
        (0, 1, 8, 33),
        (0, 2, 9, 37),
        (0, 2, 10, 41),
        (0, 3, 13, 53),
    }
    assert_ancestor_mask(buf)


@pytest.mark.parametrize("impl", IMPLS)
def test_capacity_through_the_original_spelling(impl: Any) -> None:
    ac = table_4ary(impl, 65536)
    for capacity in (1, 2, 8, 21, 64):
        buf = ac.retrieve(0, capacity)
        assert len(buf.tree_candidates) == capacity
        assert len(prefixes(buf)) == capacity
    buf = ac.retrieve(0, 8, is_chain=True)
    assert [len(p) for p in rows_of(buf.candidates)] == [8]
    assert_ancestor_mask(buf)


@pytest.mark.parametrize("impl", IMPLS)
def test_border_depth_and_freq_keyword(impl: Any) -> None:
    ac = impl(32)
    ac.insert([1, 2, 3], freq=3)
    ac.build()
    assert {tuple(p) for p in rows_of(ac.retrieve(1, 8).candidates)} == {(1,)}
    ac.trans_tokens([1])
    assert (2, 3) in {tuple(p) for p in rows_of(ac.retrieve(2, 8).candidates)}


@pytest.mark.parametrize("impl", IMPLS)
def test_tiny_and_rowless_roots(impl: Any) -> None:
    assert rows_of(impl(0).retrieve(7, 1).candidates) == [[7]]
    ac = impl(8)
    ac.init_logits(16, 4)
    buf = ac.retrieve(99, 8)  # past the vocabulary: no row, the root alone
    assert list(buf.tree_candidates) == [99]
    assert rows_of(buf.candidates) == [[99]]


@pytest.mark.parametrize("impl", IMPLS)
def test_merge_aware_refill_through_the_original_spelling(impl: Any) -> None:
    def with_rows(max_nodes: int, mapping: dict[int, list[int]]) -> Any:
        ac = impl(max_nodes)
        ac.init_logits(64, 4)
        ac.update(list(mapping), [(row + [0] * 4)[:4] for row in mapping.values()])
        return ac

    x, a, b = 10, 20, 30
    ac = with_rows(1, {x: [a, a, a, a], a: [b, 31, 32, 33]})
    buf = ac.retrieve(x, 6)
    assert len(buf.tree_candidates) == 6
    assert {p for p in prefixes(buf) if len(p) == 3} == {(x, a, b), (x, a, 31), (x, a, 32), (x, a, 33)}

    ac = with_rows(32, {x: [a, 21, 22, 23], a: [b, 31, 32, 33], b: [40, 41, 42, 43]})
    ac.insert([1, x, a], freq=5)
    ac.build()
    ac.trans_tokens([1])
    buf = ac.retrieve(x, 8)
    assert len(buf.tree_candidates) == 8 and (x, a, b) in prefixes(buf)
    assert_ancestor_mask(buf)

    ac = with_rows(64, {x: [20, 21, 22, 23], 20: [30, 31, 32, 33]})
    ac.insert([1, 2, x], freq=5)
    ac.insert([2, x], freq=5)
    ac.build()
    ac.trans_tokens([1, 2])
    buf = ac.retrieve(x, 4)
    assert len(buf.tree_candidates) == 4 and (x,) in prefixes(buf)
