"""Tool calls in the chat template's own format (tools.py): a template that
writes Hermes' <tool_call> tags (Qwen2.5's, Qwen3's) is found by rendering it,
gets the tools to describe itself, renders calls and tool results itself, and
the reply is held by a Lark grammar to its tags and read back as OpenAI's
tool_calls. Other templates keep the generic form (test_api_structured_tools.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_helpers import client, running
from fake_engine import FakeEngine

from racer_core.common.tool_syntax import HERMES, hermes_call, tool_syntax
from racer_core.testing import tiny_hermes_tokenizer, tiny_tokenizer
from racer_tui.api.chat_input import chat_prompt
from racer_tui.api.protocol import ChatRequest, parse, sampling
from racer_tui.api.tools import read_hermes

USER = [{"role": "user", "content": "What is the weather in Lyon?"}]
ARGUMENTS = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                              "unit": {"enum": ["celsius", "fahrenheit"]}},
             "required": ["city", "unit"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                            "parameters": ARGUMENTS}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "",
                                         "parameters": {"type": "object", "properties": {}}}}
LYON = {"city": "Lyon", "unit": "celsius"}
CALL = hermes_call("get_weather", LYON)
ASKED_CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(LYON)}}
ANSWERED = [*USER, {"role": "assistant", "content": None, "tool_calls": [ASKED_CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]


def rendered(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    return tiny_hermes_tokenizer().apply_chat_template(messages, tools=tools, tokenize=False,
                                                       add_generation_prompt=True)


def ids(text: str) -> list[int]:
    return tiny_hermes_tokenizer()(text, add_special_tokens=False)["input_ids"]


# ANSWERED as the template takes it: the arguments as their JSON value, the result with its function's name
ANSWERED_TURNS = [*USER, {"role": "assistant", "content": "", "tool_calls": [
    {**ASKED_CALL, "function": {"name": "get_weather", "arguments": LYON}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "sunny, 21 C"}]


def planned(body: dict[str, Any]) -> Any:
    return sampling(parse(ChatRequest, {"messages": USER, **body}), "racer", None, HERMES)


def matches(grammar_text: str, text: str) -> bool:
    """Whether the whole of `text` (tokenized by the tiny tokenizer) is a reply the Lark grammar accepts."""
    pytest.importorskip("llguidance")
    import llguidance
    import llguidance.hf

    tokenizer = tiny_hermes_tokenizer()
    matcher = llguidance.LLMatcher(llguidance.hf.from_tokenizer(tokenizer),
                                   llguidance.LLMatcher.grammar_from_lark(grammar_text), log_level=0)
    return all(matcher.consume_token(t) for t in tokenizer(text, add_special_tokens=False)["input_ids"]) \
        and matcher.is_accepting()


def test_a_template_is_found_to_write_hermes_tool_calls_by_rendering_it() -> None:
    assert tool_syntax(tiny_hermes_tokenizer()) == HERMES
    assert tool_syntax(tiny_tokenizer()) is None  # a template without tools
    without = type("NoTemplate", (), {"chat_template": None})()
    assert tool_syntax(without) is None

    class OtherSyntax:  # a template that mentions tools but writes calls its own way
        chat_template = "{% for t in tools %}{{ t }}{% endfor %}"

        def apply_chat_template(self, messages: Any, tools: Any = None, **_: Any) -> str:
            return json.dumps({"tools": tools, "messages": messages})

    assert tool_syntax(OtherSyntax()) is None


@pytest.mark.parametrize("body, good, bad", [
    ({"tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False},
     [CALL], ["It is sunny.", f"{CALL}\n{CALL}", CALL.replace(", ", ",")]),
    ({"tools": [WEATHER, TIME], "tool_choice": "required"},
     [CALL, f"{CALL}\n{hermes_call('get_time', {})}"], ["It is sunny.", f"{CALL}{CALL}"]),
    ({"tools": [WEATHER, TIME], "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
     [hermes_call("get_time", {})], [CALL]),
    ({"tools": [WEATHER]}, ["It is sunny in Lyon.", CALL, f"{CALL}\n{CALL}"],
     [f"Let me look. {CALL}", hermes_call("get_weather", {"city": "Lyon"})]),
    ({"tools": [WEATHER], "response_format": {"type": "json_object"}}, ['{"a": 1}', CALL], ["It is sunny."]),
])
def test_each_tool_choice_holds_the_reply_to_its_hermes_form(body, good, bad) -> None:
    plan = planned(body)
    grammar = plan.config.grammar
    assert grammar.kind == "lark" and plan.tools.syntax == HERMES
    assert all(matches(grammar.text, text) for text in good), grammar.text
    assert not any(matches(grammar.text, text) for text in bad), grammar.text


def test_a_hermes_reply_is_read_back_as_openai_tool_calls() -> None:
    content, calls = read_hermes(f"{CALL}\n{hermes_call('get_time', {})}")
    assert content is None and [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", LYON),
                                                                                       ("get_time", {})]
    assert len({c.id for c in calls}) == 2 and calls[0].id.startswith("call_")
    content, calls = read_hermes(f"Let me look.\n{CALL}")  # vLLM's reading: the text before is the content
    assert content == "Let me look." and len(calls) == 1
    for not_calls in ["It is sunny.", CALL[:-5], "<tool_call>\n{\"name\": 1}\n</tool_call>", f"{CALL} and more"]:
        assert read_hermes(not_calls) == (not_calls, [])


def test_the_template_gets_the_tools_the_calls_and_the_results_as_they_are() -> None:
    engine = FakeEngine(reply=CALL, template_tools=HERMES)
    with running(engine) as service:
        api = client(service)
        reply = api.chat.completions.create(model="fake", messages=USER, tools=[WEATHER], tool_choice="required")
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        assert [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls] == [
            ("get_weather", LYON)]
        assert engine.configs[-1].grammar.kind == "lark"
        assert engine.tools_sent[-1] == [WEATHER] and engine.prompts[-1][1] == USER  # no system description
        chunks = list(api.chat.completions.create(model="fake", messages=USER, tools=[WEATHER], stream=True))
        heads = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices and c.choices[0].delta.tool_calls]
        assert heads[0].function.name == "get_weather" and json.loads(heads[1].function.arguments) == LYON
        engine.reply = "It is sunny, 21 C."
        reply = api.chat.completions.create(model="fake", messages=[{"role": "system", "content": "Be brief."},
                                                                    *ANSWERED], tools=[WEATHER])
        assert reply.choices[0].message.content == "It is sunny, 21 C." and not reply.choices[0].message.tool_calls
        sent = engine.prompts[-1][1]  # the results last: the reply answers them, no user turn is added
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
        assert sent[0]["content"] == "Be brief." and sent[2]["tool_calls"][0]["function"]["arguments"] == LYON
        assert sent[3] == {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "sunny, 21 C"}
        api.chat.completions.create(model="fake", messages=ANSWERED, tools=[WEATHER], tool_choice="none")
        assert engine.tools_sent[-1] is None and engine.configs[-1].grammar is None


def test_a_prompt_with_tool_turns_is_the_templates_own_rendering() -> None:
    """The engine's conversation renders the calls and the result through the template with
    the tools: the same ids as apply_chat_template with the tool role."""
    pytest.importorskip("torch")
    from racer_core.engine.engine import RacerEngine
    from racer_core.testing import tiny_model

    engine = RacerEngine(tiny_model("qwen3", 0), tiny_hermes_tokenizer(), "tiny-qwen3")
    assert engine.tool_syntax == HERMES
    request = parse(ChatRequest, {"messages": ANSWERED, "tools": [WEATHER]})
    plan = sampling(request, "racer", None, HERMES)
    prompt = chat_prompt(request.messages, plan.tools, native_tools=True)
    conv = engine.new_conversation()
    conv.messages = list(prompt.history)
    text = rendered(ANSWERED_TURNS, [WEATHER])
    assert conv.prompt_ids(False, "", prompt.tools) == ids(text)
    assert "<tools>\n" + json.dumps(WEATHER) in text and f"<|im_start|>assistant\n{CALL}<|im_end|>" in text
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in text


def test_a_required_call_on_a_tiny_model_comes_back_as_tool_calls_racer_equal_to_ar() -> None:
    """A tiny real qwen3 with a Hermes template, greedy: the call is in the template's tags
    (its arguments valid), racer's equals ar's, and the prompt is the template's own."""
    pytest.importorskip("torch")
    pytest.importorskip("llguidance")
    from engine_helpers import make_markov

    from racer_core.engine.engine import RacerEngine
    from racer_core.testing import tiny_model

    engine = RacerEngine(make_markov(tiny_model("qwen3", 0)), tiny_hermes_tokenizer(), "tiny-qwen3")
    with running(engine) as service:
        api = client(service)
        ask = {"model": "tiny", "messages": USER, "tools": [WEATHER, TIME], "tool_choice": "required",
               "parallel_tool_calls": False, "temperature": 0, "max_tokens": 80}
        replies = {method: api.chat.completions.create(**ask, extra_body={"racer": {"method": method}})
                   for method in ("ar", "racer")}
        calls = {m: [(c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls or []]
                 for m, r in replies.items()}
        assert calls["racer"] == calls["ar"] and len(calls["ar"]) == 1, replies["ar"]
        assert replies["racer"].choices[0].racer["accepted_tokens"] > 0  # drafts (the grammar's forced ones too) accepted
        for name, arguments in calls["ar"]:
            value = json.loads(arguments)
            assert name == "get_time" and value == {} or name == "get_weather" and set(value) == {"city", "unit"}
        assert replies["racer"].choices[0].finish_reason == "tool_calls"
        text = rendered(USER, [WEATHER, TIME])
        assert "# Tools" in text and replies["ar"].usage.prompt_tokens == len(ids(text))
        answered = api.chat.completions.create(**{**ask, "messages": ANSWERED, "tool_choice": "auto",
                                                  "max_tokens": 8})
        assert answered.usage.prompt_tokens == len(ids(rendered(ANSWERED_TURNS, [WEATHER, TIME])))
