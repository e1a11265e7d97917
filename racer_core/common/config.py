"""Generation parameters: one definition, checked on construction.

`GenerationConfig` is the only place that knows a parameter's type, range and
default. The command line, the settings file and screen, and the Python API
all go through it (`parse_field` for one value given as text or JSON), so a
value is accepted or refused everywhere alike, in the same words, before any
model loads.

Pure Python on purpose: the app and the headless commands import it without
torch or numpy.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from racer_core.common import registry
from racer_core.common.errors import InputError
from racer_core.common.grammar import Grammar

METHODS = registry.names()
"""Decoding methods (racer_core/common/registry.py): the drafters share one code path
(racer_core/engine/decoder.py); `hf` (transformers' generate) and `pld` (its prompt lookup) are anchors."""
TRANSFORMERS_METHODS = registry.names(registry.ANCHOR)
"""The anchors that run transformers' own generate (and its modules, not the lean forward)."""
DRAFTING_METHODS = tuple(s.name for s in registry.METHOD_SPECS if s.cost_sized)
"""The methods whose tree size follows the cost curve (racer and its one-source variants)."""

MAX_DRAFT = 4096
"""Largest draft tree: its attention mask is T x T, 16 MiB at 4096."""
MAX_TEMPERATURE = 5.0
"""Beyond this the distribution is noise; the settings screen always refused it."""
MAX_BREADTH = 1024
"""The logits table holds vocab x breadth ids: 1024 keeps a 262k vocabulary within the automaton's 2**28."""
INT_LIMIT = 2**31 - 1
"""The automaton stores its sizes as int32."""
SEED_LIMIT = 2**64 - 1
"""torch generators take 64-bit seeds."""
MAX_REPETITION_PENALTY = 10.0
"""Beyond this a seen token is all but forbidden."""
MAX_LOGPROBS = 20
"""Most alternatives a token's log-probabilities list (OpenAI's top_logprobs limit)."""


class ConfigError(InputError, ValueError):
    """A generation parameter out of its type or range; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _show(value: Any) -> str:
    """The value as the user wrote it: 7 for a 7 read as 7.0, quotes around text."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value) if isinstance(value, str) else str(value)


def _is_int(value: Any) -> bool:
    # bool is an int subclass, but `true` for a count is a mistake, not a 1
    # (numpy's bool is no Integral at all).
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _int_range(low: int, high: int) -> Callable[[str, Any], int]:
    def check(name: str, value: Any) -> int:
        if not _is_int(value) or not low <= int(value) <= high:
            raise ConfigError(name, f"{name} must be a whole number from {low} to {high}, not {_show(value)}")
        return int(value)

    return check


def _float_range(low: float, high: float, low_open: bool = False, note: str = "") -> Callable[[str, Any], float]:
    span = f"in ({low:g}, {high:g}]" if low_open else f"from {low:g} to {high:g}"

    def check(name: str, value: Any) -> float:
        try:
            x = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
        except OverflowError:  # an int too large for a float
            x = math.inf
        inside = (low < x if low_open else low <= x) and x <= high  # False for NaN
        if not inside:
            raise ConfigError(name, f"{name} must be a number {span}{note}, not {_show(value)}")
        return x

    return check


_nucleus_mass = _float_range(0.0, 1.0, note=" (0: no nucleus filter, like 1)")


def _top_p(name: str, value: Any) -> float:
    # 0 means no nucleus filter, like 1: the original's default (its --top-p 0), read so at every
    # entry point (the command line, the settings, the API, whose OpenAI range 0..1 has it) and kept as 1
    x = _nucleus_mass(name, value)
    return 1.0 if x == 0.0 else x


def _method(name: str, value: Any) -> str:
    if value not in METHODS:
        raise ConfigError(name, f"{name} must be one of {', '.join(METHODS)}, not {_show(value)} (unknown method)")
    return str(value)


def _budget(name: str, value: Any) -> int | str:
    if value == "auto":
        return "auto"
    if not _is_int(value) or not 1 <= int(value) <= MAX_DRAFT:
        raise ConfigError(name, f"{name} must be 'auto' or a whole number from 1 to {MAX_DRAFT}, not {_show(value)}")
    return int(value)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(name, f"{name} must be true or false, not {_show(value)}")
    return value


def _thinking(name: str, value: Any) -> bool | None:
    # None leaves the choice to the chat template (the original's benchmarks omit the switch)
    return None if value is None else _flag(name, value)


def _logprobs(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if not _is_int(value) or not 0 <= int(value) <= MAX_LOGPROBS:
        raise ConfigError(name, f"{name} must be empty (none) or a whole number from 0 to {MAX_LOGPROBS}, "
                                f"not {_show(value)}")
    return int(value)


def _seed(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if not _is_int(value) or not 0 <= int(value) <= SEED_LIMIT:
        raise ConfigError(name, f"{name} must be empty (random) or a whole number from 0 to {SEED_LIMIT}, not {_show(value)}")
    return int(value)


@dataclass(frozen=True)
class FieldSpec:
    """How one parameter is checked and how its text form is read."""

    check: Callable[[str, Any], Any]  # returns the normalized value or raises ConfigError
    kind: str  # "int", "float", "budget", "method", "flag", "seed": how text is read
    help: str


FIELDS: dict[str, FieldSpec] = {
    "method": FieldSpec(_method, "method", "decoding method"),
    "max_new_tokens": FieldSpec(_int_range(1, INT_LIMIT), "int", "tokens to generate per reply"),
    "temperature": FieldSpec(_float_range(0.0, MAX_TEMPERATURE, note=" (0 is greedy)"), "float", "0 is greedy"),
    "top_p": FieldSpec(_top_p, "float", "nucleus sampling mass (0: no filter, like 1)"),
    "sample_top_k": FieldSpec(_int_range(0, INT_LIMIT), "int", "sample from the k likeliest tokens only (0: all)"),
    "min_p": FieldSpec(_float_range(0.0, 1.0), "float", "drop tokens below min_p times the likeliest's probability"),
    "logprobs": FieldSpec(_logprobs, "seed", "report each token's log-probability and this many alternatives"),
    "frequency_penalty": FieldSpec(_float_range(-2.0, 2.0), "float", "minus this times a token's count in the reply"),
    "presence_penalty": FieldSpec(_float_range(-2.0, 2.0), "float", "minus this once a token is in the reply"),
    "repetition_penalty": FieldSpec(_float_range(0.0, MAX_REPETITION_PENALTY, low_open=True), "float",
                                    "divide the logits of tokens already seen by this (1: none)"),
    "max_num_draft": FieldSpec(_budget, "budget", "draft tree budget, or auto"),
    # 0 turns a source off, as in the original: racer then drafts as logits (ngram 0) or retrieval (max_breadth 0)
    "ngram": FieldSpec(_int_range(0, INT_LIMIT), "int", "automaton n-gram length (0: no retrieval drafts)"),
    "max_nodes": FieldSpec(_int_range(1, INT_LIMIT), "int", "automaton capacity"),
    "max_breadth": FieldSpec(_int_range(0, MAX_BREADTH), "int", "logits tree breadth (0: no logits drafts)"),
    "min_depth": FieldSpec(_int_range(1, INT_LIMIT), "int", "shortest retrieved continuation"),
    "enable_thinking": FieldSpec(_thinking, "flag", "let a reasoning model think first (unset: the template decides)"),
    "seed": FieldSpec(_seed, "seed", "sampling seed (empty: random)"),
    # eagle3's dynamic tree, named as in the original's evaluation/inference_eagle3.py
    "total_token": FieldSpec(_int_range(1, MAX_DRAFT), "int", "eagle3: draft tree nodes with the root"),
    "depth": FieldSpec(_int_range(0, 64), "int", "eagle3: expansion steps below the root's children"),
    "top_k": FieldSpec(_int_range(1, 64), "int", "eagle3: children per expanded node and nodes expanded per step"),
}


@dataclass(frozen=True)
class GenerationConfig:
    """What to generate and how; the same fields drive chat and benchmarks.

    Construction checks every field (see FIELDS) and raises ConfigError;
    `replace` checks again. Numbers are normalized (an int temperature
    becomes a float) so equal settings compare and serialize alike.
    """

    method: str = "racer"
    max_new_tokens: int = 256
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    sample_top_k: int = 0  # 0: no top-k cut (`top_k` below is eagle3's tree width)
    min_p: float = 0.0
    logprobs: int | None = None  # None: none; k: the chosen token's and its k likeliest alternatives'
    frequency_penalty: float = 0.0  # racer_core/verify/penalties.py: each tree node's from its own path
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    max_num_draft: int | str = "auto"  # a budget from 1 to MAX_DRAFT, or "auto"
    ngram: int = 10
    max_nodes: int = 10000
    max_breadth: int = 8
    min_depth: int = 2
    enable_thinking: bool | None = False  # None: the chat template decides
    seed: int | None = None
    total_token: int = 60
    depth: int = 5
    top_k: int = 10
    # Not a FIELDS parameter (no form, flag or settings entry): the API's structured
    # fields and the chat's !!json set it per reply (racer_core/common/grammar.py).
    grammar: Grammar | None = None
    # Not a FIELDS parameter either: only the benchmark (its near-tie verdicts) and
    # scripts/step_overhead.py ask for each greedy token's tie margin (StepEvent.margins),
    # a top-2 over the vocabulary per accepted row that chat and the API would pay for nothing.
    tie_margins: bool = False

    def __post_init__(self) -> None:
        for name, spec in FIELDS.items():
            object.__setattr__(self, name, spec.check(name, getattr(self, name)))
        if self.grammar is not None and not isinstance(self.grammar, Grammar):
            raise ConfigError("grammar", "grammar must be a racer_core.common.grammar.Grammar or None")
        _flag("tie_margins", self.tie_margins)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def replace(self, **changes: Any) -> GenerationConfig:
        """A copy with `changes`, checked like a new one."""
        unknown = sorted(set(changes) - set(FIELDS) - set(PER_REPLY))
        if unknown:
            raise ConfigError(unknown[0], f"{unknown[0]} is not a generation parameter")
        return dataclasses.replace(self, **changes)

    @staticmethod
    def parse_field(name: str, value: Any) -> Any:
        """One field's value from text (a command line, a form) or a JSON value.

        Text is read by the field's kind ('auto' for the budget, 'true'/'false'
        for flags, empty for no seed); any other value is checked as is, so a
        JSON `true` is not a budget and `null` is not a token count.
        """
        spec = FIELDS.get(name)
        if spec is None:
            raise ConfigError(name, f"{name} is not a generation parameter")
        if isinstance(value, str):
            value = _from_text(spec.kind, value.strip())
        return spec.check(name, value)


PER_REPLY = ("grammar", "tie_margins")
"""GenerationConfig's fields that are no setting (no form, flag, settings entry or API field)."""

DEFAULTS = GenerationConfig()
"""Every default, defined once (the dataclass fields above)."""


def _from_text(kind: str, text: str) -> Any:
    """Text to a typed value where it reads as one; otherwise the text itself,
    which the field's check then refuses with its usual sentence."""
    lowered = text.lower()
    if kind in ("int", "budget", "seed"):
        if kind == "budget" and lowered == "auto":
            return "auto"
        if kind == "seed" and lowered in ("", "none", "random"):
            return None
        try:
            return int(text)
        except ValueError:
            return text
    if kind == "float":
        try:
            return float(text)
        except ValueError:
            return text
    if kind == "flag":
        return {"true": True, "yes": True, "on": True, "1": True,
                "false": False, "no": False, "off": False, "0": False}.get(lowered, text)
    return lowered  # method names
