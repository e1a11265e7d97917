"""Llama (and the embedded SmolLM2): the plain layer."""

from racer_core.models.family import Family

FAMILY = Family("llama")
