"""The hardware-aware budget: cost curve and chooser behaviour."""

from __future__ import annotations

from racer_core.budget import CPU_GRID, BudgetChooser, CostCurve, load_or_measure


def test_curve_interpolates_and_extrapolates() -> None:
    curve = CostCurve([1, 2, 4], [1.0, 2.0, 2.0])
    assert curve(1) == 1.0 and curve(3) == 2.0 and curve(8) == 2.0
    assert CostCurve([1, 2], [1.0, 2.0])(4) == 4.0


def test_curve_is_measured_once_and_monotone(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path))
    calls = []

    def measure(sizes) -> list[float]:
        calls.extend(sizes)
        return [{1: 1.0, 2: 0.9}.get(size, float(size)) for size in sizes]  # noisy dip at 2

    first = load_or_measure(("m", "cpu"), (1, 2, 4), measure)
    assert first.seconds == [1.0, 1.0, 4.0]
    again = load_or_measure(("m", "cpu"), (1, 2, 4), measure)
    assert again.seconds == first.seconds and calls == [1, 2, 4]


def test_chooser_falls_back_to_plain_decoding_when_drafts_miss() -> None:
    curve = CostCurve(list(CPU_GRID), [1.0 + 0.03 * b for b in CPU_GRID])
    chooser = BudgetChooser(curve, CPU_GRID, 64)
    for _ in range(200):
        budget = chooser.choose(0)
        chooser.observe(0, budget, budget, lambda b: 0)
    picks = [chooser.choose(0) for _ in range(64)]
    assert picks.count(1) >= 56  # only the occasional exploration step drafts


def test_chooser_grows_the_budget_when_drafts_hit() -> None:
    curve = CostCurve(list(CPU_GRID), [1.0 + 0.01 * b for b in CPU_GRID])
    chooser = BudgetChooser(curve, CPU_GRID, 64)
    for _ in range(200):
        budget = chooser.choose(1)
        chooser.observe(1, budget, budget, lambda b: min(b - 1, 6))
    assert chooser.choose(1) >= 8
