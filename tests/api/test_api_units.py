"""The server's pieces on their own: stop sequences over streamed tokens, the
request rules, messages and their images."""

from __future__ import annotations

import base64
import io

import pytest

pytest.importorskip("pydantic")

from racer_core.common.events import Source, TokenPiece  # noqa: E402
from racer_tui.api.chat_input import chat_prompt  # noqa: E402
from racer_tui.api.protocol import ApiError, ChatRequest, parse, sampling  # noqa: E402
from racer_tui.api.reply import StopText  # noqa: E402


def pieces(*texts: str) -> list[TokenPiece]:
    return [TokenPiece(i, t, Source.RETRIEVAL if i % 2 else Source.MODEL) for i, t in enumerate(texts)]


def run(stops: tuple[str, ...], texts: list[str], chunk: int = 1) -> tuple[str, bool, list[str]]:
    """Feed `texts` `chunk` tokens at a time: (the text let through, stopped?, what each push let through)."""
    scan = StopText(stops)
    given = pieces(*texts)
    outs = []
    for i in range(0, len(given), chunk):
        outs.append("".join(p.text for p in scan.push(given[i : i + chunk])))
    if not scan.hit:
        outs.append("".join(p.text for p in scan.flush()))
    return "".join(outs), scan.hit, outs


@pytest.mark.parametrize("chunk", [1, 2, 5])
def test_a_stop_sequence_cuts_the_text_wherever_the_tokens_split_it(chunk: int) -> None:
    texts = ["Hel", "lo wo", "rld", ". Bye", " now"]
    assert run(("o w",), texts, chunk)[:2] == ("Hell", True)
    assert run(("ld.",), texts, chunk)[:2] == ("Hello wor", True)
    assert run((". B", "wor"), texts, chunk)[:2] == ("Hello ", True)  # the earliest of several
    assert run(("zzz",), texts, chunk)[:2] == ("Hello world. Bye now", False)
    assert run((), texts, chunk)[:2] == ("Hello world. Bye now", False)


def test_text_that_may_begin_a_stop_is_held_back_until_it_cannot() -> None:
    text, hit, outs = run(("world!",), ["Hello ", "wor", "ld", " again"])
    assert (text, hit) == ("Hello world again", False)
    assert outs[:3] == ["Hello ", "", ""]  # "wor", "world" might have begun the stop
    scan = StopText(("x",))
    cut = scan.push(pieces("abxcd"))
    assert [(p.token_id, p.text, p.source) for p in cut] == [(0, "ab", Source.MODEL)]
    assert scan.push(pieces("more")) == [] and scan.hit


def req(**fields) -> ChatRequest:
    return parse(ChatRequest, {"messages": [{"role": "user", "content": "hi"}], **fields})


def refusal(**fields) -> ApiError:
    with pytest.raises(ApiError) as caught:
        sampling(req(**fields), "racer")
    assert caught.value.status == 400
    return caught.value


def test_requests_map_to_the_engines_config_with_openais_defaults() -> None:
    plan = sampling(req(), "racer")
    assert (plan.config.method, plan.config.temperature, plan.config.top_p, plan.n) == ("racer", 1.0, 1.0, 1)
    assert not plan.config.tie_margins  # the benchmark's: a reply here does not pay for them
    assert not plan.max_tokens_given and plan.config.max_new_tokens == 2**31 - 1  # the context decides
    plan = sampling(req(max_completion_tokens=7, temperature=0, seed=3, stop="\n", n=2,
                        racer={"method": "logits", "max_breadth": 4, "max_num_draft": "auto"}), "ar")
    c = plan.config
    assert (c.method, c.max_new_tokens, c.temperature, c.seed, c.max_breadth) == ("logits", 7, 0.0, 3, 4)
    assert plan.stops == ("\n",) and plan.n == 2 and plan.max_tokens_given
    assert sampling(req(), "ar", max_tokens=50).config.max_new_tokens == 50  # the server's --max-tokens


def test_top_p_0_means_no_filter_as_on_the_command_line() -> None:
    # issue 41: the API refused top_p 0, which OpenAI's range 0..1 has and the command line reads as 1
    from racer_tui.cli import build_parser
    from racer_tui.cli.chat import overrides

    command_line = overrides(build_parser().parse_args(["--top-p", "0"]))["top_p"]
    assert sampling(req(top_p=0), "racer").config.top_p == command_line == 1.0
    assert sampling(req(top_p=0.5), "racer").config.top_p == 0.5
    assert refusal(top_p=1.5).message == "top_p must be a number from 0 to 1 (0: no nucleus filter, like 1), not 1.5"


def test_values_are_refused_by_the_config_rules_under_the_requests_names() -> None:
    assert refusal(temperature=7).param == "temperature"
    assert refusal(max_tokens=0).message.startswith("max_tokens must be a whole number")
    assert refusal(racer={"ngram": -1}).param == "racer.ngram"
    assert "racer.ngram must be" in refusal(racer={"ngram": -1}).message
    assert refusal(racer={"max_new_tokens": 5}).param == "racer.max_new_tokens"  # OpenAI names that one
    assert refusal(racer={"tie_margins": True}).param == "racer.tie_margins"  # asked by the benchmark, no setting
    assert refusal(max_tokens=3, max_completion_tokens=4).param == "max_tokens"
    assert refusal(stop=[""]).param == "stop"


def test_messages_become_a_history_and_a_last_user_turn() -> None:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (3, 2), "blue").save(out, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()
    request = parse(ChatRequest, {"messages": [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "a"}]},
        {"role": "assistant", "content": "A square."},
        {"role": "user", "content": [{"type": "text", "text": "and"}, {"type": "text", "text": "now?"}]},
    ]})
    prompt = chat_prompt(request.messages)
    assert prompt.history == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "a"},
                              {"role": "assistant", "content": "A square."}]
    assert prompt.text == "and\nnow?" and prompt.attached == ()
    assert list(prompt.history_images) == [1] and prompt.history_images[1][0].pixels.size == (3, 2)
    broken = parse(ChatRequest, {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]})
    with pytest.raises(ApiError, match="not readable"):
        chat_prompt(broken.messages)


def test_docs_list_every_method_setting_and_request_field() -> None:
    """docs/api.md names every decoding method, every `racer` setting and every request field."""
    import re
    from pathlib import Path

    from racer_core.common.config import METHODS
    from racer_tui.api.protocol import RACER_FIELDS, CompletionRequest

    doc = Path(__file__).resolve().parents[2].joinpath("docs", "api.md").read_text()
    named = set(re.findall(r"`([a-z0-9_]+)", doc))
    assert set(METHODS) - named == set()
    assert set(RACER_FIELDS) - named == set()
    assert (set(ChatRequest.model_fields) | set(CompletionRequest.model_fields)) - named == set()


def test_serve_start_is_tried_again_when_a_busy_machine_kills_its_proxy() -> None:
    """On a loaded machine Serve's controller killed a slow proxy and serve.start
    raised ActorDiedError (CI, 4 Dec 2026): the start is tried again, and after
    the last try the user gets one line."""
    from types import SimpleNamespace

    from racer_core.common.errors import RacerError
    from racer_tui.api.ray_replicas import start_serve

    class ActorDiedError(Exception):
        pass

    ray = SimpleNamespace(exceptions=SimpleNamespace(ActorDiedError=ActorDiedError))
    fails = [ActorDiedError("The actor died unexpectedly before finishing this task.\n\tclass_name: ProxyActor"),
             TimeoutError("HTTP proxies not available after 60s.")]
    calls: list[dict] = []

    def start(**options: object) -> None:
        calls.append(options)
        if fails:
            raise fails.pop(0)

    start_serve(SimpleNamespace(start=start), ray, "127.0.0.1", 8000)
    assert len(calls) == 3 and calls[-1]["http_options"] == {"host": "127.0.0.1", "port": 8000}
    fails[:] = [ActorDiedError("died")] * 3
    with pytest.raises(RacerError, match=r"^Serve's HTTP proxy did not start \(3 tries; a busy machine\?\): died$"):
        start_serve(SimpleNamespace(start=start), ray, "127.0.0.1", 8000)
