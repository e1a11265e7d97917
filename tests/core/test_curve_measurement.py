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
