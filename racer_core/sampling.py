"""Choosing a token from a row of logits: argmax, or a sample from the target
distribution after transformers' temperature and top-p processors."""

from __future__ import annotations

import torch
from transformers.generation.logits_process import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper


class TokenSampler:
    def __init__(self, temperature: float, top_p: float, seed: int | None, device: torch.device | str) -> None:
        self.greedy = temperature <= 0.0
        processors = LogitsProcessorList()
        if not self.greedy:
            if temperature != 1.0:
                processors.append(TemperatureLogitsWarper(temperature))
            if top_p < 1.0:
                processors.append(TopPLogitsWarper(top_p))
        self.processors = processors
        self.generator = torch.Generator(device=device)
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)
        self._no_ids = torch.zeros((1, 0), dtype=torch.long, device=device)

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """The processed target distribution for one row of logits."""
        scores = self.processors(self._no_ids, logits.float()[None, :])
        return torch.softmax(scores, dim=-1)[0]

    def sample(self, logits: torch.Tensor) -> int:
        if self.greedy:
            return int(torch.argmax(logits))
        return int(torch.multinomial(self.probabilities(logits), 1, generator=self.generator))
