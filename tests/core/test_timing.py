"""The shared interleaved-rounds timer, on a scripted clock (nothing is really timed)."""

from __future__ import annotations

import itertools

import pytest

from racer_core.bench.timing import fastest_of_rounds


def test_keeps_the_fastest_timed_round_and_skips_the_warmup() -> None:
    # Each call reads the clock twice; the spans are 9 (warm-up), then 5, 3 for call a and 7, 2 for b.
    ticks = itertools.accumulate([0, 9, 0, 9, 0, 5, 0, 7, 0, 3, 0, 2])
    order: list[str] = []
    best = fastest_of_rounds([lambda: order.append("a"), lambda: order.append("b")], 2,
                             after=lambda: order.append("-"), clock=lambda: float(next(ticks)))
    assert best == [3.0, 2.0]
    assert order == ["a", "-", "b", "-"] * 3  # interleaved, one untimed round first


def test_rejects_zero_rounds() -> None:
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        fastest_of_rounds([lambda: None], 0)
