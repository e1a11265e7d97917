"""OpenAI's Responses API (`POST /v1/responses`), its basic text and structured
cases: what LangChain's `use_responses_api=True` sends for a reply and for
`with_structured_output`. A request is read as the chat request it amounts
to, answered by the chat path, and its answer reshaped as a Response.

Taken: `input` (a string, or messages of roles user, system, developer and
assistant whose content is a string or `input_text` / `output_text` parts),
`instructions` (a system message first), `max_output_tokens`,
`temperature`, `top_p`, `text.format` (text, json_object, json_schema with
its fields flat, as the Responses API has them), `text.verbosity` "medium",
`user`, `metadata`, `store` false, and the `racer` extension. Anything else
(streaming, tools, images and files, reasoning, earlier responses by id) is
refused by name in one line.
"""

from __future__ import annotations

import time
from typing import Any

from racer_tui.api.neutral_fields import shown
from racer_tui.api.protocol import ApiError, bad_request

PASSED = ("temperature", "top_p", "user", "metadata", "racer")  # same name and meaning as in a chat request
NEUTRAL = {"stream": (False,), "store": (False,), "tools": ([],), "parallel_tool_calls": (True, False),
           "tool_choice": ("none", "auto"), "truncation": ("disabled",), "background": (False,),
           "include": ([],), "service_tier": ("auto", "default")}
ROLES = ("user", "system", "developer", "assistant")
WHY = {"stream": "responses are not streamed here (stream chat completions instead)",
       "store": "responses are stored nowhere", "tools": "no tools on /v1/responses (use chat completions)",
       "tool_choice": "no tools on /v1/responses", "parallel_tool_calls": "true or false only", "truncation": "no truncation",
       "background": "no background responses", "include": "nothing more to include",
       "service_tier": "one service tier"}


def chat_body(body: dict[str, Any]) -> dict[str, Any]:
    """The chat completions request this Responses request amounts to, or a 400 naming its field."""
    chat: dict[str, Any] = {name: body[name] for name in PASSED if body.get(name) is not None}
    for name, value in body.items():
        if value is None or name in PASSED or name in ("model", "input", "instructions", "max_output_tokens", "text"):
            continue
        if name not in NEUTRAL:
            raise bad_request(f"{name} is not supported on /v1/responses (its basic text and structured cases "
                              "only)", name)
        if not any(value == v and type(value) is type(v) for v in NEUTRAL[name]):
            raise bad_request(f"{name} {shown(value)} is not supported: {WHY[name]}", name)
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    messages = _messages(body.get("input"))
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise bad_request("instructions must be a string", "instructions")
        messages.insert(0, {"role": "system", "content": instructions})
    chat["messages"] = messages
    text = body.get("text")
    if text is not None:
        fmt = _text(text)
        if fmt is not None:
            chat["response_format"] = fmt
    return chat


def _messages(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise bad_request("input must be a string or a non-empty list of messages", "input")
    out = []
    for i, item in enumerate(value):
        where = f"input.{i}"
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            kind = item.get("type") if isinstance(item, dict) else None
            raise bad_request(f"{where}: {shown(kind or item)} items are not supported on /v1/responses (messages "
                              "only)", where)
        unknown = sorted(set(item) - {"type", "role", "content", "id", "status"})
        if unknown:
            raise bad_request(f"{where} has no field {unknown[0]!r}", f"{where}.{unknown[0]}")
        if item.get("role") not in ROLES:
            raise bad_request(f"{where}.role must be one of {', '.join(ROLES)}, not {shown(item.get('role'))}",
                              f"{where}.role")
        out.append({"role": item["role"], "content": _content(item.get("content"), f"{where}.content")})
    return out


def _content(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise bad_request(f"{where} must be a string or a list of input_text parts", where)
    texts = []
    for k, part in enumerate(value):
        if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text") \
                or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else part
            raise bad_request(f"{where}.{k}: {shown(kind)} parts are not supported on /v1/responses (input_text "
                              "and output_text only)", f"{where}.{k}")
        texts.append(part["text"])
    return "\n".join(texts)


def _text(value: Any) -> dict[str, Any] | None:
    """`text` as the chat request's response_format (None: plain text)."""
    if not isinstance(value, dict) or set(value) - {"format", "verbosity"}:
        raise bad_request(f"text must be {{\"format\": {{...}}, \"verbosity\": \"medium\"}}, not {shown(value)}", "text")
    if value.get("verbosity") not in (None, "medium"):
        raise bad_request(f"text.verbosity {shown(value['verbosity'])} is not supported: no verbosity levels "
                          "(only \"medium\")", "text.verbosity")
    fmt = value.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise bad_request(f"text.format must be an object, not {shown(fmt)}", "text.format")
    if fmt.get("type") != "json_schema":
        return fmt  # text, json_object or a wrong type: structured.response_format says which
    return {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}


def response(chat: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """A chat completion's JSON as the Response object."""
    choice = chat["choices"][0]
    text = choice["message"]["content"] or ""
    cut = choice["finish_reason"] == "length"
    status = "incomplete" if cut else "completed"
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    usage = chat["usage"]
    fmt = (body.get("text") or {}).get("format") or {"type": "text"}
    return {
        "id": "resp_" + chat["id"].removeprefix("chatcmpl-"),
        "object": "response",
        "created_at": chat["created"],
        "completed_at": int(time.time()),
        "model": chat["model"],
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "output": [{"type": "message", "id": "msg_" + chat["id"].removeprefix("chatcmpl-"), "role": "assistant",
                    "status": status, "content": [part]}],
        "parallel_tool_calls": False,
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "tool_choice": "none",
        "tools": [],
        "text": {"format": fmt, "verbosity": "medium"},
        "store": False,
        "usage": {"input_tokens": usage["prompt_tokens"], "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": usage["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": usage["total_tokens"], "racer": usage["racer"]},
        "racer": choice["racer"],
    }


def refused_param(error: ApiError) -> ApiError:
    """A chat-request error in the Responses request's words (max_tokens is its max_output_tokens)."""
    names = {"max_tokens": "max_output_tokens", "response_format": "text.format"}
    if error.param is None:
        return error
    head, _, rest = error.param.partition(".")
    if head not in names:
        return error
    param = names[head] + (f".{rest}" if rest else "")
    message = error.message.replace(head, names[head], 1)
    if head == "response_format":
        message = message.replace("text.format.json_schema.", "text.format.")
        param = param.replace("text.format.json_schema.", "text.format.").replace("text.format.json_schema", "text.format")
    return ApiError(error.status, message, param, error.kind, error.code, error.headers)
