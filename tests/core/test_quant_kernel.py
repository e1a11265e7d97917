"""The block-quantized linear kernel (formats/quant): its weights are ggml's
own values (against gguf's numpy dequantizer and our reference), its
products close to a float64 reference, and each output row the same bit for
bit alone, beside other rows, and on any number of threads."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

gguf = pytest.importorskip("gguf")
from gguf import quants  # noqa: E402

from racer_core.models.formats.quant import reference  # noqa: E402

_quant = pytest.importorskip("racer_core.models.formats.quant._quant")
if _quant.best() == "none":
    pytest.skip("the kernel needs AVX2+FMA+F16C", allow_module_level=True)

ISAS = ["avx2"] + (["avx512"] if _quant.best() == "avx512" else [])
TYPES = {2: gguf.GGMLQuantizationType.Q4_0, 3: gguf.GGMLQuantizationType.Q4_1, 8: gguf.GGMLQuantizationType.Q8_0}


def _blocks(qtype: int, rows: int, cols: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols)).astype(np.float32) * rng.uniform(0.01, 3.0, (rows, 1)).astype(np.float32)
    return np.ascontiguousarray(quants.quantize(w, TYPES[qtype]))


def _matmul(qtype: int, blocks: np.ndarray, rows: int, cols: int, x: np.ndarray, isa: str, threads: int = 1):
    y = np.full((x.shape[0], rows), np.nan, dtype=np.float32)
    _quant.matmul(qtype, blocks, rows, cols, np.ascontiguousarray(x, dtype=np.float32), y, isa, threads)
    return y


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", sorted(TYPES))
def test_the_kernels_weights_are_ggmls_values(qtype: int, isa: str) -> None:
    blocks = _blocks(qtype, 13, 160, seed=qtype)
    want = quants.dequantize(blocks, TYPES[qtype])
    assert np.array_equal(reference.dequantize(qtype, blocks, 13, 160), want)
    assert np.array_equal(_quant.dequantize(qtype, blocks, 13, 160, isa), want)


@settings(max_examples=40, deadline=None)
@given(qtype=st.sampled_from(sorted(TYPES)), rows=st.integers(1, 41), blocks_per_row=st.integers(1, 6),
       t=st.integers(1, 33), isa=st.sampled_from(ISAS), seed=st.integers(0, 2**16))
def test_products_match_the_float64_reference(qtype, rows, blocks_per_row, t, isa, seed) -> None:
    cols = 32 * blocks_per_row
    blocks = _blocks(qtype, rows, cols, seed)
    x = np.random.default_rng(seed + 1).standard_normal((t, cols)).astype(np.float32)
    got = _matmul(qtype, blocks, rows, cols, x, isa, threads=2)
    want = reference.matmul(qtype, blocks, rows, cols, x)
    scale = np.abs(x).astype(np.float64) @ np.abs(reference.dequantize(qtype, blocks, rows, cols)).T.astype(np.float64)
    assert np.all(np.abs(got - want) <= 1.2e-7 * (cols + 16) * scale + 1e-30)  # float32 summation bound


@settings(max_examples=40, deadline=None)
@given(qtype=st.sampled_from(sorted(TYPES)), rows=st.integers(1, 37), blocks_per_row=st.integers(1, 5),
       t=st.integers(2, 33), isa=st.sampled_from(ISAS), seed=st.integers(0, 2**16))
def test_a_row_alone_equals_it_beside_others_bit_for_bit(qtype, rows, blocks_per_row, t, isa, seed) -> None:
    cols = 32 * blocks_per_row
    blocks = _blocks(qtype, rows, cols, seed)
    rng = np.random.default_rng(seed + 1)
    x = rng.standard_normal((t, cols)).astype(np.float32) * rng.uniform(1e-3, 1e3, (t, 1)).astype(np.float32)
    together = _matmul(qtype, blocks, rows, cols, x, isa, threads=2)
    assert np.array_equal(_matmul(qtype, blocks, rows, cols, x, isa, threads=1), together)
    for i in range(t):
        assert np.array_equal(_matmul(qtype, blocks, rows, cols, x[i : i + 1], isa)[0], together[i]), i
    some = rng.permutation(t)[: max(1, t // 2)]  # any subset in any order: each row its own result
    assert np.array_equal(_matmul(qtype, blocks, rows, cols, x[some], isa, threads=2), together[some])


def test_bad_arguments_are_refused_before_the_kernel_runs() -> None:
    blocks = _blocks(3, 4, 64, seed=0)
    x = np.zeros((2, 64), dtype=np.float32)
    y = np.zeros((2, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="unsupported block type"):
        _quant.matmul(12, blocks, 4, 64, x, y, ISAS[0], 1)
    with pytest.raises(ValueError, match="multiple of 32"):
        _quant.matmul(3, blocks, 4, 48, x, y, ISAS[0], 1)
    with pytest.raises(ValueError, match="do not hold"):
        _quant.matmul(3, blocks, 5, 64, x, y, ISAS[0], 1)
    with pytest.raises(ValueError, match="x must be"):
        _quant.matmul(3, blocks, 4, 64, x.astype(np.float64), y, ISAS[0], 1)
    with pytest.raises(ValueError, match="y must be"):
        _quant.matmul(3, blocks, 4, 64, x, np.zeros((3, 4), dtype=np.float32), ISAS[0], 1)
    with pytest.raises(ValueError, match="not available"):
        _quant.matmul(3, blocks, 4, 64, x, y, "neon", 1)
