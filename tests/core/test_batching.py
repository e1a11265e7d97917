"""Continuous batching (racer_core/engine/batching.py): several sequences'
forward passes shared, each sequence getting exactly what it gets alone.

Sequences are seated `engaged` before any of them starts, so each pass waits
for every seated sequence (or its leaving): the passes are shared whatever
the threads' timing, and every assertion holds for any interleaving."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from engine_helpers import PROMPT, SMALL_VOCAB, make_markov

from racer_core.budget.cost_curve import CostCurve
from racer_core.common.events import GenerationConfig, Source
from racer_core.engine.batching import BatchedForward
from racer_core.engine.engine import RacerEngine
from racer_core.models.lean_forward import Part
from racer_core.testing import tiny_model
from racer_core.testing.bit_exact import batch_mismatches

WAIT_S = 60.0  # the passes wait for every seated sequence: never for a clock in these tests
CURVE = CostCurve([1, 64], [1.0, 1.5])  # scripted: drafting pays


def _engine(batched: bool, max_rows: int = 256) -> RacerEngine:
    """A fresh tiny llama (the same weights every call) whose text falls into cycles the drafts predict."""
    engine = RacerEngine(make_markov(tiny_model("llama", 0, vocab_size=SMALL_VOCAB)), None, "tiny-llama",
                         eos_ids=frozenset())
    engine._curve = CURVE
    if batched:
        batcher = engine.batched(max_rows)
        assert batcher is not None
        batcher.wait_s = WAIT_S
    return engine


@pytest.fixture(scope="module")
def alone() -> RacerEngine:
    return _engine(batched=False)


def _prompt(i: int) -> list[int]:
    return [*PROMPT, *[(7 * i + k) % SMALL_VOCAB for k in range(i % 4)]]


def _generate(engine: RacerEngine, prompt: list[int], config: GenerationConfig,
              stop_after: int | None = None) -> tuple[list[int], int]:
    """(tokens, accepted drafts); with `stop_after` the request is cancelled after that many steps."""
    steps = 0

    def should_stop() -> bool:
        return stop_after is not None and steps >= stop_after

    tokens, drafted = [], 0
    for step in engine.decoder().generate(prompt, config, should_stop):
        steps += 1
        tokens.extend(step.tokens)
        drafted += sum(s != Source.MODEL for s in step.sources)
    return tokens, drafted


def _concurrently(engine: RacerEngine, requests: list[tuple[list[int], GenerationConfig]], first: int,
                  stop_after: dict[int, int] | None = None) -> list[tuple[list[int], int]]:
    """Serve `requests`: `first` of them seated together at once, each later one
    seated as soon as an earlier one has left (joining while others run)."""
    batcher = engine.batcher
    assert batcher is not None
    results: list[Any] = [None] * len(requests)
    errors: list[BaseException] = []
    seated = threading.Barrier(first)
    left = threading.Semaphore(0)

    def serve(i: int) -> None:
        try:
            with batcher.seat(engaged=True):
                if i < first:
                    seated.wait(30)  # nobody submits before all the first ones are seated
                prompt, config = requests[i]
                results[i] = _generate(engine, prompt, config, (stop_after or {}).get(i))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            left.release()

    threads = [threading.Thread(target=serve, args=(i,)) for i in range(first)]
    for t in threads:
        t.start()
    for i in range(first, len(requests)):
        assert left.acquire(timeout=120)
        threads.append(threading.Thread(target=serve, args=(i,)))
        threads[-1].start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return results


def test_a_batched_pass_gives_each_part_what_it_gets_alone() -> None:
    """LeanForward.batch: per part, torch.equal to that part's own pass (packed fp32)."""
    lean = _engine(batched=False).lean
    assert lean is not None and lean.packed
    gen = torch.Generator().manual_seed(0)
    for _ in range(6):
        sizes = torch.randint(1, 40, (3,), generator=gen).tolist()
        cached = torch.randint(1, 50, (3,), generator=gen).tolist()
        # the logits, and the caches' keys and values
        assert batch_mismatches(lean, list(zip(sizes, cached, strict=True)), gen, SMALL_VOCAB) == []


@pytest.mark.parametrize("method", ["racer", "ar"])
def test_concurrent_greedy_requests_equal_each_request_alone(alone: RacerEngine, method: str) -> None:
    engine = _engine(batched=True)
    requests = [(_prompt(i), GenerationConfig(method=method, max_new_tokens=12 + 9 * i, temperature=0.0))
                for i in range(5)]
    got = _concurrently(engine, requests, first=3)
    for (prompt, config), (tokens, _) in zip(requests, got, strict=True):
        expected, _ = _generate(alone, prompt, config)
        assert tokens == expected and len(tokens) == config.max_new_tokens
    batcher = engine.batcher
    assert batcher.most_parts >= 3  # the first three shared their passes
    if method == "racer":
        assert sum(d for _, d in got) > 10  # with drafts accepted
    else:
        assert all(d == 0 for _, d in got)


def test_sampling_stays_exact_per_request_with_its_own_seed(alone: RacerEngine) -> None:
    """A fixed budget keeps each tree what the request alone drafts; each
    request's own seed then gives it the tokens it gets alone."""
    engine = _engine(batched=True)
    requests = [(_prompt(i), GenerationConfig(method="racer", max_new_tokens=20 + 5 * i, temperature=0.9,
                                              seed=100 + i, max_num_draft=8)) for i in range(4)]
    got = _concurrently(engine, requests, first=4)
    for (prompt, config), (tokens, _) in zip(requests, got, strict=True):
        assert tokens == _generate(alone, prompt, config)[0]
    assert engine.batcher.most_parts == 4


def test_a_cancelled_request_leaves_at_its_next_step_and_the_others_finish_exactly(alone: RacerEngine) -> None:
    engine = _engine(batched=True)
    requests = [(_prompt(i), GenerationConfig(method="racer", max_new_tokens=40, temperature=0.0))
                for i in range(3)]
    got = _concurrently(engine, requests, first=3, stop_after={1: 3})
    tokens, _ = got[1]
    assert len(tokens) < 40  # stopped: three steps' tokens only
    expected = _generate(alone, *requests[1])[0]
    assert tokens == expected[: len(tokens)]
    for i in (0, 2):
        assert got[i][0] == _generate(alone, *requests[i])[0]


def test_a_pass_keeps_within_its_rows_unless_one_part_alone_exceeds_them(alone: RacerEngine) -> None:
    """Three prompts of 18+ tokens and a budget of 24 rows: no two prefills share
    a pass, the steps do; the outputs are unchanged."""
    engine = _engine(batched=True, max_rows=24)
    requests = [(_prompt(i), GenerationConfig(method="racer", max_new_tokens=16, temperature=0.0,
                                              max_num_draft=4)) for i in range(3)]
    got = _concurrently(engine, requests, first=3)
    for (prompt, config), (tokens, _) in zip(requests, got, strict=True):
        assert tokens == _generate(alone, prompt, config)[0]
    batcher = engine.batcher
    assert batcher.most_rows <= 24 and batcher.most_parts >= 2


def test_an_engine_without_a_lean_forward_does_not_batch() -> None:
    engine = RacerEngine(tiny_model("llama", 0, vocab_size=SMALL_VOCAB), None, "tiny", eos_ids=frozenset(),
                         forward="stock")
    assert engine.batched() is None


def test_a_failing_pass_fails_its_callers_only() -> None:
    class Broken:
        def batch(self, parts: list[Part]) -> list[torch.Tensor]:
            raise RuntimeError("boom")

    batcher = BatchedForward(Broken())  # type: ignore[arg-type]
    one = torch.zeros(1, dtype=torch.long)
    with pytest.raises(RuntimeError, match="boom"):
        batcher(one, one, torch.zeros(1, 1, 1, 1), None)
    batcher.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        batcher(one, one, torch.zeros(1, 1, 1, 1), None)
