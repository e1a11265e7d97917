"""Mistral: Llama's layer; its sliding window (when set) is applied by the mask."""

from racer_core.models.family import Family

FAMILY = Family("mistral")
