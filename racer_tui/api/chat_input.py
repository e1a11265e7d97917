"""OpenAI chat messages as a racer conversation: the turns before the last
user message are its history, the last one is what the engine is sent. A last
assistant message after it is a prefill: the reply continues that text (as
llama.cpp's server does), and only the continuation is returned. With a
chat template that renders tools itself (tools.py), tool turns and calls stay
as they are, and the last turns may be tool results, which the reply answers.

Images come only inside the request, as `data:` URLs: the server fetches no
address and reads no file. For the same reason the chat's own inline syntax,
`<image>PATH</image>` (a local file), is refused in message text.
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass, field
from typing import Any

from racer_core.engine.chat_image import ChatImage, image_from_pixels
from racer_tui.api import tools
from racer_tui.api.neutral_fields import NO_FUNCTIONS, shown
from racer_tui.api.protocol import ImagePart, Message, TextPart, bad_request
from racer_tui.api.structured import FieldError
from racer_tui.api.tools import ToolPlan

ROLES = {"developer": "system"}  # OpenAI's newer name for the system role


@dataclass
class ChatPrompt:
    history: list[dict[str, Any]]  # the messages before the last user message, as the engine keeps them
    text: str  # the last user message ("" after tool results in the template's own format: the reply answers them)
    attached: tuple[ChatImage, ...] = ()  # its images
    history_images: dict[int, tuple[ChatImage, ...]] = field(default_factory=dict)  # history index -> images
    prefill: str = ""  # the start of the reply, given by a last assistant message
    tools: list[dict[str, Any]] | None = None  # for the chat template, which describes them itself (tools.py)

    @property
    def has_images(self) -> bool:
        return bool(self.attached or self.history_images)


def chat_prompt(messages: list[Message], plan: ToolPlan | None = None, native_tools: bool = False) -> ChatPrompt:
    """Check and split the messages (decoding their images); a 400 names the
    first bad one. Tool calls and results become the generic format's turns
    (tools.py) and `plan`'s tools are described in the system message; with
    `native_tools` (the template renders tools) they stay as they are, for it."""
    if not messages:
        raise bad_request("messages must hold at least one message", "messages")
    turns: list[tuple[dict[str, Any], tuple[ChatImage, ...]]] = []
    names: dict[str, str] = {}  # tool call id -> its function's name, for the results
    for i, message in enumerate(messages):
        _check_plain(message, f"messages.{i}")
        text, images = _content(message, f"messages.{i}.content")
        if images and message.role != "user":
            raise bad_request("only user messages may carry images", f"messages.{i}.content")
        try:
            turn = _turn(message, text, names, native_tools, f"messages.{i}")
        except FieldError as exc:
            raise bad_request(exc.message, exc.param) from None
        turns.append((turn, images))
    if plan is not None and not native_tools:
        _describe_tools(turns, plan.system_text())
    roles = [turn["role"] for turn, _ in turns]
    if native_tools and roles[-1] == "tool":  # the reply answers the results: no user turn follows
        return ChatPrompt(history=[m for m, _ in turns], text="",
                          tools=plan.template_tools() if plan is not None else None,
                          history_images={i: imgs for i, (_, imgs) in enumerate(turns) if imgs})
    prefill = ""
    if len(turns) >= 2 and roles[-1] == "assistant" and roles[-2] == "user":
        if "tool_calls" in turns[-1][0]:
            raise bad_request("an assistant prefill cannot carry tool_calls", f"messages.{len(messages) - 1}.tool_calls")
        prefill = turns.pop()[0]["content"]
    last_index = len(turns) - 1
    if roles[last_index] != "user":
        raise bad_request("the last message must be the user's (or the user's and then an assistant prefill)",
                          f"messages.{len(messages) - 1}.role")
    *history, (last, attached) = turns
    if not last["content"].strip():
        raise bad_request("the last user message is empty", f"messages.{last_index}.content")
    return ChatPrompt(
        history=[m for m, _ in history],
        text=last["content"],
        attached=attached,
        history_images={i: imgs for i, (_, imgs) in enumerate(history) if imgs},
        prefill=prefill,
        tools=plan.template_tools() if plan is not None else None,
    )


def _turn(message: Message, text: str, names: dict[str, str], native_tools: bool, where: str) -> dict[str, Any]:
    """One message as the engine keeps it: in the generic form a call is the assistant's
    text and a result a user turn; for a template with tools both stay as they are."""
    role = ROLES.get(message.role, message.role)
    if message.tool_calls:
        names.update(_call_names(message.tool_calls))
        if native_tools:
            return {"role": role, "content": text, "tool_calls": tools.template_calls(message.tool_calls,
                                                                                     f"{where}.tool_calls")}
        calls = tools.call_text(message.tool_calls, f"{where}.tool_calls")
        text = f"{text}\n\n{calls}" if text else calls
    if role == "tool":
        name, call_id = _tool_result(message, names, where)
        if native_tools:
            return {"role": "tool", "tool_call_id": call_id, "name": name, "content": text}
        role, text = "user", tools.result_text(name, call_id, text)
    return {"role": role, "content": text}


def _check_plain(message: Message, where: str) -> None:
    """The legacy function turns and calls, refusals and audio: refused by name (their empty values pass)."""
    if message.role == "function":
        raise bad_request(f"function messages are not supported: {NO_FUNCTIONS}", f"{where}.role")
    for name in ("function_call", "refusal", "audio"):
        value = getattr(message, name)
        if value not in (None, []):
            raise bad_request(f"{name} {shown(value)} is not supported in a message: {NO_FUNCTIONS}, no refusals "
                              "and no audio", f"{where}.{name}")
    if message.tool_calls not in (None, []) and message.role != "assistant":
        raise bad_request("only assistant messages carry tool_calls", f"{where}.tool_calls")
    if message.role == "tool" and not isinstance(message.tool_call_id, str):
        raise bad_request("a tool message needs its tool_call_id (a string)", f"{where}.tool_call_id")
    if message.role != "tool" and message.tool_call_id is not None:
        raise bad_request("only tool messages carry a tool_call_id", f"{where}.tool_call_id")
    if message.content is None and not (message.role == "assistant" and message.tool_calls):
        raise bad_request("content is required", f"{where}.content")


def _call_names(tool_calls: Any) -> dict[str, str]:
    if not isinstance(tool_calls, list):
        return {}
    return {c["id"]: c["function"]["name"] for c in tool_calls if isinstance(c, dict) and isinstance(c.get("id"), str)
            and isinstance(c.get("function"), dict) and isinstance(c["function"].get("name"), str)}


def _tool_result(message: Message, names: dict[str, str], where: str) -> tuple[str, str]:
    """A tool turn's (function name, tool_call_id): the id must answer an earlier call."""
    call_id = message.tool_call_id
    assert isinstance(call_id, str)  # _check_plain
    if call_id not in names:
        raise FieldError(f"tool_call_id {call_id!r} answers no tool call of an earlier assistant message",
                         f"{where}.tool_call_id")
    return names[call_id], call_id


def _describe_tools(turns: list[tuple[dict[str, Any], tuple[ChatImage, ...]]], text: str) -> None:
    """The tools' description at the end of the first system message (a new one first where none is)."""
    first, images = turns[0] if turns else ({}, ())
    if first.get("role") == "system":
        turns[0] = ({"role": "system", "content": f"{first['content']}\n\n{text}"}, images)
    else:
        turns.insert(0, ({"role": "system", "content": text}, ()))


def _content(message: Message, where: str) -> tuple[str, tuple[ChatImage, ...]]:
    content = message.content or ""  # an assistant turn of tool calls only
    parts: list[Any] = [TextPart(type="text", text=content)] if isinstance(content, str) else content
    other = next((k for k, p in enumerate(parts) if not isinstance(p, TextPart | ImagePart)), None)
    if other is not None:
        raise bad_request(f"{parts[other].type} parts are not supported: text and image_url only", f"{where}.{other}")
    texts = [p.text for p in parts if isinstance(p, TextPart)]
    if any("<image>" in t for t in texts):
        raise bad_request("message text may not contain <image> tags; send images as image_url parts", where)
    images = tuple(decode_image(p, f"{where}.{k}") for k, p in enumerate(parts) if isinstance(p, ImagePart))
    return "\n".join(texts), images


def decode_image(part: ImagePart, where: str) -> ChatImage:
    """An image_url part's `data:image/...;base64,` URL as a ChatImage."""
    from PIL import Image, UnidentifiedImageError

    url = part.image_url.url
    head, comma, payload = url.partition(",")
    if not (url.startswith("data:image/") and head.endswith(";base64") and comma):
        raise bad_request("an image must be a data:image/...;base64, URL (the server fetches no address)", where)
    try:
        data = base64.b64decode(payload, validate=True)
        with Image.open(io.BytesIO(data)) as opened:
            return image_from_pixels(opened, name="image_url")
    except (binascii.Error, UnidentifiedImageError, OSError, ValueError) as exc:
        raise bad_request(f"the image is not readable ({type(exc).__name__})", where) from None
