"""The kernel's Python reference (formats/quant/reference.py) dequantizes every
block type it knows to gguf's own values, bit for bit, on any bytes whose
fp16 scales are finite (the quants are any bits)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

gguf = pytest.importorskip("gguf")

from racer_core.models.formats.quant import reference  # noqa: E402

HALVES = {2: (0,), 3: (0, 2), 6: (0,), 7: (0, 2), 8: (0,), 12: (0, 2), 13: (0, 2), 14: (208,)}
"""Where each type's fp16 scales lie in its block (d; d and m or dmin; Q6_K's d last)."""


def random_blocks(qtype: int, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    _, size = reference.LAYOUT[qtype]
    n = rows * cols // (reference.SUPER if qtype in reference.K_TYPES else reference.BLOCK)
    b = rng.integers(0, 256, (n, size), dtype=np.uint8)
    for at in HALVES[qtype]:
        b[:, at : at + 2] = rng.uniform(-0.05, 0.05, n).astype(np.float16).view(np.uint8).reshape(n, 2)
    return b.reshape(rows, -1)


def test_every_type_the_reference_knows_has_its_scales_placed() -> None:
    assert set(HALVES) == set(reference.LAYOUT)


@settings(max_examples=80, deadline=None)
@given(qtype=st.sampled_from(sorted(reference.LAYOUT)), rows=st.integers(1, 5), blocks_per_row=st.integers(1, 3),
       seed=st.integers(0, 2**16))
def test_the_reference_dequantizes_as_gguf(qtype: int, rows: int, blocks_per_row: int, seed: int) -> None:
    cols = (reference.SUPER if qtype in reference.K_TYPES else reference.BLOCK) * blocks_per_row
    blocks = random_blocks(qtype, rows, cols, np.random.default_rng(seed))
    want = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType(qtype)).reshape(rows, cols)
    assert np.array_equal(reference.dequantize(qtype, blocks, rows, cols), want, equal_nan=True)


@pytest.mark.parametrize("qtype", [6, 7, 13])
def test_the_fifth_bit_lands_on_its_value(qtype: int) -> None:
    """One quant's fifth bit set, all else zero but d = 1 (and m, dmin = 0): that value alone is 16 (Q5_0: 0, the rest -16)."""
    cols = reference.SUPER if qtype in reference.K_TYPES else reference.BLOCK
    _, size = reference.LAYOUT[qtype]
    for value in (0, 5, 17, cols - 1):
        b = np.zeros((cols // (reference.SUPER if qtype == 13 else reference.BLOCK), size), dtype=np.uint8)
        b[:, 0:2] = np.array([1.0], dtype=np.float16).view(np.uint8)
        if qtype == 13:
            b[:, 4] = 1  # sub-block 0's scale 1 (and the others 0)
            sub, at = divmod(value, 32)
            b[:, 4 + sub % 4] = 1 if sub < 4 else 0
            if sub >= 4:
                b[:, 12 + sub - 4] = 1  # sub-blocks 4..7: the low 4 bits of their scale
            b[:, 16 + at] |= 1 << sub
        else:
            start = 4 if qtype == 7 else 2
            b[:, start + value // 8] |= 1 << (value % 8)
        got = reference.dequantize(qtype, b.reshape(1, -1), 1, cols)[0]
        want = gguf.quants.dequantize(b.reshape(1, -1), gguf.GGMLQuantizationType(qtype)).reshape(-1)
        assert np.array_equal(got, want)
        base = -16.0 if qtype == 6 else 0.0
        assert got[value] == base + 16 and np.all(np.delete(got, value) == base)
