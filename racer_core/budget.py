"""The draft budget follows the hardware (DESIGN.md 1.8).

The expected speed of a budget B is E[tokens per step | B] / t(B). The cost
curve t(T) (seconds to verify T tokens) is measured once per model, device
and dtype and kept in the user cache; E[accepted | B] is learned from the run.
Every step also tells what smaller budgets would have accepted (a budget-b
tree is the first b nodes of a larger one), so one step updates every
smaller budget at once.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from racer_core.paths import cache_dir

CPU_GRID = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
GPU_GRID = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128)


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


def curve_cache_path(key_parts: Sequence[str]) -> Path:
    key = hashlib.sha256("|".join(key_parts).encode()).hexdigest()[:20]
    return cache_dir() / "cost" / f"{key}.json"


def load_or_measure(
    key_parts: Sequence[str],
    grid: Sequence[int],
    measure: Callable[[Sequence[int]], list[float]],
    on_measure: Callable[[], None] | None = None,
) -> CostCurve:
    """The cached curve for this (model, device, dtype), measuring it once
    (`on_measure` is told first, for a progress message)."""
    path = curve_cache_path(key_parts)
    try:
        data = json.loads(path.read_text())
        if data.get("sizes") == list(grid):
            return CostCurve(list(data["sizes"]), [float(x) for x in data["seconds"]])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if on_measure is not None:
        on_measure()
    seconds = list(measure(grid))
    # Verifying more tokens never costs less; noise must not say otherwise.
    for i in range(1, len(seconds)):
        seconds[i] = max(seconds[i], seconds[i - 1])
    curve = CostCurve(list(grid), seconds)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**curve.to_json(), "key": list(key_parts)}))
    tmp.replace(path)
    return curve


@dataclass
class _Arm:
    total: float = 0.0
    weight: float = 0.0


@dataclass
class BudgetChooser:
    """Chooses each step's budget from the cost curve and observed acceptance.

    Steps are split into classes (does the automaton have a retrieval match for
    this step?) since the two accept very differently. Estimates are
    exponentially weighted so the choice follows the text as it changes.
    """

    curve: CostCurve
    grid: tuple[int, ...]
    max_budget: int
    decay: float = 0.97
    explore_every: int = 8
    prior_weight: float = 2.0
    _arms: dict[tuple[int, int], _Arm] = field(default_factory=dict)
    _steps: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.grid = tuple(b for b in self.grid if b <= self.max_budget) or (1,)

    def _prior(self, kind: int, budget: int) -> float:
        # Optimistic for retrieval matches (they often continue), modest for
        # logits-only trees: both are soon replaced by what the run shows.
        if budget <= 1:
            return 0.0
        scale = 2.0 if kind else 0.6
        return scale * math.log2(budget) / math.log2(max(self.grid[-1], 2)) + (0.5 if kind else 0.0)

    def expected_accepted(self, kind: int, budget: int) -> float:
        arm = self._arms.get((kind, budget), _Arm())
        prior = self._prior(kind, budget)
        return (arm.total + prior * self.prior_weight) / (arm.weight + self.prior_weight)

    def choose(self, kind: int) -> int:
        best = max(self.grid, key=lambda b: (1.0 + self.expected_accepted(kind, b)) / self.curve(b))
        count = self._steps.get(kind, 0) + 1
        self._steps[kind] = count
        if count % self.explore_every == 0:
            # Now and then try the next larger budget so its estimate stays honest.
            larger = [b for b in self.grid if b > best]
            if larger:
                return larger[0]
        return best

    def observe(self, kind: int, used: int, tree_size: int, accepted_at: Callable[[int], int]) -> None:
        """Record a step: `accepted_at(b)` gives the drafts a budget-b tree accepted."""
        for budget in self.grid:
            if budget > used and tree_size >= used:
                break  # a larger tree was never built: nothing is known about it
            accepted = accepted_at(min(budget, used))
            arm = self._arms.setdefault((kind, budget), _Arm())
            arm.total = arm.total * self.decay + accepted
            arm.weight = arm.weight * self.decay + 1.0
