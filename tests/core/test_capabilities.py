"""Each method's declared capabilities (racer_core/common/registry.py) and the
one check that refuses what a method or model cannot do
(racer_core/common/capabilities.py): one line, the same from the engine as
from the front ends (the API's answers: tests/api/test_api_capabilities.py)."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from fake_engine import FakeEngine

from racer_core.common import registry
from racer_core.common.capabilities import CapabilityError, check_method
from racer_core.common.events import EngineInfo, GenerationConfig
from racer_core.common.stats import UNSTEPPED_METHODS
from racer_core.engine.chat_image import ChatImage
from racer_core.testing import tiny_engine

HEAD_HINT = "eagle3 needs a draft head: give one with --draft-model PATH"
PENALTIES = "penalties are not supported with method pld"
LOGPROBS = "logprobs is not supported with method hf"
# (a config the method cannot serve, the start of its refusal, the request's field named)
REFUSALS = [
    (GenerationConfig(method="pld", presence_penalty=1.0), PENALTIES, "frequency_penalty"),
    (GenerationConfig(method="hf", repetition_penalty=1.2), "penalties are not supported with method hf",
     "frequency_penalty"),
    (GenerationConfig(method="hf", logprobs=2), LOGPROBS, "logprobs"),
    (GenerationConfig(method="eagle3"), HEAD_HINT, "method"),
]


def test_the_registry_declares_each_methods_capabilities() -> None:
    anchors = set(registry.names(registry.ANCHOR))
    assert anchors == {"hf", "pld"}
    for spec in registry.METHOD_SPECS:
        gives = spec.name not in anchors
        assert (spec.penalties, spec.logprobs, spec.stepped) == (gives, gives, gives), spec.name
        assert spec.needs_head == (spec.name == "eagle3")
    assert UNSTEPPED_METHODS == anchors  # read from the registry, not a list of names of its own


@pytest.mark.parametrize(("config", "says", "param"), REFUSALS)
def test_each_refusal_is_one_line_naming_the_field(config: GenerationConfig, says: str, param: str) -> None:
    with pytest.raises(CapabilityError) as refused:
        check_method(config.method, config, head=False)
    assert str(refused.value).startswith(says) and "\n" not in str(refused.value)
    assert refused.value.param == param


def test_what_a_method_can_do_passes() -> None:
    assert check_method("racer", GenerationConfig(presence_penalty=1.0, logprobs=3), head=False).name == "racer"
    assert check_method("eagle3", head=True).name == "eagle3"
    assert check_method("eagle3").name == "eagle3"  # before a load the head is not known yet
    assert check_method("hf", GenerationConfig(method="hf", temperature=0.7)).name == "hf"
    with pytest.raises(CapabilityError, match="unknown decoding method 'nope'"):
        check_method("nope")
    with pytest.raises(CapabilityError, match="^m reads text only: it cannot take an image$"):
        check_method("racer", images=True, reads_images=False, model="m")


def test_a_missing_library_is_the_same_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("arctic_inference", "arctic_inference.suffix_decoding"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(CapabilityError, match=r"\[peers\]") as refused:
        check_method("suffix")
    assert refused.value.param == "method" and "\n" not in str(refused.value)


@pytest.fixture(scope="module")
def real_engine() -> Any:
    return tiny_engine("qwen3")


@pytest.mark.parametrize("which", ["real", "fake"])
@pytest.mark.parametrize(("config", "says", "param"), REFUSALS)
def test_the_engines_refuse_a_chat_turn_and_a_completion_alike(which: str, config: GenerationConfig, says: str,
                                                               param: str, request: pytest.FixtureRequest) -> None:
    # (the real engine gave hf's logprobs request a reply without log-probabilities, refusing nothing)
    engine = request.getfixturevalue("real_engine") if which == "real" else FakeEngine()
    chat = engine.new_conversation()
    with pytest.raises(CapabilityError) as refused:
        list(chat.send("Hello", config))
    assert str(refused.value).startswith(says) and refused.value.param == param
    assert chat.messages == []  # refused before the turn was taken
    with pytest.raises(CapabilityError) as refused:
        list(engine.complete("Hello", config))
    assert str(refused.value).startswith(says)


def test_an_engine_with_a_head_takes_eagle3_and_one_reading_text_refuses_an_image(tmp_path) -> None:
    engine = FakeEngine(info=EngineInfo("fake-model", "cpu", "float32", draft_head="h"))
    assert list(engine.new_conversation().send("Hello", GenerationConfig(method="eagle3")))[-1].finished
    picture = ChatImage(str(tmp_path / "cat.png"), "0" * 64, None)
    with pytest.raises(CapabilityError, match="^fake-model reads text only: it cannot take an image$"):
        list(engine.new_conversation().send("Hello", GenerationConfig(), images=[picture]))
