"""The verification cost curve (docs/design.md 1.8).

t(T), the seconds to verify T tokens, is kept per model, device and dtype in
the user cache; the tree policy (tree_policy.py) weighs it against the
acceptance it learns from the run. On a CPU a first start measures only a few
sizes, briefly (the grid between is interpolated), so chatting starts soon.
(Refining the curve from real steps' times was tried and dropped: on a CPU
shared with other busy processes, multi-token forwards stall on their threads
and the refined costs of 2-64 tokens went up to 15x one token's, so the policy
stopped drafting.)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from racer_core.paths import cache_dir

CPU_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
GPU_GRID = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128)
CPU_QUICK = (1, 2, 4, 8, 16, 32, 64)
"""The sizes a CPU's first start measures (timed in QUICK_ROUNDS rounds); the grid's others are interpolated."""
QUICK_ROUNDS = 2


@dataclass
class CostCurve:
    """Seconds to verify T tokens, on a grid, interpolated linearly between."""

    sizes: list[int]
    seconds: list[float]

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

    def to_json(self) -> dict[str, list[float] | list[int]]:
        return {"sizes": self.sizes, "seconds": self.seconds}

    def on_grid(self, grid: Sequence[int]) -> CostCurve:
        """This curve read at every size of `grid` (interpolated between its own sizes)."""
        return CostCurve(list(grid), [self(s) for s in grid])


def curve_cache_path(key_parts: Sequence[str]) -> Path:
    key = hashlib.sha256("|".join(key_parts).encode()).hexdigest()[:20]
    return cache_dir() / "cost" / f"{key}.json"


def save_curve(key_parts: Sequence[str], curve: CostCurve) -> None:
    """Keep the curve in the cache (atomically: a reader never sees half a file)."""
    path = curve_cache_path(key_parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**curve.to_json(), "key": list(key_parts)}))
    tmp.replace(path)


def load_or_measure(
    key_parts: Sequence[str],
    grid: Sequence[int],
    measure: Callable[[Sequence[int]], list[float]],
    on_measure: Callable[[], None] | None = None,
    quick: Sequence[int] | None = None,
) -> CostCurve:
    """The cached curve for this (model, device, dtype), measuring it once
    (`on_measure` is told first, for a progress message); with `quick` only
    those sizes are measured and the rest of `grid` is interpolated."""
    path = curve_cache_path(key_parts)
    try:
        data = json.loads(path.read_text())
        if data.get("sizes") == list(grid):
            return CostCurve(list(data["sizes"]), [float(x) for x in data["seconds"]])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if on_measure is not None:
        on_measure()
    # Kept as measured: where a larger size is cheaper (fp32 on a CPU: 2 and 3
    # tokens cost more than 4), the tree policy pads up to it.
    sizes = list(quick or grid)
    curve = CostCurve(sizes, list(measure(sizes))).on_grid(grid)
    save_curve(key_parts, curve)
    return curve

