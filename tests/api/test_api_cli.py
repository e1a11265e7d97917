"""`racer-tui api` on the command line: its safety rules, its refusals in one
line, and a headless run end to end (one log line per request)."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from api_helpers import client
from fake_engine import FakeEngine, factory_for

from racer_tui.api.service import bind
from racer_tui.cli import main

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list:
    """Stand in for uvicorn's run (it would block): record the service instead."""
    seen: list = []
    monkeypatch.setattr("racer_tui.api.service.ApiService.run", lambda self: seen.append(self))
    return seen


def test_api_has_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["api", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "--api-key" in out and "--allow-remote" in out and "--headless" in out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "    api " in capsys.readouterr().out


def test_a_remote_address_needs_allow_remote(served: list, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["api", "--host", "0.0.0.0"])
    assert exc.value.code == 2 and "--allow-remote" in capsys.readouterr().err and not served


def test_eagle3_as_the_default_method_needs_a_draft_head(served: list, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["api", "--method", "eagle3"], engine_factory=factory_for(FakeEngine())) == 2
    err = capsys.readouterr().err
    assert "eagle3 needs a draft head" in err and err.count("\n") == 1 and not served


def test_allow_remote_without_a_key_is_refused(served: list, monkeypatch, capsys) -> None:
    monkeypatch.delenv("RACER_TUI_API_KEY", raising=False)
    with pytest.raises(SystemExit) as exc:
        main(["api", "--host", "0.0.0.0", "--allow-remote"], engine_factory=factory_for(FakeEngine()))
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--allow-remote needs --api-key" in err and not served


@pytest.mark.parametrize("key_from", ["flag", "environment"])
def test_allow_remote_with_a_key_serves_with_a_warning(key_from: str, served: list, monkeypatch, capsys) -> None:
    words = ["api", "--host", "0.0.0.0", "--port", "0", "--allow-remote", "--headless"]
    if key_from == "flag":
        words += ["--api-key", "k1"]
    else:
        monkeypatch.setenv("RACER_TUI_API_KEY", "k1")
    assert main(words, engine_factory=factory_for(FakeEngine())) == 0
    (service,) = served
    service.sock.close()
    assert service.settings.api_key == "k1" and service.host == "0.0.0.0"
    assert "warning: serving on 0.0.0.0" in capsys.readouterr().err


def test_a_missing_extra_is_refused_in_one_line(monkeypatch, capsys) -> None:
    import racer_tui.cli.api as api

    monkeypatch.setattr(api, "find_spec", lambda name: None if name == "uvicorn" else object())
    assert main(["api"], engine_factory=factory_for(FakeEngine())) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["racer-tui: error: racer-tui api needs the api extra: pip install 'racer-tui[api]' "
                   "(missing: uvicorn)"]


def test_a_taken_port_is_one_clear_error(capsys) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["api", "--headless", "--port", str(port)], engine_factory=factory_for(FakeEngine())) == 1
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "Traceback" not in err


def test_the_address_takes_connections_before_the_server_runs() -> None:
    """The headless line gives the address before uvicorn starts: a client that
    connects at once waits in the backlog, not refused (a race seen in CI)."""
    sock = bind("127.0.0.1", 0)
    try:
        with socket.create_connection(sock.getsockname(), timeout=5):
            pass
    finally:
        sock.close()


def test_bad_values_are_usage_errors(capsys) -> None:
    for words, says in ((["--method", "magic"], "method"), (["--port", "70000"], "--port"),
                        (["--queue", "0"], "--queue"), (["--max-tokens", "0"], "max_new_tokens")):
        with pytest.raises(SystemExit) as exc:
            main(["api", *words])
        assert exc.value.code == 2 and says in capsys.readouterr().err


def test_a_headless_server_logs_one_line_per_request_and_stops_on_ctrl_c() -> None:
    script = (
        # Ctrl-C as a terminal sends it, whatever the runner left: a shell's background job inherits SIGINT ignored
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
        "from fake_engine import FakeEngine, factory_for\n"
        "from racer_tui.cli import main\n"
        "sys.exit(main(['api', '--headless', '--port', '0'], engine_factory=factory_for(FakeEngine())))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env=env)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()

    def next_line() -> str:
        try:
            return lines.get(timeout=30)  # never a hang, whatever breaks
        except queue.Empty:
            raise AssertionError("the server printed no line within 30 s") from None

    try:
        line = next_line()
        assert "serving fake-model on http://127.0.0.1:" in line and "as model 'fake-model'" in line, line
        url = line.split(" on ")[1].split()[0]
        api = client(url)
        assert api.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]).choices
        with pytest.raises(Exception, match="temperature"):
            api.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], temperature=9)
        done = next_line()
        refused = next_line()
        assert done.startswith("racer-tui api: 127.0.0.1:") and " chat racer done " in done and "tok/s" in done
        assert " POST /v1/chat/completions 400 temperature must be" in refused
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 130  # 128 + SIGINT, as the other commands
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
