"""The form a peer's draft takes, and what the decoder asks of a peer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class PeerTree:
    """A drafted tree, node 0 the root; a parent always comes before its children."""

    tokens: np.ndarray  # int64
    parents: np.ndarray  # int64, -1 for the root
    depths: np.ndarray  # int64, 0 for the root
    ancestors: np.ndarray  # bool T x T: [i, j] iff j is i or an ancestor of i


class PeerDrafter(Protocol):
    """What the decoder asks of a peer; one per method per conversation."""

    source_bits: int  # the Source bit its accepted drafts are shown with (1 retrieval-like, 2 logits-like)

    def start(self, prompt: Sequence[int]) -> None:
        """A reply begins after `prompt` (image placeholders left out)."""
        ...

    def emitted(self, tokens: Sequence[int]) -> None:
        """The reply grew by `tokens` (its first token, then each step's)."""
        ...

    def draft(self, root: int, limit: int | None) -> PeerTree:
        """The tree under `root` (the reply's last token): at most `limit` nodes, root included, when set."""
        ...

    def verified(self, tokens: np.ndarray, logits: Any) -> None:
        """The model's logits (a torch tensor, one row per node) for the verified tree `tokens`."""
        ...

    def finish(self) -> None:
        """The reply ended (finished, stopped or failed)."""
        ...


def tree_from_parents(tokens: Sequence[int], parents: Sequence[int]) -> PeerTree:
    """Depths and the ancestor mask of a tree given by parents (each before its children)."""
    size = len(tokens)
    parent = np.asarray(parents, dtype=np.int64)
    depths = np.zeros(size, dtype=np.int64)
    ancestors = np.eye(size, dtype=bool)
    for i in range(1, size):
        depths[i] = depths[parent[i]] + 1
        ancestors[i] |= ancestors[parent[i]]
    return PeerTree(np.asarray(tokens, dtype=np.int64), parent, depths, ancestors)
