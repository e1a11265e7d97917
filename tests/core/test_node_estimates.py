"""The tree policy's node estimates (racer_core/budget/node_estimates.py):
hand-made counts and trees, a scripted curve."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from racer_core.budget.cost_curve import CostCurve
from racer_core.budget.node_estimates import KindCounts, PathCalibration, kinds
from racer_core.budget.tree_policy import TreePolicy
from racer_core.drafting.tree import Tree

CURVE = CostCurve([1, 2, 4, 8, 16, 32, 64], [1.0, 1.05, 1.1, 1.3, 1.6, 3.0, 6.0])


def _chain(context: int, drafts: int = 12, first: int = 100) -> Tree:
    """A retrieval chain of `drafts` nodes whose automaton context is `context`."""
    tree = Tree.of(list(range(first, first + drafts + 1)), [-1, *range(drafts)], 1)
    ctx = np.full(drafts + 1, context, dtype=np.int64)
    ctx[0] = 0
    return replace(tree, context=ctx)


def _step(policy: TreePolicy, tree: Tree, text: list[int]) -> None:
    """One step: the choice, then the labels once `text` (root first) is known."""
    policy.record(tree, 0, policy.choose(tree))
    policy.learn(text, final=True)


def test_a_kind_seen_rarely_reads_as_its_bucket_and_one_seen_often_as_itself() -> None:
    counts = KindCounts(weight=4.0)
    kind = np.array([3, 7])
    assert np.allclose(counts.chances(kind, np.array([0.5, 0.5])), 0.5)  # nothing seen: the bucket's chance
    counts.observe(np.array([3] * 4), np.array([True] * 4), decay=1.0)
    assert np.isclose(counts.chances(np.array([3]), np.array([0.5]))[0], (4 + 4 * 0.5) / 8)
    counts.observe(np.array([3] * 400), np.array([True] * 400), decay=1.0)
    assert counts.chances(kind, np.array([0.5, 0.5])).tolist()[0] > 0.99
    assert counts.chances(kind, np.array([0.5, 0.5])).tolist()[1] == 0.5  # another kind: untouched


def test_the_bucket_lumps_what_the_exact_kind_separates() -> None:
    # Retrieval contexts 6 and 8 share a bucket; depth 3 and 9 too.
    a = kinds(np.array([6, 8, 8, 8]), np.array([-1, -1, 0, -1]), np.array([3, 3, 3, 9]))
    assert len(set(a.tolist())) == 4
    assert kinds(np.array([40]), np.array([9]), np.array([30]))[0] == kinds(np.array([12]), np.array([3]),
                                                                              np.array([10]))[0]


def test_the_path_calibration_starts_as_the_identity_and_learns_what_was_accepted() -> None:
    calibration = PathCalibration(weight=10.0)
    predicted = np.array([0.0, 0.01, 0.45, 0.9, 1.0])
    assert np.allclose(PathCalibration.read(predicted, calibration.table()), predicted)
    # Paths predicted 0.475 (a bin's centre) came true 7 times in 10, those predicted 0.225 never.
    for _ in range(100):
        calibration.observe(np.full(10, 0.475), np.arange(10) < 7, decay=1.0)
        calibration.observe(np.full(10, 0.225), np.zeros(10, dtype=bool), decay=1.0)
    table = calibration.table()
    assert abs(PathCalibration.read(np.array([0.475]), table)[0] - 0.7) < 0.01
    # below its prediction, though not below the lower bins' untouched readings (non-decreasing)
    assert PathCalibration.read(np.array([0.225]), table)[0] == PathCalibration.read(np.array([0.175]), table)[0]
    assert np.all(np.diff(table) >= 0)  # a likelier prediction never reads as less likely


def test_a_context_the_estimates_know_is_accepted_is_fed_deep_and_one_known_rejected_is_not() -> None:
    # Contexts 8 and 6 share the policy's bucket: only the exact kind tells
    # that the text follows one and never the other.
    policy = TreePolicy(CURVE)
    known, wrong = _chain(8), _chain(6, first=200)
    for _ in range(60):
        _step(policy, known, known.tokens.tolist())
        _step(policy, wrong, [200, *range(900, 912)])  # the text goes elsewhere
    deep, shallow = policy.choose(known), policy.choose(wrong)
    assert len(deep.chosen) == known.size and deep.fed >= known.size and deep.probabilities[-1] > 0.8
    assert shallow.probabilities[1] < 0.2 and shallow.chosen.tolist() == [0]


def test_no_tree_is_chosen_that_makes_less_than_the_root_alone() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        policy = TreePolicy(CURVE)
        policy._hits[:] = rng.uniform(0.0, 1.0, policy._hits.shape) * policy._trials
        tree = replace(_chain(int(rng.integers(1, 12)), drafts=int(rng.integers(1, 30))),
                       rank=np.where(rng.random(1) < 0.5, -1, 0) * np.ones(1, dtype=np.int64))
        choice = policy.choose(tree)
        if len(choice.chosen) > 1:
            assert (1 + choice.expected) / CURVE(choice.fed) >= 1 / CURVE(1)
