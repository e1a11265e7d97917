"""The logits table's top-k scan (automaton/top_k.cpp, drafting/top_k.py)
against its numpy reference and torch.topk: the same ids wherever the answer
is unique, and the wrapper's ids torch's on every row, ties included."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from racer_core.drafting.automaton._automaton import TOP_K_MAX
from racer_core.drafting.automaton._automaton import top_k_rows as scan

from racer_core.drafting.top_k import reference_top_k_rows, top_k_rows


def _rows(seed: int, rows: int, width: int, levels: int, specials: bool) -> np.ndarray:
    """Random rows; few `levels` make equal values (ties) frequent."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, levels, size=(rows, width)).astype(np.float32) if levels else \
        rng.standard_normal((rows, width), dtype=np.float32)
    if specials:  # NaN, infinities and signed zeros at random places
        for special in (np.nan, np.inf, -np.inf, -0.0, 0.0):
            at = rng.random((rows, width)) < 0.02
            values[at] = special
    return values


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(0, 5), width=st.integers(2, 300),
       k=st.integers(1, TOP_K_MAX), levels=st.sampled_from([0, 2, 5, 50, 1000]), specials=st.booleans())
def test_scan_matches_the_reference_and_torch(seed: int, rows: int, width: int, k: int, levels: int,
                                              specials: bool) -> None:
    k = min(k, width - 1)
    logits = _rows(seed, rows, width, levels, specials)
    top, unique = scan(logits, k)
    ref_top, ref_unique = reference_top_k_rows(logits, k)
    assert top.dtype == np.int64 and top.shape == (rows, k)
    np.testing.assert_array_equal(unique, ref_unique)
    np.testing.assert_array_equal(top[unique], ref_top[unique])
    torch_top = torch.topk(torch.from_numpy(logits), k, dim=-1).indices.numpy()
    np.testing.assert_array_equal(top[unique], torch_top[unique])
    np.testing.assert_array_equal(top_k_rows(torch.from_numpy(logits), k), torch_top)


def test_a_vocabulary_row_is_unique_and_torchs() -> None:
    logits = torch.from_numpy(_rows(7, 8, 49152, 0, False))
    top, unique = scan(logits.numpy(), 8)
    assert unique.all()
    np.testing.assert_array_equal(top, torch.topk(logits, 8, dim=-1).indices.numpy())


def test_equal_values_are_left_to_torch() -> None:
    row = np.array([[1.0, 3.0, 2.0, 3.0, 0.5]], dtype=np.float32)
    assert not scan(row, 2)[1][0]  # the two largest are equal
    assert not scan(row, 3)[1][0]
    row = np.array([[1.0, 4.0, 2.0, 3.0, 2.0]], dtype=np.float32)
    assert not scan(row, 3)[1][0]  # the 3rd and 4th largest are equal: which is 3rd is torch's to say
    top, unique = scan(row, 2)  # a tie below the k + 1 largest does not matter
    assert unique[0] and top[0].tolist() == [1, 3]


@pytest.mark.parametrize("k", [0, -1, TOP_K_MAX + 1, 5])
def test_bad_k_is_refused(k: int) -> None:
    with pytest.raises(ValueError, match="k must be"):
        scan(np.zeros((1, 5), dtype=np.float32), k)


def test_other_inputs_go_to_torch() -> None:
    logits = torch.randn(3, 50, dtype=torch.float64)
    np.testing.assert_array_equal(top_k_rows(logits, 4), torch.topk(logits, 4, dim=-1).indices.numpy())
    wide = torch.randn(2, 200)
    np.testing.assert_array_equal(top_k_rows(wide, TOP_K_MAX + 1),
                                  torch.topk(wide, TOP_K_MAX + 1, dim=-1).indices.numpy())
