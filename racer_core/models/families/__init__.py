"""The decoder families the lean forward computes exactly, one module each;
every module here defines FAMILY (a racer_core.models.family.Family), so
adding a family is adding its module."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from racer_core.models.family import Family


def _discover() -> dict[str, Family]:
    found: dict[str, Family] = {}
    for module in pkgutil.iter_modules(__path__):
        family = importlib.import_module(f"{__name__}.{module.name}").FAMILY
        found[family.model_type] = family
    return found


FAMILIES: dict[str, Family] = _discover()


def family_of(config: Any) -> Family | None:
    """The family of a config (transformers' or a checkpoint's), None when it has none here."""
    return FAMILIES.get(getattr(config, "model_type", None) or "")
