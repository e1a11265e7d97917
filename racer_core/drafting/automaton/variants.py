"""The automaton's comparison variants, outside its public constructor: the
logits tree's older breadth rule (`late_halving`, the root's breadth halved
one level later) and a table keyed by the token alone (`pair_rows=False`).
No user chooses them (the engine always builds the paper's automaton, with
pair rows); the tests and the scripts that measure the difference build
them here, for the compiled class and the reference alike."""

from __future__ import annotations

from typing import Any


def variant(cls: type, max_nodes: int = 10000, min_depth: int = 2, ngram: int = 10, *,
            late_halving: bool = False, pair_rows: bool = True) -> Any:
    """`cls` (Automaton or ReferenceAutomaton) with the given variant flags (bools, else TypeError)."""
    return cls(max_nodes, min_depth, ngram, _variant=(late_halving, pair_rows))
