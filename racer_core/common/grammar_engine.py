"""The [structured] extra's engine, llguidance, imported only when a reply asks for a grammar."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from racer_core.common.errors import InputError

EXTRA_HINT = ("structured output needs the optional extra [structured] (llguidance); "
              "pip install 'racer-tui[structured]'")


def available() -> bool:
    """Whether llguidance is installed, found without importing it (capabilities.py asks before a load)."""
    return importlib.util.find_spec("llguidance") is not None


def llguidance() -> ModuleType:
    """The llguidance module, or an InputError naming the extra."""
    try:
        import llguidance
    except ImportError as error:
        raise InputError(EXTRA_HINT) from error
    return llguidance
