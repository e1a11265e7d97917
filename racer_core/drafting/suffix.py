"""SuffixDecoding (Oliaro et al., 2024; vLLM's `suffix` method) through its
authors' library, arctic-inference's SuffixDecodingCache.

Used as vLLM's proposer uses it: each reply is a request whose prompt builds
the request's own suffix tree; every emitted token extends it and, through
the cache's global tree, the cached responses that later requests draft
from; each step speculates from the last `max_tree_depth` tokens. The cache
lives as long as its drafter: one conversation, or the whole run when the
benchmark keeps it across questions (--warm), as vLLM's spans its requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from arctic_inference.suffix_decoding import SuffixDecodingCache

from racer_core.common import registry
from racer_core.drafting.protocol import Drafter
from racer_core.drafting.tree import Tree

SOURCE = registry.SUFFIX.id  # its drafts are shown as the suffix tree's, not racer's automaton


@dataclass(frozen=True)
class SuffixSettings:
    """vLLM's SpeculativeConfig fields and defaults for method 'suffix'."""

    max_tree_depth: int = 24  # suffix_decoding_max_tree_depth: match plus speculation length
    max_cached_requests: int = 10000  # suffix_decoding_max_cached_requests: responses in the global tree (FIFO)
    max_spec_factor: float = 1.0  # suffix_decoding_max_spec_factor: speculated tokens <= factor * match length
    min_token_prob: float = 0.1  # suffix_decoding_min_token_prob: frequency-estimated probability floor
    # num_speculative_tokens: vLLM defaults it to the tree depth for suffix
    max_spec_tokens: int = 24
    use_tree_spec: bool = False  # vLLM's proposer speculates a chain (the library's default)


class SuffixDrafter(Drafter):
    """One SuffixDecodingCache; a request per reply. A warmed conversation
    shares it, as vLLM's cache spans its requests."""

    def __init__(self, settings: SuffixSettings | None = None) -> None:
        self.settings = settings or SuffixSettings()
        self.cache = SuffixDecodingCache(max_tree_depth=self.settings.max_tree_depth,
                                         max_cached_requests=self.settings.max_cached_requests)
        self._requests = 0
        self._active: int | None = None
        self._context: list[int] = []  # the active request's last tokens, for speculation

    def warm_copy(self, setup: Any) -> SuffixDrafter:
        return self

    def start(self, prompt: Sequence[int], first: int | None = None) -> None:
        self.finish()  # a reply that never finished leaves its request open
        self._requests += 1
        self._active = self._requests
        self.cache.start_request(self._active, list(prompt))
        self._context = list(prompt[-self.settings.max_tree_depth :])
        if first is not None:
            self.emitted([first])

    def emitted(self, tokens: Sequence[int]) -> None:
        if self._active is None or not tokens:
            return
        self.cache.add_active_response(self._active, list(tokens))
        self._context = (self._context + list(tokens))[-self.settings.max_tree_depth :]

    def draft(self, root: int, prev: int = -1, limit: int | None = None, load: tuple[int, int] = (0, 0)) -> Tree:
        assert self._active is not None, "start() first"
        # The root is the last emitted token: the context already ends with it.
        most = self.settings.max_spec_tokens if limit is None else min(self.settings.max_spec_tokens, limit - 1)
        found = self.cache.speculate(
            self._active, self._context, max_spec_tokens=max(most, 0),
            max_spec_factor=self.settings.max_spec_factor, min_token_prob=self.settings.min_token_prob,
            use_tree_spec=self.settings.use_tree_spec,
        ) if most > 0 else None
        if found is None or not found.token_ids:
            return Tree.of([root], [-1], SOURCE)
        # The library's parents index its own list (-1: the context); ours put the root first.
        parents = [-1, *(p + 1 for p in found.parents)]
        return Tree.of([root, *found.token_ids], parents, SOURCE)

    def verified(self, tree: Tree, logits: Any, path: list[int], emitted: list[int], captured: Any) -> None:
        self.emitted(emitted)  # the suffix trees learn from emitted text only

    def finish(self) -> None:
        if self._active is not None:
            self.cache.stop_request(self._active)
            self._active = None
