"""What web pages can do with `racer-tui api` (request_guard.py): a page on
another origin, or one reaching the server by a rebound DNS name, is refused;
an origin allowed with --allow-origin gets CORS; programs (no Origin) pass;
a body that is not JSON is refused before it is read."""

from __future__ import annotations

import json

import pytest
from api_helpers import client, http, running
from fake_engine import FakeEngine

from racer_tui.cli import main
from racer_tui.host_names import normal_origin

CHAT = json.dumps({"model": "fake", "messages": [{"role": "user", "content": "hello"}]})
UI = "http://localhost:3000"


def refused_with(answer, status: int, code: str) -> str:
    """The error's message, after checking OpenAI's shape."""
    assert answer.status == status, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    return error["message"]


def test_a_foreign_host_is_refused_on_loopback() -> None:
    engine = FakeEngine()
    seen: list = []
    with running(engine, refused=lambda route, who, error: seen.append((route, error.status))) as service:
        rebound = f"attacker.example:{service.port}"
        message = refused_with(http(service, "/v1/chat/completions", CHAT, Host=rebound), 403, "host_not_allowed")
        assert "attacker.example" in message
        refused_with(http(service, "/v1/models", Host=f"127.0.0.1:{service.port + 1}"), 403, "host_not_allowed")
        refused_with(http(service, "/health", Host="attacker.example"), 403, "host_not_allowed")
        for name in ("localhost", "127.0.0.1", "[::1]", "LocalHost"):
            assert http(service, "/v1/models", Host=f"{name}:{service.port}").status == 200
        assert engine.total_steps == 0  # the refused chat never reached the engine
        assert ("POST /v1/chat/completions", 403) in seen  # the log and the monitor hear of it


def test_allow_remote_answers_any_host() -> None:
    with running(FakeEngine(), allow_remote=True) as service:
        assert http(service, "/v1/models", Host=f"attacker.example:{service.port}").status == 200


@pytest.mark.parametrize("content_type", ["text/plain", "application/json"])
def test_a_request_from_another_origin_is_refused(content_type: str) -> None:
    engine = FakeEngine()
    with running(engine, allowed_origins=(UI,)) as service:
        answer = http(service, "/v1/chat/completions", CHAT, Origin="https://evil.example",
                      **{"Content-Type": content_type})
        message = refused_with(answer, 403, "origin_not_allowed")
        assert "--allow-origin https://evil.example" in message
        assert "access-control-allow-origin" not in {k.lower() for k in answer.headers}
        refused_with(http(service, "/v1/models", Origin="null"), 403, "origin_not_allowed")
        preflight = http(service, "/v1/chat/completions", method="OPTIONS", Origin="https://evil.example",
                         **{"Access-Control-Request-Method": "POST"})
        refused_with(preflight, 403, "origin_not_allowed")
        assert engine.total_steps == 0


def test_an_allowed_origin_gets_cors_and_its_preflight_answered() -> None:
    with running(FakeEngine(), allowed_origins=(UI,)) as service:
        preflight = http(service, "/v1/chat/completions", method="OPTIONS", Origin=UI,
                         **{"Access-Control-Request-Method": "POST",
                            "Access-Control-Request-Headers": "authorization, content-type"})
        assert preflight.status == 204
        assert preflight.headers["Access-Control-Allow-Origin"] == UI
        assert "POST" in preflight.headers["Access-Control-Allow-Methods"]
        assert preflight.headers["Access-Control-Allow-Headers"] == "authorization, content-type"
        whole = http(service, "/v1/chat/completions", CHAT, Origin=UI)
        assert whole.status == 200 and whole.json()["choices"][0]["message"]["content"]
        assert whole.headers["Access-Control-Allow-Origin"] == UI and "Origin" in whole.headers["Vary"]
        streamed = http(service, "/v1/chat/completions", json.dumps({**json.loads(CHAT), "stream": True}), Origin=UI)
        assert streamed.status == 200 and streamed.text.rstrip().endswith("data: [DONE]")
        assert streamed.headers["Access-Control-Allow-Origin"] == UI
        errors = http(service, "/v1/models/nope", Origin=UI)  # its errors are readable by the page too
        assert errors.status == 404 and errors.headers["Access-Control-Allow-Origin"] == UI


def test_the_openai_client_sends_no_origin_and_is_answered() -> None:
    with running(FakeEngine(), allowed_origins=(UI,)) as service:
        openai = client(service)
        assert [m.id for m in openai.models.list().data]
        reply = openai.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content
        chunks = list(openai.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}],
                                                     stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
            reply.choices[0].message.content


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x"])
def test_a_body_that_is_not_json_is_refused(content_type: str) -> None:
    engine = FakeEngine()
    with running(engine) as service:
        for path in ("/v1/chat/completions", "/v1/completions"):
            answer = http(service, path, CHAT, **{"Content-Type": content_type})
            message = refused_with(answer, 415, "unsupported_media_type")
            assert "application/json" in message and content_type in message
        assert engine.total_steps == 0
        with_charset = http(service, "/v1/chat/completions", CHAT, **{"Content-Type": "application/json; charset=utf-8"})
        assert with_charset.status == 200


def test_origins_are_written_as_browsers_send_them() -> None:
    assert normal_origin("http://localhost:3000") == "http://localhost:3000"
    assert normal_origin("HTTPS://UI.Example/") == "https://ui.example"
    for bad in ("localhost:3000", "http://ui.example/app", "*", "null", "ftp://x", "http://u@ui.example"):
        assert normal_origin(bad) is None


def test_allow_origin_on_the_command_line(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from fake_engine import factory_for

    served: list = []
    monkeypatch.setattr("racer_tui.api.service.ApiService.run", lambda self: served.append(self))
    words = ["api", "--port", "0", "--headless", "--allow-origin", "http://LocalHost:3000/", "--allow-origin", UI]
    assert main(words, engine_factory=factory_for(FakeEngine())) == 0
    (service,) = served
    service.sock.close()
    assert set(service.settings.allowed_origins) == {UI} and not service.settings.allow_remote
    with pytest.raises(SystemExit) as exc:
        main(["api", "--allow-origin", "localhost:3000"])
    assert exc.value.code == 2 and "is not a web origin" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["api", "--help"])
    assert "--allow-origin" in capsys.readouterr().out
