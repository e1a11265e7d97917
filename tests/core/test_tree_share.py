"""racer's retrieval share travels with the engine's Tree through the policy's
cut and the grammar's rebuild (racer_core/drafting/tree.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from racer_core.budget.cost_curve import CostCurve
from racer_core.budget.tree_policy import TreePolicy
from racer_core.drafting.tree import Tree, cut, rebuilt

CURVE = CostCurve([1, 2, 4, 8, 16, 32, 64], [1.0, 1.0, 1.05, 1.1, 1.3, 3.0, 6.0])


def _tree() -> Tree:
    tree = Tree.of([10, 11, 12, 13, 14], [-1, 0, 1, 0, 3], 1)
    return replace(tree, context=np.array([0, 9, 9, 9, 9]), share=np.array([-1.0, 1.0, 0.95, 0.25, 0.5]))


def test_the_cut_keeps_the_chosen_nodes_shares() -> None:
    tree = _tree()
    kept = cut(tree, TreePolicy(CURVE))
    chosen = kept.selection.chosen
    assert len(chosen) > 1
    np.testing.assert_array_equal(kept.share, tree.share[chosen])


def test_a_rebuilt_tree_keeps_the_old_nodes_shares_and_an_added_one_has_none() -> None:
    tree = _tree()
    # keep nodes 0, 1, 2 and add one under node 2
    again = rebuilt(tree, [0, 1, 2, -1], [-1, 0, 1, 2], [10, 11, 12, 99], [0, 1, 1, 1])
    assert again.share.tolist() == [-1.0, 1.0, 0.95, -1.0]


def test_a_tree_without_shares_stays_without() -> None:
    tree = Tree.of([10, 11], [-1, 0], 1)
    assert tree.share is None
    assert cut(tree, TreePolicy(CURVE)).share is None
    assert rebuilt(tree, [0, -1], [-1, 0], [10, 5], [0, 1]).share is None


def test_racers_tree_carries_the_automatons_shares() -> None:
    from racer_core.drafting.automaton import Automaton
    from racer_core.drafting.racer import _tree

    a = Automaton(min_depth=1, ngram=3)
    a.feed([7, 1, 2, 8, 1, 3, 8, 1, 3, 7])
    drafted = a.retrieve(1, 8)
    tree = _tree(a, 1, 8, -1, "auto")
    assert (tree.share >= 0).sum() == len(tree.share) - 1  # every node but the root retrieved
    np.testing.assert_array_equal(tree.share, drafted.share)
