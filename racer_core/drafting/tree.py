"""The one draft tree every drafter hands the verifier (racer_core/engine/decoder.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from racer_core.budget._tree_choice import cut_nodes
from racer_core.common.frozen import built

if TYPE_CHECKING:
    from racer_core.budget.tree_policy import Selection, TreePolicy


@dataclass(frozen=True)
class Tree:
    """A drafted tree, node 0 the root, a parent always before its children.

    `sources` says per node which Source (racer_core.common.events, declared by
    the method in racer_core/common/registry.py) proposed it; the root's is 0.
    `context` and `rank` are racer's features (the automaton's retrieval
    context, the logits table's rank); other drafters leave them 0 and -1.
    `share`, racer's too (a retrieved node's count over its siblings' in the
    automaton, -1 for none), is None where the drafter has none.
    """

    tokens: np.ndarray  # int64
    parents: np.ndarray  # int64, -1 for the root
    depths: np.ndarray  # int64, 0 for the root
    ancestors: np.ndarray  # bool T x T: [i, j] iff j is i or an ancestor of i
    sources: np.ndarray  # uint8 Source ids
    context: np.ndarray  # int64
    rank: np.ndarray  # int64
    rule: str = "own"  # how its size was chosen, for the step record ("plain", "auto", "fixed", "head", "own")
    fed: int = 0  # rows the pass feeds when more than `size` (a cheaper padded size); 0: `size`
    drafted: int = 0  # nodes in the tree this one was cut from; 0: `size`
    selection: Selection | None = None  # the tree policy's choice and what led to it
    estimates: np.ndarray | None = None  # P(path accepted) per node where nodes changed after the choice (rebuilt)
    share: np.ndarray | None = None  # float64, racer's retrieval share per node (-1 for none), else None

    def path_estimates(self) -> np.ndarray | None:
        """The tree policy's P(path accepted) per node, None where no policy chose the tree."""
        if self.estimates is not None:
            return self.estimates
        return None if self.selection is None else self.selection.probabilities[self.selection.chosen]

    @property
    def size(self) -> int:
        return len(self.tokens)

    @property
    def position_ids(self) -> np.ndarray:
        """The depths, under the name the tree policy reads (as racer's DraftTree has them)."""
        return self.depths

    @property
    def rows(self) -> int:
        return max(self.fed, self.size)

    def padded(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The fed tokens, depths and ancestor mask. Where a cheaper size exists
        above the tree's, the rows past it repeat the root and see only the
        cache and themselves; their outputs and cache rows are dropped."""
        pad = self.rows - self.size
        if pad <= 0:
            return self.tokens, self.depths, self.ancestors
        ancestors = np.eye(self.rows, dtype=bool)
        ancestors[: self.size, : self.size] = self.ancestors
        return (np.concatenate([self.tokens, np.full(pad, self.tokens[0], dtype=np.int64)]),
                np.concatenate([self.depths, np.zeros(pad, dtype=np.int64)]), ancestors)

    @classmethod
    def of(cls, tokens: Sequence[int] | np.ndarray, parents: Sequence[int] | np.ndarray, source: int,
           rule: str = "own") -> Tree:
        """A tree given by parents, every node but the root proposed by `source`."""
        parent = np.asarray(parents, dtype=np.int64)
        depths, ancestors = _shape(parent)
        return cls.shaped(np.asarray(tokens, dtype=np.int64), parent, depths, ancestors, source, rule)

    @classmethod
    def shaped(cls, tokens: np.ndarray, parents: np.ndarray, depths: np.ndarray, ancestors: np.ndarray,
               source: int, rule: str = "own") -> Tree:
        """A tree whose depths and mask are known, every node but the root from `source`."""
        size = len(tokens)
        sources = np.full(size, source, dtype=np.uint8)
        sources[:1] = 0
        return cls(tokens, parents, depths, ancestors, sources, np.zeros(size, dtype=np.int64),
                   np.full(size, -1, dtype=np.int64), rule)

    @classmethod
    def root_only(cls, root: int) -> Tree:
        """Plain decoding: the root alone. Its columns but the token are one
        shared read-only set (`_ROOT`): every ar step and every undrafted step
        makes one, and building them afresh (eight small arrays) cost tens of
        microseconds a step, most of a plain step's drafting."""
        token = np.empty(1, dtype=np.int64)
        token[0] = root
        return cls(token, *_ROOT, "plain")


def rebuilt(tree: Tree, nodes: Sequence[int], parents: Sequence[int], tokens: Sequence[int],
            sources: Sequence[int]) -> Tree:
    """`tree` with nodes dropped or added (the grammar's pruning and forced
    drafts, racer_core/structured/tree_walk.py): new node i is old node
    `nodes[i]` (-1 for an added one, racer's features left 0 and -1), under
    new node `parents[i]`, holding `tokens[i]` from `sources[i]`. A parent
    comes before its children; the padded size is dropped. The policy's
    selection stays as it chose (its drafter learns from it); an added node's
    path estimate is its parent's (the grammar forces it)."""
    old = np.asarray(nodes, dtype=np.int64)
    kept = old >= 0
    parent = np.asarray(parents, dtype=np.int64)
    depths, ancestors = _shape(parent)
    context = np.zeros(len(old), dtype=np.int64)
    rank = np.full(len(old), -1, dtype=np.int64)
    context[kept], rank[kept] = tree.context[old[kept]], tree.rank[old[kept]]
    share = None
    if tree.share is not None:
        share = np.full(len(old), -1.0)
        share[kept] = tree.share[old[kept]]
    before = tree.path_estimates()
    estimates = None
    if before is not None:
        estimates = np.zeros(len(old), dtype=np.float64)
        for i, o in enumerate(old):
            estimates[i] = before[o] if o >= 0 else estimates[parent[i]]
    return replace(tree, tokens=np.asarray(tokens, dtype=np.int64), parents=parent, depths=depths, ancestors=ancestors,
                   sources=np.asarray(sources, dtype=np.uint8), context=context, rank=rank, fed=0,
                   estimates=estimates, share=share)


def _read_only(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


# The root-only tree's parents, depths, ancestor mask, sources, contexts and ranks (Tree.root_only), as Tree.of makes them.
_ROOT = tuple(_read_only(a) for a in (np.full(1, -1, dtype=np.int64), np.zeros(1, dtype=np.int64),
                                      np.ones((1, 1), dtype=bool), np.zeros(1, dtype=np.uint8),
                                      np.zeros(1, dtype=np.int64), np.full(1, -1, dtype=np.int64)))


def _shape(parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The depths and ancestor mask of a tree given by parents (a parent before its children)."""
    size = len(parents)
    depths = np.zeros(size, dtype=np.int64)
    ancestors = np.eye(size, dtype=bool)
    for i in range(1, size):
        depths[i] = depths[parents[i]] + 1
        ancestors[i] |= ancestors[parents[i]]
    return depths, ancestors


def cut(tree: Tree, policy: TreePolicy, load: tuple[int, int] = (0, 0)) -> Tree:
    """The nodes of `tree` the tree policy verifies (docs/design.md 1.8) at
    `load` (the pass's other sequences and their rows), with what led to the
    choice; its size may be padded up to a cheaper one."""
    # the choice and the cut in one native call where it can (budget/_tree_choice.pyx); else the cut
    # by one native pass over the chosen nodes, or numpy where that cannot read them
    selection, taken = policy.choose_cut(tree, load)
    if taken is None:
        chosen = selection.chosen
        taken = cut_nodes(chosen, tree.parents, tree.ancestors, tree.tokens, tree.depths, tree.sources, tree.context,
                          tree.rank, tree.share)
        if taken is None:
            taken = taken_nodes(tree, chosen)
    parents, ancestors, tokens, depths, sources, context, rank, share = taken
    return built(Tree, tokens=tokens, parents=parents, depths=depths, ancestors=ancestors, sources=sources,
                 context=context, rank=rank, rule="auto", fed=selection.fed, drafted=tree.size, selection=selection,
                 estimates=tree.estimates, share=share)


def taken_nodes(tree: Tree, chosen: np.ndarray) -> tuple[np.ndarray, ...]:
    """The nodes `chosen` (root first) of `tree` renumbered in their order:
    (parents, ancestor mask, tokens, depths, sources, contexts, ranks, shares
    or None), by numpy indexing -- what the native cut_nodes computes, and where it cannot."""
    remap = np.full(tree.size, -1, dtype=np.int64)
    remap[chosen] = np.arange(len(chosen))
    parents = remap[tree.parents[chosen]]
    parents[0] = -1
    return (parents, tree.ancestors[chosen][:, chosen], tree.tokens[chosen], tree.depths[chosen],
            tree.sources[chosen], tree.context[chosen], tree.rank[chosen],
            None if tree.share is None else tree.share[chosen])
