"""argparse types shared by the commands: each value is read and checked by
the rule the engine itself applies (GenerationConfig), so the command line,
the settings screen and the Python API accept and refuse the same values
with the same words, before any model loads."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

from racer_core.common.config import GenerationConfig
from racer_core.common.errors import RacerError
from racer_core.common.events import METHODS

T = TypeVar("T")


def rule(check: Callable[[str], T], name: str) -> Callable[[str], T]:
    """An argparse type that reads a value by a rule of racer_core (the one
    the screens use too): its one-line RacerError becomes a usage error."""

    def parse(text: str) -> T:
        try:
            return check(text)
        except RacerError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = name  # argparse names the type in some messages
    return parse


def param(name: str) -> Callable[[str], Any]:
    """Reads one generation parameter by GenerationConfig's own rules."""
    return rule(lambda text: GenerationConfig.parse_field(name, text), name)


def at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {value}")
        return value

    parse.__name__ = f"at_least_{low}"
    return parse


def methods(text: str) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in names if m not in METHODS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown method(s) {', '.join(bad) or '(none)'}; choose from {', '.join(METHODS)}"
        )
    return list(dict.fromkeys(names))


def str2bool(text: str) -> bool:
    """true/false as the original reads them (yes/no, t/f, 1/0 too)."""
    lowered = text.strip().lower()
    if lowered in ("true", "t", "yes", "y", "1"):
        return True
    if lowered in ("false", "f", "no", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


TOP_P_HELP = (
    "nucleus sampling mass from 0 to 1; 0, the original's default, means no nucleus filter, like 1 "
    "(at temperature 0 decoding is greedy and top-p is unused)"
)
