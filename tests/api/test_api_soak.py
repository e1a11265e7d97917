"""A short soak (scripts/api_soak.py) of the batched server on a tiny model:
a bounded number of mixed requests (streamed and whole, racer and ar, some
clients leaving mid-stream, some bad requests); every request is answered
or refused with its reason, none is lost, and the server failed none."""

from __future__ import annotations

import pytest
from api_helpers import Recorder, running
from engine_helpers import make_markov

from racer_core.budget.cost_curve import CostCurve
from racer_core.engine.engine import RacerEngine
from racer_core.testing import tiny_model, tiny_tokenizer
from scripts.api_soak import soak

pytest.importorskip("openai")


def test_a_short_soak_loses_no_request() -> None:
    engine = RacerEngine(make_markov(tiny_model("qwen3", 0)), tiny_tokenizer(), "tiny-qwen3")
    engine._curve = CostCurve([1, 64], [1.0, 1.5])  # scripted
    recorder = Recorder()
    with running(engine, observers=[recorder], queue=4) as service:
        assert service.batcher is not None
        report = soak(service.url, clients=4, requests=24, max_tokens=16, seed=3)
    assert report.requests == 24 and report.outcomes["lost"] == 0, report.as_dict()
    assert report.outcomes["answered"] >= 10 and report.tokens > 0
    assert report.outcomes["refused"] >= 1  # the bad requests, with their status
    assert all(reason.split()[1].startswith("4") for reason in report.reasons if reason.startswith("refused"))
    outcomes = {outcome for kind, _, outcome, _ in recorder.seen if kind == "finished"}
    assert outcomes <= {"done", "cancelled"}  # the server failed none
