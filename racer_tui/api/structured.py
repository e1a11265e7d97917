"""A request's constraint on its reply: `response_format`, `racer.grammar` and
llama.cpp's top-level `grammar`, as one racer_core Grammar.

OpenAI's shapes: {"type": "text"} (no constraint), {"type": "json_object"}
(any JSON object), {"type": "json_schema", "json_schema": {"name", "schema",
"strict", "description"}}. The extension: `racer.grammar` = {"type": "regex" |
"lark" | "gbnf", "value": TEXT}; llama.cpp's server's `grammar` (a GBNF
string) is taken as its alias. One constraint per request: two are refused.
Whether the engine can compile it is the engine's to say, when the reply
starts (an InputError, a 400 with its line).
"""

from __future__ import annotations

import json
import re
from typing import Any

from racer_core.common.grammar import GBNF, JSON_OBJECT, JSON_SCHEMA, LARK, REGEX, Grammar
from racer_tui.api.neutral_fields import shown

GRAMMAR_TYPES = (REGEX, LARK, GBNF)  # racer.grammar's `type`
SCHEMA_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for json_schema.name


class FieldError(Exception):
    """A structured field in a wrong shape: the sentence and the field it names."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def response_format(value: Any) -> Grammar | None:
    """OpenAI's `response_format` as a Grammar (None: plain text)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise FieldError(f"response_format {shown(value)} must be an object with a type: \"text\", \"json_object\" "
                         "or \"json_schema\"", "response_format")
    kind = value["type"]
    extra = sorted(set(value) - {"type", "json_schema"} if kind == JSON_SCHEMA else set(value) - {"type"})
    if extra:
        raise FieldError(f"response_format of type {kind!r} has no field {extra[0]!r}", f"response_format.{extra[0]}")
    if kind == "text":
        return None
    if kind == JSON_OBJECT:
        return Grammar(JSON_OBJECT)
    if kind == JSON_SCHEMA:
        return _json_schema(value.get("json_schema"), "response_format.json_schema")
    raise FieldError(f"response_format.type {kind!r} is not supported: use \"text\", \"json_object\" or "
                     "\"json_schema\"", "response_format.type")


def _json_schema(spec: Any, where: str) -> Grammar:
    if not isinstance(spec, dict):
        raise FieldError(f"{where} is required: an object with a name and a schema", where)
    unknown = sorted(set(spec) - {"name", "schema", "strict", "description"})
    if unknown:
        raise FieldError(f"{where} has no field {unknown[0]!r}", f"{where}.{unknown[0]}")
    name = spec.get("name")
    if not isinstance(name, str) or not SCHEMA_NAME.match(name):
        raise FieldError(f"{where}.name must be 1 to 64 letters, digits, '_' or '-', not {shown(name)}", f"{where}.name")
    schema = spec.get("schema", {})
    if not isinstance(schema, dict):
        raise FieldError(f"{where}.schema must be a JSON schema object, not {shown(schema)}", f"{where}.schema")
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise FieldError(f"{where}.strict must be true or false, not {shown(strict)}", f"{where}.strict")
    if spec.get("description") is not None and not isinstance(spec["description"], str):
        raise FieldError(f"{where}.description must be a string", f"{where}.description")
    # no schema: OpenAI's default, any JSON object
    return Grammar(JSON_SCHEMA, json.dumps(schema or {"type": "object"}), bool(strict))


def racer_grammar(value: Any, where: str = "racer.grammar") -> Grammar:
    """The extension's {"type": "regex" | "lark" | "gbnf", "value": TEXT}."""
    if not isinstance(value, dict) or set(value) != {"type", "value"}:
        raise FieldError(f"{where} must be {{\"type\": \"regex\" | \"lark\" | \"gbnf\", \"value\": TEXT}}, not "
                         f"{shown(value)}", where)
    kind, text = value["type"], value["value"]
    if kind not in GRAMMAR_TYPES:
        raise FieldError(f"{where}.type must be one of {', '.join(GRAMMAR_TYPES)}, not {shown(kind)}", f"{where}.type")
    if not isinstance(text, str) or not text.strip():
        raise FieldError(f"{where}.value must be the {kind} as a non-empty string", f"{where}.value")
    return Grammar(kind, text)


def gbnf_alias(value: Any) -> Grammar | None:
    """llama.cpp's top-level `grammar`: a GBNF string ("" or null: none)."""
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise FieldError(f"grammar must be a GBNF grammar as a string, not {shown(value)}", "grammar")
    return Grammar(GBNF, value)


def one_constraint(given: dict[str, Grammar | None]) -> Grammar | None:
    """The request's one constraint; two are refused by name (field -> its Grammar or None)."""
    named = [(field, g) for field, g in given.items() if g is not None]
    if len(named) > 1:
        raise FieldError(f"{named[0][0]} and {named[1][0]} both constrain the reply; give one of them", named[1][0])
    return named[0][1] if named else None
