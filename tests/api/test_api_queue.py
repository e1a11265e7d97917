"""The server's request handling on the scripted engine (no torch): the queue
answers in order and refuses when full, a client that leaves cancels its
reply, keys are checked, failures answer in OpenAI's shape."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import pytest
from api_helpers import Recorder, client, http, running
from fake_engine import FakeEngine, tokenize

from racer_core.common.errors import InputError

openai = pytest.importorskip("openai")

USER = [{"role": "user", "content": "hello"}]


def wait_until(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {condition}")
        time.sleep(0.01)


def ask(service, **kwargs):
    return client(service, kwargs.pop("api_key", "unused")).chat.completions.create(
        model="fake", messages=kwargs.pop("messages", USER), temperature=0, **kwargs)


def test_requests_are_answered_in_order_and_a_full_queue_answers_429() -> None:
    engine = FakeEngine(gate_after=2)
    recorder = Recorder()
    with running(engine, observers=[recorder], queue=1) as service:
        answers: dict[str, str] = {}

        def send(name: str) -> None:
            answers[name] = ask(service, messages=[{"role": "user", "content": name}]).choices[0].message.content

        first = threading.Thread(target=send, args=("first",))
        first.start()
        wait_until(engine.paused.is_set)  # the first request holds the engine
        second = threading.Thread(target=send, args=("second",))
        second.start()
        wait_until(lambda: service.worker.waiting == 1)
        full = http(service, "/v1/chat/completions", '{"messages": [{"role": "user", "content": "third"}]}')
        assert full.status == 429 and int(full.headers["Retry-After"]) >= 1
        assert full.json()["error"]["type"] == "rate_limit_error" and "busy" in full.json()["error"]["message"]
        with pytest.raises(openai.RateLimitError):
            ask(service)
        engine.release()
        first.join(30)
        second.join(30)
        assert answers == {"first": engine.reply, "second": engine.reply}
        started = [job for kind, job, _, _ in recorder.seen if kind == "started"]
        texts = [text for text, _ in engine.prompts]
        assert texts == ["first", "second"] and len(started) == 2  # in the order they came
        assert ask(service).choices[0].message.content == engine.reply  # room again


def test_a_client_that_leaves_mid_stream_cancels_its_reply() -> None:
    engine = FakeEngine(step_hook=lambda method: time.sleep(0.05))  # about 40 steps: 2 s
    recorder = Recorder()
    with running(engine, observers=[recorder]) as service:
        stream = ask(service, stream=True)
        chunks = [next(stream), next(stream)]
        assert chunks[0].choices[0].delta.role == "assistant"
        stream.close()
        wait_until(lambda: recorder.finished())
        (_, _, outcome, tokens), = recorder.finished()
        assert outcome == "cancelled" and tokens < len(engine.reply.split())
        engine.step_hook = None
        assert ask(service).choices[0].message.content == engine.reply  # the engine is free again


def test_a_client_that_leaves_before_a_whole_reply_cancels_it_too() -> None:
    engine = FakeEngine(step_hook=lambda method: time.sleep(0.05))
    recorder = Recorder()
    with running(engine, observers=[recorder]) as service:
        body = json.dumps({"messages": USER}).encode()
        with socket.create_connection(("127.0.0.1", service.port), timeout=10) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (service.port, len(body), body))
            wait_until(lambda: engine.total_steps >= 3)
        wait_until(lambda: recorder.finished())
        (_, _, outcome, tokens), = recorder.finished()
        assert outcome == "cancelled" and tokens < len(engine.reply.split())


def test_a_key_is_asked_for_when_set() -> None:
    with running(FakeEngine(), api_key="sekret") as service:
        assert ask(service, api_key="sekret").choices[0].message.content
        with pytest.raises(openai.AuthenticationError, match="not valid"):
            ask(service, api_key="wrong")
        bare = http(service, "/v1/models")
        assert bare.status == 401 and "Authorization: Bearer" in bare.json()["error"]["message"]
        assert http(service, "/v1/models", Authorization="Bearer sekret").status == 200
        assert http(service, "/health").status == 200  # open to load balancers; it tells nothing private


def test_failures_answer_in_openais_shape_and_the_server_goes_on() -> None:
    engine = FakeEngine(fail_with=RuntimeError("the model broke"))
    with running(engine) as service:
        with pytest.raises(openai.InternalServerError, match="the model broke"):
            ask(service)
        engine.fail_with = InputError("that prompt cannot be read")
        with pytest.raises(openai.BadRequestError, match="cannot be read"):
            ask(service)
        engine.fail_with = None
        calls = []

        def break_midway(method: str) -> None:
            calls.append(method)
            if len(calls) == 3:
                raise RuntimeError("lost the device")

        engine.step_hook = break_midway
        with pytest.raises(openai.APIError, match="lost the device"):
            list(ask(service, stream=True))
        engine.step_hook = None
        assert ask(service).choices[0].message.content == engine.reply
        missing = http(service, "/v1/nothing")
        assert missing.status == 404 and missing.json()["error"]["type"] == "not_found_error"
        wrong_verb = http(service, "/v1/chat/completions")
        assert wrong_verb.status == 405 and "error" in wrong_verb.json()


def test_text_completions_go_through_the_engines_complete() -> None:
    # every engine completes text (the Engine protocol's `complete`): the scripted one too
    engine = FakeEngine()
    with running(engine) as service:
        reply = client(service).completions.create(model="fake", prompt="hi there", max_tokens=5)
    assert reply.choices[0].text == "".join(tokenize(engine.reply)[:5])
    assert reply.usage.prompt_tokens == len(engine.text_ids("hi there")) == 2
    assert [(text, config.max_new_tokens) for text, config in engine.completions] == [("hi there", 5)]


def test_the_server_modules_never_import_torch() -> None:
    code = ("import sys\nimport racer_tui.api.service, racer_tui.api.monitor, racer_tui.cli.api\n"
            "print([m for m in ('torch', 'transformers') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
