"""OpenAI chat messages as a racer conversation: the turns before the last
user message are its history, the last one is what the engine is sent.

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
from racer_tui.api.protocol import ImagePart, Message, TextPart, bad_request

ROLES = {"developer": "system"}  # OpenAI's newer name for the system role


@dataclass
class ChatPrompt:
    history: list[dict[str, str]]  # the messages before the last user message, as the engine keeps them
    text: str  # the last user message
    attached: tuple[ChatImage, ...] = ()  # its images
    history_images: dict[int, tuple[ChatImage, ...]] = field(default_factory=dict)  # history index -> images

    @property
    def has_images(self) -> bool:
        return bool(self.attached or self.history_images)


def chat_prompt(messages: list[Message]) -> ChatPrompt:
    """Check and split the messages (decoding their images); a 400 names the first bad one."""
    if not messages:
        raise bad_request("messages must hold at least one message", "messages")
    if messages[-1].role != "user":
        raise bad_request("the last message must be the user's", f"messages.{len(messages) - 1}.role")
    turns: list[tuple[dict[str, str], tuple[ChatImage, ...]]] = []
    for i, message in enumerate(messages):
        text, images = _content(message, f"messages.{i}.content")
        if images and message.role != "user":
            raise bad_request("only user messages may carry images", f"messages.{i}.content")
        turns.append(({"role": ROLES.get(message.role, message.role), "content": text}, images))
    *history, (last, attached) = turns
    if not last["content"].strip():
        raise bad_request("the last user message is empty", f"messages.{len(messages) - 1}.content")
    return ChatPrompt(
        history=[m for m, _ in history],
        text=last["content"],
        attached=attached,
        history_images={i: imgs for i, (_, imgs) in enumerate(history) if imgs},
    )


def _content(message: Message, where: str) -> tuple[str, tuple[ChatImage, ...]]:
    parts: list[Any] = [TextPart(type="text", text=message.content)] if isinstance(message.content, str) else message.content
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
