"""RACER's drafter: the automaton (retrieval) and the logits table, one
tree per step, sized by the tree policy on the cost curve (budget auto) or
cut to a fixed budget.

`retrieval` and `logits` are racer with one source off; all three share one
drafter per conversation (registry.py's `shares`), so switching among them
keeps the automaton. The automaton learns the text (prompt and emitted
tokens); the table learns the top-k of every fed position's logits. A chat
corpus (drafting/corpus.py) seeds each new automaton.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from racer_core.budget.tree_policy import TreePolicy
from racer_core.common import registry
from racer_core.common.config import GenerationConfig
from racer_core.common.frozen import built
from racer_core.drafting.automaton import Automaton
from racer_core.drafting.protocol import Drafter, DrafterSetup
from racer_core.drafting.top_k import learn_top_k, top_k_rows
from racer_core.drafting.tree import Tree, cut

drafting_clock = time.perf_counter
"""What times the drafting's own Python (TreePolicy.drafting_s); tests script it, as they script the cost curve."""

RETRIEVAL_BIT = 1  # the automaton's source bits (DraftTree.sources)
LOGITS_BIT = 2


def _automaton_key(config: GenerationConfig) -> tuple[int, int, int, int]:
    return (config.ngram, config.max_nodes, config.min_depth, config.max_breadth)


class RacerDrafter(Drafter):
    """One conversation's automaton and logits table."""

    def __init__(self, setup: DrafterSetup) -> None:
        self.setup = setup
        self.automaton: Automaton | None = None
        self._key: tuple[int, int, int, int] | None = None
        self.seen: list[int] = []  # the token stream the automaton was fed (image placeholders left out)
        self.use_trie = self.use_table = False
        self.policy: TreePolicy | None = None  # None: a fixed budget
        self.generated: list[int] = []  # this reply's tokens, for the policy's labels
        self._full: Tree | None = None  # this step's whole tree, before the policy's cut
        self._recorded: list = []  # this reply's trees the policy is still to learn from (TreePolicy.record)
        self._prev = -1  # the token before this step's root
        self._drafting_s = 0.0  # this step's retrieval and choice, in seconds (TreePolicy.note_drafting)

    @classmethod
    def create(cls, setup: DrafterSetup) -> RacerDrafter:
        return cls(setup)

    def warm_copy(self, setup: DrafterSetup) -> RacerDrafter:
        """The same automaton and table (shared, as the benchmark's --warm does)."""
        copy = RacerDrafter(setup)
        copy.automaton, copy._key, copy.seen = self.automaton, self._key, list(self.seen)
        return copy

    def _ensure_automaton(self, config: GenerationConfig) -> Automaton:
        key = _automaton_key(config)
        if self.automaton is None or key != self._key:
            top_k = min(config.max_breadth, self.setup.vocab_size)
            automaton = Automaton(max_nodes=config.max_nodes, min_depth=config.min_depth, ngram=config.ngram)
            automaton.init_logits(self.setup.vocab_size, max(1, top_k))
            if self.setup.seed is not None and config.max_breadth > 0:  # 0: the table stays empty, unseeded too
                self.setup.seed(automaton)
            if self.seen:
                # New settings: rebuild the retrieval corpus from the history.
                automaton.feed(self.seen)
            self.automaton, self._key = automaton, key
        return self.automaton

    def configure(self, config: GenerationConfig) -> None:
        self._ensure_automaton(config)
        # the sources the method declares (racer both, retrieval and logits one each);
        # ngram 0 or max_breadth 0 turns that source off, as the original's flags do
        spec = registry.REGISTRY[config.method]
        self.use_trie = registry.AUTOMATON in spec.sources and config.ngram > 0
        self.use_table = registry.LOGITS in spec.sources and config.max_breadth > 0
        auto = config.max_num_draft == "auto" and self.setup.policy_for is not None
        self.policy = self.setup.policy_for(config.method) if auto else None  # type: ignore[misc]
        self.generated = []

    def reads_prompt_logits(self) -> bool:
        # The paper's fixed budget learns every prompt row's top-k. Under the cost
        # policy the table learns from the steps only: on built-in 1-14 the prompt
        # rows moved MAT by 0.01 and the head over them cost about a tenth of a
        # reply (docs/design.md, "A prompt's logits").
        return self.use_table and self.automaton is not None and self.policy is None

    def prefilled(self, cached: list[int], base: int, logits: Any, captured: Any) -> list[np.ndarray | None] | None:
        """The table learns each new position's top-k, keyed by its token and
        (previous token, token); only the last position's when `logits` holds
        that row alone (`reads_prompt_logits`)."""
        chunk = cached[base:]
        learned: list[np.ndarray | None] = [None] * len(chunk)
        automaton = self.automaton
        if not self.use_table or automaton is None:
            return learned
        rows = [i for i, t in enumerate(chunk) if t not in self.setup.placeholder_ids]
        at = rows
        if logits.shape[0] < len(chunk):
            rows = [i for i in rows if i == len(chunk) - 1]
            at = [logits.shape[0] - 1] * len(rows)
        if rows:
            top = top_k_rows(logits[at], automaton.top_k)
            prev = [cached[base + i - 1] if base + i else -1 for i in rows]
            automaton.update(np.asarray([chunk[i] for i in rows], dtype=np.int64), top, prev)
            for i, row in zip(rows, top, strict=True):
                learned[i] = row
        return learned

    def start(self, prompt: list[int], first: int) -> None:
        # The root is fed with the step that verifies it: retrieval for a
        # root reads the text up to, not including, that root.
        self.generated = [first]
        if self.use_trie and self.automaton is not None:
            self.automaton.feed(prompt[_common_prefix(self.seen, prompt) :])
            self.seen = list(prompt)

    def draft(self, root: int, prev: int, limit: int | None, load: tuple[int, int] = (0, 0)) -> Tree:
        assert self.automaton is not None, "configure() first"
        self._full, self._prev = None, prev
        if self.policy is None:
            return _tree(self.automaton, root, limit or 1, prev, "fixed")
        # a full batch where no tree could pay: plain decoding, undrafted (alone a tree is always drafted)
        if load[0] and not self.policy.worth_drafting(load):
            return Tree.root_only(root)
        start = drafting_clock()
        self._full = _tree(self.automaton, root, self.policy.largest, prev, "auto")
        tree = cut(self._full, self.policy, load)
        self._drafting_s = drafting_clock() - start
        return tree

    def verified(self, tree: Tree, logits: Any, path: list[int], emitted: list[int], captured: Any) -> np.ndarray | None:
        """Teach the table every node's top choices (keyed by the node's token
        and by (its parent's token, its token)), the automaton the fed text,
        the policy the acceptance."""
        automaton = self.automaton
        assert automaton is not None
        start = drafting_clock()
        drafted = self.policy is not None and self._full is not None and tree.selection is not None
        if drafted:
            self.policy.record(self._full, len(self.generated) - 1, tree.selection, self._recorded)
        recorded = drafting_clock() - start
        self._full = None
        top = fed = None
        if self.use_trie:
            # the root and the accepted tokens up to the bonus (cut at an end-of-turn token)
            fed = [int(tree.tokens[0]), *emitted[:-1]]
            placeholders = self.setup.placeholder_ids
            if placeholders:
                fed = [t for t in fed if t not in placeholders]
        if self.use_table:  # the table's learning, and the automaton fed, in one call
            top = learn_top_k(automaton, logits, tree.tokens, tree.parents, self._prev, fed)
        elif fed is not None:
            automaton.feed(fed)
        if fed is not None:
            self.seen.extend(fed)
        self.generated.extend(emitted)
        if self.policy is not None:
            learning = drafting_clock()
            self.policy.learn(self.generated, pending=self._recorded)
            if drafted:  # drafting, recording and learning: what a plain step does not spend
                self.policy.note_drafting(self._drafting_s + recorded + drafting_clock() - learning)
        return top

    def finish(self) -> None:
        if self.policy is not None:
            self.policy.learn(self.generated, final=True, pending=self._recorded)


_SOURCE_OF_BITS = bytes([0, registry.AUTOMATON.id, registry.LOGITS.id, registry.AUTOMATON.id])
"""A node's Source id by its automaton bits (RETRIEVAL_BIT, LOGITS_BIT): retrieval's when it has that bit."""


def _tree(automaton: Automaton, root: int, budget: int, prev: int, rule: str) -> Tree:
    """The automaton's tree under `root` with its bits read as this method's
    sources (both bits: the automaton's); its node columns alone, the leaf
    paths and DraftTree left out (what `retrieve` would add, unread here)."""
    tokens, parents, depths, mask, sources, context, rank, share = automaton.retrieve_nodes(root, budget, prev,
                                                                                            _SOURCE_OF_BITS)
    return built(Tree, tokens=tokens, parents=parents, depths=depths, ancestors=mask, sources=sources,
                 context=context, rank=rank, rule=rule, fed=0, drafted=len(tokens), selection=None, estimates=None,
                 share=share)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
