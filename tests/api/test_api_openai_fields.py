"""Every field of OpenAI's chat and completions requests, through the real
`openai` client: neutral values pass, values not implemented are refused by
name, and the implemented ones do what plain decoding does (log-probabilities
equal ar's and a plain forward pass's, top_k and min_p reach the sampler, an
assistant prefill is continued)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import math

import pytest
from api_helpers import client, http, running, weak_attention_engine

torch = pytest.importorskip("torch")

from openai.resources.chat.completions import Completions as ChatCompletions  # noqa: E402
from openai.resources.completions import Completions  # noqa: E402

from racer_core.engine.engine import RacerEngine  # noqa: E402
from racer_tui.api.neutral_fields import shown  # noqa: E402
from racer_tui.api.protocol import ChatRequest, CompletionRequest  # noqa: E402

SYSTEM = "Be brief."
PROMPT = "The cat sat on the mat, and the dog sat on the log. The cat sat"
TOKENS = 40
CLIENT_ONLY = {"self", "extra_headers", "extra_query", "extra_body", "timeout"}


@pytest.fixture(scope="module")
def engine() -> RacerEngine:
    return weak_attention_engine()


@pytest.fixture(scope="module")
def service(engine):
    with running(engine) as service:
        yield service


MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]


def ask(service, messages=MESSAGES, **kwargs):
    return client(service).chat.completions.create(
        model="tiny", messages=messages, **{"max_tokens": TOKENS, "temperature": 0, **kwargs})


def test_every_field_the_openai_client_sends_is_known() -> None:
    chat = set(inspect.signature(ChatCompletions.create).parameters) - CLIENT_ONLY
    text = set(inspect.signature(Completions.create).parameters) - CLIENT_ONLY
    assert chat - set(ChatRequest.model_fields) == set()
    assert text - set(CompletionRequest.model_fields) == set()


NEUTRAL_CHAT = dict(
    frequency_penalty=0, presence_penalty=0, logprobs=False, tools=[], tool_choice="none",
    response_format={"type": "text"}, logit_bias={}, store=False, metadata={}, parallel_tool_calls=False,
    service_tier="auto", user="someone", n=1, seed=7, top_p=1, functions=[], function_call="none",
    modalities=["text"], verbosity="medium", prompt_cache_key="k", safety_identifier="s",
    prompt_cache_retention="in_memory", prompt_cache_options={}, max_completion_tokens=TOKENS,
    audio=None, prediction=None, reasoning_effort=None, web_search_options=None, moderation=None, stop=None,
)


def test_every_chat_field_at_its_neutral_value_changes_nothing(service) -> None:
    plain = ask(service).choices[0].message.content
    kwargs = NEUTRAL_CHAT
    reply = client(service).chat.completions.create(model="tiny", messages=MESSAGES, temperature=0, **kwargs)
    assert reply.choices[0].message.content == plain and reply.choices[0].logprobs is None
    streamed = client(service).chat.completions.create(
        model="tiny", messages=MESSAGES, temperature=0, stream=True,
        stream_options={"include_usage": True, "include_obfuscation": False}, **kwargs)
    chunks = list(streamed)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == plain
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == TOKENS
    # history turns in the shapes clients send: an empty tool_calls list, a null refusal
    history = [*MESSAGES, {"role": "assistant", "content": plain, "tool_calls": [], "refusal": None},
               {"role": "user", "content": [{"type": "text", "text": "Again."}]}]
    assert ask(service, history).choices[0].message.content


def test_every_completion_field_at_its_neutral_value_changes_nothing(service) -> None:
    api = client(service)
    plain = api.completions.create(model="tiny", prompt=PROMPT, max_tokens=20, temperature=0).choices[0].text
    reply = api.completions.create(model="tiny", prompt=PROMPT, max_tokens=20, temperature=0, best_of=1, echo=False,
                                   frequency_penalty=0, presence_penalty=0, logit_bias={}, n=1, seed=3, suffix="",
                                   top_p=1, user="someone", stop=None)
    assert reply.choices[0].text == plain and reply.choices[0].logprobs is None


REFUSED = [
    ("chat", "logit_bias", {"5": 10}),
    ("chat", "functions", [{"name": "f", "parameters": {}}]),
    ("chat", "store", True),
    ("chat", "service_tier", "priority"),
    ("chat", "modalities", ["text", "audio"]),
    ("chat", "reasoning_effort", "high"),
    ("chat", "audio", {"voice": "alloy", "format": "wav"}),
    ("text", "echo", True),
    ("text", "suffix", "the end"),
    ("text", "best_of", 3),
]


@pytest.mark.parametrize(("endpoint", "field", "value"), REFUSED, ids=[f"{e}-{f}" for e, f, _ in REFUSED])
def test_a_value_not_implemented_is_refused_naming_the_field_and_the_value(service, endpoint, field, value) -> None:
    body = {"messages": MESSAGES} if endpoint == "chat" else {"prompt": PROMPT}
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    answer = http(service, path, json.dumps({**body, field: value}))
    assert answer.status == 400, answer.text
    error = answer.json()["error"]
    assert error["message"].startswith(f"{field} {shown(value)} is not supported"), error["message"]
    assert error["param"] == field and "unknown field" not in error["message"]


@pytest.mark.parametrize(("message", "says"), [
    ({"role": "tool", "content": "42", "tool_call_id": "c1"}, "answers no tool call of an earlier assistant message"),
    ({"role": "function", "name": "f", "content": "42"}, "function messages are not supported"),
    ({"role": "assistant", "content": "", "function_call": {"name": "f", "arguments": "{}"}},
     "function_call {"),
    ({"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]},
     "input_audio parts are not supported"),
])
def test_legacy_function_turns_unanswered_tool_results_and_other_parts_are_refused_by_name(service, message, says) -> None:
    answer = http(service, "/v1/chat/completions",
                  json.dumps({"messages": [*MESSAGES, message, {"role": "user", "content": "and?"}]}))
    assert answer.status == 400 and says in answer.json()["error"]["message"], answer.text


# -- log-probabilities ---------------------------------------------------------


def _plain_logprobs(engine: RacerEngine, prompt_ids: list[int], reply_ids: list[int]) -> torch.Tensor:
    """Each reply token's log-probability from one plain forward pass over the whole sequence."""
    with torch.inference_mode():
        logits = engine.model(input_ids=torch.tensor([prompt_ids + reply_ids])).logits[0].float()
    rows = torch.log_softmax(logits[len(prompt_ids) - 1: -1], dim=-1)
    return rows


def test_logprobs_are_plain_decodings_and_equal_ars(service, engine) -> None:
    racer = ask(service, logprobs=True, top_logprobs=3)
    ar = ask(service, logprobs=True, top_logprobs=3, extra_body={"racer": {"method": "ar"}})
    extension = racer.choices[0].model_extra["racer"]
    assert extension["accepted_tokens"] > 0  # drafted rows of the tree gave some of the log-probabilities
    got, want = racer.choices[0].logprobs.content, ar.choices[0].logprobs.content
    assert racer.choices[0].message.content == ar.choices[0].message.content
    assert len(got) == len(want) == racer.usage.completion_tokens == TOKENS
    for a, b in zip(got, want, strict=True):
        assert a.token == b.token and a.logprob == pytest.approx(b.logprob, abs=1e-4)
        assert [t.token for t in a.top_logprobs] == [t.token for t in b.top_logprobs]
        assert len(a.top_logprobs) == 3 and a.top_logprobs[0].logprob >= a.logprob - 1e-6  # greedy: the likeliest
    conv = engine.new_conversation(SYSTEM)
    conv.messages.append({"role": "user", "content": PROMPT})
    ids = [t["id"] for t in extension["tokens"]]
    rows = _plain_logprobs(engine, conv.prompt_ids(), ids)
    for k, (token, entry) in enumerate(zip(ids, got, strict=True)):
        assert entry.logprob == pytest.approx(float(rows[k, token]), abs=1e-4)
        assert math.isclose(sum(math.exp(t.logprob) for t in entry.top_logprobs),
                            float(rows[k].topk(3).values.exp().sum()), abs_tol=1e-4)
        assert entry.bytes == list(entry.token.encode())
    # streamed: the same entries, chunk by chunk
    chunks = list(ask(service, logprobs=True, top_logprobs=3, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in got]


def test_the_completions_api_has_its_own_logprobs_shape(service) -> None:
    api = client(service)
    whole = api.completions.create(model="tiny", prompt=PROMPT, max_tokens=12, temperature=0, logprobs=2)
    lp = whole.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 12
    assert all(len(top) <= 2 for top in lp.top_logprobs) and lp.text_offset[0] == 0
    assert lp.text_offset == sorted(lp.text_offset)
    streamed = api.completions.create(model="tiny", prompt=PROMPT, max_tokens=12, temperature=0, logprobs=2,
                                      stream=True)
    parts = [c.choices[0].logprobs for c in streamed if c.choices[0].logprobs]
    assert [t for p in parts for t in p.text_offset] == lp.text_offset
    assert [t for p in parts for t in p.token_logprobs] == lp.token_logprobs


def test_logprobs_are_refused_where_they_cannot_be_given(service) -> None:
    answer = http(service, "/v1/chat/completions", json.dumps({"messages": MESSAGES, "top_logprobs": 2}))
    assert answer.status == 400 and "top_logprobs needs logprobs true" in answer.text
    answer = http(service, "/v1/chat/completions",
                  json.dumps({"messages": MESSAGES, "logprobs": True, "top_logprobs": 21}))
    assert answer.status == 400 and "top_logprobs must be" in answer.text
    answer = http(service, "/v1/chat/completions",
                  json.dumps({"messages": MESSAGES, "logprobs": True, "racer": {"method": "hf"}}))
    assert answer.status == 400 and "logprobs is not supported with method hf" in answer.text


# -- top_k, min_p, seed ----------------------------------------------------------


def test_top_k_and_min_p_reach_the_sampler(service) -> None:
    greedy = ask(service).choices[0].message.content
    sampled = ask(service, temperature=1.0, seed=5).choices[0].message.content
    assert sampled != greedy  # sampling at temperature 1 leaves the greedy path
    # top_k 1 and min_p 1 keep the likeliest token alone: sampling then is greedy
    assert ask(service, temperature=1.0, seed=5, extra_body={"top_k": 1}).choices[0].message.content == greedy
    assert ask(service, temperature=1.0, seed=5, extra_body={"min_p": 1.0}).choices[0].message.content == greedy
    # a seed repeats a sampled reply, top_k and min_p included
    again = {"top_k": 20, "min_p": 0.05}
    first = ask(service, temperature=1.0, seed=9, extra_body=again).choices[0].message.content
    assert ask(service, temperature=1.0, seed=9, extra_body=again).choices[0].message.content == first
    for body, says in (({"top_k": -2}, "top_k must be"), ({"min_p": 1.5}, "min_p must be")):
        answer = http(service, "/v1/chat/completions", json.dumps({"messages": MESSAGES, **body}))
        assert answer.status == 400 and says in answer.text, answer.text


# -- penalties ---------------------------------------------------------------------

FREQUENCY, PRESENCE, REPETITION = 0.05, 0.05, 1.02  # mild: the reply still repeats enough for drafts to be accepted
PENALTIES = {"frequency_penalty": FREQUENCY, "presence_penalty": PRESENCE, "extra_body": {"repetition_penalty": REPETITION}}


def _penalized_greedy(engine: RacerEngine, prompt_ids: list[int], count: int) -> list[int]:
    """Plain greedy decoding with the penalties, written out: one full forward pass per token."""
    reply: list[int] = []
    with torch.inference_mode():
        for _ in range(count):
            row = engine.model(input_ids=torch.tensor([prompt_ids + reply])).logits[0, -1].float()
            seen = set(prompt_ids) | set(reply)
            for t in seen:
                row[t] = row[t] / REPETITION if row[t] > 0 else row[t] * REPETITION
            for t in set(reply):
                row[t] -= FREQUENCY * reply.count(t) + PRESENCE
            reply.append(int(row.argmax()))
    return reply


def test_penalties_keep_racer_equal_to_ar_and_to_plain_decoding(service, engine) -> None:
    racer = ask(service, **PENALTIES)
    extra = {**PENALTIES["extra_body"], "racer": {"method": "ar"}}
    ar = ask(service, **{**PENALTIES, "extra_body": extra})
    tokens = [t["id"] for t in racer.choices[0].model_extra["racer"]["tokens"]]
    assert racer.choices[0].model_extra["racer"]["accepted_tokens"] > 0  # drafts were verified with penalties
    assert [t["id"] for t in ar.choices[0].model_extra["racer"]["tokens"]] == tokens
    assert racer.choices[0].message.content != ask(service).choices[0].message.content  # they change the reply
    conv = engine.new_conversation(SYSTEM)
    conv.messages.append({"role": "user", "content": PROMPT})
    assert tokens == _penalized_greedy(engine, conv.prompt_ids(), TOKENS)
    for body, says in (({"frequency_penalty": 3}, "frequency_penalty must be a number from -2 to 2"),
                       ({"repetition_penalty": 0}, "repetition_penalty must be a number in (0, 10]"),
                       ({"presence_penalty": 1, "racer": {"method": "pld"}}, "penalties are not supported with method pld")):
        answer = http(service, "/v1/chat/completions", json.dumps({"messages": MESSAGES, **body}))
        assert answer.status == 400 and says in answer.text, answer.text


# -- assistant prefill -------------------------------------------------------------

PREFILL = "Once upon a time"


def test_a_last_assistant_message_is_continued(service, engine) -> None:
    plain = ask(service).choices[0].message.content
    reply = ask(service, [*MESSAGES, {"role": "assistant", "content": PREFILL}])
    continued = reply.choices[0].message.content
    assert continued != plain and not continued.startswith(PREFILL)  # the continuation alone comes back
    # the same as continuing the rendered chat, which ends in the prefill, as plain text
    text = engine.tokenizer.apply_chat_template([*MESSAGES, {"role": "assistant", "content": PREFILL}],
                                                tokenize=False, continue_final_message=True)
    assert text.endswith(PREFILL)
    as_text = client(service).completions.create(model="tiny", prompt=text, max_tokens=TOKENS, temperature=0)
    assert continued == as_text.choices[0].text
    assert reply.usage.prompt_tokens == as_text.usage.prompt_tokens
    streamed = ask(service, [*MESSAGES, {"role": "assistant", "content": PREFILL}], stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == continued


# -- models ----------------------------------------------------------------------


def test_the_model_has_a_plain_id_and_its_display_name_is_an_alias() -> None:
    from racer_core.models.embedded import EMBEDDED_NAME
    from racer_tui.api.server import model_id

    assert model_id(EMBEDDED_NAME) == "smollm2-135m-instruct-q4_1"
    assert model_id("Qwen/Qwen3-0.6B (bfloat16)") == "qwen-qwen3-0.6b-bfloat16"


def test_models_can_be_listed_and_read_one_by_one(engine) -> None:
    engine.info = dataclasses.replace(engine.info, model="Tiny Qwen3 (Q4_1, embedded)")
    try:
        with running(engine) as service:
            api = client(service)
            listed = api.models.list().data
            assert [m.id for m in listed] == ["tiny-qwen3-q4_1"]
            assert listed[0].model_extra["name"] == "Tiny Qwen3 (Q4_1, embedded)"
            assert api.models.retrieve("tiny-qwen3-q4_1").id == "tiny-qwen3-q4_1"
            assert api.models.retrieve("Tiny Qwen3 (Q4_1, embedded)").id == "tiny-qwen3-q4_1"  # the alias
            missing = http(service, "/v1/models/gpt-4")
            assert missing.status == 404 and missing.json()["error"]["code"] == "model_not_found"
            reply = ask(service, max_tokens=3)
            assert reply.model == "tiny-qwen3-q4_1"
    finally:
        engine.info = dataclasses.replace(engine.info, model="tiny-qwen3")
