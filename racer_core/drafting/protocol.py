"""What the decoder asks of a drafting method (racer_core/engine/decoder.py).

One drafter per method per conversation (methods that share state, like
racer's one-source variants, share one: registry.py's `shares`). The decoder
calls, for each reply:

    configure(config)            the reply's settings, before its prompt is prefilled
    truncate(length) -> int      the cache was cut (or is checked) at `length`
    prefilled(...) per chunk     the prompt's new positions and their logits
    start(prompt, first)         the prompt's text, and the reply's first token
    draft(root, prev, limit, load)  each step: the tree under `root`
    verified(...)                each step: what the model said about that tree
    finish()                     the reply ended (finished, stopped or failed)

`Drafter` below is the protocol with do-nothing defaults: a method subclasses
it and overrides what it uses (see docs/drafters.md and ngram.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from racer_core.drafting.tree import Tree

if TYPE_CHECKING:
    from racer_core.budget.tree_policy import TreePolicy
    from racer_core.common.config import GenerationConfig


@dataclass(frozen=True)
class DrafterSetup:
    """What a conversation's drafter may use of the loaded model."""

    vocab_size: int
    placeholder_ids: frozenset[int] = frozenset()  # image tokens: never drafted from, never learned
    head: Any = None  # an EAGLE-3 draft head (models/eagle3_head.py), for methods that need one
    policy_for: Callable[[str], TreePolicy] | None = None  # the engine's tree policy per method (budget auto)
    seed: Callable[[Any], None] | None = None  # seeds a new automaton from the chat corpus (drafting/corpus.py)


class Drafter:
    """A method's drafting state for one conversation; the defaults never draft."""

    capture_layers: tuple[int, ...] = ()  # target layers whose input states `prefilled`/`verified` receive

    @classmethod
    def create(cls, setup: DrafterSetup) -> Drafter:
        """A fresh drafter (empty state) for a conversation on this model."""
        return cls()

    def warm_copy(self, setup: DrafterSetup) -> Drafter | None:
        """The drafter a new conversation starts from when warmed by this one
        (the benchmark's --warm); None starts it cold."""
        return None

    def configure(self, config: GenerationConfig) -> None:
        """A reply with `config` begins; its prompt is not yet prefilled."""

    def truncate(self, length: int) -> int:
        """The cache holds its first `length` positions; returns how many of
        them this drafter has state for (the decoder feeds the rest again)."""
        return length

    def reads_prompt_logits(self) -> bool:
        """Whether `prefilled` reads every prompt row's logits (racer's table
        learns them). Else the prefill computes only each chunk's last row's:
        the head over every prompt row was about a quarter of a prefill."""
        return False

    def prefilled(self, cached: list[int], base: int, logits: Any, captured: Any) -> list[np.ndarray | None] | None:
        """Prompt positions `base` on of `cached` were fed, with their logits (and
        the states entering `capture_layers`). Returns what it learned per
        position for the chat corpus (a top-k row or None), or None."""
        return None

    def start(self, prompt: list[int], first: int) -> None:
        """The reply's prompt (image placeholders left out) and first token."""

    def draft(self, root: int, prev: int, limit: int | None, load: tuple[int, int] = (0, 0)) -> Tree:
        """The tree under `root` (`prev` the token before it): at most `limit`
        nodes with the root, or the drafter's own size when None. `load`: the
        other sequences sharing this step's pass and their rows ((0, 0) alone);
        a drafter that sizes its tree by cost (racer's policy) weighs it against them."""
        return Tree.root_only(root)

    def verified(self, tree: Tree, logits: Any, path: list[int], emitted: list[int], captured: Any) -> np.ndarray | None:
        """The model's `logits` (one row per node) for `tree`; `path` the accepted
        nodes (root first); `emitted` the tokens the reply grew by. Returns the
        nodes' top-k rows for the chat corpus, or None."""
        return None

    def finish(self) -> None:
        """The reply ended (finished, stopped or failed)."""
