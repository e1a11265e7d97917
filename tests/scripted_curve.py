"""The cost curve every test engine verifies on (conftest's fixture, and engines in
processes of their own, as API replicas, where the fixture does not run)."""

from __future__ import annotations

from collections.abc import Sequence

from racer_core.budget import cost_curve
from racer_core.drafting import racer as racer_drafter

SCRIPTED_CURVE = cost_curve.CostCurve([1, 2, 4, 8, 16, 32, 64], [0.010, 0.0102, 0.0104, 0.0108, 0.0116, 0.0132, 0.0164])
"""What every test engine's verification costs: a little more per token (drafting pays), the same on any machine."""


def scripted_on(grid: Sequence[int]) -> cost_curve.CostCurve:
    return SCRIPTED_CURVE.on_grid(grid)


def still_clock() -> float:
    """The drafting's clock in tests: it stands still, so racer's drafting costs nothing measured and its
    choices under load (TreePolicy.drafting_s) do not depend on the machine's speed or load."""
    return 0.0


def script_cost_curves() -> None:
    """Every engine of this process verifies on SCRIPTED_CURVE instead of measuring its forward,
    and drafts on the still clock."""
    cost_curve.load_or_measure = lambda key, grid, measure, *args, **kwargs: scripted_on(grid)
    racer_drafter.drafting_clock = still_clock
