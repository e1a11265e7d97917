"""Repetition penalties, each tree node's from its own path.

A penalty depends on the text before the token chosen, so under tree
verification a node's row is penalized by the reply so far plus the drafted
tokens on the path down to that node: exactly the text plain decoding would
have before the same position, so racer keeps ar's output (greedy) and its
distribution (sampling).

As vLLM's (and OpenAI's, for the first two):
- `frequency`: minus `frequency` times the count of the token in the reply so far;
- `presence`: minus `presence` once the token is in the reply so far;
- `repetition` (transformers' rule): a token in the prompt or the reply so far
  has a positive logit divided by it, a negative one multiplied.
The repetition penalty comes first, then the other two, as in vLLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from racer_core.common.config import GenerationConfig


@dataclass(frozen=True)
class Penalties:
    frequency: float = 0.0
    presence: float = 0.0
    repetition: float = 1.0

    @property
    def active(self) -> bool:
        return self.frequency != 0.0 or self.presence != 0.0 or self.repetition != 1.0


class Penalizer:
    """Penalizes rows of one reply: the prompt is fixed, the reply's tokens are given per row."""

    def __init__(self, penalties: Penalties, prompt: Sequence[int]) -> None:
        self.penalties = penalties
        self.prompt = list(prompt)
        self._in_prompt: torch.Tensor | None = None  # built on the first row (its size and device)

    def __call__(self, row: torch.Tensor, reply: Sequence[int]) -> torch.Tensor:
        """`row` (a node's logits) penalized for `reply`, the reply's tokens before that node, as float32."""
        p = self.penalties
        scores = row.float().clone()
        reply_ids = torch.tensor(list(reply), dtype=torch.long, device=scores.device)
        if p.repetition != 1.0:
            if self._in_prompt is None:
                self._in_prompt = torch.zeros(scores.shape[-1], dtype=torch.bool, device=scores.device)
                self._in_prompt[torch.tensor(self.prompt, dtype=torch.long, device=scores.device)] = True
            seen = self._in_prompt.clone()
            seen[reply_ids] = True
            picked = scores[seen]
            scores[seen] = torch.where(picked > 0, picked / p.repetition, picked * p.repetition)
        if len(reply_ids) and (p.frequency != 0.0 or p.presence != 0.0):
            counts = torch.bincount(reply_ids, minlength=scores.shape[-1]).to(scores.dtype)
            scores -= p.frequency * counts + p.presence * (counts > 0).to(scores.dtype)
        return scores


def penalties_of(config: GenerationConfig) -> Penalties:
    return Penalties(config.frequency_penalty, config.presence_penalty, config.repetition_penalty)
