"""Starting `racer-tui api` servers inside a test: on loopback, a free port,
stopped (and their engine thread ended) when the block ends."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("openai")

from openai import OpenAI  # noqa: E402

from racer_tui.api.server import ServerSettings  # noqa: E402
from racer_tui.api.service import ApiService  # noqa: E402

TIMEOUT = 60.0  # seconds any one request may take in a test


@contextlib.contextmanager
def running(engine: Any, observers: list | None = None, refused: Any = None, queue: int = 16,
            **settings: Any) -> Iterator[ApiService]:
    service = ApiService(engine, ServerSettings(**settings), "127.0.0.1", 0, queue, observers, refused)
    service.start()
    try:
        yield service
    finally:
        service.stop()


def red_png_url() -> str:
    """A 4x4 red PNG as a data: URL (an image part's)."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def client(where: ApiService | str, api_key: str = "unused") -> OpenAI:
    """The openai client for a service (or its base URL), without retries."""
    url = where if isinstance(where, str) else where.url
    return OpenAI(base_url=url, api_key=api_key, max_retries=0, timeout=TIMEOUT)


def weak_attention_engine() -> Any:
    """A tiny qwen3 whose attention is weak: its replies fall into cycles the drafts predict."""
    import torch

    from racer_core.engine.engine import RacerEngine
    from racer_core.testing import tiny_model, tiny_tokenizer

    model = tiny_model("qwen3", 0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("o_proj.weight"):
                param.mul_(0.05)
    return RacerEngine(model, tiny_tokenizer(), "tiny-qwen3")


def replica_engine() -> Any:
    """weak_attention_engine in a process of its own (a Ray Serve replica), where conftest's fixture does
    not run: on the tests' scripted cost curve all the same, so it times nothing."""
    from scripted_curve import script_cost_curves  # tests/ is on the replica's path

    script_cost_curves()
    return weak_attention_engine()


def replica_factory(model_path: str | None, *, device: str = "auto", dtype: str = "auto", progress: Any = None) -> Any:
    """An engine factory as the command takes one (engine_factory), building replica_engine: pickles by name."""
    return replica_engine()


class Recorder:
    """An observer that keeps what the worker told: (kind, job id, outcome, tokens)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str, int]] = []

    def __call__(self, kind: str, job: Any, event: Any) -> None:
        self.seen.append((kind, job.id, job.outcome, job.tally.tokens))

    def finished(self) -> list[tuple[str, str, str, int]]:
        return [s for s in self.seen if s[0] == "finished"]


@dataclass
class Answer:
    status: int
    headers: Any
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def http(service: ApiService, path: str, body: bytes | str | None = None, method: str | None = None,
         **headers: str) -> Answer:
    """One raw request (stdlib only): POST when there is a body, else GET (or `method`)."""
    data = body.encode() if isinstance(body, str) else body
    request = urllib.request.Request(service.url.removesuffix("/v1") + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
            return Answer(answer.status, answer.headers, answer.read().decode())
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.headers, error.read().decode())
