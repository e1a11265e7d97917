"""Continuous batching in the engine loop (racer_core/engine/loop.py): several
sequences' forward passes shared on the loop's one thread, each sequence
getting exactly what it gets alone.

The first sequences are submitted while the loop is `held`, so they start
together, and each pass waits for every reader of the last one (`read_wait_s`
is far beyond any test): the passes are shared whatever the threads' timing,
and every assertion holds for any interleaving."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from engine_helpers import PROMPT, SMALL_VOCAB, make_markov

from racer_core.budget.cost_curve import CostCurve
from racer_core.budget.tree_policy import TreePolicy
from racer_core.common.events import GenerationConfig, Source
from racer_core.engine.engine import RacerEngine
from racer_core.engine.loop import PROMPT_WAITS, EngineLoop
from racer_core.testing import tiny_model
from racer_core.testing.bit_exact import batch_mismatches

READ_WAIT_S = 60.0  # a pass waits for every reader: never for a clock in these tests
CURVE = CostCurve([1, 64], [1.0, 1.5])  # scripted: drafting pays


def _engine(batched: bool, max_rows: int = 256) -> RacerEngine:
    """A fresh tiny llama (the same weights every call) whose text falls into cycles the drafts predict."""
    engine = RacerEngine(make_markov(tiny_model("llama", 0, vocab_size=SMALL_VOCAB)), None, "tiny-llama",
                         eos_ids=frozenset())
    engine._curve = CURVE
    if batched:
        loop = engine.batched(max_rows)
        assert loop is engine.loop
        loop.read_wait_s = READ_WAIT_S
    return engine


@pytest.fixture(scope="module")
def alone() -> RacerEngine:
    return _engine(batched=False)


def _prompt(i: int) -> list[int]:
    return [*PROMPT, *[(7 * i + k) % SMALL_VOCAB for k in range(i % 4)]]


def _read(steps: Any, stop_after: int | None, counted: list[int]) -> tuple[list[int], int]:
    tokens, drafted = [], 0
    for step in steps:
        counted[0] += 1
        tokens.extend(step.tokens)
        drafted += sum(s != Source.MODEL for s in step.sources)
    return tokens, drafted


def _generate(engine: RacerEngine, prompt: list[int], config: GenerationConfig,
              stop_after: int | None = None, on_loop: bool = False) -> tuple[list[int], int]:
    """(tokens, accepted drafts), decoded on the calling thread (or on the
    engine's loop); with `stop_after` the request is cancelled after that many steps."""
    counted = [0]

    def should_stop() -> bool:
        return stop_after is not None and counted[0] >= stop_after

    decoder = engine.decoder()
    if on_loop:
        return _read(engine.loop.submit(decoder.steps(prompt, config, should_stop)), stop_after, counted)
    return _read(decoder.generate(prompt, config, should_stop), stop_after, counted)


def _concurrently(engine: RacerEngine, requests: list[tuple[list[int], GenerationConfig]], first: int,
                  stop_after: dict[int, int] | None = None) -> list[tuple[list[int], int]]:
    """Serve `requests` on the loop from reader threads: `first` of them
    starting together, each later one as soon as an earlier one has ended
    (joining while others run)."""
    results: list[Any] = [None] * len(requests)
    errors: list[BaseException] = []
    left = threading.Semaphore(0)

    def serve(i: int) -> None:
        try:
            prompt, config = requests[i]
            results[i] = _generate(engine, prompt, config, (stop_after or {}).get(i), on_loop=True)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            left.release()

    threads = [threading.Thread(target=serve, args=(i,)) for i in range(first)]
    with engine.loop.held():
        for t in threads:
            t.start()
        _wait(lambda: engine.loop.waiting == first)
    for i in range(first, len(requests)):
        assert left.acquire(timeout=120)
        threads.append(threading.Thread(target=serve, args=(i,)))
        threads[-1].start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return results


def _wait(condition: Any) -> None:
    done = threading.Event()
    for _ in range(12000):
        if condition():
            return
        done.wait(0.005)
    raise AssertionError("timed out")


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
    assert engine.loop.most_parts >= 3  # the first three shared their passes
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
    assert engine.loop.most_parts == 4


def test_a_cancelled_request_leaves_at_its_next_step_and_the_others_finish_exactly(alone: RacerEngine) -> None:
    engine = _engine(batched=True)
    requests = [(_prompt(i), GenerationConfig(method="racer", max_new_tokens=40, temperature=0.0))
                for i in range(3)]
    got = _concurrently(engine, requests, first=3, stop_after={1: 3})
    tokens, _ = got[1]
    expected = _generate(alone, *requests[1], stop_after=3)[0]  # the loop asks should_stop as the reader would
    assert len(tokens) < 40 and tokens == expected
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
    assert engine.loop.most_rows <= 24 and engine.loop.most_parts >= 2


def test_each_tree_is_weighed_against_the_others_rows_passed_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """The load reaches the tree policy as an argument: alone (0, 0); three
    sequences together, the two others and some of their rows."""
    seen: list[tuple[int, int]] = []
    choose_cut = TreePolicy.choose_cut  # what drafting/tree.py's cut asks

    def spy(self: TreePolicy, tree: Any, load: tuple[int, int] = (0, 0)) -> Any:
        seen.append(load)
        return choose_cut(self, tree, load)

    monkeypatch.setattr(TreePolicy, "choose_cut", spy)
    engine = _engine(batched=True)
    config = GenerationConfig(method="racer", max_new_tokens=12, temperature=0.0)
    _generate(engine, _prompt(0), config, on_loop=True)
    assert seen and set(seen) == {(0, 0)}
    seen.clear()
    _concurrently(engine, [(_prompt(i), config) for i in range(3)], first=3)
    assert any(others == 2 and rows >= 2 for others, rows in seen)


def test_no_thread_but_the_loop_runs_the_model(alone: RacerEngine) -> None:
    """A chat's reply: its passes run on the engine loop's thread, its reader only reads."""
    engine = _engine(batched=False)
    lean = engine.lean
    assert lean is not None
    threads: set[str] = set()
    call, batch = lean.__call__, lean.batch

    class Spy:
        def __getattr__(self, name: str) -> Any:
            return getattr(lean, name)

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            threads.add(threading.current_thread().name)
            return call(*args, **kwargs)

        def batch(self, parts: Any) -> Any:
            threads.add(threading.current_thread().name)
            return batch(parts)

    import dataclasses

    engine.runtime = dataclasses.replace(engine.runtime, lean=Spy())
    config = GenerationConfig(method="racer", max_new_tokens=10, temperature=0.0)
    tokens, _ = _generate(engine, _prompt(1), config, on_loop=True)
    assert tokens == _generate(alone, _prompt(1), config)[0]
    assert threads == {"racer-loop"}


def test_a_reader_that_stops_reading_ends_its_sequence_and_the_loop_goes_on(alone: RacerEngine) -> None:
    engine = _engine(batched=True)
    config = GenerationConfig(method="racer", max_new_tokens=40, temperature=0.0)
    steps = engine.loop.submit(engine.decoder().steps(_prompt(0), config))
    next(steps)
    steps.close()  # the reader leaves after one step
    _wait(lambda: not engine.loop._active)
    assert _generate(engine, _prompt(2), config, on_loop=True)[0] == _generate(alone, _prompt(2), config)[0]


def test_an_engine_without_a_lean_forward_does_not_batch() -> None:
    engine = RacerEngine(tiny_model("llama", 0, vocab_size=SMALL_VOCAB), None, "tiny", eos_ids=frozenset(),
                         forward="stock")
    assert engine.batched() is None


def test_a_failing_pass_fails_its_sequences_only(alone: RacerEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _engine(batched=True)
    config = GenerationConfig(method="ar", max_new_tokens=8, temperature=0.0)

    def broken(parts: Any) -> Any:
        raise RuntimeError("boom")

    assert engine.lean is not None
    monkeypatch.setattr(engine.lean, "batch", broken)  # a pass of two or more sequences fails
    requests = [(_prompt(i), config) for i in range(2)]
    with pytest.raises(AssertionError, match="boom"):
        _concurrently(engine, requests, first=2)
    monkeypatch.undo()
    assert _generate(engine, _prompt(3), config, on_loop=True)[0] == _generate(alone, _prompt(3), config)[0]



def _asking(loop: EngineLoop, *requests: tuple[int, int]) -> list[Any]:
    """Sequences asking in this order for passes of (rows, prompt left) (0 left: a step)."""
    from types import SimpleNamespace

    from racer_core.engine.loop import _Sequence

    made = []
    for rows, left in requests:
        sequence = _Sequence(steps=iter(()), seat=None)  # type: ignore[arg-type]
        sequence.request = SimpleNamespace(rows=rows, prompt_left=left, batchable=True)  # type: ignore[assignment]
        made.append(sequence)
    loop._asking.extend(made)
    return made


def test_the_shortest_prompts_go_first_and_steps_fill_the_room() -> None:
    """Prompt chunks by the prompt left, shortest first, in the places prompt chunks
    hold; one that does not fit is passed over for a younger one that does."""
    loop = EngineLoop(max_rows=24)
    long, step, short, middle, step2 = _asking(loop, (21, 21), (1, 0), (9, 9), (15, 15), (2, 0))
    # in the prompt chunks' places: short, step, middle, long, step2; 9 + 1 + 15 > 24, 9 + 1 + 2 fits
    assert loop._take() == [short, step, step2]
    assert list(loop._asking) == [middle, long]  # the oldest of the next pass, by the prompt left
    assert middle.passed_over == long.passed_over == 1


def test_a_long_prompt_is_put_behind_shorter_ones_at_most_prompt_waits_passes() -> None:
    loop = EngineLoop(max_rows=20)
    long, *_ = _asking(loop, (19, 19))
    for waited in range(PROMPT_WAITS):
        fresh = _asking(loop, (9, 9), (9, 9))
        assert loop._take() == fresh, waited  # two short prompts fill the pass; the long one waits
        assert long.passed_over == waited + 1
    _asking(loop, (9, 9))
    assert loop._take() == [long]  # overdue: it goes first, however many shorter ones came
    assert long.passed_over == 0


def test_prompts_prefilled_shortest_first_give_what_each_gets_alone(alone: RacerEngine) -> None:
    engine = _engine(batched=True, max_rows=24)
    config = GenerationConfig(method="racer", max_new_tokens=6, temperature=0.0, max_num_draft=4)
    requests = [([(5 * n + k) % SMALL_VOCAB for k in range(n)], config) for n in (21, 9, 15)]
    got = _concurrently(engine, requests, first=3)
    for (prompt, config_), (tokens, _) in zip(requests, got, strict=True):
        assert tokens == _generate(alone, prompt, config_)[0]
