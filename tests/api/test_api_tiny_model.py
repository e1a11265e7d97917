"""`racer-tui api` on a tiny random model, through the real `openai` client:
replies equal the chat's, statistics add up, drafts are accepted, bad input
is refused in OpenAI's shape and the server goes on serving."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from api_helpers import Answer, Recorder, client, http, red_png_url, running, weak_attention_engine

torch = pytest.importorskip("torch")

import openai  # noqa: E402

from racer_core.common.events import GenerationConfig  # noqa: E402
from racer_core.engine.engine import RacerEngine  # noqa: E402

SYSTEM = "Be brief."
PROMPT = "The cat sat on the mat, and the dog sat on the log. The cat sat"
TOKENS = 60


@pytest.fixture(scope="module")
def engine() -> RacerEngine:
    return weak_attention_engine()


@pytest.fixture(scope="module")
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def service(engine, recorder):
    with running(engine, observers=[recorder]) as service:
        yield service


def chat_reply(engine: RacerEngine, text: str, method: str = "racer", system: str | None = SYSTEM, **config) -> str:
    conv = engine.new_conversation(system)
    list(conv.send(text, GenerationConfig(method=method, temperature=0.0, **{"max_new_tokens": TOKENS, **config})))
    return conv.messages[-1]["content"]


def ask(service, text: str = PROMPT, **kwargs):
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
    return client(service).chat.completions.create(
        model="tiny", messages=messages, **{"max_tokens": TOKENS, "temperature": 0, **kwargs})


def check_statistics(racer: dict, tokens: list[dict], completion_tokens: int) -> None:
    """The per-choice extension adds up: tokens = the prefill's + the steps' sum, accepted <= drafted."""
    lengths = racer["accept_lengths"]
    assert racer["steps"] == len(lengths)
    assert completion_tokens == len(tokens) == 1 + sum(lengths)
    assert 0 <= racer["accepted_tokens"] <= racer["drafted_tokens"]
    by_source = {s: sum(1 for t in tokens if t["source"] == s) for s in ("automaton", "logits", "bonus")}
    assert by_source["automaton"] == racer["accepted_by_source"]["automaton"]
    assert by_source["logits"] == racer["accepted_by_source"]["logits"]
    assert by_source["automaton"] + by_source["logits"] == racer["accepted_tokens"]
    # every step ends with the model's token, unless the length limit cut it off
    assert by_source["bonus"] <= racer["steps"] + 1
    assert by_source["bonus"] + racer["accepted_tokens"] == completion_tokens
    assert racer["mean_accepted_tokens"] == pytest.approx(sum(lengths) / len(lengths), abs=1e-4)


def test_a_greedy_reply_equals_the_chats_and_its_statistics_add_up(service, engine) -> None:
    reply = ask(service)
    choice = reply.choices[0]
    assert choice.message.content == chat_reply(engine, PROMPT)
    assert choice.message.content == chat_reply(engine, PROMPT, method="ar")  # and plain greedy's
    assert choice.finish_reason == "length"
    racer = choice.model_extra["racer"]
    check_statistics(racer, racer["tokens"], reply.usage.completion_tokens)
    assert racer["method"] == "racer" and racer["accepted_tokens"] > 0  # drafts were accepted
    assert "".join(t["text"] for t in racer["tokens"]) == choice.message.content
    conv = engine.new_conversation(SYSTEM)
    conv.messages.append({"role": "user", "content": PROMPT})
    assert reply.usage.prompt_tokens == len(conv.prompt_ids())
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert reply.usage.model_extra["racer"]["accepted_tokens"] == racer["accepted_tokens"]
    assert reply.model == "tiny-qwen3" and reply.object == "chat.completion"


def test_the_method_and_its_settings_come_in_the_extension(service, engine) -> None:
    ar = ask(service, extra_body={"racer": {"method": "ar"}})
    stats = ar.choices[0].model_extra["racer"]
    assert stats["method"] == "ar" and stats["drafted_tokens"] == 0 and stats["mean_accepted_tokens"] == 1.0
    small = ask(service, extra_body={"racer": {"method": "retrieval", "max_num_draft": 4, "ngram": 5}})
    stats = small.choices[0].model_extra["racer"]
    assert set(stats["accepted_by_source"]) == {"automaton"}  # retrieval drafts from the automaton alone
    assert max(stats["accept_lengths"]) <= 5  # a budget of 4 drafts, plus the bonus
    assert small.choices[0].message.content == ar.choices[0].message.content


def test_a_streamed_reply_equals_the_whole_one(service, engine) -> None:
    # Both requests start from the same tree policy (the engine's is shared and learns
    # from every reply) on the scripted cost curve (tests/conftest.py): the same trees.
    engine._policies.clear()
    whole = ask(service).choices[0]
    engine._policies.clear()
    chunks = list(ask(service, stream=True, stream_options={"include_usage": True}))
    content = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(content) == whole.message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    tokens = [t for c in chunks if c.choices and c.choices[0].finish_reason is None
              for t in c.choices[0].model_extra["racer"]["tokens"]]
    assert tokens == whole.model_extra["racer"]["tokens"]
    last_choice = [c for c in chunks if c.choices][-1].choices[0]
    assert last_choice.finish_reason == "length"
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.completion_tokens == len(tokens)
    check_statistics(last_choice.model_extra["racer"], tokens, usage.completion_tokens)


def test_n_choices_follow_the_seed_rule_of_num_choices(service) -> None:
    sampled = dict(temperature=0.9, seed=11, max_tokens=20)
    three = ask(service, n=3, **sampled)
    assert [c.index for c in three.choices] == [0, 1, 2]
    second_alone = ask(service, **{**sampled, "seed": 12})
    assert three.choices[1].message.content == second_alone.choices[0].message.content
    assert len({c.message.content for c in three.choices}) > 1
    assert three.usage.completion_tokens == sum(len(c.model_extra["racer"]["tokens"]) for c in three.choices)
    streamed = list(ask(service, n=2, stream=True, **sampled))
    for i in range(2):
        text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices and c.choices[0].index == i)
        assert text == three.choices[i].message.content


def test_stop_sequences_end_the_reply_in_both_modes(service) -> None:
    full = ask(service).choices[0].message.content
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    cut = full[: full.index(stop)]
    reply = ask(service, stop=[stop, "never-there"]).choices[0]
    assert reply.message.content == cut and reply.finish_reason == "stop"
    streamed = list(ask(service, stop=stop, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == cut
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_text_completions_continue_the_prompt_as_is(service, engine) -> None:
    config = GenerationConfig(method="racer", temperature=0.0, max_new_tokens=30)
    expected = "".join(e.text for e in engine.complete(PROMPT, config))
    api = client(service)
    reply = api.completions.create(model="tiny", prompt=PROMPT, max_tokens=30, temperature=0)
    assert reply.choices[0].text == expected and reply.object == "text_completion"
    assert reply.usage.prompt_tokens == len(engine.text_ids(PROMPT))
    check_statistics(reply.choices[0].model_extra["racer"], reply.choices[0].model_extra["racer"]["tokens"],
                     reply.usage.completion_tokens)
    streamed = api.completions.create(model="tiny", prompt=PROMPT, max_tokens=30, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == expected


def test_models_and_health(service) -> None:
    assert [m.id for m in client(service).models.list()] == ["tiny-qwen3"]
    health = http(service, "/health").json()
    assert health["status"] == "ok"


def test_concurrent_clients_each_get_their_own_reply(service, engine, recorder) -> None:
    prompts = [f"{PROMPT} {i} {i + 1} {i + 2}" for i in range(6)]
    expected = {p: chat_reply(engine, p, max_new_tokens=24) for p in prompts}
    got: dict[str, str] = {}
    errors: list[BaseException] = []

    def one(i: int, prompt: str) -> None:
        try:
            if i % 2:  # half of them stream
                got[prompt] = "".join(c.choices[0].delta.content or "" for c in ask(service, prompt, max_tokens=24,
                                                                                     stream=True))
            else:
                got[prompt] = ask(service, prompt, max_tokens=24).choices[0].message.content
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    before = len(recorder.finished())
    threads = [threading.Thread(target=one, args=(i, p)) for i, p in enumerate(prompts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and got == expected
    assert [s[2] for s in recorder.finished()[before:]] == ["done"] * len(prompts)


def _post(service, body: bytes | str) -> Answer:
    return http(service, "/v1/chat/completions", body)


USER = [{"role": "user", "content": "hi"}]
BAD = [
    ("malformed JSON", '{"messages": [', "not valid JSON"),
    ("not an object", "[1, 2]", "JSON object"),
    ("unknown field", {"messages": USER, "frequency_boost": 1}, "unknown field 'frequency_boost'"),
    ("wrong type", {"messages": USER, "max_tokens": "5"}, "max_tokens"),
    ("a bool for n", {"messages": USER, "n": True}, "n"),
    ("temperature 7", {"messages": USER, "temperature": 7}, "temperature must be a number from 0 to 5"),
    ("NaN", '{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', "temperature"),
    ("NaN top_p", '{"messages": [{"role": "user", "content": "hi"}], "top_p": NaN}', "top_p"),
    ("empty messages", {"messages": []}, "at least one message"),
    ("no messages", {"model": "x"}, "messages is required"),
    ("last not user", {"messages": [{"role": "assistant", "content": "hi"}]}, "the user's"),
    ("unknown role", {"messages": [{"role": "robot", "content": "hi"}]}, "role"),
    ("image for a text-only model",
     {"messages": [{"role": "user", "content": [{"type": "text", "text": "what is it?"},
                                                 {"type": "image_url", "image_url": {"url": red_png_url()}}]}]},
     "reads text only"),
    ("an image earlier in the chat, for a text-only model",
     {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": red_png_url()}}]},
                   {"role": "assistant", "content": "A red square."}, {"role": "user", "content": "Sure?"}]},
     "reads text only"),
    ("an image address", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}]}]}, "data:image"),
    ("a local file tag", {"messages": [{"role": "user", "content": "<image>/etc/hosts</image>"}]}, "<image>"),
    ("max_tokens above the context", {"messages": USER, "max_tokens": 4000}, "exceed the model's context of 2048"),
    ("zero max_tokens", {"messages": USER, "max_tokens": 0}, "max_tokens"),
    ("n too large", {"messages": USER, "n": 99}, "n must be"),
    ("five stops", {"messages": USER, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ("unknown method", {"messages": USER, "racer": {"method": "magic"}}, "unknown method"),
    ("unknown racer setting", {"messages": USER, "racer": {"speed": 9}}, "racer.speed"),
    ("racer budget of the wrong type", {"messages": USER, "racer": {"max_num_draft": True}}, "max_num_draft"),
    ("stream_options without stream", {"messages": USER, "stream_options": {"include_usage": True}}, "stream"),
]


@pytest.mark.parametrize(("name", "body", "says"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_4xx_in_openais_shape_and_the_server_goes_on(service, name, body, says) -> None:
    raw = body if isinstance(body, str) else json.dumps(body)
    answer = _post(service, raw)
    assert answer.status == 400, answer.text
    error = answer.json()["error"]
    assert says in error["message"] and error["type"] == "invalid_request_error"
    assert set(error) == {"message", "type", "param", "code"}
    assert ask(service, max_tokens=3).choices[0].finish_reason == "length"  # still serving


def test_the_openai_client_sees_a_bad_request_error(service) -> None:
    with pytest.raises(openai.BadRequestError, match="temperature"):
        ask(service, temperature=7)


def test_a_body_over_the_limit_is_refused(engine) -> None:
    with running(engine, max_body=2048) as small:
        answer = _post(small, json.dumps({"messages": [{"role": "user", "content": "x" * 4000}]}))
        # 413 Content Too Large, in OpenAI's error shape (issue 41: it was a 400)
        assert answer.status == 413 and answer.json()["error"]["code"] == "request_too_large"
        assert answer.json()["error"]["message"] == ("the request body is larger than the server's limit of 2048 "
                                                     "bytes (its --max-body)")
        # sent in chunks, without a Content-Length: refused alike once it grows past the limit
        body = json.dumps({"messages": [{"role": "user", "content": "x" * 4000}]}).encode()
        request = urllib.request.Request(small.url.removesuffix("/v1") + "/v1/chat/completions",
                                         data=iter([body[:1000], body[1000:]]), method="POST",
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as chunked:
            urllib.request.urlopen(request, timeout=60)
        assert chunked.value.code == 413
        assert ask(small, max_tokens=3).choices[0].message.content is not None


def test_a_prompt_longer_than_the_context_is_refused(service) -> None:
    with pytest.raises(openai.BadRequestError, match="this model takes at most 2047"):
        ask(service, "the cat " * 1200, max_tokens=None)


def test_a_reply_cut_inside_its_last_character_has_no_replacement_character() -> None:
    # issue 41: max_tokens cut the last character's bytes, and the reply ended in U+FFFD, whole and streamed
    from engine_helpers import CUT_REPLY, cut_reply_engine

    messages = [{"role": "user", "content": "Repeat exactly: 日本語 🙂 🚀"}]
    with running(cut_reply_engine()) as service:
        api = client(service)
        whole = api.chat.completions.create(model="tiny", messages=messages, max_tokens=40)
        streamed = api.chat.completions.create(model="tiny", messages=messages, max_tokens=40, stream=True)
        chunks = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
        completion = api.completions.create(model="tiny", prompt="Repeat exactly:", max_tokens=40)
    assert whole.choices[0].message.content == chunks == completion.choices[0].text == CUT_REPLY
    assert whole.choices[0].finish_reason == "length"


def test_an_assistant_prefill_is_continued_on_the_projects_own_tokenizer(tmp_path) -> None:
    # issue 41: on FastTokenizer (the embedded model's) a prefill was a 500, whole and streamed
    from racer_core.models.fast_tokenizer import load_fast_tokenizer
    from racer_core.testing import tiny_model, tiny_tokenizer

    tiny_tokenizer().save_pretrained(tmp_path)
    model = tiny_model("llama")
    messages = [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": "Once upon a time"}]
    replies = []
    for tokenizer in (load_fast_tokenizer(tmp_path), tiny_tokenizer()):  # the project's, then transformers'
        with running(RacerEngine(model, tokenizer, "tiny-llama")) as service:
            api = client(service)
            whole = api.chat.completions.create(model="tiny", messages=messages, max_tokens=12, temperature=0)
            streamed = api.chat.completions.create(model="tiny", messages=messages, max_tokens=12, temperature=0,
                                                   stream=True)
            chunks = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
        assert whole.choices[0].message.content == chunks
        replies.append((chunks, whole.usage.prompt_tokens))
    assert replies[0] == replies[1] and replies[0][0]
