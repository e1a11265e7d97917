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
