"""Random draft trees for the tree policy's native-against-reference tests."""

from __future__ import annotations

import numpy as np

from racer_core.drafting.tree import Tree


def random_tree(rng: np.random.Generator, size: int, chain: float, tokens: int = 50) -> Tree:
    """A random tree of `size` nodes over `tokens` token ids, a node under the
    one before it with chance `chain`, its retrieval contexts and logits ranks random."""
    parents = [-1] + [i - 1 if rng.random() < chain else int(rng.integers(0, i)) for i in range(1, size)]
    shaped = Tree.of(rng.integers(0, tokens, size), parents, 1)
    context = np.where(rng.random(size) < 0.5, rng.integers(0, 16, size), 0)
    rank = np.where(rng.random(size) < 0.6, rng.integers(0, 8, size), -1)
    context[0], rank[0] = 0, -1
    return Tree(shaped.tokens, shaped.parents, shaped.depths, shaped.ancestors, shaped.sources, context, rank)
