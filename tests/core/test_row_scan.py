"""The native scan of a sampled row (racer_core/verify/row_scan.cpp): its largest scores and the
row's mass equal the reference's (kept_tokens.reference_top: torch's division, numpy's order and
float64 sum), on rows with ties, -inf, NaN, few values and every length's tail, and bad input is
refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from racer_core.verify.kept_tokens import reference_top

row_scan = pytest.importorskip("racer_core.verify._row_scan")
pytestmark = pytest.mark.skipif(not row_scan.available(), reason="the scan needs AVX2 and FMA")


def _rows(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = []
    for n in (65, 71, 100, 4096, 49152, 4099):
        for scale in (0.3, 3.0, 30.0):
            rows.append((rng.standard_normal(n) * scale).astype(np.float32))
    tied = (rng.standard_normal(4096) * 2).astype(np.float32)
    tied[rng.choice(4096, 100, replace=False)] = tied.max()  # equal best scores past k
    rounded = np.round(rng.standard_normal(3000) * 4).astype(np.float32)  # few distinct values: ties everywhere
    masked = np.full(5000, -np.inf, dtype=np.float32)
    masked[rng.choice(5000, 80, replace=False)] = rng.standard_normal(80).astype(np.float32)
    return [*rows, tied, rounded, masked]


@pytest.mark.parametrize("seed", range(6))
def test_the_scan_equals_its_reference(seed: int) -> None:
    checked = 0
    for row in _rows(seed):
        for temperature in (1.0, 0.7, 0.3, 1.7):
            for k in (1, 7, 64):
                got = row_scan.top_scores(row, temperature, k, True)
                want = reference_top(row, temperature, k, True)
                assert (got is None) == (want is None)
                if got is None:
                    continue
                assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
                assert got[2] == pytest.approx(want[2], rel=2e-6)
                assert row_scan.top_scores(row, temperature, k, False)[2] is None
                checked += 1
    assert checked > 100


def test_the_scan_declines_what_its_reference_declines() -> None:
    row = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    few = np.full(1000, -np.inf, dtype=np.float32)
    few[:10] = 1.0
    nan = row.copy()
    nan[500] = np.nan
    top_inf = row.copy()
    top_inf[3] = np.inf
    for bad in (few, nan, top_inf):
        assert row_scan.top_scores(bad, 0.7, 64, True) is None
        assert reference_top(bad, 0.7, 64, True) is None
    assert row_scan.top_scores(few, 1.0, 10, True) is not None  # ten values above -inf are enough for ten


def test_the_division_is_torchs() -> None:
    """The scores are the row divided as torch divides a float32 row by a Python float."""
    row = (np.random.default_rng(2).standard_normal(5000) * 20).astype(np.float32)
    for temperature in (0.7, 0.123456789, 1.3):
        got = row_scan.top_scores(row, temperature, 200, False)
        assert np.array_equal(got[1], (torch.from_numpy(row) / temperature).numpy()[got[0]])


def test_bad_scan_input_is_refused_in_one_line() -> None:
    row = np.zeros(100, dtype=np.float32)
    for call, message in [
        (lambda: row_scan.top_scores(row.astype(np.float64), 1.0, 4), "float32 vector"),
        (lambda: row_scan.top_scores(row[::2], 1.0, 4), "float32 vector"),
        (lambda: row_scan.top_scores(row, 1.0, 0), "k must be"),
        (lambda: row_scan.top_scores(row, 1.0, 100), "k must be"),
        (lambda: row_scan.top_scores(row, 0.0, 4), "divisor must be positive"),
    ]:
        with pytest.raises(ValueError, match=message) as error:
            call()
        assert "\n" not in str(error.value)


def _reference_draw(row: np.ndarray, temperature: float, u: float) -> tuple[int, np.ndarray, float]:
    """The draw by kept()'s whole-row softmax (float64) and its cumulative sum; and that sum
    (normalized) and where u falls in it, to tell a rounding boundary."""
    from racer_core.verify.sampling import TokenSampler, _draw

    sampler = TokenSampler(temperature, 1.0, 0, "cpu")
    ids, probs = sampler.kept(torch.from_numpy(row))
    return _draw(ids, probs, u), np.cumsum(probs), u * np.cumsum(probs)[-1]


@pytest.mark.parametrize("seed", range(4))
def test_a_native_draw_is_the_reference_draw_but_within_rounding_of_a_boundary(seed: int) -> None:
    rng = np.random.default_rng(seed)
    matched = 0
    for n, scale in [(9, 1.0), (100, 3.0), (4099, 2.0), (49152, 4.0)]:
        row = (rng.standard_normal(n) * scale).astype(np.float32)
        row[rng.choice(n, n // 10, replace=False)] = -np.inf  # masked tokens are never drawn
        for temperature in (0.7, 1.0, 1.6):
            for u in (*rng.random(40), 0.0, np.nextafter(1.0, 0.0)):
                got = row_scan.sample_index(row, temperature, float(u))
                want, cdf, target = _reference_draw(row, temperature, float(u))
                assert row[got] > -np.inf
                if got == want:
                    matched += 1
                    continue
                # only where u lies within the float32 weights' rounding of the boundary between them
                ids = np.flatnonzero(np.isfinite(row))
                edge = cdf[np.searchsorted(ids, min(got, want))]
                assert abs(edge - target) < 1e-5, (n, temperature, u, got, want)
    assert matched > 450


def test_a_draw_declines_a_row_its_reference_must_answer() -> None:
    row = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    nan = row.copy()
    nan[10] = np.nan
    assert row_scan.sample_index(nan, 0.7, 0.5) is None
    assert row_scan.sample_index(np.full(50, -np.inf, dtype=np.float32), 0.7, 0.5) is None
    for call, message in [
        (lambda: row_scan.sample_index(row, 0.7, 1.0), "u must be"),
        (lambda: row_scan.sample_index(row, -1.0, 0.5), "divisor must be positive"),
        (lambda: row_scan.sample_index(row[:0], 0.7, 0.5), "non-empty"),
    ]:
        with pytest.raises(ValueError, match=message) as error:
            call()
        assert "\n" not in str(error.value)
