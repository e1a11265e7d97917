"""Near-tie accounting: is a divergence from plain decoding rounding, or a bug?

In fp32 greedy RACER equals plain decoding token for token. In a lower
precision a tree of T tokens is computed in other blocks than one token, so
the logits round differently, and where the top two logits are within the
dtype's resolution the argmax may flip. Every generated token therefore
carries its tie margin: the gap between the top two logits that chose it, in
units of the dtype's resolution at the top logit (one unit in the last place,
ulp). A divergence is a near-tie when, at the first differing token, the
margin is at most NEAR_TIE_ULPS in either run (the two runs share the text
before it); any other divergence is not rounding and must be reported.

Pure Python apart from `tie_margins`, which takes the logits tensor it is
given (no torch import here: the benchmark tables use this module; numpy
is there anyway).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import numpy as np

NEAR_TIE_ULPS = 2.0
"""The gap (in ulps of the top logit) at or below which two logits count as tied."""

MARGIN_CAP = 1000.0
"""Margins are stored up to this many ulps: only small ones matter, and fp32 gaps run to millions."""

Verdict = Literal["identical", "near-tie", "other"]


def tie_margins(logits: Any, eps: float) -> list[float]:
    """Per row of `logits` (rows x vocab, any float dtype), the top-2 gap in ulps.

    `eps` is the model dtype's machine epsilon (torch.finfo(dtype).eps): the
    ulp at magnitude x in [2**k, 2**(k+1)) is eps * 2**k. In fp32 numpy, as
    torch would compute it (every step but the subtraction is exact); on the
    CPU numpy's reductions over a 49k row are about 10x faster than torch's,
    and greedy replies take this every step on the engine loop."""
    import numpy as np  # here: the results' and the command line's imports of Verdict need no numpy

    top = top_two(logits)
    _, exponent = np.frexp(np.abs(top[:, 0]))  # |x| = m * 2**e with m in [0.5, 1): k = e - 1
    ulp = np.exp2(exponent.astype(np.float32) - np.float32(1)) * np.float32(eps)
    gaps = np.minimum((top[:, 0] - top[:, 1]) / ulp, np.float32(MARGIN_CAP))
    return [round(g, 2) for g in gaps.tolist()]


def top_two(logits: Any) -> np.ndarray:
    """Each row's two largest values, largest first (a tied maximum twice), as
    fp32 numpy (as topk(2).values: the conversion is exact)."""
    import numpy as np

    rows = logits.float()
    if rows.device.type != "cpu":
        return rows.topk(2, dim=-1).values.cpu().numpy()
    values = rows.numpy()
    out = np.empty((len(values), 2), dtype=np.float32)
    for i, row in enumerate(values):
        # The largest of the row without that one occurrence (a tied maximum stays
        # the second), from the slices either side of it: copying the row to hide it
        # took most of a greedy step's accounting (a few rows a step on the engine loop).
        at = int(row.argmax())
        sides = [side.max() for side in (row[:at], row[at + 1 :]) if len(side)]
        out[i, 0] = row[at]
        out[i, 1] = np.maximum(*sides) if len(sides) == 2 else sides[0] if sides else -np.inf  # NaN as max() has it
    return out


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The index of the first token where a and b differ (or one ends early); None when equal."""
    if list(a) == list(b):
        return None
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _near_tie_at(position: int, margins: Sequence[Sequence[float] | None]) -> bool:
    known = [m[position] for m in margins if m is not None and position < len(m)]
    return any(g <= NEAR_TIE_ULPS for g in known)


def classify_turns(
    ids: Sequence[Sequence[int]],
    base_ids: Sequence[Sequence[int]],
    margins: Sequence[Sequence[float]] | None,
    base_margins: Sequence[Sequence[float]] | None,
) -> Verdict:
    """One reply (per-turn token ids and margins) against the baseline's.

    Only the first differing turn counts: later turns follow different text.
    Without margins a divergence cannot be accounted for, so it is "other"."""
    if len(ids) != len(base_ids):
        return "other"
    for turn, (a, b) in enumerate(zip(ids, base_ids, strict=True)):
        position = first_difference(a, b)
        if position is None:
            continue
        mine = margins[turn] if margins is not None and turn < len(margins) else None
        theirs = base_margins[turn] if base_margins is not None and turn < len(base_margins) else None
        return "near-tie" if _near_tie_at(position, [mine, theirs]) else "other"
    return "identical"


def worst(verdicts: Sequence[Verdict]) -> Verdict:
    """The verdict of several replies to one question (several choices)."""
    for v in ("other", "near-tie"):
        if v in verdicts:
            return v  # type: ignore[return-value]
    return "identical"
