"""How many cores other processes leave free, and the OpenMP thread count that follows.

A forward pass split over more threads than there are free cores waits at
every parallel region's end for a thread the OS has descheduled, and a step
has a few hundred of them: beside one busy process on 2 cores, 2 threads made
a step several times slower than 1 thread (docs/design.md, "A busy machine").
So the thread count follows the cores the machine leaves free: Linux's
/proc/stat says how busy all the CPUs were, /proc/self/stat how much of that
was this process's own (its spinning workers included), and the difference
over a short window is the other processes' use. The count is re-chosen
between steps, never within one, and changes no output bit: every kernel
computes a row in one fixed order whatever the threads (tests/core/test_bit_exact.py).

Torch-free: the benchmark script reads the same figures.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

WINDOW_S = 0.5
"""The shortest window the other processes' use is measured over: /proc's clock ticks
100 times a second, and a longer window keeps a short burst of other work from
switching the count back and forth."""
SPARE = 0.3
"""A core the others use less than this share of counts as free: a thread there waits less than it gains."""


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative CPU time, in clock ticks: all CPUs busy, all CPUs in all, this process's own."""

    busy: float
    total: float
    own: float
    cpus: int


def read_cpu_times() -> CpuTimes | None:
    """The machine's and this process's CPU times now; None where /proc cannot say (not Linux)."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
        with open("/proc/self/stat") as f:
            own_fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    fields = [float(x) for x in lines[0].split()[1:9]]  # user nice system idle iowait irq softirq steal
    cpus = sum(1 for line in lines[1:] if line.startswith("cpu"))
    idle = fields[3] + fields[4]
    # utime and stime: fields 14 and 15 of stat, 12 and 13 after the command's closing parenthesis
    return CpuTimes(sum(fields) - idle, sum(fields), float(own_fields[11]) + float(own_fields[12]), max(cpus, 1))


def others_use(before: CpuTimes, after: CpuTimes) -> float:
    """Cores the other processes used, on average, between the two readings."""
    total = after.total - before.total
    if total <= 0:
        return 0.0
    others = (after.busy - before.busy) - (after.own - before.own)
    return max(0.0, others / total * after.cpus)


def threads_for(free: float, most: int) -> int:
    """The threads for `free` cores (SPARE rounds up), at least 1, at most `most`."""
    return max(1, min(most, int(free + SPARE)))


class ThreadChoice:
    """The thread count for the next step, re-chosen from the free cores once
    a window has passed since the last reading (`read` and `clock` scripted in tests)."""

    def __init__(self, most: int, read: Callable[[], CpuTimes | None] = read_cpu_times,
                 clock: Callable[[], float] = time.monotonic, window_s: float = WINDOW_S) -> None:
        self.most = most
        self.threads = most
        self.others = 0.0  # the other processes' use in the last window, in cores
        self._read, self._clock, self._window_s = read, clock, window_s
        self._last = read()
        self._at = clock()

    def choose(self) -> int:
        """The threads to run the next step on."""
        now = self._clock()
        if self._last is None or now - self._at < self._window_s:
            return self.threads
        latest = self._read()
        if latest is None:
            return self.threads
        self.others = others_use(self._last, latest)
        self.threads = threads_for(latest.cpus - self.others, self.most)
        self._last, self._at = latest, now
        return self.threads


def quiet(others: float) -> bool:
    """Whether the machine counts as quiet: the others use less than SPARE of a core."""
    return others < SPARE


def cpu_count() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def quiet_now(read: Callable[[], CpuTimes | None] = read_cpu_times) -> Callable[[], bool]:
    """A check whether the other processes left the machine quiet since its
    last call (or since this one, for the first); True where /proc cannot say."""
    last = [read()]

    def check() -> bool:
        latest = read()
        before, last[0] = last[0], latest
        return before is None or latest is None or quiet(others_use(before, latest))

    return check
