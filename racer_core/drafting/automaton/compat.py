"""The original RACER's automaton API, spelled exactly as its `racer.automaton`.

Code written against the original (its tests, its evaluation scripts) runs
with one changed import:

    from racer_core.drafting.automaton.compat import Automaton

`Automaton(max_nodes=1000)`, `init_logits`, `update(tokens, adj_vectors)`,
`insert(pattern, freq=1)`, `build`, `trans_tokens` and
`retrieve(next_token, max_num_draft=64, is_chain=False)` behave as the
original's, and `retrieve` returns a `DraftBuffer` of plain Python lists:
`tree_candidates` and `position_ids` (one int per node), `candidates` and
`retrieve_indices` (one ragged list per leaf, root to leaf) and `attn_mask`
(rows of 0/1 ints). The engine keeps the array form (`DraftTree`: padded
numpy arrays, no per-call list building); this class only converts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from racer_core.drafting.automaton._automaton import Automaton as _Compiled
from racer_core.drafting.automaton.draft import DraftTree

__all__ = ["Automaton", "DraftBuffer"]


class DraftBuffer:
    """The original's draft: every field a list, `candidates` and
    `retrieve_indices` ragged (each leaf's path, no padding)."""

    __slots__ = ("tree_candidates", "position_ids", "candidates", "attn_mask", "retrieve_indices")

    def __init__(self) -> None:
        self.tree_candidates: list[int] = []
        self.position_ids: list[int] = []
        self.candidates: list[list[int]] = []
        self.attn_mask: list[list[int]] = []
        self.retrieve_indices: list[list[int]] = []

    @classmethod
    def from_tree(cls, tree: DraftTree) -> DraftBuffer:
        buf = cls()
        buf.tree_candidates = tree.tokens.tolist()
        buf.position_ids = tree.position_ids.tolist()
        # -1 pads a row past its leaf; token ids and node indices are never negative
        buf.candidates = _ragged(tree.candidates)
        buf.retrieve_indices = _ragged(tree.retrieve_indices)
        buf.attn_mask = tree.attn_mask.astype(np.int64).tolist()
        return buf

    def __repr__(self) -> str:
        return (
            f"<DraftBuffer tree_candidates={self.tree_candidates}, position_ids={self.position_ids}, "
            f"candidates={self.candidates}, attn_mask={self.attn_mask}, retrieve_indices={self.retrieve_indices}>"
        )


def _ragged(padded: np.ndarray) -> list[list[int]]:
    lengths = (padded >= 0).sum(axis=1).tolist()
    return [row[:n] for row, n in zip(padded.tolist(), lengths, strict=True)]


class Automaton:
    """The original's `racer.automaton.Automaton`, backed by racer_core's.

    `core_class` is the automaton doing the work (the compiled one; tests
    also run the pure-Python reference through this spelling)."""

    core_class: Any = _Compiled

    def __init__(self, max_nodes: int = 1000) -> None:
        self.core = self.core_class(max_nodes)

    def init_logits(self, vocab_size: int, top_k: int) -> None:
        self.core.init_logits(vocab_size, top_k)

    def update(self, tokens: Sequence[int], adj_vectors: Sequence[Sequence[int]]) -> None:
        """Rows for `tokens`; as in the original, a no-op before init_logits,
        and a token at or above the vocabulary size is skipped."""
        vocab = self.core.vocab_size
        if vocab is None:
            return
        keep = [i for i, t in enumerate(tokens) if not (isinstance(t, int | np.integer) and t >= vocab)]
        if len(keep) < len(tokens):
            tokens, adj_vectors = [tokens[i] for i in keep], [adj_vectors[i] for i in keep]
        if len(tokens):
            self.core.update(tokens, adj_vectors)

    def insert(self, pattern: Sequence[int], freq: int = 1) -> None:
        self.core.insert(pattern, freq)

    def build(self) -> None:
        self.core.build()

    def trans_tokens(self, tokens: Sequence[int]) -> None:
        self.core.trans_tokens(tokens)

    def retrieve(self, next_token: int, max_num_draft: int = 64, is_chain: bool = False) -> DraftBuffer:
        return DraftBuffer.from_tree(self.core.retrieve(next_token, max_num_draft, bool(is_chain)))
