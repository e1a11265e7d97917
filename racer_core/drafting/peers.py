"""Other papers' drafters, verified by the same tree code as racer.

`suffix` (SuffixDecoding, through the arctic-inference library) and
`recycling` (Token Recycling, our own code) each draft a tree under the root
in their own way and size it themselves; the decoder (racer_core/engine/decoder.py)
verifies it, accepts and teaches the drafter what the step saw, exactly as
for racer, so a comparison isolates drafting (docs/evaluation.md).

This module imports neither torch nor a drafter's library: the front ends ask
it whether a method can run before anything loads.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from racer_core.common.config import PEER_METHODS
from racer_core.common.errors import InputError
from racer_core.drafting.tree import PeerDrafter, PeerTree, tree_from_parents

__all__ = ["EXTRA", "PeerDrafter", "PeerTree", "check_available", "missing_extra", "new_drafter", "tree_from_parents"]

EXTRA = "peers"
"""The optional extra that installs the libraries the peers need."""
_LIBRARIES = {"suffix": ("arctic_inference.suffix_decoding", "arctic-inference")}


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
        from racer_core.drafting.suffix import SuffixDrafter

        return SuffixDrafter()
    from racer_core.drafting.recycling import RecyclingDrafter

    return RecyclingDrafter(vocab_size)
