"""Checks shared by the automaton tests: invariants computed from scratch.

Everything here works from the public/debug surface (`snapshot`, `state_path`,
`node_count`, the DraftTree arrays) so it applies to the compiled class and to
the reference alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from racer_core.drafting.automaton.draft import DraftTree

Snapshot = dict[tuple[int, ...], tuple[int, tuple[int, ...]]]


def expected_failure(path: tuple[int, ...], paths: Any) -> tuple[int, ...]:
    """Longest proper suffix of `path` that is a trie path (the root is ())."""
    for length in range(len(path) - 1, 0, -1):
        if path[-length:] in paths:
            return path[-length:]
    return ()


def check_trie(auto: Any) -> Snapshot:
    """Asserts the trie invariants; returns the snapshot."""
    snap: Snapshot = auto.snapshot()
    assert auto.node_count == len(snap) + 1, (auto.node_count, len(snap))
    assert 2 <= auto.max_nodes and auto.node_count <= auto.max_nodes
    child_freq: dict[tuple[int, ...], int] = {}
    for path, (freq, fail) in snap.items():
        assert len(path) >= 1
        # A tree: every node's parent is a node (the root is ()).
        assert len(path) == 1 or path[:-1] in snap, f"orphan {path}"
        assert freq >= 1, f"{path} has frequency {freq}"
        want = expected_failure(path, snap)
        assert fail == want, f"failure link of {path} is {fail}, expected {want}"
        if len(path) > 1:
            child_freq[path[:-1]] = child_freq.get(path[:-1], 0) + freq
    # Every insert through a child also went through its parent.
    for parent, total in child_freq.items():
        assert snap[parent][0] >= total, f"{parent}: children's frequencies exceed its own"
    state = auto.state_path()
    assert state == () or state in snap, f"matcher state {state} is not a trie path"
    internal = getattr(auto, "_check_internal", None)
    if internal is not None:
        fault = internal()
        assert fault == "", fault
    return snap


def failure_chain(state: tuple[int, ...], snap: Snapshot) -> list[tuple[int, ...]]:
    """state, fail(state), ..., () using the snapshot's links."""
    chain = [state]
    while chain[-1] != ():
        chain.append(snap[chain[-1]][1])
    return chain


def retrieval_paths(snap: Snapshot, state: tuple[int, ...], next_token: int, min_depth: int) -> set[tuple[int, ...]]:
    """Token paths below the root that retrieval can offer (merged over borders)."""
    borders = [
        u + (next_token,) for u in failure_chain(state, snap) if u + (next_token,) in snap and len(u) + 1 >= min_depth
    ]
    out: set[tuple[int, ...]] = set()
    for b in borders:
        for path in snap:
            if len(path) > len(b) and path[: len(b)] == b:
                out.add(path[len(b) :])
    return out


def draft_paths(draft: DraftTree) -> list[tuple[int, ...]]:
    """Token path (below the root) of every node, in breadth-first order."""
    parents = draft.parents.tolist()
    tokens = draft.tokens.tolist()
    paths: list[tuple[int, ...]] = [()]
    for i in range(1, len(tokens)):
        paths.append(paths[parents[i]] + (tokens[i],))
    return paths


def check_draft(draft: DraftTree, next_token: int, budget: int, is_chain: bool) -> None:
    """Asserts the shape and consistency of a draft tree."""
    t = draft.size
    assert 1 <= t <= budget, (t, budget)
    assert draft.tokens.dtype == np.int64 and draft.tokens.shape == (t,)
    assert draft.position_ids.dtype == np.int64 and draft.position_ids.shape == (t,)
    assert draft.parents.dtype == np.int64 and draft.parents.shape == (t,)
    assert draft.sources.dtype == np.uint8 and draft.sources.shape == (t,)
    assert draft.attn_mask.dtype == np.bool_ and draft.attn_mask.shape == (t, t)
    assert draft.tree_candidates is draft.tokens
    tokens = draft.tokens.tolist()
    parents = draft.parents.tolist()
    depth = draft.position_ids.tolist()
    sources = draft.sources.tolist()
    assert tokens[0] == next_token and parents[0] == -1 and depth[0] == 0 and sources[0] == 0
    children: dict[int, list[int]] = {i: [] for i in range(t)}
    for i in range(1, t):
        p = parents[i]
        assert 0 <= p < i, "parents must precede children"
        assert depth[i] == depth[p] + 1
        assert sources[i] in (1, 2, 3)
        children[p].append(i)
    assert depth == sorted(depth), "not breadth-first"
    # Breadth-first with children contiguous in their parent's order.
    order = [0]
    for n in order:
        order.extend(children[n])
    assert order == list(range(t)), "not breadth-first"
    for kids in children.values():
        kid_tokens = [tokens[c] for c in kids]
        assert len(set(kid_tokens)) == len(kid_tokens), "identical prefixes were not merged"
        if is_chain:
            assert len(kids) <= 1, "a chain has one child per node"
    # Eq. 2: the mask is the ancestor-or-self closure of parents.
    want = np.zeros((t, t), dtype=bool)
    for i in range(t):
        j = i
        while j >= 0:
            want[i, j] = True
            j = parents[j]
    assert np.array_equal(draft.attn_mask, want), "attention mask is not the ancestor closure"
    # One row per leaf, breadth-first, root-to-leaf indices padded with -1.
    leaves = [i for i in range(t) if not children[i]]
    width = max(depth) + 1
    assert draft.retrieve_indices.shape == (len(leaves), width)
    assert draft.candidates.shape == (len(leaves), width)
    assert draft.retrieve_indices.dtype == np.int64 and draft.candidates.dtype == np.int64
    for row, leaf in enumerate(leaves):
        path = []
        j = leaf
        while j >= 0:
            path.append(j)
            j = parents[j]
        path.reverse()
        want_row = path + [-1] * (width - len(path))
        assert draft.retrieve_indices[row].tolist() == want_row
        assert draft.candidates[row].tolist() == [tokens[j] for j in path] + [-1] * (width - len(path))
