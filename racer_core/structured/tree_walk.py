"""A drafted tree under a grammar: every node's allowed tokens, the drafts
the grammar forbids pruned before they cost a row, and the tokens it forces
added as drafts of their own (Source.GRAMMAR).

The walk is depth-first with one matcher: accept a node's token, compute the
mask of its row, visit its children, roll back. A node's row chooses the
token after its path, so its mask is the grammar's state after that path.
"""

from __future__ import annotations

import numpy as np

from racer_core.common.events import Source
from racer_core.drafting.tree import Tree, rebuilt
from racer_core.structured.matcher import GrammarMatcher

MAX_FORCED = 12  # forced drafts added per tree: a JSON key and its punctuation, a closing run


def constrain(tree: Tree, matcher: GrammarMatcher, forced: int = MAX_FORCED) -> tuple[Tree, np.ndarray]:
    """The tree pruned to what the grammar allows and grown by up to `forced`
    forced tokens, with a bool mask per node (rows x vocabulary). `matcher`
    stands after the root and is left there."""
    walk = _Walk(tree, matcher, forced)
    walk.visit(0, 0)
    if walk.nodes == list(range(tree.size)):
        return tree, np.stack(walk.masks)
    return rebuilt(tree, walk.nodes, walk.parents, walk.tokens, walk.sources), np.stack(walk.masks)


class _Walk:
    def __init__(self, tree: Tree, matcher: GrammarMatcher, forced: int) -> None:
        self.tree, self.matcher, self.budget = tree, matcher, forced
        self.children: list[list[int]] = [[] for _ in range(tree.size)]
        for i in range(1, tree.size):
            self.children[int(tree.parents[i])].append(i)
        # the new tree, node by node in visiting order (a parent before its children)
        self.nodes, self.parents = [0], [-1]
        self.tokens, self.sources = [int(tree.tokens[0])], [int(tree.sources[0])]
        self.masks: list[np.ndarray] = []

    def _add(self, old: int, parent: int, token: int, source: int) -> int:
        self.nodes.append(old)
        self.parents.append(parent)
        self.tokens.append(token)
        self.sources.append(source)
        return len(self.nodes) - 1

    def _ends(self, token: int) -> bool:
        return token in self.matcher.eos_ids

    def visit(self, old: int, new: int) -> None:
        """Node `new` (old node `old`, -1 when added): its mask, then its children's subtrees."""
        mask = self.matcher.allowed()
        self.masks.append(mask)
        drafted = set()
        for child in self.children[old] if old >= 0 else ():
            token = int(self.tree.tokens[child])
            if not mask[token]:
                continue  # forbidden: pruned with its subtree
            drafted.add(token)
            index = self._add(child, new, token, int(self.tree.sources[child]))
            self._descend(token, child, index)
        self._force(new, mask, drafted)

    def _descend(self, token: int, old: int, new: int) -> None:
        if self._ends(token):  # the reply ends here: its row is never used for a token
            self.masks.append(np.ones(self.matcher.vocab_size, dtype=bool))
            return
        self.matcher.accept(token)
        self.visit(old, new)
        self.matcher.rollback(1)

    def _force(self, new: int, mask: np.ndarray, drafted: set[int]) -> None:
        """Add the grammar's forced run under node `new` unless its first token was drafted."""
        if self.budget <= 0:
            return
        run = self.matcher.forced()
        if not run:
            only = np.flatnonzero(mask)
            run = [int(only[0])] if len(only) == 1 else []
        if not run or run[0] in drafted or not mask[run[0]]:
            return
        token = run[0]
        self.budget -= 1
        index = self._add(-1, new, token, int(Source.GRAMMAR))
        self._descend(token, -1, index)
