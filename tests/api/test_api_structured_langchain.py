"""LangChain against the real server: `with_structured_output` by its default
method (response_format json_schema) and by function calling (a named tool),
and a tool-calling loop (the model asks for a tool, its result goes back, the
model answers). The scripted engine replies what the grammar would hold a
model to, changed between the loop's turns as a model's reply would be."""

from __future__ import annotations

import json

import pytest
from api_helpers import TIMEOUT, running
from fake_engine import FakeEngine

pytest.importorskip("langchain_openai")

from langchain_core.messages import HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from pydantic import BaseModel  # noqa: E402


class Place(BaseModel):
    """A city and its country."""

    city: str
    country: str


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny and 21 C in {city}"


def chat_model(service) -> ChatOpenAI:
    return ChatOpenAI(base_url=service.url, api_key="unused", model="fake", temperature=0, max_retries=0,
                      timeout=TIMEOUT)


def test_with_structured_output_by_json_schema_and_by_function_calling() -> None:
    engine = FakeEngine(reply='{"city": "Lyon", "country": "France"}')
    with running(engine) as service:
        place = chat_model(service).with_structured_output(Place).invoke("Name a city in France.")
        assert place == Place(city="Lyon", country="France")
        grammar = engine.configs[-1].grammar
        assert grammar.kind == "json_schema" and json.loads(grammar.text)["required"] == ["city", "country"]

        engine.reply = '{"tool_call": {"name": "Place", "arguments": {"city": "Lyon", "country": "France"}}}'
        place = chat_model(service).with_structured_output(Place, method="function_calling").invoke("A French city?")
        assert place == Place(city="Lyon", country="France")
        form = json.loads(engine.configs[-1].grammar.text)
        assert form["properties"]["tool_call"]["properties"]["name"] == {"const": "Place"}


def test_a_tool_calling_loop() -> None:
    engine = FakeEngine(reply='{"tool_call": {"name": "get_weather", "arguments": {"city": "Lyon"}}}')
    with running(engine) as service:
        model = chat_model(service).bind_tools([get_weather])
        messages = [HumanMessage("What is the weather in Lyon?")]
        asked = model.invoke(messages)
        assert [(c["name"], c["args"]) for c in asked.tool_calls] == [("get_weather", {"city": "Lyon"})]
        messages.append(asked)
        for call in asked.tool_calls:
            messages.append(ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"]))
        engine.reply = '{"response": "It is sunny and 21 C in Lyon."}'
        answer = model.invoke(messages)
        assert answer.content == "It is sunny and 21 C in Lyon." and not answer.tool_calls
        result = json.loads(engine.prompts[-1][1][-1]["content"])["tool_response"]
        assert result == {"tool": "get_weather", "tool_call_id": asked.tool_calls[0]["id"],
                          "content": "sunny and 21 C in Lyon"}
        # streamed, LangChain assembles the same call from the deltas
        engine.reply = '{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}'
        chunks = list(model.stream([HumanMessage("And in Paris?")]))
        whole = chunks[0]
        for chunk in chunks[1:]:
            whole = whole + chunk
        assert [(c["name"], c["args"]) for c in whole.tool_calls] == [("get_weather", {"city": "Paris"})]
