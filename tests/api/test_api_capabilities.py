"""What a method or the model cannot do is a 400 with the one check's line
(racer_core/common/capabilities.py), naming the request's field, on both
routes; the engine never runs such a request."""

from __future__ import annotations

import json
import sys

import pytest
from api_helpers import http, red_png_url, running
from fake_engine import FakeEngine

from racer_core.common.events import EngineInfo

USER = [{"role": "user", "content": "hi"}]
HEAD = "eagle3 needs a draft head: give one with --draft-model PATH"
# (the request's fields, the refusal's start, the field it names)
REFUSALS = [
    ({"presence_penalty": 1, "racer": {"method": "pld"}}, "penalties are not supported with method pld",
     "frequency_penalty"),
    ({"repetition_penalty": 1.3, "racer": {"method": "hf"}}, "penalties are not supported with method hf",
     "frequency_penalty"),
    ({"racer": {"method": "eagle3"}}, HEAD, "racer.method"),
]
CHAT_LOGPROBS = ({"logprobs": True, "racer": {"method": "hf"}}, "logprobs is not supported with method hf", "logprobs")
TEXT_LOGPROBS = ({"logprobs": 2, "racer": {"method": "pld"}}, "logprobs is not supported with method pld", "logprobs")


def refusal(service, route: str, body: dict) -> tuple[str, str]:
    answer = http(service, route, json.dumps(body))
    assert answer.status == 400, answer.text
    error = answer.json()["error"]
    assert "\n" not in error["message"]
    return error["message"], error["param"]


@pytest.fixture(scope="module")
def engine_and_service():
    engine = FakeEngine()
    with running(engine) as service:
        yield engine, service


@pytest.mark.parametrize(("fields", "says", "param"), [*REFUSALS, CHAT_LOGPROBS])
def test_a_chat_request_a_method_cannot_serve_is_a_400(engine_and_service, fields, says, param) -> None:
    engine, service = engine_and_service
    message, named = refusal(service, "/v1/chat/completions", {"messages": USER, "temperature": 0, **fields})
    assert message.startswith(says) and named == param
    assert engine.prompts == []  # the engine never saw it


@pytest.mark.parametrize(("fields", "says", "param"), [*REFUSALS, TEXT_LOGPROBS])
def test_a_completion_a_method_cannot_serve_is_a_400(engine_and_service, fields, says, param) -> None:
    engine, service = engine_and_service
    message, named = refusal(service, "/v1/completions", {"prompt": "Once", **fields})
    assert message.startswith(says) and named == param
    assert engine.completions == []


def test_an_image_for_a_model_that_reads_text_only_is_a_400(engine_and_service) -> None:
    engine, service = engine_and_service
    image = {"role": "user", "content": [{"type": "text", "text": "what is it?"},
                                          {"type": "image_url", "image_url": {"url": red_png_url()}}]}
    message, named = refusal(service, "/v1/chat/completions", {"messages": [image]})
    assert (message, named) == ("fake-model reads text only: it cannot take an image", "messages")


def test_a_method_missing_its_library_is_a_400(engine_and_service, monkeypatch) -> None:
    for name in ("arctic_inference", "arctic_inference.suffix_decoding"):
        monkeypatch.setitem(sys.modules, name, None)
    message, named = refusal(engine_and_service[1], "/v1/chat/completions",
                             {"messages": USER, "racer": {"method": "suffix"}})
    assert "[peers]" in message and named == "racer.method"


def test_what_the_engine_can_do_is_served() -> None:
    engine = FakeEngine(info=EngineInfo("fake-model", "cpu", "float32", draft_head="h"))
    with running(engine) as service:
        answer = http(service, "/v1/chat/completions",
                      json.dumps({"messages": USER, "max_tokens": 4, "racer": {"method": "eagle3"}}))
        assert answer.status == 200, answer.text
        answer = http(service, "/v1/chat/completions",
                      json.dumps({"messages": USER, "max_tokens": 4, "presence_penalty": 1, "logprobs": True}))
        assert answer.status == 200, answer.text
    assert [c.method for c in engine.configs] == ["eagle3", "racer"]
