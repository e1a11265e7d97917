"""`ngram`: prompt lookup as vLLM's `ngram` speculative method does it,
verified by our own verifier (the same cache, forward and acceptance as
racer), unlike the `pld` anchor, which runs transformers' own loop.

Each step looks for the last n tokens of the reply's context (the prompt and
what the reply emitted so far, the root last) earlier in that context, n from
`prompt_lookup_max` down to `prompt_lookup_min`; the longest n that occurs
wins, and of its occurrences the earliest, as vLLM's proposer chooses. The
tokens that followed it, at most `num_speculative_tokens`, are drafted as a
chain under the root. It keeps no state between replies.

Defaults are vLLM's: prompt_lookup_min = prompt_lookup_max = 5 when neither is
given; vLLM has no default for num_speculative_tokens (its docs' examples use
5), and a fixed budget (max_num_draft) caps the chain further.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from racer_core.common import registry
from racer_core.drafting.protocol import Drafter
from racer_core.drafting.tree import Tree

SOURCE = registry.PROMPT_LOOKUP.id


@dataclass(frozen=True)
class NgramSettings:
    """vLLM's SpeculativeConfig fields for method 'ngram'."""

    prompt_lookup_min: int = 5
    prompt_lookup_max: int = 5
    num_speculative_tokens: int = 5


def propose(context: np.ndarray, low: int, high: int, k: int) -> np.ndarray:
    """The up to `k` tokens that followed the earliest earlier occurrence of
    the longest suffix of `context` of length in [low, high]; empty if none."""
    total = len(context)
    for n in range(min(high, total - 1), low - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(context[:-1], n)  # every n-gram that ends before the last token
        hits = np.flatnonzero((windows == context[total - n :]).all(axis=1))
        if len(hits):
            start = int(hits[0]) + n
            return context[start : start + k]
    return context[:0]


class NgramDrafter(Drafter):
    """A chain copied from earlier in the context."""

    def __init__(self, settings: NgramSettings | None = None) -> None:
        self.settings = settings or NgramSettings()
        self.context = np.zeros(0, dtype=np.int64)

    def start(self, prompt: list[int], first: int) -> None:
        self.context = np.asarray([*prompt, first], dtype=np.int64)

    def draft(self, root: int, prev: int, limit: int | None, load: tuple[int, int] = (0, 0)) -> Tree:
        s = self.settings
        k = s.num_speculative_tokens if limit is None else min(s.num_speculative_tokens, limit - 1)
        chain = propose(self.context, s.prompt_lookup_min, s.prompt_lookup_max, k) if k > 0 else []
        return Tree.of([root, *chain], list(range(-1, len(chain))), SOURCE)

    def verified(self, tree: Tree, logits: Any, path: list[int], emitted: list[int], captured: Any) -> None:
        self.context = np.concatenate([self.context, np.asarray(emitted, dtype=np.int64)])
