"""The tree policy's choices pinned on fixed inputs (issue 44's cheaper drafting:
behaviour must not change). Random trees with racer's features, a text they
partly follow, the drafter's calls in the engine's order (choose, record,
learn), alone and under load; every choice, the chances and sizes behind it
and the learned state must equal what the policy made before its arithmetic
was rearranged (tests/core/data/tree_policy_pinned.json, written by the code
before: `python tests/core/test_tree_policy_pinned.py --write`). Floats are
compared exactly, through a digest of their reprs."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from racer_core.budget.cost_curve import CostCurve
from racer_core.budget.tree_policy import TreePolicy
from racer_core.drafting.tree import Tree, cut

PINNED = Path(__file__).parent / "data" / "tree_policy_pinned.json"
CURVE = CostCurve([1, 2, 4, 8, 16, 32, 64], [1.0, 1.0, 1.32, 2.1, 3.92, 7.42, 15.1])


def _tree(rng: np.random.Generator, text: list[int], at: int) -> Tree:
    """A tree under text[at] whose first chain follows the text for a while, the rest random."""
    size = int(rng.integers(1, 40))
    parents, tokens = [-1], [text[at]]
    follow = int(rng.integers(0, 10))
    for i in range(1, size):
        if i <= follow and at + i < len(text):
            parents.append(i - 1)
            tokens.append(text[at + i])
        else:
            parents.append(int(rng.integers(0, i)))
            tokens.append(int(rng.integers(0, 12)))
    tree = Tree.of(tokens, parents, 1)
    context = np.where(rng.random(size) < 0.5, rng.integers(0, 15, size), 0)
    rank = np.where(rng.random(size) < 0.6, rng.integers(0, 7, size), -1)
    context[0], rank[0] = 0, -1
    return Tree(tree.tokens, tree.parents, tree.depths, tree.ancestors, tree.sources,
                context.astype(np.int64), rank.astype(np.int64))


def run() -> dict:
    """Every choice of three replies (the last two under load) on one policy."""
    rng = np.random.default_rng(44)
    policy = TreePolicy(CURVE, largest=64)
    steps, digest = [], hashlib.sha256()
    for load in ((0, 0), (3, 5), (1, 40)):
        text = [int(t) for t in rng.integers(0, 12, 400)]
        generated, pending, at = [text[0]], [], 0
        policy.note_drafting(0.05)
        while at < 300:
            tree = _tree(rng, text, at)
            if not policy.worth_drafting(load):
                steps.append({"skipped": True})
                at += 1
                generated = text[: at + 1]
                continue
            verified = cut(tree, policy, load)
            s = verified.selection
            policy.record(tree, len(generated) - 1, s, pending)
            at += int(rng.integers(1, 5))
            generated = text[: at + 1]
            policy.learn(generated, pending=pending)
            steps.append({"chosen": s.chosen.tolist(), "fed": s.fed, "best": s.best, "gate": s.gate})
            digest.update(repr((verified.tokens.tolist(), verified.parents.tolist(), verified.depths.tolist(),
                                verified.context.tolist(), verified.rank.tolist(), verified.fed,
                                s.probabilities.tolist(), [(o.nodes, o.fed, o.expected_tokens, o.seconds)
                                                           for o in s.options], s.expected,
                                None if s.intended is None else (s.intended[0].tolist(), s.intended[1]),
                                s.load)).encode())
        policy.learn(generated, final=True, pending=pending)
    digest.update(repr((policy._hits.tolist(), policy._trials.tolist(), policy._kinds.hits.tolist(),
                        policy._kinds.trials.tolist(), policy._calibration.hits.tolist(),
                        policy._calibration.trials.tolist(), policy.drafting_s)).encode())
    return {"steps": steps, "digest": digest.hexdigest()}


def test_the_choices_are_the_pinned_ones() -> None:
    pinned = json.loads(PINNED.read_text())
    now = run()
    assert len(now["steps"]) == len(pinned["steps"])
    for i, (a, b) in enumerate(zip(now["steps"], pinned["steps"], strict=True)):
        assert a == b, f"step {i}"
    assert sum(1 for s in pinned["steps"] if len(s.get("chosen", [])) > 1) > 20  # trees were chosen, not only roots
    assert now["digest"] == pinned["digest"], "the chances, sizes weighed or learned state changed"


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    PINNED.write_text(json.dumps(run()) + "\n")


def test_feature_tables_give_the_formulas_buckets_and_kinds() -> None:
    """TreePolicy._features' lookups against the bucket edges and node_estimates.kinds, past every cap."""
    from types import SimpleNamespace

    from racer_core.budget.node_estimates import kinds
    from racer_core.budget.tree_policy import _CTX_EDGES, _DEPTH_EDGES, _RANK_EDGES, _SHAPE

    rng = np.random.default_rng(0)
    context, rank, depth = rng.integers(0, 40, 5000), rng.integers(-3, 30, 5000), rng.integers(0, 40, 5000)
    buckets, kind = TreePolicy(CURVE)._features(SimpleNamespace(context=context, rank=rank, position_ids=depth))
    ctx = np.searchsorted(_CTX_EDGES, context, side="right")
    rnk = np.where(rank < 0, 0, np.searchsorted(_RANK_EDGES, rank, side="right"))
    dep = np.searchsorted(_DEPTH_EDGES, depth, side="right")
    np.testing.assert_array_equal(buckets, np.ravel_multi_index((ctx, rnk, dep), _SHAPE))
    np.testing.assert_array_equal(kind, kinds(context, rank, depth))
