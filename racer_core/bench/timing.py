"""The one interleaved-rounds timer that the engine's cost curve and the scripts share.

Every call is timed once per round, rounds interleaved, and the fastest time
of each call is kept: the cost without interference, so that another busy
process during a measurement does not distort what is kept. Torch-free: a
caller on an accelerator passes `sync` to wait for queued work.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence


def fastest_of_rounds(
    calls: Sequence[Callable[[], object]],
    rounds: int,
    *,
    warmup: bool = True,
    after: Callable[[], object] | None = None,
    sync: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Fastest seconds of each of `calls` over `rounds` interleaved rounds.

    With `warmup`, one untimed round comes first (it pays for first-call
    allocations). `after` runs untimed after every call (e.g. to truncate a
    cache back); `sync` runs inside the timed span (e.g. CUDA synchronize).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    best = [float("inf")] * len(calls)
    for round_index in range(rounds + 1 if warmup else rounds):
        for i, call in enumerate(calls):
            start = clock()
            call()
            if sync is not None:
                sync()
            spent = clock() - start
            if round_index or not warmup:
                best[i] = min(best[i], spent)
            if after is not None:
                after()
    return best
