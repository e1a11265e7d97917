"""Other papers' drafters, verified by the same tree code as racer.

`suffix` (SuffixDecoding, through the arctic-inference library) and
`recycling` (Token Recycling, our own code) each draft a tree under the root
in their own way and size it themselves; the decoder (racer_core/decoder.py)
verifies it, accepts and teaches the drafter what the step saw, exactly as
for racer, so a comparison isolates drafting (docs/evaluation.md).

This module imports neither torch nor a drafter's library: the front ends ask
it whether a method can run before anything loads.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from racer_core.config import PEER_METHODS
from racer_core.errors import InputError

EXTRA = "peers"
"""The optional extra that installs the libraries the peers need."""
_LIBRARIES = {"suffix": ("arctic_inference.suffix_decoding", "arctic-inference")}


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


def missing_extra(method: str) -> str | None:
    """One line saying what `method` lacks to run here, or None when it can run."""
    library = _LIBRARIES.get(method)
    if library is None:
        return None
    module, package = library
    try:
        importlib.import_module(module)
    except ImportError as error:
        reason = (str(error).splitlines() or ["not importable"])[0]
        return (f"method {method!r} needs the optional extra [{EXTRA}] ({package}; here: {reason}); "
                f"install it as docs/evaluation.md says")
    return None


def check_available(methods: Sequence[str]) -> None:
    """Refuse, in one line, the first method whose library is not installed."""
    for method in methods:
        problem = missing_extra(method)
        if problem is not None:
            raise InputError(problem)


def new_drafter(method: str, vocab_size: int) -> PeerDrafter:
    """A fresh drafter for `method` (one of PEER_METHODS): empty cache, empty matrix."""
    if method not in PEER_METHODS:
        raise InputError(f"{method!r} is not a peer drafting method")
    check_available([method])
    if method == "suffix":
        from racer_core.drafters.suffix import SuffixDrafter

        return SuffixDrafter()
    from racer_core.drafters.recycling import RecyclingDrafter

    return RecyclingDrafter(vocab_size)


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
