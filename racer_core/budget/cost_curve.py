"""The verification cost curve (docs/design.md 1.8).

t(T), the seconds to verify T tokens, is kept per model, device and dtype in
the user cache; the tree policy (tree_policy.py) weighs it against the
acceptance it learns from the run. On a CPU a first start measures only a few
sizes, briefly (the grid between is interpolated), so chatting starts soon.
(Refining the curve from real steps' times was tried and dropped: on a CPU
shared with other busy processes, multi-token forwards stall on their threads
and the refined costs of 2-64 tokens went up to 15x one token's, so the policy
stopped drafting.)

A curve is measured at two starts at least and the measurements merged
(`merged`: by their shapes, the faster one row's kept where their speeds differ),
the cost without interference: one quick
measurement on a machine shared with other guests caught bursts the load
average does not show (on a 2-core guest 2 rows priced at 1.71x one row where
1.3x was right, kept for good). A curve measured while the machine was busy is
measured again at more starts, up to MAX_MEASUREMENTS times in all. A benchmark asks for a fresh
measurement at every run and merges it with the stored one.

A chat never waits for a measurement (`load_or_measure` with `later`): it
starts on the stored curve, even one measured while the machine was busy, or
on `safe_curve` where none is stored yet, and the measurement is handed to
`later`, which runs it once the machine and the engine are quiet
(racer_core/engine/curve_in_background.py). On a busy machine the first
three starts had measured for 18-23 s each.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import numpy as np

from racer_core.common.paths import cache_dir, cache_key

CPU_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
GPU_GRID = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128)
CPU_QUICK = (1, 2, 4, 8, 16, 32, 64)
"""The sizes a CPU's first start measures (timed in QUICK_ROUNDS rounds); the grid's others are interpolated."""
QUICK_ROUNDS = 2
MIN_MEASUREMENTS = 2
"""Measurements before a quiet one settles a curve."""
MAX_MEASUREMENTS = 3
"""How many starts measure a curve while every measurement was taken on a busy machine."""


def machine_is_busy() -> bool:
    """Other work is running (the 1-minute load is over half the cores): a
    measurement now may be inflated. False where the load is unknown."""
    try:
        return os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1)
    except OSError:
        return False


@dataclass
class CostCurve:
    """Seconds to verify T tokens, on a grid, interpolated linearly between."""

    sizes: list[int]
    seconds: list[float]
    provisional: bool = field(default=False, compare=False)
    """Not measured (`safe_curve`): its seconds are not this machine's."""

    def __call__(self, size: int) -> float:
        if size <= self.sizes[0]:
            return self.seconds[0]
        for (s0, t0), (s1, t1) in pairwise(zip(self.sizes, self.seconds, strict=True)):
            if size <= s1:
                return t0 + (t1 - t0) * (size - s0) / (s1 - s0)
        # Past the grid: extend the last segment's slope.
        s0, s1 = self.sizes[-2], self.sizes[-1]
        t0, t1 = self.seconds[-2], self.seconds[-1]
        return t1 + (t1 - t0) * (size - s1) / (s1 - s0)

    def at(self, sizes: np.ndarray) -> np.ndarray:
        """`self(s)` for every s of `sizes` (float64), in the same operations in the
        same order, so each equals the scalar call bit for bit: the tree policy
        reads a whole shifted curve per load (TreePolicy.sizes_on), and the
        scalar loop over 64 sizes took about 0.4 ms a load."""
        grid = np.asarray(self.sizes, dtype=np.float64)
        cost = np.asarray(self.seconds, dtype=np.float64)
        x = np.asarray(sizes, dtype=np.float64)
        # segment (s0, s1] holding x, the last one extended past the grid
        hi = np.clip(np.searchsorted(grid, x, side="left"), 1, len(grid) - 1)
        s0, s1, t0, t1 = grid[hi - 1], grid[hi], cost[hi - 1], cost[hi]
        inside = t0 + (t1 - t0) * (x - s0) / (s1 - s0)
        past = t1 + (t1 - t0) * (x - s1) / (s1 - s0)
        return np.where(x <= grid[0], cost[0], np.where(x <= grid[-1], inside, past))

    def to_json(self) -> dict[str, list[float] | list[int]]:
        return {"sizes": self.sizes, "seconds": self.seconds}

    def on_grid(self, grid: Sequence[int]) -> CostCurve:
        """This curve read at every size of `grid` (interpolated between its own sizes)."""
        return CostCurve(list(grid), [self(s) for s in grid], self.provisional)


def safe_curve(grid: Sequence[int]) -> CostCurve:
    """The curve a chat starts on before any is measured: every token costs as
    much as the first, so no tree can pay and racer verifies the root alone, as
    plain decoding does, until the measured curve comes (never slower than ar)."""
    return CostCurve(list(grid), [float(size) for size in grid], provisional=True)


def curve_cache_path(key_parts: Sequence[str]) -> Path:
    return cache_dir() / "cost" / f"{cache_key(key_parts)}.json"


def save_curve(key_parts: Sequence[str], curve: CostCurve, busy: bool = False, measurements: int = 1) -> None:
    """Keep the curve in the cache (atomically: a reader never sees half a file)."""
    path = curve_cache_path(key_parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a temporary file of this thread's own: engines in other processes (API replicas) save the same key
    tmp = path.with_name(f"{path.stem}.{os.getpid()}-{threading.get_ident()}.tmp")
    doc = {**curve.to_json(), "key": list(key_parts), "busy": busy, "measurements": measurements}
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


SAME_SPEED = 1.1
"""Two measurements whose one-row times are within this factor ran at about the same speed (`merged`)."""


def merged(new: CostCurve, old: CostCurve) -> CostCurve:
    """Two measurements of one grid as one curve. Each times its sizes in
    interleaved rounds, so its shape (each size's cost over one row) holds
    by itself; two taken at different speeds are not mixed size by size.
    Interference slows the memory-bound one-row pass most, so where one
    row's times differ by more than SAME_SPEED the measurement with the
    faster one row is kept whole; at about the same speed each size keeps
    the lower of the two costs over one row (a burst one of them caught),
    at the faster one row and never below it.

    5 Dec 2026, a 2-core guest whose speed drifts 1.5x within minutes: each
    size's fastest time over measurements priced the AVX2 class's 2 rows
    at 1.67x one row (its one row from a fast minute) where interleaved
    rounds measured 1.31x; and a measurement whose one-row passes alone
    were slowed (10.7 ms, 2 rows 9.8) would have priced 2 rows at one row's
    cost and 8 at 1.6x, read through the other's faster row."""
    if max(new.seconds[0], old.seconds[0]) > SAME_SPEED * min(new.seconds[0], old.seconds[0]):
        return CostCurve(list(new.sizes), list((new if new.seconds[0] < old.seconds[0] else old).seconds))
    level = min(new.seconds[0], old.seconds[0])
    shape = [max(1.0, min(a / new.seconds[0], b / old.seconds[0])) if i else 1.0
             for i, (a, b) in enumerate(zip(new.seconds, old.seconds, strict=True))]
    return CostCurve(list(new.sizes), [level * r for r in shape])


def _settled(stored: tuple[CostCurve, bool, int]) -> bool:
    """Whether a stored curve is final: measured MIN_MEASUREMENTS times, once on a quiet machine; or
    MAX_MEASUREMENTS times."""
    _, was_busy, count = stored
    return count >= MAX_MEASUREMENTS or (not was_busy and count >= MIN_MEASUREMENTS)


def _stored(path: Path, grid: Sequence[int]) -> tuple[CostCurve, bool, int] | None:
    """(curve, measured on a busy machine, measurements so far), or None."""
    try:
        data = json.loads(path.read_text())
        if data.get("sizes") != list(grid):
            return None
        curve = CostCurve(list(data["sizes"]), [float(x) for x in data["seconds"]])
        if len(curve.seconds) != len(curve.sizes) or not all(x > 0 for x in curve.seconds):
            return None
        return curve, bool(data.get("busy", False)), int(data.get("measurements", 1))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_or_measure(
    key_parts: Sequence[str],
    grid: Sequence[int],
    measure: Callable[[Sequence[int]], list[float]],
    on_measure: Callable[[int], None] | None = None,
    quick: Sequence[int] | None = None,
    refresh: bool = False,
    busy: Callable[[], bool] = machine_is_busy,
    later: Callable[[Callable[[], CostCurve]], None] | None = None,
) -> CostCurve:
    """The cached curve for this (model, device, dtype), measuring it once
    (`on_measure` is told first, with the number of this measurement: 1 for
    the first, more for a re-measurement; for a progress message); with `quick` only
    those sizes are measured and the rest of `grid` is interpolated. A curve is
    measured again at the next start (MIN_MEASUREMENTS), and while every
    measurement was busy at more, and `refresh` measures again in any case;
    the measurements are `merged`.

    With `later` (and no `refresh`), a curve to measure is not measured now:
    `later` gets the measurement (a call that measures, saves and returns the
    curve) and the stored curve, or `safe_curve` where none is, is returned."""
    stored = _stored(curve_cache_path(key_parts), grid)
    if stored is not None and not refresh and _settled(stored):
        return stored[0]
    if later is not None and not refresh:
        later(lambda: _measure_and_save(key_parts, grid, measure, quick, busy, refresh=False))
        return stored[0] if stored is not None else safe_curve(grid)
    if on_measure is not None:
        on_measure(1 if stored is None else stored[2] + 1)
    return _measure_and_save(key_parts, grid, measure, quick, busy, refresh)


def _measure_and_save(key_parts: Sequence[str], grid: Sequence[int], measure: Callable[[Sequence[int]], list[float]],
                      quick: Sequence[int] | None, busy: Callable[[], bool], refresh: bool) -> CostCurve:
    """Measure, merge with the stored curve (`merged`), save."""
    stored = _stored(curve_cache_path(key_parts), grid)  # read again: another process may have measured since
    if stored is not None and not refresh and _settled(stored):
        return stored[0]
    busy_now = busy()
    # Kept as measured: where a larger size is cheaper (fp32 on a CPU: 2 and 3
    # tokens cost more than 4), the tree policy pads up to it.
    sizes = list(quick or grid)
    curve = CostCurve(sizes, list(measure(sizes))).on_grid(grid)
    count = 1
    if stored is not None:
        old, was_busy, count = stored
        curve = merged(curve, old)
        busy_now = busy_now and was_busy  # one quiet measurement (with MIN_MEASUREMENTS in all) settles it
        count += 1
    save_curve(key_parts, curve, busy_now, count)
    return curve
