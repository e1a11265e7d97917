"""Structured output through the API: `response_format` (json_object,
json_schema), `racer.grammar` and llama.cpp's `grammar` become the Grammar in
the config the engine receives; shapes that are wrong are 400s naming the
field; what the engine refuses when the reply starts (a grammar it cannot
compile, the [structured] extra missing) is a 400 with its line, streamed or
not. The engine here is the scripted one, told to reply with valid JSON."""

from __future__ import annotations

import json

import pytest
from api_helpers import client, http, running
from fake_engine import FakeEngine

from racer_core.common.errors import InputError
from racer_core.common.grammar import Grammar
from racer_tui.api.protocol import ApiError, ChatRequest, CompletionRequest, parse, sampling

openai = pytest.importorskip("openai")

USER = [{"role": "user", "content": "Name a city and its country."}]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
          "required": ["city", "country"], "additionalProperties": False}
CITY = '{"city": "Lyon", "country": "France"}'


def grammar_of(body: dict, endpoint: type = ChatRequest) -> Grammar | None:
    base = {"messages": USER} if endpoint is ChatRequest else {"prompt": "Lyon is in"}
    return sampling(parse(endpoint, {**base, **body}), "racer").config.grammar


def refusal(body: dict, endpoint: type = ChatRequest) -> ApiError:
    with pytest.raises(ApiError) as caught:
        grammar_of(body, endpoint)
    assert caught.value.status == 400
    return caught.value


def test_each_field_maps_to_its_grammar() -> None:
    assert grammar_of({}) is None
    assert grammar_of({"response_format": {"type": "text"}}) is None
    assert grammar_of({"response_format": {"type": "json_object"}}) == Grammar("json_object")
    fmt = {"type": "json_schema", "json_schema": {"name": "place", "schema": SCHEMA, "strict": True}}
    assert grammar_of({"response_format": fmt}) == Grammar("json_schema", json.dumps(SCHEMA), True)
    loose = {"type": "json_schema", "json_schema": {"name": "place", "schema": SCHEMA, "description": "a place"}}
    assert grammar_of({"response_format": loose}) == Grammar("json_schema", json.dumps(SCHEMA), False)
    no_schema = {"type": "json_schema", "json_schema": {"name": "anything"}}
    assert grammar_of({"response_format": no_schema}) == Grammar("json_schema", '{"type": "object"}', False)
    for kind in ("regex", "lark", "gbnf"):
        value = {"regex": "[0-9]{3}", "lark": 'start: "yes" | "no"', "gbnf": 'root ::= "yes" | "no"'}[kind]
        assert grammar_of({"racer": {"grammar": {"type": kind, "value": value}}}) == Grammar(kind, value)
        assert grammar_of({"racer": {"grammar": {"type": kind, "value": value}}}, CompletionRequest) == Grammar(kind, value)
    assert grammar_of({"grammar": 'root ::= "yes"'}) == Grammar("gbnf", 'root ::= "yes"')
    assert grammar_of({"grammar": 'root ::= "yes"'}, CompletionRequest) == Grammar("gbnf", 'root ::= "yes"')
    assert grammar_of({"grammar": ""}) is None
    # the grammar rides along with the racer settings, which still apply
    config = sampling(parse(ChatRequest, {"messages": USER, "racer": {"method": "ar", "grammar": {
        "type": "regex", "value": "a+"}}}), "racer").config
    assert config.method == "ar" and config.grammar == Grammar("regex", "a+")


BAD = [
    ({"response_format": "json"}, "response_format", "must be an object with a type"),
    ({"response_format": {"type": "xml"}}, "response_format.type", "'xml' is not supported"),
    ({"response_format": {"type": "json_object", "schema": {}}}, "response_format.schema", "has no field 'schema'"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "is required"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}},
     "response_format.json_schema.name", "name must be 1 to 64"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "a b", "schema": SCHEMA}}},
     "response_format.json_schema.name", "name must be 1 to 64"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": [1]}}},
     "response_format.json_schema.schema", "must be a JSON schema object"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA, "strict": "yes"}}},
     "response_format.json_schema.strict", "true or false"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA, "extra": 1}}},
     "response_format.json_schema.extra", "has no field 'extra'"),
    ({"racer": {"grammar": "a+"}}, "racer.grammar", "must be {\"type\""),
    ({"racer": {"grammar": {"type": "ebnf", "value": "x"}}}, "racer.grammar.type", "one of regex, lark, gbnf"),
    ({"racer": {"grammar": {"type": "regex", "value": " "}}}, "racer.grammar.value", "non-empty string"),
    ({"grammar": {"root": "x"}}, "grammar", "GBNF grammar as a string"),
    ({"grammar": 'root ::= "a"', "response_format": {"type": "json_object"}}, "response_format",
     "grammar and response_format both constrain the reply"),
    ({"racer": {"grammar": {"type": "regex", "value": "a"}}, "response_format": {"type": "json_object"}},
     "response_format", "racer.grammar and response_format both"),
]


@pytest.mark.parametrize(("body", "param", "says"), BAD, ids=[b[1] + "-" + str(i) for i, b in enumerate(BAD)])
def test_a_wrong_shape_is_a_400_naming_the_field(body, param, says) -> None:
    error = refusal(body)
    assert error.param == param and says in error.message, (error.param, error.message)
    assert "\n" not in error.message


def test_completions_take_no_response_format() -> None:
    error = refusal({"response_format": {"type": "json_object"}}, CompletionRequest)
    assert "unknown field 'response_format'" in error.message


def test_the_engine_receives_the_grammar_and_the_json_comes_back() -> None:
    engine = FakeEngine(reply=CITY)
    fmt = {"type": "json_schema", "json_schema": {"name": "place", "schema": SCHEMA, "strict": True}}
    with running(engine) as service:
        api = client(service)
        reply = api.chat.completions.create(model="fake", messages=USER, response_format=fmt)
        assert json.loads(reply.choices[0].message.content) == {"city": "Lyon", "country": "France"}
        assert engine.configs[-1].grammar == Grammar("json_schema", json.dumps(SCHEMA), True)
        chunks = list(api.chat.completions.create(model="fake", messages=USER, stream=True,
                                                  response_format={"type": "json_object"}))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == CITY
        assert engine.configs[-1].grammar == Grammar("json_object")
        text = api.completions.create(model="fake", prompt="Lyon:", extra_body={"grammar": "root ::= [a-z]+"})
        assert text.choices[0].text == CITY and engine.completions[-1][1].grammar == Grammar("gbnf", "root ::= [a-z]+")


@pytest.mark.parametrize("stream", [False, True])
def test_what_the_engine_refuses_at_the_reply_start_is_a_400_with_its_line(stream) -> None:
    line = "the [structured] extra is not installed: pip install 'racer-tui[structured]'"
    engine = FakeEngine(reply=CITY, fail_with=InputError(line))
    with running(engine) as service:
        body = {"messages": USER, "response_format": {"type": "json_object"}, "stream": stream}
        answer = http(service, "/v1/chat/completions", json.dumps(body))
        assert answer.status == 400, answer.text
        assert answer.json()["error"]["message"] == line
        with pytest.raises(openai.BadRequestError, match="structured"):
            reply = client(service).chat.completions.create(model="fake", messages=USER, stream=stream,
                                                            response_format={"type": "json_object"})
            list(reply) if stream else None
        # the server goes on, and what needs no grammar is unaffected
        engine.fail_with = None
        assert http(service, "/v1/models").status == 200
        assert client(service).chat.completions.create(model="fake", messages=USER).choices[0].message.content == CITY
