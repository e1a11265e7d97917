"""OpenAI's `tools`, `tool_choice` and `parallel_tool_calls` in llama.cpp's
generic tool-call format, for every chat template.

The engine's conversation takes messages only (no `tools` for the template),
so the tools are described in the system message, and the reply is held by a
JSON schema to one of

    {"tool_call": {"name": N, "arguments": {...}}}          one call
    {"tool_calls": [{"name": N, "arguments": {...}}, ...]}  parallel_tool_calls
    {"response": "..."}                                     tool_choice "auto" only

(llama.cpp's server's generic format: COMMON_CHAT_FORMAT_GENERIC), which the
API parses into OpenAI's `tool_calls`. A tool call or a tool result in the
history goes back to the model in the same JSON: the call as the assistant
turn's text, the result as a user turn {"tool_response": {...}}, which every
template renders. `tool_choice` "none" sends no tools at all: plain text.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from racer_core.common.grammar import JSON_SCHEMA, Grammar
from racer_tui.api.neutral_fields import shown
from racer_tui.api.structured import FieldError

CHOICES = ("auto", "none", "required")
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolPlan:
    """How this request's reply is asked for and read back."""

    tools: tuple[Tool, ...]  # those the reply may call (a named tool_choice: that one)
    described: tuple[Tool, ...]  # those the system message describes (all given)
    may_answer: bool  # tool_choice "auto": text ({"response": ...}) or calls
    parallel: bool
    response_schema: dict[str, Any] | None = None  # response_format's schema for the answer (auto only)

    def grammar(self) -> Grammar:
        calls = _calls_schema(self.tools, self.parallel)
        if not self.may_answer:
            return Grammar(JSON_SCHEMA, json.dumps(calls))
        answer = _keyed("response", self.response_schema or {"type": "string"})
        forms = calls["anyOf"] if "anyOf" in calls else [calls]
        return Grammar(JSON_SCHEMA, json.dumps({"anyOf": [*forms, answer]}))

    def system_text(self) -> str:
        """What the system message says about the tools and the reply's form."""
        specs = [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in self.described]
        call = '{"name": "<tool name>", "arguments": {<its arguments>}}'
        form = f'{{"tool_call": {call}}} to call a tool'
        if self.parallel:
            form += f', or {{"tool_calls": [{call}, ...]}} to call several at once'
        if self.may_answer:
            form += ', or with {"response": "<your answer>"} to answer the user'
        return ("You can call any of the following tools to satisfy the user's requests:\n"
                f"{json.dumps(specs, indent=2, ensure_ascii=False)}\n\nRespond in JSON, either with {form}.")


def _calls_schema(tools: tuple[Tool, ...], parallel: bool) -> dict[str, Any]:
    """One call; with `parallel` also a list of them (one call stays open: a small
    model told only of the list tends to repeat its call until max_tokens)."""
    one = [{"type": "object", "properties": {"name": {"const": t.name}, "arguments": t.parameters},
            "required": ["name", "arguments"], "additionalProperties": False} for t in tools]
    call = one[0] if len(one) == 1 else {"anyOf": one}
    single = _keyed("tool_call", call)
    if not parallel:
        return single
    return {"anyOf": [single, _keyed("tool_calls", {"type": "array", "items": call, "minItems": 1})]}


def _keyed(key: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {key: value}, "required": [key], "additionalProperties": False}


def plan(tools: Any, tool_choice: Any, parallel: Any, response_schema: dict[str, Any] | None) -> ToolPlan | None:
    """The request's tool fields as a ToolPlan (None: no tools, or tool_choice "none")."""
    given = _tools(tools)
    if parallel is not None and not isinstance(parallel, bool):
        raise FieldError(f"parallel_tool_calls must be true or false, not {shown(parallel)}", "parallel_tool_calls")
    choice = "auto" if tool_choice is None else tool_choice
    if isinstance(choice, str):
        if choice not in CHOICES:
            raise FieldError(f"tool_choice must be \"auto\", \"none\", \"required\" or "
                             f"{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, not {shown(choice)}",
                             "tool_choice")
        if choice == "required" and not given:
            raise FieldError("tool_choice \"required\" needs tools", "tool_choice")
        if choice == "none" or not given:
            return None
        return ToolPlan(given, given, choice == "auto", parallel is not False, response_schema)
    name = _named_choice(choice)
    chosen = tuple(t for t in given if t.name == name)
    if not chosen:
        raise FieldError(f"tool_choice names the function {name!r}, which is not among the tools",
                         "tool_choice.function.name")
    return ToolPlan(chosen, given, False, False)


def _named_choice(choice: Any) -> str:
    if (not isinstance(choice, dict) or choice.get("type") != "function" or set(choice) != {"type", "function"}
            or not isinstance(choice["function"], dict) or not isinstance(choice["function"].get("name"), str)):
        raise FieldError(f"tool_choice must be \"auto\", \"none\", \"required\" or {{\"type\": \"function\", "
                         f"\"function\": {{\"name\": ...}}}}, not {shown(choice)}", "tool_choice")
    return choice["function"]["name"]


def _tools(value: Any) -> tuple[Tool, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise FieldError(f"tools must be a list of {{\"type\": \"function\", \"function\": {{...}}}}, not "
                         f"{shown(value)}", "tools")
    out: list[Tool] = []
    for i, item in enumerate(value):
        where = f"tools.{i}"
        if not isinstance(item, dict) or item.get("type") != "function":
            raise FieldError(f"{where} is not supported: only tools of type \"function\" ({shown(item)})", where)
        fn = item.get("function")
        if set(item) != {"type", "function"} or not isinstance(fn, dict):
            raise FieldError(f"{where} must be {{\"type\": \"function\", \"function\": {{\"name\", \"description\", "
                             f"\"parameters\", \"strict\"}}}}", where)
        unknown = sorted(set(fn) - {"name", "description", "parameters", "strict"})
        if unknown:
            raise FieldError(f"{where}.function has no field {unknown[0]!r}", f"{where}.function.{unknown[0]}")
        name = fn.get("name")
        if not isinstance(name, str) or not 1 <= len(name) <= 64 or not set(name) <= NAME_CHARS:
            raise FieldError(f"{where}.function.name must be 1 to 64 letters, digits, '_' or '-', not {shown(name)}",
                             f"{where}.function.name")
        if any(t.name == name for t in out):
            raise FieldError(f"{where}: two tools are named {name!r}", f"{where}.function.name")
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise FieldError(f"{where}.function.parameters must be a JSON schema object", f"{where}.function.parameters")
        description = fn.get("description") or ""
        if not isinstance(description, str):
            raise FieldError(f"{where}.function.description must be a string", f"{where}.function.description")
        out.append(Tool(name, description, params))
    return tuple(out)


# -- the reply read back -------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI sends it

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def read_reply(text: str) -> tuple[str | None, list[ToolCall]]:
    """The reply's (content, tool calls). A reply not in the form (cut short by
    max_tokens, or generated without the grammar) is its text, with no calls."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text, []
    if isinstance(value, dict) and len(value) == 1:
        calls = value.get("tool_calls", [value["tool_call"]] if "tool_call" in value else None)
        if isinstance(calls, list) and calls and all(_is_call(c) for c in calls):
            return None, [ToolCall(f"call_{uuid.uuid4().hex[:24]}", c["name"],
                                   json.dumps(c["arguments"], ensure_ascii=False)) for c in calls]
        if "response" in value:
            answer = value["response"]
            return answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False), []
    return text, []


def _is_call(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("name"), str) and isinstance(value.get("arguments"), dict)


# -- the history sent back ---------------------------------------------------------


def call_text(tool_calls: Any, where: str) -> str:
    """An assistant turn's OpenAI tool_calls as the generic JSON the model writes."""
    if not isinstance(tool_calls, list) or not tool_calls:
        raise FieldError(f"{where} must be a non-empty list of tool calls", where)
    calls = []
    for k, call in enumerate(tool_calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str):
            raise FieldError(f"{where}.{k} must be {{\"id\", \"type\": \"function\", \"function\": {{\"name\", "
                             f"\"arguments\"}}}}", f"{where}.{k}")
        try:
            arguments = json.loads(fn["arguments"])
        except json.JSONDecodeError:
            raise FieldError(f"{where}.{k}.function.arguments is not JSON", f"{where}.{k}.function.arguments") from None
        calls.append({"name": fn["name"], "arguments": arguments})
    body = {"tool_call": calls[0]} if len(calls) == 1 else {"tool_calls": calls}
    return json.dumps(body, ensure_ascii=False)


def result_text(name: str | None, call_id: str, content: str) -> str:
    """A tool turn's result as the user turn the model reads."""
    return json.dumps({"tool_response": {"tool": name, "tool_call_id": call_id, "content": content}},
                      ensure_ascii=False)


# -- the reply as OpenAI's JSON ------------------------------------------------------


def message(content: str | None, calls: list[ToolCall]) -> dict[str, Any]:
    """A whole reply's `message`."""
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        out["tool_calls"] = [c.to_json() for c in calls]
    return out


def deltas(content: str | None, calls: list[ToolCall]) -> list[dict[str, Any]]:
    """A streamed reply's `delta`s, as OpenAI streams them: per call one with its
    id and name (arguments ""), then one with its arguments; or the content."""
    if not calls:
        return [{"role": "assistant", "content": content or ""}]
    out: list[dict[str, Any]] = []
    for k, call in enumerate(calls):
        head = {"index": k, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        out.append({"tool_calls": [head]})
        out.append({"tool_calls": [{"index": k, "function": {"arguments": call.arguments}}]})
    out[0] = {"role": "assistant", "content": None, **out[0]}
    return out
