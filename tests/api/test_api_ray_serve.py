"""`racer-tui api` as two Ray Serve replicas on a local cluster of 2 CPU workers,
tiny model: concurrent requests through Serve's proxy get the single server's
greedy replies with their own statistics, and both replicas answer. Without
the extra, the replica options alone are refused in one line.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from api_helpers import client, replica_engine, running, weak_attention_engine
from fake_engine import FakeEngine, factory_for
from time_limit import time_limit

from racer_tui.api import ray_replicas
from racer_tui.api.ray_replicas import REPLICA_HEADER, ReplicaSpec
from racer_tui.api.server import ServerSettings
from racer_tui.cli import main

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
START_LIMIT_S = 240  # a 2-CPU cluster, Serve and two replicas loading torch, on a loaded 2-core machine
TEST_LIMIT_S = 180
PROMPTS = [f"Count with me: {i} {i + 1} {i + 2}. The cat sat on the mat, and the dog sat on the" for i in range(8)]
TOKENS = 24


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def replicas():
    """Two replicas of the tiny model behind Serve's proxy on a free loopback port; yields the base URL."""
    ray = pytest.importorskip("ray", reason="Ray Serve is an optional extra (pip install -e '.[serve]')")
    serve = pytest.importorskip("ray.serve", reason="Ray Serve is an optional extra (pip install -e '.[serve]')")
    # The replicas import this checkout (and api_helpers, the loader's module), whatever is installed.
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), str(TESTS / "api"), *filter(None, [before])])
    session = tempfile.mkdtemp(prefix="ray-")  # Ray's session folder, removed after
    port = _free_port()
    spec = ReplicaSpec(replica_engine, ServerSettings(), "127.0.0.1", queue=16, max_batch=4, max_rows=256)
    try:
        with time_limit(START_LIMIT_S, "starting two API replicas on a local Ray cluster"):
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
                     _temp_dir=session)
            ray_replicas.start(spec, ray_replicas.LOCAL, replicas=2, port=port, cpus=1)
        yield ray_replicas.url("127.0.0.1", port)
    finally:
        if ray.is_initialized():
            serve.shutdown()
        ray.shutdown()
        shutil.rmtree(session, ignore_errors=True)
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def _ask(url: str, prompt: str, stream: bool = False):
    """(text, completion tokens, racer statistics, the replica that answered)."""
    answer = client(url).completions.with_raw_response.create(
        model="tiny", prompt=prompt, max_tokens=TOKENS, temperature=0, stream=stream,
        **({"stream_options": {"include_usage": True}} if stream else {}))
    replica = answer.headers.get(REPLICA_HEADER)
    if not stream:
        reply = answer.parse()
        return reply.choices[0].text, reply.usage.completion_tokens, reply.usage.model_extra["racer"], replica
    chunks = list(answer.parse())
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    usage = chunks[-1].usage
    return text, usage.completion_tokens, usage.model_extra["racer"], replica


def test_two_replicas_answer_concurrent_requests_as_one_server_does(replicas) -> None:
    with running(weak_attention_engine()) as single:
        expected = {p: _ask(single.url, p)[0] for p in PROMPTS}
    seen: set[str] = set()
    accepted = 0
    with time_limit(TEST_LIMIT_S, "requests to the replicas"):
        for _ in range(3):  # Serve's router picks replicas at random: rounds until both answered
            with ThreadPoolExecutor(len(PROMPTS)) as pool:
                answers = list(pool.map(lambda i: _ask(replicas, PROMPTS[i], stream=i % 4 == 0), range(len(PROMPTS))))
            for prompt, (text, tokens, racer, replica) in zip(PROMPTS, answers, strict=True):
                assert text == expected[prompt]
                assert tokens == TOKENS and racer["method"] == "racer" and racer["steps"] >= 1
                seen.add(replica)
                accepted += racer["accepted_tokens"]
            if len(seen) == 2:
                break
    assert None not in seen and len(seen) == 2, f"answered by {seen}"
    assert accepted > 0  # the replicas drafted, and their drafts were checked against the single server's text


def test_the_replicas_keep_the_servers_guard(replicas) -> None:
    port = urllib.parse.urlsplit(replicas).port
    request = urllib.request.Request(replicas + "/models", headers={"Host": f"rebound.example:{port}"})  # DNS rebinding
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 403 and b"host_not_allowed" in refused.value.read()


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
