"""Tool calls through the API (tools.py): the tool fields become the generic
format's JSON schema and system message, the reply comes back as OpenAI's
`tool_calls` (whole, and streamed as OpenAI streams them), and tool calls and
results in the history go back to the model. Checked with the openai client
and LangChain against the real server, the scripted engine told to reply in
the form the grammar holds it to."""

from __future__ import annotations

import json

import pytest
from api_helpers import client, http, running
from fake_engine import FakeEngine

from racer_core.common.grammar import Grammar
from racer_tui.api.protocol import ApiError, ChatRequest, parse, sampling

openai = pytest.importorskip("openai")

USER = [{"role": "user", "content": "What is the weather in Lyon?"}]
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                            "parameters": CITY}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
CALL = '{"tool_call": {"name": "get_weather", "arguments": {"city": "Lyon"}}}'
TWO_CALLS = ('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Lyon"}}, '
             '{"name": "get_time", "arguments": {}}]}')


def one_call(name: str, arguments: dict) -> dict:
    return {"type": "object", "properties": {"name": {"const": name}, "arguments": arguments},
            "required": ["name", "arguments"], "additionalProperties": False}


def calls_schema(key: str, call: dict) -> dict:
    value = {"type": "array", "items": call, "minItems": 1} if key == "tool_calls" else call
    return {"type": "object", "properties": {key: value}, "required": [key], "additionalProperties": False}


def checked(body: dict):
    return sampling(parse(ChatRequest, {"messages": USER, **body}), "racer")


def schema_of(body: dict) -> dict:
    grammar = checked(body).config.grammar
    assert grammar is not None and grammar.kind == "json_schema"
    return json.loads(grammar.text)


def test_tool_choice_decides_the_form_the_grammar_holds_the_reply_to() -> None:
    weather, time = one_call("get_weather", CITY), one_call("get_time", TIME["function"]["parameters"])
    answer = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"],
              "additionalProperties": False}
    both = {"anyOf": [weather, time]}
    tools = [WEATHER, TIME]
    assert schema_of({"tools": tools, "tool_choice": "required", "parallel_tool_calls": False}) == calls_schema(
        "tool_call", both)
    parallel = {"anyOf": [calls_schema("tool_call", both), calls_schema("tool_calls", both)]}  # parallel: the default
    assert schema_of({"tools": tools, "tool_choice": "required"}) == parallel
    assert schema_of({"tools": tools}) == {"anyOf": [*parallel["anyOf"], answer]}
    assert schema_of({"tools": tools, "parallel_tool_calls": False}) == {"anyOf": [calls_schema("tool_call", both),
                                                                                   answer]}  # auto: the default
    named = {"type": "function", "function": {"name": "get_time"}}
    assert schema_of({"tools": tools, "tool_choice": named}) == calls_schema("tool_call", time)
    # an answer in a response_format's form
    fmt = {"type": "json_schema", "json_schema": {"name": "place", "schema": CITY}}
    shaped = schema_of({"tools": tools, "tool_choice": "auto", "parallel_tool_calls": False, "response_format": fmt})
    assert shaped["anyOf"][1]["properties"]["response"] == CITY
    # "none", or no tools: no tool form (a response_format still holds)
    assert checked({"tools": tools, "tool_choice": "none"}).config.grammar is None
    assert checked({"tools": tools, "tool_choice": "none"}).tools is None
    assert checked({"tools": [], "tool_choice": "auto"}).config.grammar is None
    assert checked({"tools": tools, "tool_choice": "none", "response_format": {"type": "json_object"}}
                   ).config.grammar == Grammar("json_object")


BAD = [
    ({"tools": {"name": "f"}}, "tools", "must be a list"),
    ({"tools": [{"type": "code_interpreter"}]}, "tools.0", "only tools of type \"function\""),
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools.0.function.name", "1 to 64"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}, "tools.0.function.parameters",
     "JSON schema object"),
    ({"tools": [{"type": "function", "function": {"name": "f", "returns": {}}}]}, "tools.0.function.returns",
     "no field 'returns'"),
    ({"tools": [WEATHER, WEATHER]}, "tools.1.function.name", "two tools are named"),
    ({"tools": [WEATHER], "tool_choice": "any"}, "tool_choice", "must be \"auto\""),
    ({"tool_choice": "required"}, "tool_choice", "needs tools"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name", "'nope', which is not among the tools"),
    ({"tools": [WEATHER], "parallel_tool_calls": 1}, "parallel_tool_calls", "true or false"),
    ({"tools": [WEATHER], "racer": {"grammar": {"type": "regex", "value": "a"}}}, "racer.grammar",
     "tools and racer.grammar both"),
    ({"tools": [WEATHER], "functions": [{"name": "f"}]}, "functions", "legacy functions API"),
]


@pytest.mark.parametrize(("body", "param", "says"), BAD, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD)])
def test_a_wrong_tool_field_is_a_400_naming_it(body, param, says) -> None:
    with pytest.raises(ApiError) as caught:
        checked(body)
    assert caught.value.param == param and says in caught.value.message, (caught.value.param, caught.value.message)


def test_a_tool_call_comes_back_as_openai_returns_it_and_streams_as_deltas() -> None:
    engine = FakeEngine(reply=CALL)
    with running(engine) as service:
        api = client(service)
        reply = api.chat.completions.create(model="fake", messages=USER, tools=[WEATHER], tool_choice="required",
                                            parallel_tool_calls=False)
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        (call,) = choice.message.tool_calls
        assert call.id.startswith("call_") and call.type == "function" and call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": "Lyon"}
        # the tools were described to the model in a system message, and the config carries the form
        sent = engine.prompts[-1][1]
        assert sent[0]["role"] == "system" and '"get_weather"' in sent[0]["content"]
        assert '{"tool_call": {"name": "<tool name>"' in sent[0]["content"]
        assert engine.configs[-1].grammar is not None and "get_weather" in engine.configs[-1].grammar.text

        chunks = list(api.chat.completions.create(model="fake", messages=USER, tools=[WEATHER, TIME], stream=True))
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        assert deltas[0].role == "assistant" and deltas[0].tool_calls[0].id.startswith("call_")
        assert deltas[0].tool_calls[0].function.name == "get_weather" and deltas[0].tool_calls[0].function.arguments == ""
        assert deltas[1].tool_calls[0].id is None and deltas[1].tool_calls[0].index == 0
        arguments = "".join(d.tool_calls[0].function.arguments for d in deltas if d.tool_calls)
        assert json.loads(arguments) == {"city": "Lyon"}
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        assert not any(d.content for d in deltas)

        engine.reply = TWO_CALLS
        reply = api.chat.completions.create(model="fake", messages=USER, tools=[WEATHER, TIME], tool_choice="required")
        assert [c.function.name for c in reply.choices[0].message.tool_calls] == ["get_weather", "get_time"]
        assert len({c.id for c in reply.choices[0].message.tool_calls}) == 2
        streamed = list(api.chat.completions.create(model="fake", messages=USER, tools=[WEATHER, TIME], stream=True))
        heads = [d.tool_calls[0] for c in streamed if c.choices and (d := c.choices[0].delta).tool_calls
                 if d.tool_calls[0].id]
        assert [(h.index, h.function.name) for h in heads] == [(0, "get_weather"), (1, "get_time")]


def test_auto_may_answer_in_text_and_none_sends_no_tools() -> None:
    engine = FakeEngine(reply='{"response": "It is sunny in Lyon."}')
    with running(engine) as service:
        api = client(service)
        reply = api.chat.completions.create(model="fake", messages=USER, tools=[WEATHER])
        assert reply.choices[0].message.content == "It is sunny in Lyon." and reply.choices[0].finish_reason == "stop"
        assert reply.choices[0].message.tool_calls is None
        chunks = list(api.chat.completions.create(model="fake", messages=USER, tools=[WEATHER], stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "It is sunny in Lyon."
        engine.reply = "Sunny."
        reply = api.chat.completions.create(model="fake", messages=USER, tools=[WEATHER], tool_choice="none")
        assert reply.choices[0].message.content == "Sunny." and engine.configs[-1].grammar is None
        assert engine.prompts[-1][1] == [{"role": "user", "content": USER[0]["content"]}]


def test_tool_calls_and_results_in_the_history_go_back_to_the_model() -> None:
    engine = FakeEngine(reply='{"response": "Sunny, 21 C."}')
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}}
    history = [{"role": "system", "content": "Be brief."}, *USER,
               {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    with running(engine) as service:
        reply = client(service).chat.completions.create(model="fake", messages=history, tools=[WEATHER])
        assert reply.choices[0].message.content == "Sunny, 21 C."
        sent = engine.prompts[-1][1]
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
        assert sent[0]["content"].startswith("Be brief.\n\nYou can call any of the following tools")
        assert json.loads(sent[2]["content"]) == {"tool_call": {"name": "get_weather", "arguments": {"city": "Lyon"}}}
        assert json.loads(sent[3]["content"]) == {"tool_response": {"tool": "get_weather", "tool_call_id": "call_1",
                                                                    "content": "sunny, 21 C"}}
        for wrong, says in [
            ({"role": "tool", "tool_call_id": "call_9", "content": "x"}, "answers no tool call"),
            ({"role": "tool", "content": "x"}, "needs its tool_call_id"),
            ({"role": "user", "content": "x", "tool_call_id": "call_1"}, "only tool messages carry"),
        ]:
            body = {"messages": [*history[:3], wrong], "tools": [WEATHER]}
            answer = http(service, "/v1/chat/completions", json.dumps(body))
            assert answer.status == 400 and says in answer.json()["error"]["message"], answer.text
        bad_args = {**call, "function": {"name": "get_weather", "arguments": "{city"}}
        body = {"messages": [*USER, {"role": "assistant", "content": None, "tool_calls": [bad_args]},
                             {"role": "user", "content": "and?"}]}
        answer = http(service, "/v1/chat/completions", json.dumps(body))
        assert answer.status == 400 and answer.json()["error"]["param"] == "messages.1.tool_calls.0.function.arguments"


def test_a_reply_cut_short_is_its_text_without_calls() -> None:
    engine = FakeEngine(reply=CALL)
    with running(engine) as service:
        reply = client(service).chat.completions.create(model="fake", messages=USER, tools=[WEATHER], max_tokens=3)
        assert reply.choices[0].finish_reason == "length" and reply.choices[0].message.tool_calls is None
        assert CALL.startswith(reply.choices[0].message.content)


def test_a_tool_history_reaches_a_real_template_as_the_generic_turns() -> None:
    """On a tiny real model (greedy): a history of a call and its result answers as the same
    conversation written out in the generic form's turns does."""
    pytest.importorskip("torch")
    from api_helpers import weak_attention_engine

    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}}
    with_tools = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    written = [*USER, {"role": "assistant", "content": CALL},
               {"role": "user", "content": json.dumps({"tool_response": {
                   "tool": "get_weather", "tool_call_id": "call_1", "content": "sunny"}})}]
    with running(weak_attention_engine()) as service:
        api = client(service)
        ask = {"model": "tiny", "temperature": 0, "max_tokens": 12}
        reply = api.chat.completions.create(messages=with_tools, tools=[WEATHER], tool_choice="none", **ask)
        plain = api.chat.completions.create(messages=written, **ask)
        assert reply.choices[0].message.content == plain.choices[0].message.content
        assert reply.usage.prompt_tokens == plain.usage.prompt_tokens
