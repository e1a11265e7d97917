"""A tree's value at a load: tokens per second of cost curve (docs/design.md 1.8).

The one formula the pre-check (TreePolicy.worth_drafting), the choice
(TreePolicy.choose) and the draft gate's score (DraftGate.observe) share. A
step verifies `rows` rows of its own beside `others` sequences' `base` rows
in one pass, which costs `pass_seconds` = t(base + rows) by the cost curve
(the policy reads it from its sizes at that base, EfficientSizes, cached per
load). The pass makes the others' one token each plus the tree's `tokens` (1 +
its accepted drafts). Under load the pass also waits for the tree's drafting
(retrieval, choice and learning run in Python while the others wait); alone
that time is not counted (alone it is not what decides, docs/design.md 1.8).
`pass_seconds`, `tokens` and `drafting_s` may be arrays, one entry per tree
weighed (the choice weighs every size at once).
"""

from __future__ import annotations

import numpy as np

Load = tuple[int, int]
"""(other sequences in the pass, their rows)."""


def tree_value(pass_seconds: float | np.ndarray, tokens: float | np.ndarray, load: Load = (0, 0),
               drafting_s: float | np.ndarray = 0.0) -> float | np.ndarray:
    """Tokens per curve-second of the whole pass: the others' one each and the
    tree's `tokens`, in t(base + rows) = `pass_seconds`, plus under load the
    tree's drafting time (0 for an undrafted root)."""
    others = load[0]
    return (others + tokens) / (pass_seconds + (drafting_s if others else 0.0))

