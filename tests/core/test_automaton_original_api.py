"""The paper-alignment and merge-aware refill checks, written the way code
for the original RACER calls its automaton: `Automaton(max_nodes)`
positionally, `update` with plain lists of rows, `insert(..., freq=N)`,
`build()`, `trans_tokens`, `retrieve(token, budget, is_chain=...)`, and the
draft read as the original's `DraftBuffer` of ragged lists
(`racer_core.drafting.automaton.compat`). Nothing here strips padding: a leaf's path
is its list, as the original returns it.

Every case runs on the compiled automaton and on the pure-Python reference.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from racer_core.drafting.automaton import ReferenceAutomaton
from racer_core.drafting.automaton.compat import Automaton, DraftBuffer


class ReferenceBacked(Automaton):
    core_class = ReferenceAutomaton


IMPLS = [Automaton, ReferenceBacked]
K = 4

FIGURE_9 = {
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


def four_ary(impl: Any, vocab: int = 1024) -> Any:
    """The paper's Figure 9 table: token t's row is 4t+1 .. 4t+4 (many name tokens past the vocabulary)."""
    ac = impl(1)
    ac.init_logits(vocab, K)
    ac.update(list(range(vocab)), [[K * t + j for j in range(1, K + 1)] for t in range(vocab)])
    return ac


def with_rows(impl: Any, max_nodes: int, rows: dict[int, list[int]]) -> Any:
    """A 64-token table with these rows, each padded with 0 to K entries."""
    ac = impl(max_nodes)
    ac.init_logits(64, K)
    ac.update(list(rows), [(row + [0] * K)[:K] for row in rows.values()])
    return ac


def prefixes(paths: list[list[int]]) -> set[tuple[int, ...]]:
    return {tuple(path[:i]) for path in paths for i in range(1, len(path) + 1)}


def assert_original_shape(buf: Any) -> None:
    """Plain lists of ints everywhere, the ragged ones without padding."""
    assert isinstance(buf, DraftBuffer)
    for flat in (buf.tree_candidates, buf.position_ids):
        assert type(flat) is list and all(type(v) is int for v in flat)
    for rows in (buf.candidates, buf.retrieve_indices, buf.attn_mask):
        assert type(rows) is list and all(type(r) is list and all(type(v) is int for v in r) for r in rows)
    assert all(v >= 0 for row in buf.retrieve_indices + buf.candidates for v in row)
    assert [len(p) for p in buf.candidates] == [len(p) for p in buf.retrieve_indices]


def assert_tree_attention(buf: Any) -> None:
    """Along each leaf's path, node i is at depth i and sees exactly the path's nodes up to it (Eq. 2)."""
    for indices in buf.retrieve_indices:
        seen = []
        for depth, idx in enumerate(indices):
            seen.append(idx)
            assert buf.position_ids[idx] == depth
            assert {j for j, value in enumerate(buf.attn_mask[idx]) if value == 1} == set(seen)


# -- paper alignment ------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_figure9_tree(impl: Any) -> None:
    buf = four_ary(impl).retrieve(0, 21)
    assert_original_shape(buf)
    assert len(buf.tree_candidates) == 21
    assert set(tuple(path) for path in buf.candidates) == FIGURE_9


@pytest.mark.parametrize("impl", IMPLS)
def test_tree_attention(impl: Any) -> None:
    assert_tree_attention(four_ary(impl).retrieve(0, 21))


@pytest.mark.parametrize("impl", IMPLS)
def test_border_depth_is_2(impl: Any) -> None:
    ac = impl(32)
    ac.insert([1, 2, 3], freq=3)
    ac.build()
    assert set(map(tuple, ac.retrieve(1, 8).candidates)) == {(1,)}
    ac = impl(32)
    ac.insert([1, 2, 3], freq=3)
    ac.build()
    ac.trans_tokens([1])
    assert (2, 3) in set(map(tuple, ac.retrieve(2, 8).candidates))


@pytest.mark.parametrize("impl", IMPLS)
def test_zero_capacity_constructor(impl: Any) -> None:
    buf = impl(0).retrieve(7, 1)
    assert_original_shape(buf)
    assert set(map(tuple, buf.candidates)) == {(7,)}


@pytest.mark.parametrize("impl", IMPLS)
def test_capacity_is_met_not_exceeded(impl: Any) -> None:
    ac = four_ary(impl, 65536)  # children stay inside the vocabulary up to capacity 64
    for capacity in (1, 2, 8, 21, 64):
        buf = ac.retrieve(0, capacity)
        assert len(buf.tree_candidates) == capacity
        assert len(prefixes(buf.candidates)) == capacity


# -- merge-aware refill -----------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_root_found_by_retrieval_costs_no_budget_twice(impl: Any) -> None:
    x = 10
    ac = with_rows(impl, 32, {x: [20, 21, 22, 23], 20: [30, 31, 32, 33], 21: [34, 35, 36, 37]})
    ac.insert([1, x], freq=3)
    ac.build()
    ac.trans_tokens([1])
    buf = ac.retrieve(x, 4)
    assert len(buf.tree_candidates) == 4
    assert (x,) in prefixes(buf.candidates)


@pytest.mark.parametrize("impl", IMPLS)
def test_retrieved_prefix_grows_from_the_table(impl: Any) -> None:
    x, a, b = 10, 20, 30
    ac = with_rows(impl, 32, {x: [a, 21, 22, 23], a: [b, 31, 32, 33], b: [40, 41, 42, 43]})
    ac.insert([1, x, a], freq=5)
    ac.build()
    ac.trans_tokens([1])
    buf = ac.retrieve(x, 8)
    assert (x, a, b) in prefixes(buf.candidates)
    assert len(buf.tree_candidates) == 8
    assert_tree_attention(buf)


@pytest.mark.parametrize("impl", IMPLS)
def test_repeated_row_tokens_are_one_node(impl: Any) -> None:
    x, a = 10, 20
    ac = with_rows(impl, 1, {x: [a, a, a, a], a: [30, 31, 32, 33]})
    buf = ac.retrieve(x, 6)
    found = prefixes(buf.candidates)
    assert len(buf.tree_candidates) == 6
    assert {p for p in found if len(p) == 2} == {(x, a)}
    assert {p for p in found if len(p) == 3} == {(x, a, 30), (x, a, 31), (x, a, 32), (x, a, 33)}


@pytest.mark.parametrize("impl", IMPLS)
def test_rowless_root_is_drafted_alone(impl: Any) -> None:
    ac = impl(8)
    ac.init_logits(16, K)
    buf = ac.retrieve(99, 8)  # past the vocabulary: no row
    assert buf.tree_candidates == [99]
    assert buf.candidates == [[99]] and buf.retrieve_indices == [[0]]


@pytest.mark.parametrize("impl", IMPLS)
def test_merged_borders_leave_their_hole_to_the_table(impl: Any) -> None:
    x = 10
    ac = with_rows(impl, 64, {x: [20, 21, 22, 23], 20: [30, 31, 32, 33]})
    ac.insert([1, 2, x], freq=5)
    ac.insert([2, x], freq=5)
    ac.build()
    ac.trans_tokens([1, 2])
    buf = ac.retrieve(x, 4)
    assert len(buf.tree_candidates) == 4
    assert (x,) in prefixes(buf.candidates)


@pytest.mark.parametrize("impl", IMPLS)
def test_chain_mode(impl: Any) -> None:
    buf = four_ary(impl, 65536).retrieve(0, 8, is_chain=True)
    assert len(buf.tree_candidates) == 8
    assert len(buf.candidates) == 1 and len(buf.candidates[0]) == 8
    assert_tree_attention(buf)

    x, a, b = 10, 20, 30
    ac = with_rows(impl, 32, {x: [a, 21, 22, 23], a: [b, 31, 32, 33], b: [40, 41, 42, 43]})
    ac.insert([1, x, a], freq=5)
    ac.build()
    ac.trans_tokens([1])
    buf = ac.retrieve(x, 8, is_chain=True)
    assert len(buf.tree_candidates) <= 8
    assert any(tuple(path[:2]) == (x, a) for path in buf.candidates), buf.candidates
    assert_tree_attention(buf)


# -- the original's leniencies ------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_update_skips_what_the_original_skips(impl: Any) -> None:
    ac = impl(8)
    ac.update([1], [[2, 3, 4, 5]])  # before init_logits: nothing to write
    ac.init_logits(16, K)
    ac.update([3, 40], [[5, 6, 7, 8], [9, 9, 9, 9]])  # 40 is past the vocabulary: skipped
    assert set(map(tuple, ac.retrieve(3, 5).candidates)) == {(3, 5), (3, 6), (3, 7), (3, 8)}
    with pytest.raises(ValueError, match="max_num_draft"):  # the original refuses a budget under 1 too
        ac.retrieve(3, 0)


def test_the_engine_keeps_the_array_form() -> None:
    """The compatibility class converts; the engine's own automaton still returns padded arrays."""
    ac = four_ary(Automaton)
    tree = ac.core.retrieve(0, 21)
    assert tree.candidates.shape == (9, 4) and (tree.candidates == -1).sum() == 1  # the one short leaf
    assert {tuple(p) for p in ac.retrieve(0, 21).candidates} == FIGURE_9


def test_the_original_unittest_command_runs_the_paper_cases() -> None:
    """`python -m unittest tests.test_automaton_paper_alignment -v` from the repository root, as documented."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "unittest", "tests.test_automaton_paper_alignment", "-v"],
        cwd=root, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ran = re.search(r"^Ran (\d+) tests?", done.stderr, re.MULTILINE)
    assert ran and int(ran.group(1)) >= 20 and "test_figure9" in done.stderr
