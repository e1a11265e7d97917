"""Tree attention on stock transformers models (docs/design.md 1.4, Eq. 2).

The draft tree goes through the model in one forward pass: position ids are
the cached length plus each node's depth, and a 4D additive float mask lets
each node see every cached position and its own ancestors. A boolean mask
would be silently wrong under eager attention, so the mask is always float in
the model's dtype.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch

from racer_core.common.errors import ModelLoadError


def rope_of(config: Any) -> tuple[dict[str, Any], str | None]:
    """The config's rope parameters (transformers 5's rope_parameters or the
    older rope_scaling) and its rope type; the type is None when the
    parameters are not a dict (then transformers' rotary module is the authority)."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if not isinstance(params, dict):
        return {}, None
    return params, params.get("rope_type", params.get("type", "default"))


def cache_argument_name(model: Any) -> str:
    """transformers 5 renames `past_key_values` to `cache`; accept either."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def sliding_window_of(config: Any) -> int | None:
    """The one sliding window all layers share, None for full attention.

    A model mixing sliding and full layers would need one mask per layer kind;
    refuse it clearly instead of verifying with the wrong mask.
    """
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    layer_types = getattr(text_config, "layer_types", None)
    window = getattr(text_config, "sliding_window", None)
    if getattr(text_config, "use_sliding_window", True) is False:
        window = None
    if layer_types:
        kinds = set(layer_types)
        if "sliding_attention" in kinds and len(kinds) > 1:
            raise ModelLoadError(
                f"{text_config.model_type} mixes sliding-window and full attention layers; "
                "tree verification supports one attention kind per model"
            )
        if "sliding_attention" not in kinds:
            window = None
        if kinds - {"sliding_attention", "full_attention"}:
            raise ModelLoadError(f"{text_config.model_type} has layer kinds {sorted(kinds)}; only attention layers can be tree-verified")
    return int(window) if window else None


def rope_switch_of(config: Any) -> int | None:
    """The first position a longrope model ropes with its long factors; None for other ropes.

    transformers picks the short or the long factors once per forward pass, by
    the pass's largest position, and plain decoding ropes each position on its
    own side of this switch: a verified tree must not straddle it."""
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    params, kind = rope_of(text_config)
    if kind != "longrope":
        return None
    # rope_parameters' copy is the one transformers reads; older configs keep it at the top level
    switch = params.get("original_max_position_embeddings") or getattr(text_config, "original_max_position_embeddings", None)
    return int(switch) if switch else None


_NUMPY_DTYPES = {torch.float32: np.float32, torch.float16: np.float16, torch.float64: np.float64}


class TreeMaskBuilder:
    """Builds the (1, 1, T, L + T) additive mask, reusing buffers."""

    def __init__(self, dtype: torch.dtype, device: torch.device | str, window: int | None) -> None:
        self.dtype = dtype
        self.device = device
        self.window = window
        self.neg = torch.finfo(dtype).min
        self._open = torch.zeros((1, 1, 1, 0), dtype=dtype, device=device)  # one row seeing every key
        # the dtype's numpy twin where the mask stays on the CPU (bfloat16 has none: torch builds it)
        self._numpy = _NUMPY_DTYPES.get(dtype) if torch.device(device).type == "cpu" else None

    def build(self, cached: int, ancestor_mask: np.ndarray, depths: np.ndarray) -> torch.Tensor:
        size = ancestor_mask.shape[0]
        if size == 1 and self.window is None and ancestor_mask[0, 0]:
            # A lone row sees every cached key and itself: all zeros, a view of one
            # buffer kept and grown (plain decoding's every step, racer's steps of
            # the root alone; building it took 0.1 ms a step). Nothing writes to a mask.
            if self._open.shape[-1] < cached + 1:
                self._open = torch.zeros((1, 1, 1, 2 * (cached + 1)), dtype=self.dtype, device=self.device)
            return self._open[..., : cached + 1]
        if self._numpy is not None and self.window is None:
            # numpy's calls cost a few us where torch's cost tens: a step's tree mask on the CPU (issue 44)
            built = np.zeros((1, 1, size, cached + size), dtype=self._numpy)
            np.copyto(built[0, 0, :, cached:], self._numpy(self.neg), where=~ancestor_mask)
            return torch.from_numpy(built)
        mask = torch.zeros((1, 1, size, cached + size), dtype=self.dtype)
        tree = torch.tensor(ancestor_mask, dtype=torch.bool)  # a copy: a root-only tree's mask is read-only
        mask[0, 0, :, cached:].masked_fill_(~tree, self.neg)
        if self.window is not None and cached > 0:
            # Query at position cached + depth sees key j only if the distance is below the window.
            query_pos = torch.tensor(depths, dtype=torch.int64) + cached
            key_pos = torch.arange(cached)
            too_far = (query_pos[:, None] - key_pos[None, :]) >= self.window
            mask[0, 0, :, :cached].masked_fill_(too_far, self.neg)
        return mask.to(self.device, non_blocking=True)

    def causal(self, cached: int, size: int) -> torch.Tensor:
        """The plain causal mask for `size` new tokens after `cached` ones."""
        lower = np.tril(np.ones((size, size), dtype=bool))
        return self.build(cached, lower, np.arange(size))
