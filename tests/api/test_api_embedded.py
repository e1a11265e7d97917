"""`racer-tui api` on the embedded model, through the real `openai` client:
the greedy reply equals the chat's (and plain greedy's), drafts are accepted,
and streaming gives the same text."""

from __future__ import annotations

import pytest
from api_helpers import client, running

from racer_core.common.events import GenerationConfig
from racer_core.models.embedded import embedded_installed

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not embedded_installed(), reason="embedded model not installed (racer-tui install-model)"),
]

PROMPT = ("Repeat this list exactly, then once more: apples, pears, plums, cherries, grapes, lemons, "
          "oranges, peaches, apricots, figs.")
TOKENS = 64


@pytest.fixture(scope="module")
def engine():
    from racer_core.engine.engine import load_engine

    return load_engine(dtype="float32")  # fp32: racer equals ar token for token


def test_the_embedded_model_answers_as_the_chat_does(engine) -> None:
    # A fixed budget: "auto" follows this machine's measured costs, which a busy test machine may make 1.
    chat = engine.new_conversation()
    list(chat.send(PROMPT, GenerationConfig(method="racer", temperature=0.0, max_new_tokens=TOKENS, max_num_draft=16)))
    messages = [{"role": "user", "content": PROMPT}]
    with running(engine) as service:
        api = client(service)
        racer = api.chat.completions.create(model="smollm2", messages=messages, max_tokens=TOKENS, temperature=0,
                                            extra_body={"racer": {"max_num_draft": 16}})
        ar = api.chat.completions.create(model="smollm2", messages=messages, max_tokens=TOKENS, temperature=0,
                                         extra_body={"racer": {"method": "ar"}})
        streamed = api.chat.completions.create(model="smollm2", messages=messages, max_tokens=TOKENS, temperature=0,
                                               stream=True, stream_options={"include_usage": True},
                                               extra_body={"racer": {"max_num_draft": 16}})
        chunks = list(streamed)
    text = racer.choices[0].message.content
    assert text == chat.messages[-1]["content"] == ar.choices[0].message.content
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    stats = racer.usage.model_extra["racer"]
    assert 10 < stats["accepted_tokens"] <= stats["drafted_tokens"]
    assert stats["accepted_by_source"]["automaton"] > 0
    assert racer.usage.completion_tokens == chunks[-1].usage.completion_tokens == 1 + sum(stats["accept_lengths"])
    assert ar.usage.model_extra["racer"]["accepted_tokens"] == 0


def test_an_assistant_prefill_is_continued_on_the_embedded_tokenizer(engine) -> None:
    # The embedded model's tokenizer is the project's own (no transformers): the prefill went through it.
    from racer_core.models.fast_tokenizer import FastTokenizer

    assert isinstance(engine.tokenizer, FastTokenizer)
    messages = [{"role": "user", "content": "Name three fruits."}, {"role": "assistant", "content": "Sure: apples,"}]
    with running(engine) as service:
        api = client(service)
        whole = api.chat.completions.create(model="smollm2", messages=messages, max_tokens=12, temperature=0)
        streamed = api.chat.completions.create(model="smollm2", messages=messages, max_tokens=12, temperature=0,
                                               stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    reply = whole.choices[0].message.content
    assert reply and reply == text and not reply.startswith("Sure")


PLACE = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
         "required": ["city", "country"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                          "additionalProperties": False}}}


def test_structured_replies_on_the_embedded_model_equal_constrained_ar(engine) -> None:
    # The real server, model and grammar engine: a schema-constrained reply and a required tool call are
    # valid, racer's equal ar's token for token, and the grammar's forced tokens were accepted as drafts.
    pytest.importorskip("llguidance")
    import json

    import jsonschema

    messages = [{"role": "user", "content": "What is the weather in Lyon?"}]
    schema_format = {"type": "json_schema", "json_schema": {"name": "place", "schema": PLACE, "strict": True}}
    with running(engine) as service:
        api = client(service)

        def ask(method: str, **fields):
            return api.chat.completions.create(model="smollm2", messages=messages, max_tokens=60, temperature=0,
                                               extra_body={"racer": {"method": method, "max_num_draft": 16}},
                                               **fields)

        placed = {m: ask(m, response_format=schema_format) for m in ("ar", "racer")}
        called = {m: ask(m, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False) for m in ("ar", "racer")}
    text = placed["racer"].choices[0].message.content
    assert text == placed["ar"].choices[0].message.content
    jsonschema.validate(json.loads(text), PLACE)
    calls = {m: [(c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls]
             for m, r in called.items()}
    assert calls["racer"] == calls["ar"] and calls["racer"][0][0] == "get_weather"
    jsonschema.validate(json.loads(calls["racer"][0][1]), WEATHER["function"]["parameters"])
    assert called["racer"].choices[0].finish_reason == "tool_calls"
    for reply in (placed["racer"], called["racer"]):
        assert reply.usage.model_extra["racer"]["accepted_by_source"]["grammar"] > 0
