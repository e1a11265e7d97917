"""Qwen3 (dense): an rmsnorm on each head's queries and keys."""

from racer_core.models.family import Family

FAMILY = Family("qwen3", qk_norm=True, window_switch="use_sliding_window")
