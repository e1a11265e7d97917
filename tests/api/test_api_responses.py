"""`POST /v1/responses`, its basic text and structured cases, with the openai
client and LangChain's `use_responses_api=True` against the real server on
the scripted engine; what it does not take is refused by name."""

from __future__ import annotations

import json

import pytest
from api_helpers import TIMEOUT, client, http, running
from fake_engine import FakeEngine
from pydantic import BaseModel

from racer_core.common.grammar import Grammar

openai = pytest.importorskip("openai")

PLACE = '{"city": "Lyon", "country": "France"}'


class Place(BaseModel):
    city: str
    country: str


def test_text_and_structured_responses_with_the_openai_client() -> None:
    engine = FakeEngine(reply=PLACE)
    with running(engine) as service:
        api = client(service)
        reply = api.responses.create(model="fake", input="Name a city.", instructions="Be brief.", max_output_tokens=50)
        assert reply.status == "completed" and reply.output_text == PLACE
        assert reply.usage.output_tokens == reply.usage.total_tokens - reply.usage.input_tokens > 0
        assert engine.prompts[-1][1] == [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": "Name a city."}]
        assert engine.configs[-1].grammar is None and engine.configs[-1].max_new_tokens == 50
        parsed = api.responses.parse(model="fake", input=[{"role": "user", "content": [
            {"type": "input_text", "text": "Name a city."}]}], text_format=Place)
        assert parsed.output_parsed == Place(city="Lyon", country="France")
        grammar = engine.configs[-1].grammar
        assert grammar.kind == "json_schema" and json.loads(grammar.text)["required"] == ["city", "country"]
        api.responses.create(model="fake", input="A city?", text={"format": {"type": "json_object"}})
        assert engine.configs[-1].grammar == Grammar("json_object")
        cut = api.responses.create(model="fake", input="Name a city.", max_output_tokens=2)
        assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"


@pytest.mark.parametrize(("body", "param", "says"), [
    ({"stream": True}, "stream", "stream true is not supported"),
    ({"tools": [{"type": "web_search"}]}, "tools", "no tools on /v1/responses"),
    ({"previous_response_id": "resp_1"}, "previous_response_id", "not supported on /v1/responses"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}, "input.0",
     "function_call_output"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input.0.content.0",
     "input_image"),
    ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name", "name must be 1 to 64"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type", "'xml' is not supported"),
    ({"max_output_tokens": "5"}, "max_output_tokens", "max_output_tokens"),
])
def test_what_responses_does_not_take_is_refused_by_name(body, param, says) -> None:
    with running(FakeEngine()) as service:
        answer = http(service, "/v1/responses", json.dumps({"model": "fake", "input": "hi", **body}))
        assert answer.status == 400, answer.text
        error = answer.json()["error"]
        assert error["param"] == param and says in error["message"], error


def test_langchain_with_the_responses_api() -> None:
    pytest.importorskip("langchain_openai")
    from langchain_openai import ChatOpenAI

    engine = FakeEngine(reply=PLACE)
    with running(engine) as service:
        model = ChatOpenAI(base_url=service.url, api_key="unused", model="fake", temperature=0, max_retries=0,
                           timeout=TIMEOUT, use_responses_api=True)
        assert model.invoke("Name a city.").text == PLACE
        assert model.with_structured_output(Place).invoke("Name a city.") == Place(city="Lyon", country="France")
        assert engine.configs[-1].grammar.kind == "json_schema"
