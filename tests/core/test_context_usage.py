"""RacerEngine.context_usage: a chat's tokens as the next reply would read
them, of the model's maximum (the chat's status line, issue 29)."""

from __future__ import annotations

import pytest

from racer_core.common.events import ContextUsage, GenerationConfig
from racer_core.testing import tiny_engine


@pytest.fixture(scope="module")
def engine():
    return tiny_engine("qwen3")


def test_a_chats_context_is_its_prompt_of_the_models_maximum(engine) -> None:
    assert engine.context_limit == engine.runtime.max_length == 2048  # the tiny config's max_position_embeddings
    chat = engine.new_conversation("Be brief.")
    list(chat.send("The cat sat on the mat.", GenerationConfig(method="racer", max_new_tokens=12)))
    usage = engine.context_usage(chat.messages)
    assert usage == ContextUsage(len(chat.prompt_ids()), 2048)
    # It grows with the chat: a long paste shows before it is sent.
    longer = engine.context_usage([*chat.messages, {"role": "user", "content": "word " * 300}])
    assert longer is not None and longer.used > usage.used + 300
    assert engine.context_usage([]) == ContextUsage(0, 2048)  # a new chat (a template takes no empty one)


def test_an_engine_whose_model_declares_no_maximum_cannot_say(engine, monkeypatch) -> None:
    monkeypatch.setattr(engine, "context_limit", None)
    assert engine.context_usage([{"role": "user", "content": "hi"}]) is None
