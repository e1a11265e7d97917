"""The tree policy's native labelling (budget/tree_choice.cpp's tree_label,
`_tree_choice.label`) against its Python reference (TreePolicy._reference_label):
on random trees, texts and learned states, every count the labelling changes
and the draft gate's score are the same bit for bit; what the native one
cannot read it leaves untouched, and the reference answers."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tree_helpers import random_tree

from racer_core.budget import _tree_choice
from racer_core.budget.cost_curve import CostCurve
from racer_core.budget.tree_policy import TreePolicy
from racer_core.drafting.tree import Tree

CURVE = CostCurve([1, 2, 4, 8, 16, 32, 64], [1.0, 1.1, 1.3, 1.8, 2.9, 5.0, 9.5])


def _text(rng: np.random.Generator, tree: Tree, length: int, follow: float) -> list[int]:
    """Tokens after the root: down a random child with chance `follow`, else a random token."""
    text, node = [], 0
    for _ in range(length):
        children = np.flatnonzero(tree.parents == node)
        if len(children) and rng.random() < follow:
            node = int(rng.choice(children))
            text.append(int(tree.tokens[node]))
        else:
            node = -1
            text.append(int(rng.integers(0, 6)))
    return text


def _refused(*args: object) -> None:
    raise AssertionError("the native labelling left a readable tree to the reference")


def _state(policy: TreePolicy) -> list[np.ndarray]:
    return [policy._hits, policy._trials, policy._kinds.hits, policy._kinds.trials, policy._calibration.hits,
            policy._calibration.trials]


def _same(a: TreePolicy, b: TreePolicy) -> None:
    for x, y in zip(_state(a), _state(b), strict=True):
        assert x.shape == y.shape and x.tobytes() == y.tobytes()
    assert list(a.gate._seen) == list(b.gate._seen) and a.gate.paused == b.gate.paused


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 40), chain=st.sampled_from([0.0, 0.5, 0.9]),
       follow=st.sampled_from([0.3, 0.9, 1.0]), steps=st.integers(1, 6), final=st.booleans())
def test_native_labelling_equals_the_reference(seed: int, size: int, chain: float, follow: float, steps: int,
                                               final: bool) -> None:
    rng = np.random.default_rng(seed)
    native, reference = TreePolicy(CURVE), TreePolicy(CURVE, native=False)
    native._reference_label = _refused  # the native policy labels every tree itself
    trees = [random_tree(rng, size, chain, tokens=6) for _ in range(steps)]
    texts = [_text(rng, tree, int(tree.depths.max()) + 2, follow) for tree in trees]
    scored = rng.random(steps) < 0.8  # a tree recorded with the policy's choice (the gate scores it) or without
    taken = [int(rng.integers(1, len(text) + 1)) for text in texts]  # tokens emitted at each step
    for policy in (native, reference):
        sequence, pending = [7], []
        for tree, text, score, take in zip(trees, texts, scored, taken, strict=True):
            selection = policy.choose(tree)
            policy.record(tree, len(sequence) - 1, selection if score else None, pending)
            sequence.extend(text[:take])
            policy.learn(sequence, pending=pending)
        policy.learn(sequence, final=final, pending=pending)
    _same(native, reference)


def test_labelling_counts_what_the_text_decides() -> None:
    """A chain the text follows two nodes deep: those two are tested and
    accepted, the third tested and refused; the counts move by exactly that."""
    tree = Tree.of(np.array([5, 1, 2, 3]), [-1, 0, 1, 2], 1)
    tree = Tree(tree.tokens, tree.parents, tree.depths, tree.ancestors, tree.sources, np.array([0, 4, 4, 4]),
                np.array([-1, -1, -1, -1]))
    for native in (True, False):
        policy = TreePolicy(CURVE, native=native)
        before = [a.copy() for a in _state(policy)]
        policy.record(tree, 0, policy.choose(tree))
        policy.learn([5, 1, 2, 9])
        trials = policy._trials.sum() - before[1].sum() * policy.decay
        hits = policy._hits.sum() - before[0].sum() * policy.decay
        assert np.isclose(trials, 3.0) and np.isclose(hits, 2.0)
        assert np.isclose(policy._calibration.trials.sum() - before[5].sum() * policy.decay, 3.0)


def test_what_the_native_labelling_cannot_read_it_leaves_to_the_reference() -> None:
    rng = np.random.default_rng(3)
    tree = random_tree(rng, 12, 0.9, tokens=6)
    policy = TreePolicy(CURVE)
    buckets, kind, raw, _ = policy._estimates(tree)
    state = [a.copy() for a in _state(policy)]
    text = _text(rng, tree, 20, 1.0)
    args = (tree.tokens, tree.parents, tree.depths)
    counts = _state(policy)

    def label(*columns, sequence=text, known=20, chosen=None, arrays=counts) -> int:
        return _tree_choice.label(*columns, sequence, 0, min(int(tree.depths.max()), known), known, 0.998, *arrays,
                                  chosen)

    bad_bucket = buckets.copy()
    bad_bucket[3] = 10_000
    bad_raw = raw.copy()
    bad_raw[2] = np.nan
    for answer in (
        label(*args, bad_bucket, kind, raw),  # a bucket past the counts
        label(*args, buckets, kind, bad_raw),  # a chance that is not one
        label(*args, buckets, kind.astype(np.int32), raw),  # not int64
        label(*args, buckets, kind, raw, chosen=np.array([0, 99])),  # a chosen node past the tree
        label(tree.tokens, tree.parents[::-1].copy(), tree.depths, buckets, kind, raw),  # a child before its parent
        label(*args, buckets, kind, raw, sequence=text[:3]),  # less text than asked for
        label(*args, buckets, kind, raw, arrays=[counts[0][::2], *counts[1:]]),  # counts not contiguous
        label(*args, buckets, kind, raw, sequence=np.array(text)),  # the text not a list
        label(*args, buckets, kind, raw, sequence=[np.int64(t) for t in text]),  # nor of ints
    ):
        assert answer == -1
    for a, b in zip(state, _state(policy), strict=True):
        assert a.tobytes() == b.tobytes()
    assert label(*args, buckets, kind, raw) == 0  # readable: labelled, counts changed
    assert any(a.tobytes() != b.tobytes() for a, b in zip(state, _state(policy), strict=True))
