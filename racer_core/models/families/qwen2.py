"""Qwen2: biased q/k/v projections; a sliding window only with use_sliding_window
(then on some layers only, which transformers' config works out)."""

from racer_core.models.family import Family

FAMILY = Family("qwen2", qkv_bias=True, window_switch="use_sliding_window")
