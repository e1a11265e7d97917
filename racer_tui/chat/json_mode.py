"""The chat's JSON mode: a reply constrained to one JSON object.

`!!json PROMPT` sends PROMPT (the prefix left out of the message) with
`Grammar("json_object")`; the `json_mode` setting does it for every reply.
The engine enforces the grammar through the [structured] extra and says so
in one line when it is missing; its forced tokens show in the grammar's
colour (registry.GRAMMAR).
"""

from __future__ import annotations

from racer_core.common.grammar import JSON_OBJECT, Grammar

JSON_PREFIX = "!!json"
JSON_GRAMMAR = Grammar(JSON_OBJECT)
JSON_LABEL = "JSON"  # what the status line and a reply's note say when it was on


def split_json_prefix(text: str) -> tuple[str, bool]:
    """The message without a leading `!!json` (and the space after it), and whether it had one."""
    if text == JSON_PREFIX or text.startswith(JSON_PREFIX) and text[len(JSON_PREFIX)].isspace():
        return text[len(JSON_PREFIX):].strip(), True
    return text, False


def reply_grammar(prefixed: bool, json_mode: bool) -> Grammar | None:
    """A reply's constraint: JSON when asked by the prefix or the setting, else none."""
    return JSON_GRAMMAR if prefixed or json_mode else None


def grammar_label(kind: str | None) -> str | None:
    """How a reply's constraint (its grammar's kind) reads in the chat: JSON for JSON modes."""
    if kind is None:
        return None
    return JSON_LABEL if kind.startswith("json") else kind
