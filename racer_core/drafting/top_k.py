"""The logits table's top-k of logits rows, without torch.topk's cost (issue 44).

Racer's table learns the top-k ids of every verified row (drafting/racer.py),
one row per tree node each step. torch.topk on a CPU sorts a copy of the
whole row (49,152 entries on the embedded model) and hands several rows to
its thread pool: 0.1 ms a row, more with a few rows. The automaton
extension's `top_k_rows` (automaton/top_k.cpp) scans a row once, keeping the
k + 1 largest, and answers where the answer is unique -- the k + 1 largest
values distinct, none NaN and the (k + 1)-th above -inf; a row where it is not
(equal values, which torch orders its own way) is asked of torch.topk
itself, so the ids are torch's, always. `reference_top_k_rows` is the same
contract in numpy, for the property tests.

`learn_top_k` is racer's table learning from a verified tree in one native
pass (the automaton's `learn_rows`: the scan, each node's previous token and
the update, and the step's feed), `reference_learn_top_k` the same in the
steps it saves.
"""

from __future__ import annotations

import numpy as np
import torch

from racer_core.drafting.automaton._automaton import TOP_K_MAX, Automaton
from racer_core.drafting.automaton._automaton import top_k_rows as _scan


def top_k_rows(logits: torch.Tensor, k: int) -> np.ndarray:
    """torch.topk(logits, k, dim=-1).indices as an int64 array (rows x k)."""
    if (logits.device.type != "cpu" or logits.dtype != torch.float32 or logits.ndim != 2
            or not 1 <= k <= TOP_K_MAX or k >= logits.shape[1] or logits.requires_grad):
        return torch.topk(logits, k, dim=-1).indices.cpu().numpy()
    top, unique = _scan(logits.contiguous().numpy(), k)
    if not unique.all():
        tied = np.flatnonzero(~unique)
        top[tied] = torch.topk(logits[torch.from_numpy(tied)], k, dim=-1).indices.numpy()
    return top


def reference_top_k_rows(rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The extension's `top_k_rows` in numpy: (each row's k largest ids, largest
    first; whether that answer is unique). Ids of a row not unique are meaningless."""
    order = np.argsort(-rows, axis=1, kind="stable")
    values = np.take_along_axis(rows, order[:, : k + 1], axis=1)
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, not < 0 (equal values)
        falling = (np.diff(values, axis=1) < 0).all(axis=1)
    unique = ~np.isnan(rows).any(axis=1) & falling & (values[:, k] > -np.inf)
    return order[:, :k], unique


def learn_top_k(automaton: Automaton, logits: torch.Tensor, tokens: np.ndarray, parents: np.ndarray,
                prev: int, fed: list[int] | None = None) -> np.ndarray:
    """The logits table learns each node's row of `logits` (one per node of the
    tree `tokens`, `parents`): its top-k ids, keyed by the node's token and by
    (its parent's token, or `prev` for the root; its token); then, with `fed`,
    the automaton is fed those tokens. Returns the ids (nodes x k),
    torch.topk's; what `reference_learn_top_k` does, in one native call where
    the automaton can answer alone (issue 44)."""
    top = None
    if logits.dtype is _FLOAT32 and logits.is_cpu and not logits.requires_grad:
        # the tensor's own memory; learn_rows refuses it unless 2-D and C-contiguous
        top = automaton.learn_rows(logits.numpy(), tokens, parents, prev, fed)
    return reference_learn_top_k(automaton, logits, tokens, parents, prev, fed) if top is None else top


_FLOAT32 = torch.float32  # read once a step: a module constant, not torch's namespace


def reference_learn_top_k(automaton: Automaton, logits: torch.Tensor, tokens: np.ndarray, parents: np.ndarray,
                          prev: int, fed: list[int] | None = None) -> np.ndarray:
    """`learn_top_k` step by step: top_k_rows, each node's previous token, the update, the feed."""
    top = top_k_rows(logits, automaton.top_k)
    before = np.where(parents >= 0, tokens[np.maximum(parents, 0)], prev)
    automaton.update(tokens, top, before)
    if fed is not None:
        automaton.feed(fed)
    return top
