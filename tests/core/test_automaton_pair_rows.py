"""Rows keyed by (previous token, token): docs/automaton.md, Logits table.

Each test runs on the compiled class and on the reference."""

from __future__ import annotations

import numpy as np
import pytest

from racer_core.drafting.automaton import Automaton, ReferenceAutomaton
from racer_core.drafting.automaton.variants import variant

IMPLS = [Automaton, ReferenceAutomaton]


def table(cls: type, vocab: int = 20, top_k: int = 2, **kw: bool) -> Automaton:
    auto = variant(cls, 100, 2, 4, **kw)
    auto.init_logits(vocab, top_k)
    return auto


def children(tree, node: int) -> list[int]:
    return [int(t) for t, p in zip(tree.tokens, tree.parents, strict=True) if p == node]


@pytest.mark.parametrize("cls", IMPLS)
def test_pair_row_wins_over_token_row_at_root_and_below(cls: type) -> None:
    auto = table(cls)
    auto.update([5], [[6, 7]])  # token 5 alone
    auto.update([5], [[8, 9]], [3])  # 5 after 3: its pair row (and the token row again)
    auto.update([5], [[10, 11]], [4])  # 5 after 4
    assert auto.pair_count == 2
    # The token row holds the last write; the root uses the pair of prev_token.
    assert children(auto.retrieve(5, 10, prev_token=3), 0) == [8, 9]
    assert children(auto.retrieve(5, 10, prev_token=4), 0) == [10, 11]
    assert children(auto.retrieve(5, 10, prev_token=2), 0) == [10, 11]  # no pair: the token's row
    assert children(auto.retrieve(5, 10), 0) == [10, 11]
    # Below the root the previous token is the parent's token.
    auto.update([3, 4], [[5, 4], [5, 3]])
    tree = auto.retrieve(4, 10)  # 4 -> 5 (rank 0, breadth 2) -> the pair (4, 5)'s row
    first = tree.tokens.tolist().index(5)
    assert children(tree, first) == [10, 11]


@pytest.mark.parametrize("cls", IMPLS)
def test_pair_rows_off_keeps_the_token_rows_only(cls: type) -> None:
    auto = table(cls, pair_rows=False)
    assert auto.pair_rows is False
    auto.update([5, 5], [[8, 9], [6, 7]], [3, -1])
    assert auto.pair_count == 0 and auto.pair_snapshot() == []
    assert children(auto.retrieve(5, 10, prev_token=3), 0) == [6, 7]
    assert table(cls).pair_rows is True


@pytest.mark.parametrize("cls", IMPLS)
def test_at_most_vocab_size_pair_rows_least_recently_written_go_first(cls: type) -> None:
    auto = table(cls, vocab=3, top_k=1)
    auto.update([0, 1, 2], [[1], [2], [0]], [2, 0, 1])  # pairs (2,0) (0,1) (1,2)
    auto.update([0], [[2]], [2])  # rewriting (2,0) makes it the newest
    auto.update([2], [[1]], [2])  # a fourth pair: (0,1), the oldest, goes
    assert [key for key, _ in auto.pair_snapshot()] == [(1, 2), (2, 0), (2, 2)]
    assert auto.pair_snapshot()[1] == ((2, 0), (2,))
    assert children(auto.retrieve(1, 5, prev_token=0), 0) == [2]  # (0,1) gone: 1's own row
    auto.init_logits(3, 1)
    assert auto.pair_count == 0


@pytest.mark.parametrize("cls", IMPLS)
def test_bad_previous_tokens_raise_and_change_nothing(cls: type) -> None:
    auto = table(cls, vocab=6)
    auto.update([1], [[2, 3]], [0])
    before = auto.pair_snapshot()
    with pytest.raises(ValueError, match="prev_ids"):
        auto.update([1, 2], [[2, 3], [3, 4]], [0])  # one previous token per token
    with pytest.raises(ValueError, match=r"prev_ids\[1\] = 6"):
        auto.update([1, 2], [[2, 3], [3, 4]], np.array([0, 6]))
    with pytest.raises(ValueError, match=r"prev_ids\[0\] = -2"):
        auto.update([1], [[2, 3]], [-2])
    with pytest.raises(TypeError, match="prev_ids"):
        auto.update([1], [[2, 3]], [1.5])
    with pytest.raises(ValueError, match="prev_token = -2"):
        auto.retrieve(1, 4, prev_token=-2)
    with pytest.raises(TypeError, match="prev_token"):
        auto.retrieve(1, 4, prev_token="3")
    assert auto.pair_snapshot() == before
    assert children(auto.retrieve(1, 4, prev_token=7), 0) == [2, 3]  # no row can name 7: the token's
