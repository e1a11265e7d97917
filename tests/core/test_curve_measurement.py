"""The cost curve is measured with no engine loop thread alive (Engine.time_forward):
the loop's idle OpenMP workers beside the measuring thread's would stop
every worker's spinning and inflate the curve (racer_core/engine/openmp_threads.py)."""

from __future__ import annotations

from racer_core.common.events import GenerationConfig
from racer_core.engine.decoder import SequenceDecoder
from racer_core.testing import tiny_engine


def test_the_curve_is_measured_without_the_loops_thread(monkeypatch) -> None:  # noqa: ANN001
    engine = tiny_engine()
    list(engine.new_conversation().send("hello", GenerationConfig(method="ar", max_new_tokens=2)))
    def _loop_alive() -> bool:
        thread = engine.loop._thread
        return thread is not None and thread.is_alive()

    assert _loop_alive()  # it waits IDLE_EXIT_S for more sequences
    seen: list[bool] = []
    forward = SequenceDecoder._forward

    def spy(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append(_loop_alive())
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(SequenceDecoder, "_forward", spy)
    assert len(engine.time_forward([1, 2], context=8, rounds=1)) == 2
    assert seen and not any(seen), seen
    # and the loop starts again for the next reply
    monkeypatch.undo()
    assert list(engine.new_conversation().send("hello", GenerationConfig(method="ar", max_new_tokens=2)))



def test_each_size_is_timed_in_passes_back_to_back_after_the_smallest_settles(monkeypatch) -> None:  # noqa: ANN001
    """A reply's passes follow one another closely: the curve keeps a size's passes that
    follow another of the same size, never a burst's first pass nor a round's settling ones
    (scripted here as the fastest, so that keeping one would show)."""
    import pytest

    from racer_core.engine import engine as engine_module

    engine = tiny_engine()
    calls: list[int] = []  # rows of each pass, in order
    clock = [0.0]
    forward = SequenceDecoder._forward
    per_round = engine_module.SETTLE + 2 * engine_module.BURST

    def scripted(self, ids, positions, mask, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        out = forward(self, ids, positions, mask, *args, **kwargs)
        if int(positions[0]) == 0:  # the prefill of the measurement's context
            return out
        at = len(calls) % per_round  # the pass's place in its round
        calls.append(int(ids.shape[0]))
        kept = at >= engine_module.SETTLE and (at - engine_module.SETTLE) % engine_module.BURST != 0
        clock[0] += (0.01 if kept else 0.001) * calls[-1]
        return out

    monkeypatch.setattr(SequenceDecoder, "_forward", scripted)
    monkeypatch.setattr(engine_module.time, "perf_counter", lambda: clock[0])
    seconds = engine.time_forward([1, 3], context=8, rounds=2)
    assert seconds == pytest.approx([0.01, 0.03])
    assert len(calls) == 3 * per_round  # the warm-up round and two timed rounds
    assert calls[:per_round] == [1] * engine_module.SETTLE + [1] * engine_module.BURST + [3] * engine_module.BURST
