"""The per-node features of a draft tree: retrieval context and logits rank."""

from __future__ import annotations

import numpy as np
import pytest

from racer_core.drafting.automaton import Automaton, ReferenceAutomaton


@pytest.mark.parametrize("cls", [Automaton, ReferenceAutomaton])
def test_context_and_rank_name_what_added_each_node(cls) -> None:
    a = cls(min_depth=2, ngram=4)
    a.init_logits(50, 3)
    # History "1 2 3 4 9 9 1": the border for root 2 is the path "1 2" (depth 2, its context).
    a.feed([1, 2, 3, 4, 9, 9, 1])
    # Row of token 2: [3, 7, 8]; row of token 3: [4, 5, 6].
    a.update(np.array([2, 3]), np.array([[3, 7, 8], [4, 5, 6]]))
    tree = a.retrieve(2, 8)
    by_token = {int(t): i for i, t in enumerate(tree.tokens)}
    three = by_token[3]
    assert tree.sources[three] == 3  # retrieval, then merged by the logits tree
    assert tree.context[three] == 2 and tree.rank[three] == 0
    seven = by_token[7]
    assert tree.sources[seven] == 2 and tree.context[seven] == 0 and tree.rank[seven] == 1
    assert tree.context[0] == 0 and tree.rank[0] == -1


@pytest.mark.parametrize("cls", [Automaton, ReferenceAutomaton])
def test_share_is_the_count_over_the_siblings_in_the_deepest_context(cls) -> None:
    a = cls(min_depth=1, ngram=3)
    # After "1": "2" once, "3" twice. After "7 1": "2" once, nothing else.
    a.feed([7, 1, 2, 8, 1, 3, 8, 1, 3, 7])
    tree = a.retrieve(1, 8)
    by_token = {int(t): i for i, t in enumerate(tree.tokens) if tree.parents[i] == 0}
    two, three = by_token[2], by_token[3]
    assert tree.context[two] == 2 and tree.share[two] == 1.0  # "7 1" is the deeper context offering 2
    assert tree.context[three] == 1 and tree.share[three] == 2 / 3  # only "1" offers 3: 2 of its 3
    assert tree.share[0] == -1.0
    assert tree.share.dtype == np.float64


@pytest.mark.parametrize("cls", [Automaton, ReferenceAutomaton])
def test_nodes_the_logits_alone_drafted_have_no_share(cls) -> None:
    a = cls(min_depth=2, ngram=4)
    a.init_logits(50, 3)
    a.update(np.array([2]), np.array([[3, 7, 8]]))
    tree = a.retrieve(2, 8)
    assert len(tree.tokens) > 1 and (tree.sources[1:] == 2).all()
    assert (tree.share == -1.0).all()
