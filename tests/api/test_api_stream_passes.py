"""A streamed reply sends one chunk per forward pass, carrying every token the
pass accepted (its text, its log-probabilities and its sources), through the
real `openai` client and a tiny model whose drafts are accepted."""

from __future__ import annotations

import pytest
from api_helpers import client, running, weak_attention_engine

pytest.importorskip("torch")

PROMPT = "The cat sat on the mat, and the dog sat on the log. The cat sat"


@pytest.fixture(scope="module")
def service():
    with running(weak_attention_engine()) as service:
        yield service


@pytest.mark.parametrize("endpoint", ["chat", "completion"])
def test_one_chunk_per_pass_carries_all_its_tokens(service, endpoint) -> None:
    api = client(service)
    common = dict(model="tiny", max_tokens=40, temperature=0, stream=True, extra_body={"racer": {"method": "racer"}})
    if endpoint == "chat":
        chunks = list(api.chat.completions.create(messages=[{"role": "user", "content": PROMPT}], logprobs=True,
                                                  top_logprobs=2, **common))
    else:
        chunks = list(api.completions.create(prompt=PROMPT, logprobs=2, **common))
    body = [c.choices[0] for c in chunks if c.choices and c.choices[0].finish_reason is None]
    stats = [c.choices[0] for c in chunks if c.choices and c.choices[0].finish_reason][0].model_extra["racer"]
    per_chunk = [c.model_extra["racer"]["tokens"] for c in body]
    # the prefill's token, then one chunk per verification pass with all the tokens it accepted
    assert [len(t) for t in per_chunk] == [1, *stats["accept_lengths"]]
    assert max(stats["accept_lengths"]) > 1  # some passes accepted drafts: chunks of several tokens
    for choice, tokens in zip(body, per_chunk, strict=True):
        text = choice.delta.content if endpoint == "chat" else choice.text
        assert (text or "") == "".join(t["text"] for t in tokens)
        if endpoint == "chat":
            logprobs = choice.logprobs.content
            assert [e.token for e in logprobs] == [service.engine.token_text(t["id"]) for t in tokens]
            assert all(len(e.top_logprobs) == 2 for e in logprobs)
        else:
            assert len(choice.logprobs.tokens) == len(choice.logprobs.token_logprobs) == len(tokens)
