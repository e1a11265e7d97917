"""The shapes `!!load` reads (racer_tui/chat/json_file.py), and one clear line for the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from racer_core.common.errors import InputError
from racer_tui.chat import json_file as chat_file

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello"},
]


def test_the_original_list_and_the_common_messages_object_load_alike(tmp_path: Path) -> None:
    """Issue 41 (11b): {"messages": [...]} (an OpenAI-style request or export) was refused."""
    listed, wrapped = tmp_path / "list.json", tmp_path / "object.json"
    listed.write_text(json.dumps(MESSAGES))
    wrapped.write_text(json.dumps({"model": "any", "messages": MESSAGES}))  # other keys are not read
    assert chat_file.load(wrapped) == chat_file.load(listed)
    loaded = chat_file.load(wrapped)
    assert loaded.system_prompt == "Be brief." and [(m.role, m.content) for m in loaded.messages] == [
        ("user", "hi"), ("assistant", "hello")]


@pytest.mark.parametrize("data", [
    {"conversation": MESSAGES}, {"messages": "hi"}, "hi", 3, None,
], ids=["no messages key", "messages not a list", "a string", "a number", "null"])
def test_any_other_shape_is_one_clear_line(data: object) -> None:
    with pytest.raises(InputError) as caught:
        chat_file.from_json(data, "chat.json")
    assert str(caught.value) == ('chat.json is not a conversation: expected a JSON list of messages, '
                                 'or an object with a "messages" list')
