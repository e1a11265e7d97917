"""Token Recycling (Luo et al., ACL 2025), written from the paper and its
authors' public code (read for facts: the template, k, the update rule).

An adjacency matrix M (vocabulary x k, k = 8) holds, for each token, the
top-k next tokens the model gave the last time that token was verified.
Drafting expands the root breadth-first over the paper's fixed tree
template: a node at template path (i0, ..., id) takes M[parent's token, id].
After each verification every fed token's row is overwritten with the top-k
of its logits (M[x_i] = topk(p_{i+1}), rejected nodes included; for a token
fed twice the later row wins, the variant the paper measured best). M starts
at zeros (token 0 everywhere), as in the paper; the prompt's prefill does not
write it (the authors' code does not). Kept across questions it is the
paper's hot start; a fresh drafter is the cold start.

Vectorized: drafting is one gather per template layer, the update one topk
and one scatter; the tree's shape, depths and mask are built once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from racer_core.common import registry
from racer_core.drafting.protocol import Drafter, DrafterSetup
from racer_core.drafting.tree import Tree

SOURCE = registry.RECYCLED.id  # its drafts are shown as recycled top-k, not racer's logits table
TOP_K = 8  # the paper's k (--output-id-topk)

# The paper's default template ("2.2.2", 80 nodes under the root, depth 6), by
# layer: each path lists the candidate index taken at every depth from the root.
_TEMPLATE_LAYERS = (
    "0 1 2 3 4 5 6 7",
    "00 01 02 03 04 05 06 07 10 11 12 13 20 21 22 30 31 40 50 60 70",
    "000 001 002 003 004 005 006 007 010 011 012 020 021 030 040 050 060 070 100 101 110 200 300 400 500",
    "0000 0001 0002 0003 0004 0010 0011 0020 0030 0040 0100 0200 1000 2000 3000",
    "00000 00001 00002 00010 00020 00100 01000 10000",
    "000000 000001 000100",
)
TEMPLATE: tuple[tuple[int, ...], ...] = tuple(
    tuple(int(c) for c in path) for layer in _TEMPLATE_LAYERS for path in layer.split()
)


class TreeTemplate:
    """A static draft tree: per node (root 0) its parent and candidate index, breadth-first."""

    def __init__(self, paths: Sequence[tuple[int, ...]]) -> None:
        index = {(): 0}
        parents, ranks = [-1], [0]
        for path in paths:
            if path[:-1] not in index:
                raise ValueError(f"template path {path} comes before its parent")
            index[path] = len(parents)
            parents.append(index[path[:-1]])
            ranks.append(path[-1])
        self.parents = np.asarray(parents, dtype=np.int64)
        self.ranks = np.asarray(ranks, dtype=np.int64)
        self.shape = Tree.of([0] * len(parents), parents, SOURCE)
        depths = self.shape.depths
        # node ranges per depth (breadth-first: each layer is contiguous)
        self.layers = [np.nonzero(depths == d)[0] for d in range(1, int(depths.max()) + 1)]
        self.size = len(parents)


DEFAULT_TEMPLATE = TreeTemplate(TEMPLATE)


class AdjacencyMatrix:
    """M: each token's top-k successors, as the model last saw them."""

    def __init__(self, vocab_size: int, k: int = TOP_K) -> None:
        self.k = k
        self.rows = np.zeros((vocab_size, k), dtype=np.int64)

    def update(self, tokens: np.ndarray, logits: torch.Tensor) -> None:
        """Overwrite each token's row with the top-k of its logits row (later rows win)."""
        top = torch.topk(logits, self.k, dim=-1).indices.cpu().numpy()
        # numpy leaves the winner of a repeated index unspecified: keep each token's last row
        _, from_end = np.unique(tokens[::-1], return_index=True)
        last = len(tokens) - 1 - from_end
        self.rows[tokens[last]] = top[last]

    def expand(self, root: int, template: TreeTemplate, size: int) -> np.ndarray:
        """The template's first `size` nodes' tokens under `root`, one gather per layer."""
        tokens = np.empty(size, dtype=np.int64)
        tokens[0] = root
        for layer in template.layers:
            layer = layer[layer < size]
            if not len(layer):
                break
            tokens[layer] = self.rows[tokens[template.parents[layer]], template.ranks[layer]]
        return tokens


class RecyclingDrafter(Drafter):
    """Token Recycling over one adjacency matrix (kept as long as the drafter;
    a warmed conversation shares it: the paper's hot start)."""

    def __init__(self, vocab_size: int, paths: Sequence[tuple[int, ...]] = TEMPLATE, k: int = TOP_K) -> None:
        k = min(k, vocab_size)  # a vocabulary smaller than k (test models): the paths within it
        self.matrix = AdjacencyMatrix(vocab_size, k)
        self.template = DEFAULT_TEMPLATE if paths is TEMPLATE and k == TOP_K else \
            TreeTemplate([p for p in paths if max(p) < k])

    @classmethod
    def create(cls, setup: DrafterSetup) -> RecyclingDrafter:
        return cls(setup.vocab_size)

    def warm_copy(self, setup: DrafterSetup) -> RecyclingDrafter:
        return self

    def draft(self, root: int, prev: int = -1, limit: int | None = None, load: tuple[int, int] = (0, 0)) -> Tree:
        """The static tree (all of it: the paper verifies the whole template), or
        its breadth-first first `limit` nodes under a fixed budget."""
        size = self.template.size if limit is None else max(1, min(limit, self.template.size))
        shape = self.template.shape
        tokens = self.matrix.expand(root, self.template, size)
        if size == self.template.size:
            return Tree.shaped(tokens, shape.parents, shape.depths, shape.ancestors, SOURCE)
        return Tree.shaped(tokens, shape.parents[:size], shape.depths[:size], shape.ancestors[:size, :size], SOURCE)

    def verified(self, tree: Tree, logits: Any, path: list[int], emitted: list[int], captured: Any) -> None:
        self.matrix.update(tree.tokens, logits)
