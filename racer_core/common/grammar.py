"""A constraint on a reply's text: JSON mode, a JSON schema, a regex or a grammar.

Pure data, torch-free, so the API and the app build one without the engine;
`racer_core/structured/` (the [structured] extra) compiles it for a model's
vocabulary and masks every tree node's row with it. The API's
`response_format`, `tools` and `racer.grammar` and the chat's `!!json` all
come down to one of these.
"""

from __future__ import annotations

from dataclasses import dataclass

from racer_core.common.errors import InputError

JSON_OBJECT = "json_object"  # any JSON object (OpenAI's JSON mode); `text` unused
JSON_SCHEMA = "json_schema"  # `text`: the schema, as JSON text
REGEX = "regex"  # `text`: a regular expression the whole reply matches
LARK = "lark"  # `text`: a Lark grammar (llguidance's dialect: %json{...} embeds a schema)
GBNF = "gbnf"  # `text`: a GBNF grammar, as llama.cpp's server takes `grammar`
KINDS = (JSON_OBJECT, JSON_SCHEMA, REGEX, LARK, GBNF)


@dataclass(frozen=True)
class Grammar:
    """What a reply must match; checked for shape here, compiled by racer_core/structured."""

    kind: str
    text: str = ""
    strict: bool = True  # json_schema: OpenAI's `strict`; the engine enforces the schema either way

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InputError(f"unknown grammar kind {self.kind!r}; use one of {', '.join(KINDS)}")
        if not isinstance(self.text, str):
            raise InputError(f"a {self.kind} grammar's text must be a string")
        if self.kind != JSON_OBJECT and not self.text.strip():
            raise InputError(f"a {self.kind} grammar needs its text")
