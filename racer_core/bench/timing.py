"""The one interleaved-rounds timer that the measuring scripts share.

Every call is timed once per round, rounds interleaved, and the fastest time
of each call is kept: the cost without interference, so that another busy
process during a measurement does not distort what is kept. Torch-free: a
caller on an accelerator passes `sync` to wait for queued work.
(engine.time_forward keeps its own loop: it checks for an interrupting reply
between forwards.)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def timed_rounds(
    calls: Sequence[Callable[[], object]],
    rounds: int,
    *,
    warmup: int = 1,
    before: Callable[[int], object] | None = None,
    after: Callable[[int], object] | None = None,
    sync: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> list[list[float]]:
    """Each of `calls`' seconds in every one of `rounds` interleaved rounds.

    `warmup` untimed rounds come first (they pay for first-call allocations).
    `before(i)` and `after(i)` run untimed around call i (e.g. set a thread
    count, truncate a cache back); `sync` runs inside the timed span (e.g. CUDA
    synchronize); `clock` is the time read (e.g. time.process_time).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    if warmup < 0:
        raise ValueError(f"warmup must be 0 or more, got {warmup}")
    spans: list[list[float]] = [[] for _ in calls]
    for round_index in range(warmup + rounds):
        for i, call in enumerate(calls):
            if before is not None:
                before(i)
            start = clock()
            call()
            if sync is not None:
                sync()
            spent = clock() - start
            if round_index >= warmup:
                spans[i].append(spent)
            if after is not None:
                after(i)
    return spans


def fastest_of_rounds(calls: Sequence[Callable[[], object]], rounds: int, **options: object) -> list[float]:
    """Fastest seconds of each of `calls` over `rounds` interleaved rounds (options: timed_rounds')."""
    return [min(spans) for spans in timed_rounds(calls, rounds, **options)]  # type: ignore[arg-type]


def fastest_and_median(spans: Sequence[float]) -> tuple[float, float]:
    """The fastest round (the cost) and the median one (how steady the machine was)."""
    return min(spans), statistics.median(spans)
