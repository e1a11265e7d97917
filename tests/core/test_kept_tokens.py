"""Sampling's kept tokens found among a row's largest scores (racer_core/verify/kept_tokens.py)
equal transformers' processors' (TokenSampler.probabilities, the reference), and a sample
follows them: a chi-square test that also rejects the distribution without top-p."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_sampling import _chi_square_p

from racer_core.verify.kept_tokens import kept_tokens
from racer_core.verify.sampling import TokenSampler

SETTINGS = [  # temperature, top_k, top_p, min_p
    (0.7, 0, 0.8, 0.0), (1.0, 0, 0.9, 0.0), (0.7, 40, 0.9, 0.0), (1.0, 20, 1.0, 0.0),
    (0.8, 0, 1.0, 0.1), (1.3, 0, 0.5, 0.05), (0.7, 5, 1.0, 0.2), (1.5, 0, 0.99, 0.0), (1.0, 1, 1.0, 0.0),
]


def _rows(seed: int, n: int = 4096) -> list[torch.Tensor]:
    """Peaked, flat, tied and masked rows (a grammar's -inf); the tied one last."""
    rng = np.random.default_rng(seed)
    rows = [rng.standard_normal(n) * scale for scale in (0.3, 1.0, 3.0, 8.0)]
    tied = rng.standard_normal(n) * 3.0
    tied[rng.choice(n, 10, replace=False)] = tied.max()  # ten equal best scores
    masked = np.full(n, -np.inf)
    masked[rng.choice(n, 30, replace=False)] = rng.standard_normal(30) * 2.0
    return [torch.from_numpy(r.astype(np.float32)) for r in (*rows, masked, tied)]


def _reference(sampler: TokenSampler, row: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    probs = sampler.probabilities(row).double().numpy()
    ids = np.flatnonzero(probs > 0)
    return ids, probs[ids] / probs[ids].sum()


@pytest.mark.parametrize("seed", range(12))
def test_kept_tokens_equal_the_processors(seed: int) -> None:
    fast = 0
    rows = _rows(seed)
    for row in rows:
        for temperature, top_k, top_p, min_p in SETTINGS:
            sampler = TokenSampler(temperature, top_p, 0, "cpu", top_k=top_k, min_p=min_p)
            ids, probs = sampler.kept(row)
            want_ids, want_probs = _reference(sampler, row)
            if row is rows[-1]:
                # Equal best scores at the nucleus's edge: which of them stay follows
                # torch.sort's order among equals (unspecified); as many stay, as likely.
                assert len(ids) == len(want_ids) and set(ids) <= set(np.flatnonzero(row >= row.max())) | set(want_ids)
                np.testing.assert_allclose(np.sort(probs), np.sort(want_probs), rtol=1e-5, atol=1e-9)
                continue
            assert np.array_equal(ids, want_ids), (temperature, top_k, top_p, min_p)
            np.testing.assert_allclose(probs, want_probs, rtol=1e-5, atol=1e-9)
            fast += kept_tokens(row.numpy(), temperature, top_k, top_p if top_p < 1.0 else 1.0, min_p) is not None
    assert fast >= 20  # the candidates settled most of them: the fast path was the one checked


def test_a_flat_row_falls_back_to_the_processors() -> None:
    row = torch.zeros(4096)
    assert kept_tokens(row.numpy(), 1.0, 0, 0.9, 0.0) is None  # the nucleus runs past the candidates
    sampler = TokenSampler(1.0, 0.9, 0, "cpu")
    ids, _ = sampler.kept(row)
    assert np.array_equal(ids, _reference(sampler, row)[0])


def test_samples_follow_the_kept_distribution_and_the_test_has_power() -> None:
    rng = np.random.default_rng(5)
    row = torch.from_numpy((rng.standard_normal(512) * 2.5).astype(np.float32))
    sampler = TokenSampler(0.7, 0.8, seed=11, device="cpu")
    assert kept_tokens(row.numpy(), 0.7, 0, 0.8, 0.0) is not None
    n = 20_000
    counts = np.bincount([sampler.sample(row) for _ in range(n)], minlength=512)
    target = sampler.probabilities(row).double().numpy()
    no_top_p = TokenSampler(0.7, 1.0, seed=0, device="cpu").probabilities(row).double().numpy()
    expected = np.round(target * n * 50).astype(int)  # a large sample of the target itself
    wrong = np.round(no_top_p * n * 50).astype(int)
    assert _chi_square_p(counts, expected) > 0.01
    assert _chi_square_p(counts, wrong) < 0.001
    assert counts[target == 0].sum() == 0  # nothing outside the nucleus


def test_sampling_follows_the_seed() -> None:
    row = torch.randn(2048, generator=torch.Generator().manual_seed(3)) * 2
    draws = [[TokenSampler(0.8, 0.9, seed=seed, device="cpu").sample(row) for _ in range(3)] for seed in (1, 1, 2)]
    a = [TokenSampler(0.8, 0.9, seed=1, device="cpu") for _ in range(2)]
    assert [a[0].sample(row) for _ in range(20)] == [a[1].sample(row) for _ in range(20)]
    assert draws[0] == draws[1]


def test_a_draw_at_temperature_alone_follows_the_softmax_and_the_test_has_power() -> None:
    """Every token kept: the native draw from the whole row (row_scan.cpp's row_sample) where it runs."""
    rng = np.random.default_rng(7)
    row = torch.from_numpy((rng.standard_normal(512) * 2.5).astype(np.float32))
    sampler = TokenSampler(0.8, 1.0, seed=3, device="cpu")
    assert not sampler.filters  # temperature alone: the native draw's case
    n = 20_000
    counts = np.bincount([sampler.sample(row) for _ in range(n)], minlength=512)
    target = sampler.probabilities(row).double().numpy()
    hotter = TokenSampler(1.0, 1.0, seed=0, device="cpu").probabilities(row).double().numpy()
    assert _chi_square_p(counts, np.round(target * n * 50).astype(int)) > 0.01
    assert _chi_square_p(counts, np.round(hotter * n * 50).astype(int)) < 0.001
    a, b = (TokenSampler(0.8, 1.0, seed=4, device="cpu") for _ in range(2))
    assert [a.sample(row) for _ in range(50)] == [b.sample(row) for _ in range(50)]  # the seed decides
