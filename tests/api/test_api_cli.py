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


def _loads(loaded: list) -> object:
    """An engine factory that records each load (and reports its progress)."""
    def factory(*args, **kwargs):  # noqa: ANN002, ANN003
        loaded.append(args)
        return factory_for(FakeEngine())(*args, **kwargs)

    return factory


def test_a_taken_port_is_one_clear_error_before_the_model_loads(capsys) -> None:
    # issue 41: a port in use was reported only once the model had loaded
    loaded: list = []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["api", "--headless", "--port", str(port)], engine_factory=_loads(loaded)) == 1
    err = capsys.readouterr().err
    assert err == f"racer-tui: error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    assert loaded == []


def test_replicas_on_a_local_ray_refuse_a_taken_port_before_starting(monkeypatch, capsys) -> None:
    pytest.importorskip("ray.serve")
    from racer_tui.api import ray_replicas

    started: list = []
    monkeypatch.setattr(ray_replicas, "serve_until_interrupted", lambda *a, **k: started.append(a))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["api", "--replicas", "2", "--port", str(port)], engine_factory=_loads([])) == 1
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err and started == []


class _Recorded:
    """A stream and a lock that record, in order, what the log lines did with them."""

    def __init__(self, seen: list, name: str) -> None:
        self.seen, self.name = seen, name

    def write(self, text: str) -> None:
        self.seen.append((self.name, text))

    def flush(self) -> None:
        pass

    def __enter__(self) -> None:
        self.seen.append("lock")

    def __exit__(self, *exc: object) -> None:
        self.seen.append("unlock")


def test_every_log_line_is_written_whole_under_one_lock(monkeypatch) -> None:
    # issue 41: a request line ran into another ("...tokenizerracer-tui api: 127.0.0.1:51754 POST ... 500"):
    # print wrote the text and its newline apart, from the worker's thread and the server's at once
    import racer_tui.api.service as service
    from racer_tui.api.protocol import ApiError
    from racer_tui.cli.api import progress

    seen: list = []
    monkeypatch.setattr(service, "LINE_LOCK", _Recorded(seen, "lock"))
    monkeypatch.setattr(sys, "stderr", _Recorded(seen, "stderr"))
    monkeypatch.setattr(sys, "stdout", _Recorded(seen, "stdout"))
    progress("Loading the model...", 0.5)
    observe, refused = service.headless_log()
    refused("POST /v1/chat/completions", "127.0.0.1:51754", ApiError(500, "NotImplementedError: x"))
    service.write_line("racer-tui api: serving")
    assert seen == [
        "lock", ("stderr", "racer-tui api: Loading the model...\n"), "unlock",
        "lock", ("stdout", "racer-tui api: 127.0.0.1:51754 POST /v1/chat/completions 500 NotImplementedError: x\n"),
        "unlock",
        "lock", ("stdout", "racer-tui api: serving\n"), "unlock",
    ]


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
