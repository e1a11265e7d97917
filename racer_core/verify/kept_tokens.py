"""The tokens a sampled row keeps, found among the row's largest scores.

transformers' processors (sampling.py's reference) sort the whole row for
top-p (49,152 entries on the embedded model) and run a softmax or two over
it: several milliseconds a sampled token on a CPU, as much as the step's
forward pass, paid by every method alike, so it also halved what a tree's
drafts could gain under sampling. The processors keep few tokens -- top-k's k,
top-p's nucleus, min-p's tokens within a factor of the best -- and those are
among the row's largest scores. So this takes the row's CANDIDATES largest
(torch.topk: 0.1 ms a row; the automaton extension's scan takes 0.04 ms but
lives a layer above verify/), applies the processors' rules to them in
transformers' order (temperature, top-k, top-p, min-p) and gives None where a rule's boundary may lie past them (a flat row,
a large k): the caller then runs the processors themselves.

The rules, each as transformers states it:
- top-k keeps every score at least the k-th largest (ties kept);
- top-p keeps a token while the probability of the tokens above it is below
  p (its sorted tail's cumulative probability above 1 - p), the first always;
- min-p keeps a token whose probability is at least min_p times the best's,
  that is exp(score - best score) >= min_p.
The probabilities here are summed from the top (the row's total by torch's
float32 logsumexp, the candidates' in float64), where transformers sums
float32 from the bottom: a token whose tail sits within rounding of the
boundary (a few in ten million of the mass) can fall on the other side. The
kept tokens' probabilities are the softmax of their scores, as after the
processors' -inf fill. Equal scores at a boundary are kept in
torch.topk's order among equals, transformers' in torch.sort's (neither
specified): as many are kept, as likely, perhaps not the same ones.
"""

from __future__ import annotations

import math

import numpy as np
import torch

CANDIDATES = 64
"""Largest scores a row's kept tokens are looked for among."""


def kept_tokens(scores: np.ndarray, top_k: int, top_p: float, min_p: float
                ) -> tuple[np.ndarray, np.ndarray] | None:
    """(kept token ids ascending, their probabilities) for a float32 row already
    divided by the temperature, under the processors that are on (top_k 0,
    top_p 1.0, min_p 0.0: off); None where the answer may lie past the
    CANDIDATES largest scores."""
    n = scores.shape[0]
    if n <= CANDIDATES + 1 or top_k > CANDIDATES - 1:
        return None
    if not top_k and top_p >= 1.0 and not min_p:
        return None  # no filter: every token is kept, the caller's whole-row softmax is the answer
    top = torch.topk(torch.from_numpy(scores), CANDIDATES)
    ids, values = top.indices.numpy(), top.values.numpy().astype(np.float64)
    best = values[0]
    if not np.isfinite(best):
        return None
    weights = np.exp(values - best)  # each candidate's probability as a multiple of the best's
    count = CANDIDATES  # the candidates still kept, largest first
    if top_k:
        kth = values[top_k - 1]
        if values[-1] >= kth:  # ties of the k-th may lie past the candidates
            return None
        count = int(np.count_nonzero(values >= kth))
    if top_p < 1.0:
        if top_k:
            total = weights[:count].sum()
        else:  # the whole row's mass, as the best's multiple (torch's float32 logsumexp: a third of numpy's float64 time)
            total = math.exp(float(torch.logsumexp(torch.from_numpy(scores), 0)) - best)
        above = np.concatenate([[0.0], np.cumsum(weights[:count])[:-1]]) / total
        inside = np.flatnonzero(above >= top_p)
        if not len(inside):
            if not top_k:
                return None  # the nucleus goes on past the candidates
        else:
            count = max(1, int(inside[0]))
    if min_p:
        near = weights[:count] >= min_p
        if not top_k and top_p >= 1.0 and near[-1]:
            return None  # tokens within min_p of the best may lie past the candidates
        count = max(1, int(np.count_nonzero(near)))
    kept, weights = ids[:count], weights[:count]
    order = np.argsort(kept, kind="stable")
    return kept[order], (weights / weights.sum())[order]
