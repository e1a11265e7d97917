"""Every engine and conversation implements the whole Engine and Conversation
protocols (racer_core/common/events.py): each member present, each method
with the protocol's parameters (names, kinds, which have defaults), so the
front ends use the declared boundary and never probe for a member
(docs/design.md 2.1). runtime_checkable would only compare names."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from fake_engine import FakeEngine

from racer_core.common.events import Conversation, Engine
from racer_core.testing import tiny_engine


def members(protocol: type) -> dict[str, Any]:
    """The protocol's members: its annotated attributes (as None) and its methods and properties."""
    found: dict[str, Any] = dict.fromkeys(protocol.__annotations__)
    found.update({name: value for name, value in vars(protocol).items()
                  if not name.startswith("_") and (callable(value) or isinstance(value, property))})
    return found


def shape(signature: inspect.Signature) -> list[tuple[str, Any, bool]]:
    """(name, kind, has a default) of each parameter: what a caller relies on."""
    return [(p.name, p.kind, p.default is not inspect.Parameter.empty) for p in signature.parameters.values()]


def missing_or_different(protocol: type, implementation: Any) -> list[str]:
    """What `implementation` (an instance) lacks of `protocol`, or takes differently."""
    problems = []
    for name, declared in members(protocol).items():
        if not hasattr(implementation, name):
            problems.append(f"{name}: missing")
        elif isinstance(declared, property):
            if not isinstance(inspect.getattr_static(type(implementation), name, None), property):
                problems.append(f"{name}: not a property")
        elif callable(declared):
            wanted = shape(inspect.signature(declared))[1:]  # the protocol's function takes self
            given = shape(inspect.signature(getattr(implementation, name)))  # bound: no self
            if given != wanted:
                problems.append(f"{name}: takes {given}, the protocol {wanted}")
    return problems


@pytest.fixture(scope="module")
def real_engine() -> Any:
    return tiny_engine("qwen3")


def test_the_protocols_declare_what_the_front_ends_use() -> None:
    assert {"context_limit", "reads_images", "text_ids", "complete", "refresh_cost_curve", "batched",
            "new_conversation", "context_usage", "forget_chats", "token_text", "info", "tool_syntax"} <= set(members(Engine))
    assert {"messages", "images", "learn", "notice", "send", "prompt_ids"} <= set(members(Conversation))


@pytest.mark.parametrize("which", ["real", "fake"])
def test_each_engine_implements_the_whole_protocols(which: str, request: pytest.FixtureRequest) -> None:
    engine = request.getfixturevalue("real_engine") if which == "real" else FakeEngine()
    assert missing_or_different(Engine, engine) == []
    assert missing_or_different(Conversation, engine.new_conversation("Be brief.")) == []


def test_the_check_sees_a_missing_member_a_different_signature_and_a_plain_attribute() -> None:
    class Partial(FakeEngine):
        reads_images = False  # a plain attribute where the protocol declares a property

        def text_ids(self, text: str, special: bool) -> list[int]:  # a parameter more, without a default
            return []

        def complete(self, text: str, config: Any) -> Any:  # should_stop left out
            return iter(())

    engine = Partial()
    problems = missing_or_different(Engine, engine)
    assert [p.partition(":")[0] for p in problems] == ["reads_images", "text_ids", "complete"]
    assert problems[0] == "reads_images: not a property" and "'special'" in problems[1]
    conv = engine.new_conversation()
    del conv.images
    assert missing_or_different(Conversation, conv) == ["images: missing"]
