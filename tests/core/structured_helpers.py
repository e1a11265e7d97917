"""Shared by the structured-output tests: tiny engines of every lean family
with the tiny tokenizer, and the grammars they run under."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from engine_helpers import make_markov

from racer_core.common.grammar import Grammar
from racer_core.engine.engine import RacerEngine
from racer_core.structured.json_style import lark_json
from racer_core.testing import tiny_model, tiny_tokenizer

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
TOOL_ARGUMENTS: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 10}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
REGEX = r"(fox|dog|cat)( (fox|dog|cat)){2,6}\."
# a tool call as the API writes one: a fixed wrapper and the arguments' schema embedded in Lark
TOOL_CALL = ('start: "<tool_call>{\\"name\\": \\"get_weather\\", \\"arguments\\": " args "}</tool_call>"\n'
             f"args: {lark_json(TOOL_ARGUMENTS)}\n")
GRAMMARS = {
    "schema": Grammar("json_schema", json.dumps(SCHEMA)),
    "regex": Grammar("regex", REGEX),
    "tool_call": Grammar("lark", TOOL_CALL),
}
PROMPT_TEXT = "The quick brown fox jumps over the lazy dog. A tiny model repeats what it saw."


@cache
def structured_engine(family: str) -> RacerEngine:
    """A tiny near-Markov engine (drafting pays) with the tiny tokenizer, whose end-of-turn tokens end replies."""
    return RacerEngine(make_markov(tiny_model(family, 0)), tiny_tokenizer(), f"tiny-{family}")


def reply_text(engine: RacerEngine, tokens: list[int]) -> str:
    """The reply's text without its end-of-turn token."""
    return str(engine.tokenizer.decode([t for t in tokens if t not in engine.runtime.eos_ids]))
