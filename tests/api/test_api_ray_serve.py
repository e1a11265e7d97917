"""`racer-tui api --replicas 2` on a local Ray cluster, tiny model: concurrent
requests through Serve's proxy get the single server's greedy replies with
their own statistics, both replicas answer, the guard holds, and Ctrl-C tears
it all down. Without the extra, the replica options alone are refused in one line.
"""

from __future__ import annotations

import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from api_helpers import client, running, weak_attention_engine
from fake_engine import FakeEngine, factory_for
from time_limit import time_limit

from racer_tui.api.ray_replicas import REPLICA_HEADER
from racer_tui.cli import main

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
START_LIMIT_S = 240  # Ray, Serve and two replicas loading torch, on a loaded 2-core machine
TEST_LIMIT_S = 180
PROMPTS = [f"Count with me: {i} {i + 1} {i + 2}. The cat sat on the mat, and the dog sat on the" for i in range(8)]
TOKENS = 24


def _free_port() -> int:
    """A free loopback port below the kernel's ephemeral range (32768 up) and above Ray's
    workers' (10002-19999): Ray's own processes bind ephemeral ports as they start, and one
    took the port the system had just handed out here before Serve's proxy bound it."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 30000)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port between 20000 and 30000")


@dataclass
class Served:
    process: subprocess.Popen
    url: str
    port: int
    lines: list[str]


@pytest.fixture(scope="module")
def served():
    """`racer-tui api --replicas 2` in a process of its own, on a free loopback port, with the tiny model."""
    pytest.importorskip("ray.serve", reason="Ray Serve is an optional extra (pip install -e '.[serve]')")
    port = _free_port()
    session = tempfile.mkdtemp(prefix="ray-")  # Ray's session folder, removed after
    # Ctrl-C as a terminal sends it, whatever the runner left: a shell's background job inherits SIGINT ignored
    script = ("import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "import sys\nfrom api_helpers import replica_factory\nfrom racer_tui.cli import main\n"
              f"sys.exit(main(['api', '--replicas', '2', '--replica-cpus', '1', '--max-batch', '4', '--port', '{port}', "
              "'--headless'], engine_factory=replica_factory))\n")
    # The replicas import this checkout (and api_helpers, the factory's module), whatever is installed.
    path = os.pathsep.join([str(ROOT), str(TESTS), str(TESTS / "api")])
    env = {**os.environ, "PYTHONPATH": path, "RAY_TMPDIR": session}
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, cwd=ROOT, env=env)
    lines: list[str] = []
    said: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [(lines.append(x), said.put(x)) for x in process.stdout], daemon=True).start()
    try:
        deadline = time.monotonic() + START_LIMIT_S
        while not any(" serving " in line for line in lines):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the replicas did not start:\n" + "".join(lines[-30:]))
            try:
                said.get(timeout=1)
            except queue.Empty:
                pass
        yield Served(process, f"http://127.0.0.1:{port}/v1", port, lines)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        shutil.rmtree(session, ignore_errors=True)


def _ask(url: str, prompt: str, stream: bool = False):
    """(text, completion tokens, racer statistics, the replica that answered)."""
    # a fixed budget: the paper's table learns the prompt rows, which this tiny model's replies reuse
    answer = client(url).completions.with_raw_response.create(
        model="tiny", prompt=prompt, max_tokens=TOKENS, temperature=0, stream=stream,
        extra_body={"racer": {"max_num_draft": 8}}, **({"stream_options": {"include_usage": True}} if stream else {}))
    replica = answer.headers.get(REPLICA_HEADER)
    if not stream:
        reply = answer.parse()
        return reply.choices[0].text, reply.usage.completion_tokens, reply.usage.model_extra["racer"], replica
    chunks = list(answer.parse())
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    usage = chunks[-1].usage
    return text, usage.completion_tokens, usage.model_extra["racer"], replica


def test_two_replicas_answer_concurrent_requests_as_one_server_does(served) -> None:
    with running(weak_attention_engine()) as single:
        expected = {p: _ask(single.url, p)[0] for p in PROMPTS}
    seen: set[str] = set()
    accepted = 0
    with time_limit(TEST_LIMIT_S, "requests to the replicas"):
        for _ in range(3):  # Serve's router picks replicas at random: rounds until both answered
            with ThreadPoolExecutor(len(PROMPTS)) as pool:
                answers = list(pool.map(lambda i: _ask(served.url, PROMPTS[i], stream=i % 4 == 0),
                                        range(len(PROMPTS))))
            for prompt, (text, tokens, racer, replica) in zip(PROMPTS, answers, strict=True):
                assert text == expected[prompt], (prompt, replica)
                assert tokens == TOKENS and racer["method"] == "racer" and racer["steps"] >= 1
                seen.add(replica)
                accepted += racer["accepted_tokens"]
            if len(seen) == 2:
                break
    assert None not in seen and len(seen) == 2, f"answered by {seen}"
    assert accepted > 0  # the replicas drafted, and their drafts were checked against the single server's text


def test_the_replicas_keep_the_servers_guard(served) -> None:
    request = urllib.request.Request(served.url + "/models", headers={"Host": f"rebound.example:{served.port}"})
    with pytest.raises(urllib.error.HTTPError) as refused:  # DNS rebinding
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 403 and b"host_not_allowed" in refused.value.read()


def test_ctrl_c_tears_the_replicas_down(served) -> None:
    served.process.send_signal(signal.SIGINT)
    assert served.process.wait(60) == 130  # 128 + SIGINT, as the single server
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", served.port), timeout=5):
        pass  # Serve's proxy is gone with the Ray this command started
    assert not any("Traceback" in line for line in served.lines), "".join(served.lines[-30:])


def test_the_replica_options_without_the_extra_are_refused_in_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray Serve were not installed
    monkeypatch.setitem(sys.modules, "ray.serve", None)
    for words in (["--replicas", "2"], ["--ray-address", "local"]):
        assert main(["api", "--headless", *words], engine_factory=factory_for(FakeEngine())) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and 'pip install -e ".[serve]"' in err and "Traceback" not in err


def test_replicas_need_a_fixed_port(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["api", "--replicas", "2", "--port", "0"])
    assert exc.value.code == 2 and "replicas need a fixed --port" in capsys.readouterr().err
