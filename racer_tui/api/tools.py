"""OpenAI's `tools`, `tool_choice` and `parallel_tool_calls`, in the chat
template's own format where it has one, else llama.cpp's generic format.

A template that writes Hermes' tags (Qwen2.5's, Qwen3's: Engine.tool_syntax
is HERMES) is given the tools and renders them, the calls and the results
itself; the reply is held by a Lark grammar to

    <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>   (one or more, "\n" between)
    or, tool_choice "auto" only, a text without <tool_call>

Any other template gets the generic form: the tools described in the system
message, the reply held by a JSON schema to one of

    {"tool_call": {"name": N, "arguments": {...}}}          one call
    {"tool_calls": [{"name": N, "arguments": {...}}, ...]}  parallel_tool_calls
    {"response": "..."}                                     tool_choice "auto" only

(llama.cpp's server's COMMON_CHAT_FORMAT_GENERIC); a tool call or a tool
result in the history goes back in the same JSON: the call as the assistant
turn's text, the result as a user turn {"tool_response": {...}}, which every
template renders. Either way the API parses the reply into OpenAI's
`tool_calls`. `tool_choice` "none" sends no tools at all: plain text.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from racer_core.common.grammar import JSON_SCHEMA, LARK, Grammar
from racer_core.common.tool_syntax import HERMES
from racer_core.structured.json_style import lark_json
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
    syntax: str | None = None  # the template's own tool syntax (HERMES), or None: the generic form

    def grammar(self) -> Grammar:
        if self.syntax == HERMES:
            return Grammar(LARK, _hermes_grammar(self.tools, self.may_answer, self.parallel, self.response_schema))
        calls = _calls_schema(self.tools, self.parallel)
        if not self.may_answer:
            return Grammar(JSON_SCHEMA, json.dumps(calls))
        answer = _keyed("response", self.response_schema or {"type": "string"})
        forms = calls["anyOf"] if "anyOf" in calls else [calls]
        return Grammar(JSON_SCHEMA, json.dumps({"anyOf": [*forms, answer]}))

    def template_tools(self) -> list[dict[str, Any]] | None:
        """The tools as the chat template takes them (OpenAI's objects); None in the generic form."""
        if self.syntax is None:
            return None
        return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                  "parameters": t.parameters}} for t in self.described]

    def read_reply(self, text: str) -> tuple[str | None, list[ToolCall]]:
        """The reply's (content, tool calls), read in this plan's form."""
        return read_hermes(text) if self.syntax == HERMES else read_reply(text)

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


# Text that never opens a call: an "auto" reply that answers instead of calling.
_NOT_A_CALL = r"/(.|\n)+/ & ~/(.|\n)*<tool_call>(.|\n)*/"


def _hermes_grammar(tools: tuple[Tool, ...], may_answer: bool, parallel: bool,
                    response_schema: dict[str, Any] | None) -> str:
    """The Lark grammar (llguidance's) of a Hermes reply: one call (or with `parallel`
    one or more, a newline between, as the template renders them), or with
    `may_answer` a text (a response_format's JSON) instead. Arguments are written
    compactly (lark_json), as the template's tojson writes them back."""
    rules = [f"start: {'answer | calls' if may_answer else 'calls'}",
             'calls: call ("\\n" call)*' if parallel else "calls: call",
             "call: " + " | ".join(f"call_{k}" for k in range(len(tools)))]
    for k, tool in enumerate(tools):
        head = json.dumps(f'<tool_call>\n{{"name": "{tool.name}", "arguments": ')
        rules.append(f'call_{k}: {head} args_{k} "}}\\n</tool_call>"')
        rules.append(f"args_{k}: {lark_json(tool.parameters)}")
    if may_answer:
        rules.append(f"answer: {lark_json(response_schema)}" if response_schema else "answer: TEXT")
        rules.append(f"TEXT: {_NOT_A_CALL}")
    return "\n".join(rules) + "\n"


def _keyed(key: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {key: value}, "required": [key], "additionalProperties": False}


def plan(tools: Any, tool_choice: Any, parallel: Any, response_schema: dict[str, Any] | None,
         syntax: str | None = None) -> ToolPlan | None:
    """The request's tool fields as a ToolPlan (None: no tools, or tool_choice "none");
    `syntax`: the chat template's own (Engine.tool_syntax), None for the generic form."""
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
        return ToolPlan(given, given, choice == "auto", parallel is not False, response_schema, syntax)
    name = _named_choice(choice)
    chosen = tuple(t for t in given if t.name == name)
    if not chosen:
        raise FieldError(f"tool_choice names the function {name!r}, which is not among the tools",
                         "tool_choice.function.name")
    return ToolPlan(chosen, given, False, False, None, syntax)


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
            return None, _new_calls(calls)
        if "response" in value:
            answer = value["response"]
            return answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False), []
    return text, []


_HERMES_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def read_hermes(text: str) -> tuple[str | None, list[ToolCall]]:
    """A Hermes reply's (content, tool calls), as vLLM's hermes parser reads it: the
    text before the first <tool_call> is the content (None when blank), each
    block a call. A block that is not a call (cut short by max_tokens, or written
    without the grammar) makes the reply its text, with no calls."""
    start = text.find("<tool_call>")
    if start < 0:
        return text, []
    blocks = _HERMES_CALL.findall(text, start)
    try:
        values = [json.loads(block) for block in blocks]
    except json.JSONDecodeError:
        return text, []
    rest = _HERMES_CALL.sub("", text[start:]).strip()
    if not values or rest or not all(_is_call(v) for v in values):
        return text, []
    content = text[:start].strip() or None
    return content, _new_calls(values)


def _new_calls(values: list[dict[str, Any]]) -> list[ToolCall]:
    """Parsed calls ({"name", "arguments"}) as OpenAI's, each with a fresh id."""
    return [ToolCall(f"call_{uuid.uuid4().hex[:24]}", v["name"], json.dumps(v["arguments"], ensure_ascii=False))
            for v in values]


def _is_call(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("name"), str) and isinstance(value.get("arguments"), dict)


# -- the history sent back ---------------------------------------------------------


def parsed_calls(tool_calls: Any, where: str) -> list[dict[str, Any]]:
    """An assistant turn's OpenAI tool_calls checked, their arguments parsed: {"id", "name", "arguments"}."""
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
        calls.append({"id": call.get("id"), "name": fn["name"], "arguments": arguments})
    return calls


def call_text(tool_calls: Any, where: str) -> str:
    """An assistant turn's OpenAI tool_calls as the generic JSON the model writes."""
    calls = [{"name": c["name"], "arguments": c["arguments"]} for c in parsed_calls(tool_calls, where)]
    body = {"tool_call": calls[0]} if len(calls) == 1 else {"tool_calls": calls}
    return json.dumps(body, ensure_ascii=False)


def template_calls(tool_calls: Any, where: str) -> list[dict[str, Any]]:
    """An assistant turn's OpenAI tool_calls as a chat template renders them: arguments as
    their JSON value (transformers' convention; a template writes them with tojson)."""
    return [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in parsed_calls(tool_calls, where)]


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
