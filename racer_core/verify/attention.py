"""The one attention entry point of the lean forward.

Every verification pass, one request's tree or several requests' trees in one
batched pass (racer_core/models/lean_forward.py, `LeanForward.batch`), calls
`attend` once per request with that request's queries, its whole cache (the
cached prefix, then the tree's rows just written) and its mask. A kernel that
makes attention batch-invariant (each row reduced over its own context in a
fixed order) replaces the body here and nowhere else.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """Attention of T query rows over L cached keys.

    q: (1, heads, T, D); keys, values: (1, kv_heads, L, D) with the tree's own
    rows last; mask: (1, 1, T, L) additive, 0 where a row sees a key and the
    dtype's minimum where it does not (tree_attention.TreeMaskBuilder).
    Returns (1, heads, T, D)."""
    gqa = q.shape[1] != keys.shape[1]
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale, enable_gqa=gqa)
