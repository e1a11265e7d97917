"""A reply's grammar as the decoder (racer_core/engine/decoder.py) uses it:
started where the reply starts, it masks the first token's row, constrains
each drafted tree (tree_walk.py) and follows the accepted tokens."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from racer_core.common.grammar import Grammar
from racer_core.drafting.tree import Tree
from racer_core.structured.matcher import GrammarMatcher
from racer_core.structured.tree_walk import MAX_FORCED, constrain


class ReplyGrammar:
    def __init__(self, matcher: GrammarMatcher, drafts: bool) -> None:
        self.matcher = matcher
        self.forced = MAX_FORCED if drafts else 0

    def first(self) -> np.ndarray:
        """The mask of the reply's first token."""
        return self.matcher.allowed()[None, :]

    def constrain(self, tree: Tree) -> tuple[Tree, np.ndarray]:
        """The tree to verify and each of its rows' masks (tree_walk.constrain)."""
        return constrain(tree, self.matcher, self.forced)

    def advance(self, tokens: list[int]) -> None:
        self.matcher.advance(tokens)

    @staticmethod
    def masked(rows: torch.Tensor, allowed: np.ndarray) -> torch.Tensor:
        """`rows` with every token its row's mask forbids at -inf."""
        keep = torch.from_numpy(allowed).to(rows.device)
        return rows.masked_fill(~keep[:, : rows.shape[-1]], float("-inf"))


def start_grammar(grammar: Grammar | None, tokenizer: Any, vocab_size: int, eos_ids: frozenset[int],
                  drafts: bool = True) -> ReplyGrammar | None:
    """A reply's grammar state, compiled (or from the cache) for the model's
    vocabulary; None without a grammar. `drafts`: whether its forced tokens
    are drafted (not for `ar`, which stays plain decoding). An InputError in
    one line where it cannot be compiled or the [structured] extra is missing."""
    if grammar is None:
        return None
    from racer_core.structured.compile import compile_grammar

    return ReplyGrammar(compile_grammar(grammar, tokenizer, vocab_size, eos_ids).matcher(), drafts)
