"""A tree's value at a load: tokens per second of cost curve (docs/design.md 1.8).

The one formula the pre-check (TreePolicy.worth_drafting), the choice
(TreePolicy.choose) and the draft gate's score (DraftGate.observe) share. A
step verifies `rows` rows of its own beside `others` sequences' `base` rows
in one pass: the pass makes the others' one token each plus the tree's
`tokens` (1 + its accepted drafts) in t(base + rows). Under load the pass
also waits for the tree's drafting (retrieval, choice and learning run in
Python while the others wait); alone that time is not counted (alone the
drafting is not what decides, docs/design.md 1.8).
"""

from __future__ import annotations

from racer_core.budget.cost_curve import CostCurve

Load = tuple[int, int]
"""(other sequences in the pass, their rows)."""


def tree_seconds(curve: CostCurve, rows: int, load: Load = (0, 0), drafting_s: float = 0.0) -> float:
    """Curve-seconds of a pass with the tree's `rows` at `load`; `drafting_s`
    is the tree's own drafting time (0 for an undrafted root), counted only under load."""
    others, base = load
    return curve(base + rows) + (drafting_s if others else 0.0)


def tree_value(curve: CostCurve, rows: int, tokens: float, load: Load = (0, 0), drafting_s: float = 0.0) -> float:
    """Tokens per curve-second of the whole pass: the others' one each and the tree's `tokens`."""
    return (load[0] + tokens) / tree_seconds(curve, rows, load, drafting_s)
