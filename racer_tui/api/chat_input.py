"""OpenAI chat messages as a racer conversation: the turns before the last
user message are its history, the last one is what the engine is sent. A last
assistant message after it is a prefill: the reply continues that text (as
llama.cpp's server does), and only the continuation is returned.

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
from racer_tui.api.neutral_fields import NO_TOOLS, shown
from racer_tui.api.protocol import ImagePart, Message, TextPart, bad_request

ROLES = {"developer": "system"}  # OpenAI's newer name for the system role


@dataclass
class ChatPrompt:
    history: list[dict[str, str]]  # the messages before the last user message, as the engine keeps them
    text: str  # the last user message
    attached: tuple[ChatImage, ...] = ()  # its images
    history_images: dict[int, tuple[ChatImage, ...]] = field(default_factory=dict)  # history index -> images
    prefill: str = ""  # the start of the reply, given by a last assistant message

    @property
    def has_images(self) -> bool:
        return bool(self.attached or self.history_images)


def chat_prompt(messages: list[Message]) -> ChatPrompt:
    """Check and split the messages (decoding their images); a 400 names the first bad one."""
    if not messages:
        raise bad_request("messages must hold at least one message", "messages")
    turns: list[tuple[dict[str, str], tuple[ChatImage, ...]]] = []
    for i, message in enumerate(messages):
        _check_plain(message, f"messages.{i}")
        text, images = _content(message, f"messages.{i}.content")
        if images and message.role != "user":
            raise bad_request("only user messages may carry images", f"messages.{i}.content")
        turns.append(({"role": ROLES.get(message.role, message.role), "content": text}, images))
    prefill = ""
    if len(turns) >= 2 and messages[-1].role == "assistant" and messages[-2].role == "user":
        prefill = turns.pop()[0]["content"]
    last_index = len(turns) - 1
    if messages[last_index].role != "user":
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
    )


def _check_plain(message: Message, where: str) -> None:
    """Tool turns, tool calls, refusals and audio: refused by name (their empty values pass)."""
    if message.role in ("tool", "function"):
        raise bad_request(f"{message.role} messages are not supported: {NO_TOOLS}", f"{where}.role")
    for name in ("tool_calls", "function_call", "tool_call_id", "refusal", "audio"):
        value = getattr(message, name)
        if value not in (None, []):
            raise bad_request(f"{name} {shown(value)} is not supported in a message: {NO_TOOLS}, no refusals "
                              "and no audio", f"{where}.{name}")
    if message.content is None:
        raise bad_request("content is required", f"{where}.content")


def _content(message: Message, where: str) -> tuple[str, tuple[ChatImage, ...]]:
    parts: list[Any] = [TextPart(type="text", text=message.content)] if isinstance(message.content, str) else message.content
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
