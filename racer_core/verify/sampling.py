"""Choosing a token from a row of logits: argmax, or a sample from the target
distribution after transformers' temperature, top-k, top-p and min-p processors
(in the order transformers' generate applies them).

Each processor reads one row alone (no earlier tokens), so every node of a
draft tree samples from exactly the distribution plain decoding would use there.
The processors are the reference (`TokenSampler.probabilities`); a sample
finds their kept tokens among the row's largest scores where it can
(kept_tokens.py), and draws by one uniform number and the kept tokens'
cumulative probabilities, in token order, either way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from racer_core.verify.kept_tokens import NATIVE, kept_tokens
from racer_core.verify.penalties import Penalizer, Penalties


def greedy_choices(logits: torch.Tensor) -> list[int]:
    """The argmax of each row (the first index of the maximum, as torch.argmax).

    Taken in fp32: the conversion is exact, and torch's argmax over bf16 rows
    of a 49k vocabulary is about 4x slower on the CPU than over fp32 ones
    (1.4 ms against 0.4 for 16 rows), a few percent of a verification step.
    On the CPU numpy's argmax (the same first index) is about 10x faster
    again than torch's: every sequence's every step takes it on the engine loop."""
    rows = logits.float()
    if rows.device.type == "cpu":
        return rows.numpy().argmax(axis=-1).tolist()
    return rows.argmax(dim=-1).tolist()


class TokenSampler:
    def __init__(self, temperature: float, top_p: float, seed: int | None, device: torch.device | str,
                 top_k: int = 0, min_p: float = 0.0, penalties: Penalties | None = None,
                 prompt: Sequence[int] = ()) -> None:
        self.greedy = temperature <= 0.0
        # None: rows are used as they are (and greedy acceptance takes every node's argmax at once)
        self.penalizer = Penalizer(penalties, prompt) if penalties is not None and penalties.active else None
        processors: list[Any] = []
        if not self.greedy:
            # Imported here: a greedy engine never needs transformers (a faster start).
            from transformers.generation.logits_process import (
                MinPLogitsWarper,
                TemperatureLogitsWarper,
                TopKLogitsWarper,
                TopPLogitsWarper,
            )

            if temperature != 1.0:
                processors.append(TemperatureLogitsWarper(temperature))
            if top_k > 0:
                processors.append(TopKLogitsWarper(top_k))
            if top_p < 1.0:
                processors.append(TopPLogitsWarper(top_p))
            if min_p > 0.0:
                processors.append(MinPLogitsWarper(min_p))
        self.processors = processors
        self.temperature, self.top_k, self.min_p = temperature, top_k, min_p
        self.top_p = top_p if top_p < 1.0 else 1.0
        self.filters = not self.greedy and (top_k > 0 or top_p < 1.0 or min_p > 0.0)  # beyond the temperature
        self.generator = torch.Generator(device=device)
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)
        self._no_ids = torch.zeros((1, 0), dtype=torch.long, device=device)

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """The processed target distribution for one row of logits."""
        scores = logits.float()[None, :]
        for processor in self.processors:
            scores = processor(self._no_ids, scores)
        return torch.softmax(scores, dim=-1)[0]

    def penalized(self, logits: torch.Tensor, reply: Sequence[int]) -> torch.Tensor:
        """One row with the penalties for `reply` (the reply's tokens before it); as it is without penalties."""
        return logits if self.penalizer is None else self.penalizer(logits, reply)

    def kept(self, logits: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """(the token ids the processed distribution keeps, ascending; their
        probabilities, float64): `probabilities`' nonzero entries, found among
        the row's largest scores where that settles them (kept_tokens.py)."""
        scores = logits.float()
        if scores.device.type == "cpu":
            if self.filters:  # the row divided by the temperature there, as TemperatureLogitsWarper divides it
                fast = kept_tokens(scores.numpy(), self.temperature, self.top_k, self.top_p, self.min_p)
                if fast is not None:
                    return fast
            else:  # temperature alone: every token, a softmax of the whole row
                if self.temperature != 1.0:
                    scores = scores / self.temperature  # as TemperatureLogitsWarper: float32 by the Python float
                return _softmax_support(scores.numpy())
        probs = self.probabilities(logits).double().cpu().numpy()
        ids = np.flatnonzero(probs > 0)
        return ids, probs[ids] / probs[ids].sum()

    def sample(self, logits: torch.Tensor) -> int:
        if self.greedy:
            return greedy_choices(logits[None, :])[0]
        u = float(torch.rand(1, generator=self.generator, dtype=torch.float64, device=self.generator.device))
        if not self.filters and logits.device.type == "cpu" and NATIVE is not None:
            # temperature alone keeps every token: one native pass draws from the whole row's softmax
            # (kept's numpy softmax and cumulative sum over the row took 1.5 ms a token)
            drawn = NATIVE.sample_index(np.ascontiguousarray(logits.float().numpy()), self.temperature, u)
            if drawn is not None:
                return drawn
        return _draw(*self.kept(logits), u)


def _draw(ids: np.ndarray, probs: np.ndarray, u: float) -> int:
    """The token whose stretch of the cumulative probabilities holds u (in [0, 1))."""
    cdf = np.cumsum(probs)
    return int(ids[min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), len(ids) - 1)])


def _softmax_support(row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every token with a nonzero softmax probability of `row`, and those probabilities (float64)."""
    values = row.astype(np.float64)
    with np.errstate(under="ignore", invalid="ignore"):
        weights = np.exp(values - values.max())
    ids = np.flatnonzero(weights > 0)
    return ids, weights[ids] / weights[ids].sum()


def token_logprobs(rows: torch.Tensor, tokens: list[int], top: int) -> list[tuple[float, list[tuple[int, float]]]]:
    """Each chosen token's log-probability under its row of logits (the model's
    own distribution, before temperature and the other processors), with the
    `top` likeliest tokens of that row: [(logprob, [(token, logprob), ...])]."""
    logp = torch.log_softmax(rows.float(), dim=-1)
    chosen = logp[torch.arange(len(tokens)), torch.tensor(tokens, dtype=torch.long)].tolist()
    if top <= 0:
        return [(lp, []) for lp in chosen]
    values, ids = torch.topk(logp, min(top, logp.shape[-1]), dim=-1)
    return [(lp, list(zip(i, v, strict=True))) for lp, i, v in zip(chosen, ids.tolist(), values.tolist(), strict=True)]


def accept(
    logits: torch.Tensor, tokens: np.ndarray, parents: np.ndarray, sampler: TokenSampler,
    generated: Sequence[int] = (),
) -> tuple[list[int], int]:
    """Walk the tree from the root along the model's choices (docs/design.md 1.5).

    Greedy: the argmax at each node. Sampling: one sample per visited node,
    shared by every path through it, which keeps the target distribution.
    With penalties each visited node's row is penalized for `generated` (the
    reply so far, the root included) plus the path's tokens down to it.
    Returns the accepted node indices (root first) and the bonus token.
    """
    ups, toks = np.asarray(parents).tolist(), np.asarray(tokens).tolist()
    children = {(ups[index], toks[index]): index for index in range(1, len(toks))}
    path = [0]
    if sampler.greedy and sampler.penalizer is None:
        if logits.device.type == "cpu":
            # Only the rows on the accepted path are read, each as it is reached
            # (numpy's argmax of a row: the first index of its maximum, as of all rows at once).
            rows = logits.float().numpy()
            node, token = 0, int(rows[0].argmax())
            while (node, token) in children:
                node = children[(node, token)]
                path.append(node)
                token = int(rows[node].argmax())
            return path, token
        choice = greedy_choices(logits)
        node = 0
        while (node, choice[node]) in children:
            node = children[(node, choice[node])]
            path.append(node)
        return path, choice[node]
    node = 0
    before = list(generated) if sampler.penalizer is not None else []
    while True:
        token = sampler.sample(sampler.penalized(logits[node], before))
        nxt = children.get((node, token))
        if nxt is None:
            return path, token
        node = nxt
        path.append(node)
        before.append(token)
