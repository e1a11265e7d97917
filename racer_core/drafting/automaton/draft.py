"""The draft tree handed to the verifier (docs/automaton.md, Output)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(slots=True, eq=False, repr=False)  # arrays: identity equality (same_as compares values)
class DraftTree:
    """A flattened draft tree, breadth-first, node 0 being the root token.

    tokens (int64, T), position_ids (depth, int64, T), parents (int64, T; -1 for
    the root), sources (uint8, T; bit 1 retrieval, bit 2 logits, 0 for the root),
    attn_mask (bool, T x T; [i][j] iff j is i or an ancestor of i),
    retrieve_indices (int64, leaves x longest path, padded with -1) and
    candidates (the tokens at retrieve_indices, padded with -1), context
    (int64, T; the retrieval context of the candidate that added the node, 0
    for nodes retrieval did not add) and rank (int64, T; the logits-row rank
    that reached the node, -1 if none) and share (float64, T; for a node
    retrieval added, its token's count over the summed counts of all the
    children of the deepest matched context offering it -- the automaton's
    own estimate of the continuation, as SuffixDecoding scores nodes; -1 for
    the root and nodes retrieval did not add): features the engine uses to
    estimate how likely each node is to be accepted.
    """

    tokens: np.ndarray
    position_ids: np.ndarray
    parents: np.ndarray
    sources: np.ndarray
    attn_mask: np.ndarray
    retrieve_indices: np.ndarray
    candidates: np.ndarray
    context: np.ndarray
    rank: np.ndarray
    share: np.ndarray

    @property
    def tree_candidates(self) -> np.ndarray:
        """The original implementation's name for `tokens`."""
        return self.tokens

    @property
    def size(self) -> int:
        """Number of tree nodes, root included."""
        return int(self.tokens.shape[0])

    def same_as(self, other: DraftTree) -> bool:
        """True when every array has the same dtype, shape and values."""
        return all(
            a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))
            for a, b in ((getattr(self, name), getattr(other, name)) for name in DraftTree.__slots__)
        )

    def __repr__(self) -> str:
        return f"DraftTree(size={self.size}, tokens={self.tokens.tolist()}, parents={self.parents.tolist()})"
