"""The shared interleaved-rounds timer, on a scripted clock (nothing is really timed)."""

from __future__ import annotations

import itertools

import pytest

from racer_core.bench.timing import fastest_and_median, fastest_of_rounds, timed_rounds


def scripted(spans: list[float]):  # noqa: ANN201 - a clock
    """A clock whose successive start/stop pairs are `spans` apart."""
    ticks = itertools.accumulate(x for span in spans for x in (0.0, span))
    return lambda: float(next(ticks))


def test_keeps_the_fastest_timed_round_and_skips_the_warmup() -> None:
    # Spans: 9, 9 (warm-up), then 5, 7 and 3, 2 for calls a and b.
    order: list[str] = []
    best = fastest_of_rounds([lambda: order.append("a"), lambda: order.append("b")], 2,
                             after=lambda i: order.append(f"-{i}"), clock=scripted([9, 9, 5, 7, 3, 2]))
    assert best == [3.0, 2.0]
    assert order == ["a", "-0", "b", "-1"] * 3  # interleaved, one untimed round first


def test_every_timed_span_with_several_warmup_rounds_and_before() -> None:
    order: list[str] = []
    spans = timed_rounds([lambda: order.append("a"), lambda: order.append("b")], 2, warmup=2,
                         before=lambda i: order.append(f"+{i}"), clock=scripted([1, 1, 1, 1, 4, 6, 8, 2]))
    assert spans == [[4.0, 8.0], [6.0, 2.0]]
    assert order == ["+0", "a", "+1", "b"] * 4
    assert fastest_and_median([4.0, 8.0, 5.0]) == (4.0, 5.0)


def test_no_warmup_times_every_round_and_sync_is_inside_the_span() -> None:
    order: list[str] = []
    spans = timed_rounds([lambda: order.append("a")], 2, warmup=False, sync=lambda: order.append("sync"),
                         clock=scripted([3, 1]))
    assert spans == [[3.0, 1.0]]
    assert order == ["a", "sync"] * 2


def test_rejects_zero_rounds_and_negative_warmup() -> None:
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        fastest_of_rounds([lambda: None], 0)
    with pytest.raises(ValueError, match="warmup must be 0 or more"):
        timed_rounds([lambda: None], 1, warmup=-1)
