"""OpenAI's request fields this server takes only at their neutral values.

Clients and frameworks send many of OpenAI's fields by default, at values that
change nothing (`functions: []`, `logit_bias: {}`, `store: false`). Those
pass; any other value of them is refused in one sentence that names the field
and the value and says what is not supported, never ignored: a request that
asks for logit bias or stored completions must not be answered as if it had them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def _empty(value: Any) -> bool:
    return value in ([], {}, "")


def _is(*values: Any) -> Callable[[Any], bool]:
    return lambda value: any(value is v or (type(value) is type(v) and value == v) for v in values)


def _string_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _text_only(value: Any) -> bool:
    return value == ["text"]


NO_FUNCTIONS = "the legacy functions API is not supported; use tools"
Rule = tuple[Callable[[Any], bool], str]

# field -> (is it neutral?, what is not supported); null is always neutral
def _never(value: Any) -> bool:
    return False


def _string(value: Any) -> bool:
    return isinstance(value, str)


CHAT: dict[str, Rule] = {
    "logit_bias": (_empty, "no logit bias (only {})"),
    "functions": (_empty, f"{NO_FUNCTIONS} (only [])"),
    "function_call": (_is("none", "auto"), f"{NO_FUNCTIONS} (only \"none\", or \"auto\" with no functions)"),
    "store": (_is(False), "completions are stored nowhere (only false)"),
    "metadata": (_string_map, "metadata maps strings to strings (it is accepted and kept nowhere)"),
    "service_tier": (_is("auto", "default"), "one service tier (only \"auto\" or \"default\")"),
    "modalities": (_text_only, "text output only (only [\"text\"])"),
    "audio": (_never, "no audio output (only null)"),
    "prediction": (_never, "no predicted outputs (only null)"),
    "web_search_options": (_never, "no web search (only null)"),
    "reasoning_effort": (_never, "no reasoning effort levels (only null; racer.enable_thinking switches a "
                                 "reasoning model's thinking on or off)"),
    "verbosity": (_is("medium"), "no verbosity levels (only \"medium\")"),
    "prompt_cache_key": (_string, "a string (accepted and unused: each request is its own conversation)"),
    "safety_identifier": (_string, "a string (accepted and unused)"),
    "prompt_cache_options": (lambda value: isinstance(value, dict), "an object (accepted and unused: each request "
                                                                     "is its own conversation)"),
    "prompt_cache_retention": (_is("in_memory", "24h"), "\"in_memory\" or \"24h\" (accepted and unused)"),
    "moderation": (_never, "no moderation (only null)"),
}
COMPLETION: dict[str, Rule] = {
    "logit_bias": CHAT["logit_bias"],
    "suffix": (_empty, "no insertion (only \"\")"),
    "echo": (_is(False), "the prompt is not echoed (only false)"),
}


def first_not_neutral(values: dict[str, Any], rules: dict[str, Rule]) -> tuple[str, str] | None:
    """The first field whose value is not neutral: (its name, a sentence naming it and its value)."""
    for name, (neutral, why) in rules.items():
        value = values.get(name)
        if value is not None and not neutral(value):
            return name, f"{name} {shown(value)} is not supported: {why}"
    return None


def shown(value: Any, limit: int = 60) -> str:
    """A value as JSON, cut short."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."
