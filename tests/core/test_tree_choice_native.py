"""The tree policy's native estimates and choice (budget/tree_choice.cpp)
against its Python reference (TreePolicy._reference_estimates and
_reference_weigh): on random trees, random learned states, curves and loads,
every chance, the order they give, the sizes weighed and the nodes chosen
are the same bit for bit; a tree or state the native one cannot read is
answered by the reference. And the native cut (cut_nodes) against numpy's
indexing (drafting/tree.py's taken_nodes)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from racer_core.budget._tree_choice import cut_nodes
from tree_helpers import random_tree

from racer_core.budget import _tree_choice
from racer_core.budget.cost_curve import CostCurve
from racer_core.budget.tree_policy import Selection, TreePolicy
from racer_core.drafting.tree import Tree, cut, taken_nodes


def _counts(rng: np.random.Generator, shape: int | tuple[int, ...], coarse: bool, unseen: float) -> tuple:
    """Random (hits, trials): on a coarse grid (equal chances, so ties in the
    order, and chances of exactly 0, 1/2 and 1) or fine; `unseen` of them at 0 trials."""
    trials = rng.choice([1.0, 2.0, 4.0], shape) if coarse else rng.uniform(0.05, 60.0, shape)
    hits = trials * (rng.choice([0.0, 0.5, 1.0], shape) if coarse else rng.random(shape))
    zero = rng.random(shape) < unseen
    return np.where(zero, 0.0, hits), np.where(zero, 0.0, trials)


def _policies(seed: int, coarse: bool, weight: float) -> tuple[TreePolicy, TreePolicy]:
    """(native, reference) policies with the same random curve and learned state."""
    rng = np.random.default_rng(seed)
    sizes = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    seconds = np.cumsum(rng.uniform(0.0, 1.0, len(sizes))) + rng.uniform(0.5, 2.0)
    if rng.random() < 0.5:  # a curve where some sizes cost more than larger ones (padded up)
        seconds = seconds * rng.uniform(0.8, 1.2, len(sizes))
    curve = CostCurve(sizes, seconds.tolist())
    state = (_counts(rng, (6, 5, 3), coarse, 0.0), _counts(rng, 650, coarse, 0.6), _counts(rng, 20, coarse, 0.0))
    drafting_s = float(rng.choice([0.0, 0.001, 0.3]))
    made = []
    for native in (True, False):
        policy = TreePolicy(curve, largest=64, prior_weight=weight, native=native)
        (policy._hits, policy._trials), (hits, trials), (cal_hits, cal_trials) = [
            (h.copy(), t.copy()) for h, t in state]
        if weight == 0.0:  # the bucket's trials never 0 when its weight is (a bucket not seen would be 0 / 0)
            policy._trials = np.maximum(policy._trials, 1.0)
        policy._kinds.hits, policy._kinds.trials = hits, trials
        policy._calibration.hits, policy._calibration.trials = cal_hits, np.maximum(cal_trials, 0.5)
        policy.drafting_s = drafting_s
        made.append(policy)
    return made[0], made[1]


def _same_floats(a: object, b: object) -> bool:
    """Equal bit for bit (floats by their bytes, NaN included)."""
    return np.asarray(a).dtype == np.asarray(b).dtype and np.asarray(a).tobytes() == np.asarray(b).tobytes()


def _assert_same_selection(a: Selection, b: Selection) -> None:
    assert a.chosen.dtype == b.chosen.dtype and a.chosen.tolist() == b.chosen.tolist()
    assert (a.fed, a.best, a.gate, a.load) == (b.fed, b.best, b.gate, b.load)
    assert _same_floats(a.expected, b.expected) and type(a.expected) is type(b.expected)
    assert _same_floats(a.probabilities, b.probabilities)
    for x, y in zip(a.options._columns, b.options._columns, strict=True):
        assert [type(v) for v in x] == [type(v) for v in y]
        assert _same_floats(x, y)
    assert (a.intended is None) == (b.intended is None)
    if a.intended is not None:
        assert a.intended[0].tolist() == b.intended[0].tolist() and a.intended[1] == b.intended[1]


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 90), chain=st.sampled_from([0.0, 0.5, 0.9]),
       coarse=st.booleans(), weight=st.sampled_from([3.0, 0.5, 0.0]),
       load=st.sampled_from([(0, 0), (1, 1), (3, 5), (2, 40)]))
def test_native_choice_equals_the_reference(seed: int, size: int, chain: float, coarse: bool, weight: float,
                                            load: tuple[int, int]) -> None:
    native, reference = _policies(seed, coarse, weight)
    tree = random_tree(np.random.default_rng(seed + 1), size, chain)
    with np.errstate(all="ignore"):  # a kind never seen at weight 0 reads 0 / 0, on both sides
        found = _tree_choice.estimates(native._choice_tables(), tree.parents, tree.context, tree.rank,
                                       tree.position_ids)
        assert found is not None  # the native one answered, not the reference for it
        expected = reference._reference_estimates(tree)
        for x, y in zip(found, expected, strict=True):
            assert _same_floats(x, y)
        a, b = native.choose(tree, load), reference.choose(tree, load)
    _assert_same_selection(a, b)
    for x, y in zip(native._last[1:4], reference._last[1:4], strict=True):  # what record() learns from
        assert _same_floats(x, y)
    # and the tree's depth, which the native choice finds and the reference leaves to record()
    assert native._last[4] == int(tree.position_ids.max()) and reference._last[4] is None


def test_the_learned_state_is_read_where_it_is_changed_in_place_or_replaced() -> None:
    native, reference = _policies(7, False, 3.0)
    tree = random_tree(np.random.default_rng(8), 40, 0.5)
    _assert_same_selection(native.choose(tree), reference.choose(tree))
    for policy in (native, reference):
        policy._kinds.hits *= 0.5  # in place: the tables already read it
        policy._calibration.hits = policy._calibration.hits[::-1].copy()  # replaced: read anew
    _assert_same_selection(native.choose(tree), reference.choose(tree))


def test_what_the_native_choice_cannot_read_the_reference_answers() -> None:
    native, reference = _policies(3, False, 3.0)
    tree = random_tree(np.random.default_rng(4), 30, 0.5)
    tables = native._choice_tables()
    odd = {
        "negative context": (tree.parents, np.where(np.arange(30) == 5, -2, tree.context), tree.rank, tree.depths),
        "int32 parents": (tree.parents.astype(np.int32), tree.context, tree.rank, tree.depths),
        "a parent after its child": (np.where(np.arange(30) == 3, 7, tree.parents), tree.context, tree.rank,
                                     tree.depths),
        "a list": (tree.parents.tolist(), tree.context, tree.rank, tree.depths),
        "lengths apart": (tree.parents, tree.context[:-1], tree.rank, tree.depths),
    }
    for why, (parents, context, rank, depths) in odd.items():
        assert _tree_choice.estimates(tables, parents, context, rank, depths) is None, why
    strided = Tree(tree.tokens, tree.parents, tree.depths, tree.ancestors, tree.sources,
                   np.repeat(tree.context, 2)[::2], tree.rank)  # not contiguous
    _assert_same_selection(native.choose(strided), reference.choose(strided))
    native._hits = np.asfortranarray(native._hits)  # a state the tables cannot read (not C-contiguous)
    assert not native._choice_tables().usable
    _assert_same_selection(native.choose(tree), reference.choose(tree))


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 90), chain=st.sampled_from([0.0, 0.5, 0.9]),
       keep=st.floats(0.0, 1.0), shared=st.booleans())
def test_native_cut_equals_numpy_indexing(seed: int, size: int, chain: float, keep: float, shared: bool) -> None:
    """cut_nodes against drafting/tree.py's taken_nodes on random chosen sets: the
    policy's (a parent before its children) and any ascending set from the root."""
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, size, chain)
    share = np.where(rng.random(size) < 0.5, rng.random(size), -1.0) if shared else None
    tree = Tree(tree.tokens, tree.parents, tree.depths, tree.ancestors, rng.integers(0, 6, size).astype(np.uint8),
                tree.context, tree.rank, share=share)
    chosen = np.flatnonzero(np.concatenate([[True], rng.random(size - 1) < keep]))
    found = cut_nodes(chosen, tree.parents, tree.ancestors, tree.tokens, tree.depths, tree.sources, tree.context,
                      tree.rank, tree.share)
    assert found is not None
    for x, y in zip(found, taken_nodes(tree, chosen), strict=True):
        if x is None or y is None:
            assert x is None and y is None and not shared
            continue
        assert x.dtype == y.dtype and x.shape == y.shape and x.flags.c_contiguous
        assert np.array_equal(x, y)


def test_cut_is_the_numpy_cut_and_odd_choices_are_left_to_numpy() -> None:
    native, _ = _policies(5, False, 3.0)
    tree = random_tree(np.random.default_rng(6), 50, 0.5)
    tree = Tree(tree.tokens, tree.parents, tree.depths, tree.ancestors, tree.sources, tree.context, tree.rank,
                share=np.linspace(-1.0, 1.0, 50))
    verified = cut(tree, native)
    want = taken_nodes(tree, verified.selection.chosen)
    got = (verified.parents, verified.ancestors, verified.tokens, verified.depths, verified.sources,
           verified.context, verified.rank, verified.share)
    assert all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in zip(got, want, strict=True))
    assert verified.rule == "auto" and verified.drafted == 50 and verified.fed == verified.selection.fed
    columns = (tree.parents, tree.ancestors, tree.tokens, tree.depths, tree.sources, tree.context, tree.rank,
               tree.share)
    for why, chosen in {"not from the root": np.array([1, 2]), "not ascending": np.array([0, 3, 2]),
                        "past the tree": np.array([0, 50]), "int32": np.array([0, 1], dtype=np.int32)}.items():
        assert cut_nodes(chosen, *columns) is None, why
    assert cut_nodes(np.array([0, 1]), tree.parents, tree.ancestors[:, :49], *columns[2:]) is None
    assert cut_nodes(np.array([0, 1]), *columns[:-1], tree.share.astype(np.float32)) is None


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 90), chain=st.sampled_from([0.0, 0.5, 0.9]),
       load=st.sampled_from([(0, 0), (1, 1), (3, 5)]), paused=st.booleans(), shared=st.booleans())
def test_choice_and_cut_in_one_call_equal_the_reference_and_numpys_cut(seed: int, size: int, chain: float,
                                                                       load: tuple[int, int], paused: bool,
                                                                       shared: bool) -> None:
    """choose_cut (the native choice and cut_nodes of its chosen nodes in one
    call, what `cut` asks) against the reference's choice and numpy's cut of
    it; where the draft gate keeps the root alone it hands no cut, and `cut`
    cuts the root itself."""
    native, reference = _policies(seed, False, 3.0)
    rng = np.random.default_rng(seed + 2)
    tree = random_tree(rng, size, chain)
    share = np.where(rng.random(size) < 0.5, rng.random(size), -1.0) if shared else None
    tree = Tree(tree.tokens, tree.parents, tree.depths, tree.ancestors, rng.integers(0, 6, size).astype(np.uint8),
                tree.context, tree.rank, share=share)
    for policy in (native, reference):
        policy.gate.paused = paused
        policy.gate.resume_context = 10**9  # paused stays paused
    selection, taken = native.choose_cut(tree, load)
    _assert_same_selection(selection, reference.choose(tree, load))
    if paused:
        assert taken is None and selection.chosen.tolist() == [0]
    else:
        assert taken is not None
        for x, y in zip(taken, taken_nodes(tree, selection.chosen), strict=True):
            assert (x is None) == (y is None) and (x is not None or not shared)
            if x is not None:
                assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)
    assert reference.choose_cut(tree, load)[1] is None  # the reference choice leaves the cut to `cut`
    verified = cut(tree, native, load)
    want = taken_nodes(tree, verified.selection.chosen)
    got = (verified.parents, verified.ancestors, verified.tokens, verified.depths, verified.sources,
           verified.context, verified.rank, verified.share)
    assert all((x is None and y is None) or (np.array_equal(x, y) and x.dtype == y.dtype)
               for x, y in zip(got, want, strict=True))
