"""The tokens a sampled row keeps, found among the row's largest scores.

transformers' processors (sampling.py's reference) sort the whole row for
top-p (49,152 entries on the embedded model) and run a softmax or two over
it: several milliseconds a sampled token on a CPU, as much as the step's
forward pass, paid by every method alike, so it also halved what a tree's
drafts could gain under sampling. The processors keep few tokens -- top-k's k,
top-p's nucleus, min-p's tokens within a factor of the best -- and those are
among the row's largest scores. So this takes the row's CANDIDATES largest
(one native pass over the row, row_scan.cpp: its CANDIDATES largest scores and
the row's total mass, where torch's topk and logsumexp took 0.25 ms a row cold), applies the processors' rules to them in
transformers' order (temperature, top-k, top-p, min-p) and gives None where a rule's boundary may lie past them (a flat row,
a large k): the caller then runs the processors themselves.

The rules, each as transformers states it:
- top-k keeps every score at least the k-th largest (ties kept);
- top-p keeps a token while the probability of the tokens above it is below
  p (its sorted tail's cumulative probability above 1 - p), the first always;
- min-p keeps a token whose probability is at least min_p times the best's,
  that is exp(score - best score) >= min_p.
The probabilities here are summed from the top (the row's total from float32
exponentials summed in float64, the candidates' in float64), where transformers sums
float32 from the bottom: a token whose tail sits within rounding of the
boundary (a few in ten million of the mass) can fall on the other side. The
kept tokens' probabilities are the softmax of their scores, as after the
processors' -inf fill. Equal scores at a boundary are kept in
the lower index first, transformers' in torch.sort's order (not
specified): as many are kept, as likely, perhaps not the same ones.

`reference_top` is the scan's reference in torch and numpy (and its stand-in
where the CPU lacks AVX2): the same candidates, the total in float64.
"""

from __future__ import annotations

import numpy as np
import torch

try:
    from racer_core.verify import _row_scan
except ImportError:  # the extension is not built: the reference answers
    _row_scan = None

NATIVE = _row_scan if _row_scan is not None and _row_scan.available() else None
"""The native row scan (row_scan.cpp), where it is built and the CPU runs it (AVX2 and FMA); else None."""

CANDIDATES = 64
"""Largest scores a row's kept tokens are looked for among."""


def reference_top(row: np.ndarray, temperature: float, k: int, total: bool
                  ) -> tuple[np.ndarray, np.ndarray, float | None] | None:
    """(ids, values, mass) of s = row / temperature (torch's float32 division): its k largest,
    largest first, the lower index first among equals; with `total` the sum of exp(s - max) over
    the row in float64. None where the row holds a NaN or fewer than k values above -inf, or its
    largest is not finite (as row_scan.hpp's row_top)."""
    scores = torch.from_numpy(row) / temperature if temperature != 1.0 else torch.from_numpy(row)
    s = scores.numpy()
    if np.isnan(s).any() or np.count_nonzero(s > -np.inf) < k:
        return None
    kth = torch.topk(scores, k).values[-1].item()  # the k-th largest value (torch's order among equals aside)
    above = np.flatnonzero(s > kth)
    picked = np.concatenate([above, np.flatnonzero(s == kth)[: k - len(above)]])  # equals: the lower indices
    order = picked[np.lexsort((picked, -s[picked].astype(np.float64)))]  # largest first, then by index
    values = s[order]
    if not np.isfinite(values[0]):
        return None
    mass = float(np.exp(s.astype(np.float64) - float(values[0])).sum()) if total else None
    return order.astype(np.int64), values, mass


def _top(row: np.ndarray, temperature: float, k: int, total: bool
         ) -> tuple[np.ndarray, np.ndarray, float | None] | None:
    if NATIVE is not None:
        found = NATIVE.top_scores(row, temperature, k, total)
        if found is not None:
            return found
    return reference_top(row, temperature, k, total)


def kept_tokens(row: np.ndarray, temperature: float, top_k: int, top_p: float, min_p: float
                ) -> tuple[np.ndarray, np.ndarray] | None:
    """(kept token ids ascending, their probabilities) for a float32 row of logits sampled at
    `temperature`, under the processors that are on (top_k 0, top_p 1.0, min_p 0.0: off); None
    where the answer may lie past the CANDIDATES largest scores."""
    n = row.shape[0]
    if n <= CANDIDATES + 1 or top_k > CANDIDATES - 1:
        return None
    if not top_k and top_p >= 1.0 and not min_p:
        return None  # no filter: every token is kept, the caller's whole-row softmax is the answer
    found = _top(np.ascontiguousarray(row, dtype=np.float32), temperature, CANDIDATES, top_p < 1.0 and not top_k)
    if found is None:
        return None
    ids, values, mass = found[0], found[1].astype(np.float64), found[2]
    best = values[0]
    weights = np.exp(values - best)  # each candidate's probability as a multiple of the best's
    count = CANDIDATES  # the candidates still kept, largest first
    if top_k:
        kth = values[top_k - 1]
        if values[-1] >= kth:  # ties of the k-th may lie past the candidates
            return None
        count = int(np.count_nonzero(values >= kth))
    if top_p < 1.0:
        # the row's mass as the best's multiple: the kept candidates' under top-k, else the whole row's
        total = weights[:count].sum() if top_k else mass
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
