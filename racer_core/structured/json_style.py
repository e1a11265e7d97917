"""How JSON is written under a grammar: compactly, on one line, as models
print it. No free whitespace (a weak model could pad forever) and fixed
separators, which makes the keys' punctuation forced tokens (drafted with
certainty). A schema's own "x-guidance" options win over these. Pure data:
the API writes tool-call grammars with it without importing the engine."""

from __future__ import annotations

import json
from typing import Any

JSON_STYLE: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def styled(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with JSON_STYLE as its "x-guidance" defaults (its own options kept)."""
    return {**schema, "x-guidance": {**JSON_STYLE, **schema.get("x-guidance", {})}}


def lark_json(schema: dict[str, Any]) -> str:
    """A Lark grammar's `%json{...}` embedding of `schema`, written in JSON_STYLE
    (a %json inside Lark takes no compile options but the schema's own)."""
    return "%json" + json.dumps(styled(schema))
