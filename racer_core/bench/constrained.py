"""Constrained suites: questions whose replies must match a JSON Schema.

A question line may carry `schema` (a JSON Schema object). The runner gives
each of its replies `Grammar("json_schema", schema)`, which the engine
enforces through the [structured] extra (llguidance); the results then say,
per method, how many replies parse as JSON and validate against their schema.
Validity is always computed from the replies' text, never assumed from the
constraint: an engine that ignored the grammar shows up here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from racer_core.common import registry
from racer_core.common.capabilities import CapabilityError, check_grammar
from racer_core.common.grammar import JSON_SCHEMA, Grammar

Verdict = Literal["valid", "invalid", "unparsable"]


def schema_problem(schema: Any) -> str | None:
    """Why `schema` is not a usable JSON Schema (one line), or None when it is."""
    if not isinstance(schema, dict):
        return "schema must be a JSON object"
    import jsonschema  # here: only a suite with schemas pays for its import

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"schema is not a valid JSON Schema ({exc.message})"
    return None


def schema_text(schema: dict[str, Any]) -> str:
    """A schema as the compact JSON text a Grammar and an answer record keep."""
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


def grammar_for(schema: str | None) -> Grammar | None:
    """The constraint a question's replies get: its schema, or none."""
    return None if schema is None else Grammar(JSON_SCHEMA, schema)


def check_output(text: str, schema: str) -> Verdict:
    """Whether a reply parses as JSON and, if so, validates against `schema` (JSON text)."""
    try:
        value = json.loads(text)
    except ValueError:
        return "unparsable"
    import jsonschema

    loaded = json.loads(schema)
    validator = jsonschema.validators.validator_for(loaded)(loaded)
    return "valid" if validator.is_valid(value) else "invalid"


@dataclass(frozen=True)
class Validity:
    """How many constrained replies (every turn of every choice) parse and validate."""

    valid: int = 0
    invalid: int = 0  # JSON, but not what the schema asks
    unparsable: int = 0  # not JSON at all

    @property
    def total(self) -> int:
        return self.valid + self.invalid + self.unparsable

    @property
    def share(self) -> float | None:
        return self.valid / self.total if self.total else None

    @property
    def text(self) -> str:
        """For tables: valid/total, or a dash when nothing was constrained."""
        return "–" if not self.total else f"{self.valid}/{self.total}"

    def to_json(self) -> dict[str, Any]:
        share = self.share
        return {"valid": self.valid, "invalid": self.invalid, "unparsable": self.unparsable,
                "valid_share": None if share is None else round(share, 4)}


def validity(records: Iterable[Any]) -> Validity:
    """Count the replies of answer records that carry a schema (others are not constrained)."""
    counts = {"valid": 0, "invalid": 0, "unparsable": 0}
    for record in records:
        if record.schema is None:
            continue
        for choice in record.choices:
            for text in choice.turns:
                counts[check_output(text, record.schema)] += 1
    return Validity(**counts)


def structured_refusal(questions: Iterable[Any], suite: str, methods: Iterable[str] = ()) -> str | None:
    """One line when the questions have schemas and a method cannot follow them (an anchor)
    or the [structured] extra is missing, else None."""
    if not any(q.schema is not None for q in questions):
        return None
    for spec in [*(registry.method(m) for m in methods), registry.method("ar")]:
        try:
            check_grammar(spec)
        except CapabilityError as exc:
            return f"suite {suite} constrains its replies with JSON schemas: {exc}"
    return None
