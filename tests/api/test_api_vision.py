"""Images through `racer-tui api`: a data: URL in a user message reaches a
tiny vision-language model as the chat's attached image does."""

from __future__ import annotations

import base64
import io

import pytest
from api_helpers import client, running

pytest.importorskip("torch")

from racer_core.common.events import GenerationConfig  # noqa: E402
from racer_core.engine.chat_image import image_from_pixels  # noqa: E402
from racer_core.testing.tiny_vl import tiny_image, tiny_vl_engine  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog."


def data_url(picture) -> str:
    out = io.BytesIO()
    picture.save(out, format="PNG")  # lossless: the server decodes the same pixels
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def test_an_image_part_answers_as_the_chats_attached_image() -> None:
    engine = tiny_vl_engine("qwen2_5_vl")
    picture = tiny_image(seed=3)
    conv = engine.new_conversation()
    list(conv.send(TEXT, GenerationConfig(method="racer", temperature=0.0, max_new_tokens=24),
                   images=[image_from_pixels(picture)]))
    parts = [{"type": "image_url", "image_url": {"url": data_url(picture)}}, {"type": "text", "text": TEXT}]
    with running(engine) as service:
        api = client(service)
        seen = api.chat.completions.create(model="vl", messages=[{"role": "user", "content": parts}],
                                           max_tokens=24, temperature=0)
        blind = api.chat.completions.create(model="vl", messages=[{"role": "user", "content": TEXT}],
                                            max_tokens=24, temperature=0)
    assert seen.choices[0].message.content == conv.messages[-1]["content"]
    assert seen.usage.prompt_tokens > blind.usage.prompt_tokens  # the image's placeholders count
    assert seen.choices[0].message.content != blind.choices[0].message.content  # and the image matters
