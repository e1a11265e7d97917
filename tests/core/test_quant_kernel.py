"""The block-quantized linear kernels (formats/quant): their weights are ggml's
own values (against gguf's numpy dequantizer and our reference), the integer
kernel's quantized activations are the reference's bit for bit, the products
are close to a float64 reference, and each output row is the same bit for bit
alone, beside other rows, and on any number of threads."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

gguf = pytest.importorskip("gguf")
from gguf import quants  # noqa: E402
from quant_helpers import the_kernel  # noqa: E402

from racer_core.bench.sized_gguf import random_k_blocks  # noqa: E402
from racer_core.models.formats.quant import reference  # noqa: E402

_quant, ISAS = the_kernel()
Q = gguf.GGMLQuantizationType
TYPES = {2: Q.Q4_0, 3: Q.Q4_1, 6: Q.Q5_0, 7: Q.Q5_1, 8: Q.Q8_0, 12: Q.Q4_K, 13: Q.Q5_K, 14: Q.Q6_K}
K_TYPES = (12, 13, 14)  # 256 values a block; gguf's numpy has no quantizer for them: random blocks, sane scales


def _cols(qtype: int, blocks_per_row: int) -> int:
    return (256 if qtype in K_TYPES else 32) * blocks_per_row


def _blocks(qtype: int, rows: int, cols: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if qtype in K_TYPES:
        return random_k_blocks(qtype, rows, cols, rng)
    w = rng.standard_normal((rows, cols)).astype(np.float32) * rng.uniform(0.01, 3.0, (rows, 1)).astype(np.float32)
    return np.ascontiguousarray(quants.quantize(w, TYPES[qtype]))


KERNELS = {"float": (_quant.matmul, reference.matmul), "q8": (_quant.matmul_q8, reference.matmul_q8)}
"""float: unpacked weights times float32 activations; q8: activations quantized per block, integer products."""


def _matmul(qtype: int, blocks: np.ndarray, rows: int, cols: int, x: np.ndarray, isa: str, threads: int = 1,
            kernel: str = "float"):
    y = np.full((x.shape[0], rows), np.nan, dtype=np.float32)
    KERNELS[kernel][0](qtype, blocks, rows, cols, np.ascontiguousarray(x, dtype=np.float32), y, isa, threads)
    return y


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", sorted(TYPES))
def test_the_kernels_weights_are_ggmls_values(qtype: int, isa: str) -> None:
    cols = _cols(qtype, 5)
    blocks = _blocks(qtype, 13, cols, seed=qtype)
    want = quants.dequantize(blocks, TYPES[qtype])
    assert np.array_equal(reference.dequantize(qtype, blocks, 13, cols), want)
    assert np.array_equal(_quant.dequantize(qtype, blocks, 13, cols, isa), want)


@settings(max_examples=60, deadline=None)
@given(t=st.integers(1, 9), blocks_per_row=st.integers(1, 6), seed=st.integers(0, 2**16),
       zero_block=st.booleans())
def test_activations_are_quantized_as_the_reference_bit_for_bit(t, blocks_per_row, seed, zero_block) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((t, 32 * blocks_per_row)).astype(np.float32) * rng.uniform(1e-4, 1e4, (t, 1)).astype(np.float32)
    x[:, :16] = np.round(x[:, :16])  # ties: x * 127 / amax lands on .5 often with integers
    if zero_block:
        x[0, :32] = 0.0
    got, want = _quant.quantize_rows(x), reference.quantize_rows(x)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and np.array_equal(g, w)
    q, d, _ = got
    assert np.abs(q.astype(np.int32)).max() <= 127
    back = (q.reshape(t, -1, 32) * d[..., None]).reshape(t, -1)
    assert np.all(np.abs(back - x) <= d.repeat(32, axis=1) * 0.5001)  # each value within half a step


@settings(max_examples=40, deadline=None)
@given(qtype=st.sampled_from(sorted(TYPES)), rows=st.integers(1, 41), blocks_per_row=st.integers(1, 6),
       t=st.integers(1, 33), isa=st.sampled_from(ISAS), seed=st.integers(0, 2**16),
       kernel=st.sampled_from(sorted(KERNELS)))
def test_products_match_the_float64_reference(qtype, rows, blocks_per_row, t, isa, seed, kernel) -> None:
    cols = _cols(qtype, blocks_per_row)
    blocks = _blocks(qtype, rows, cols, seed)
    x = np.random.default_rng(seed + 1).standard_normal((t, cols)).astype(np.float32)
    got = _matmul(qtype, blocks, rows, cols, x, isa, threads=2, kernel=kernel)
    want = KERNELS[kernel][1](qtype, blocks, rows, cols, x)
    scale = np.abs(x).astype(np.float64) @ np.abs(reference.dequantize(qtype, blocks, rows, cols)).T.astype(np.float64)
    assert np.all(np.abs(got - want) <= 1.2e-7 * (cols + 16) * scale + 1e-30)  # float32 summation bound


def test_the_integer_kernel_is_llama_cpps_arithmetic_not_the_float_kernels() -> None:
    """The q8 kernel's answer is the quantized activations' product: far nearer
    that than the float activations' product (the two kernels differ)."""
    blocks = _blocks(3, 16, 256, seed=5)
    x = np.random.default_rng(6).standard_normal((3, 256)).astype(np.float32)
    got = _matmul(3, blocks, 16, 256, x, ISAS[0], kernel="q8")
    near = np.abs(got - reference.matmul_q8(3, blocks, 16, 256, x)).max()
    far = np.abs(got - reference.matmul(3, blocks, 16, 256, x)).max()
    assert near * 100 < far


@pytest.mark.skipif(len(ISAS) < 2, reason="one ISA on this CPU")
@pytest.mark.parametrize("qtype", sorted(TYPES))
def test_the_integer_kernel_gives_the_same_bits_on_every_isa(qtype: int) -> None:
    cols = _cols(qtype, 6 if qtype not in K_TYPES else 2)
    blocks = _blocks(qtype, 29, cols, seed=qtype)
    x = np.random.default_rng(1).standard_normal((11, cols)).astype(np.float32)
    want = _matmul(qtype, blocks, 29, cols, x, "avx2", kernel="q8")
    for isa in ISAS[1:]:  # AVX-VNNI's and AVX-512 VNNI's dpbusd where the CPU has them
        assert np.array_equal(want, _matmul(qtype, blocks, 29, cols, x, isa, kernel="q8")), isa


@settings(max_examples=40, deadline=None)
@given(qtype=st.sampled_from(sorted(TYPES)), rows=st.integers(1, 37), blocks_per_row=st.integers(1, 11),
       t=st.integers(2, 33), isa=st.sampled_from(ISAS), seed=st.integers(0, 2**16),
       kernel=st.sampled_from(sorted(KERNELS)))
def test_a_row_alone_equals_it_beside_others_bit_for_bit(qtype, rows, blocks_per_row, t, isa, seed, kernel) -> None:
    cols = _cols(qtype, blocks_per_row if qtype not in K_TYPES else 1 + blocks_per_row % 3)
    blocks = _blocks(qtype, rows, cols, seed)
    rng = np.random.default_rng(seed + 1)
    x = rng.standard_normal((t, cols)).astype(np.float32) * rng.uniform(1e-3, 1e3, (t, 1)).astype(np.float32)
    together = _matmul(qtype, blocks, rows, cols, x, isa, threads=2, kernel=kernel)
    assert np.array_equal(_matmul(qtype, blocks, rows, cols, x, isa, threads=1, kernel=kernel), together)
    for i in range(t):
        assert np.array_equal(_matmul(qtype, blocks, rows, cols, x[i : i + 1], isa, kernel=kernel)[0], together[i]), i
    some = rng.permutation(t)[: max(1, t // 2)]  # any subset in any order: each row its own result
    assert np.array_equal(_matmul(qtype, blocks, rows, cols, x[some], isa, threads=2, kernel=kernel), together[some])


def test_bad_arguments_are_refused_before_the_kernel_runs() -> None:
    blocks = _blocks(3, 4, 64, seed=0)
    x = np.zeros((2, 64), dtype=np.float32)
    y = np.zeros((2, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="unsupported block type"):  # Q3_K
        _quant.matmul(11, blocks, 4, 64, x, y, ISAS[0], 1)
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
    with pytest.raises(ValueError, match="x must be"):
        _quant.matmul_q8(3, blocks, 4, 64, x[:, :32].copy(), y, ISAS[0], 1)
    with pytest.raises(ValueError, match="do not hold"):
        _quant.matmul_q8(3, blocks, 5, 64, x, y, ISAS[0], 1)
    with pytest.raises(ValueError, match="multiple of 32"):
        _quant.quantize_rows(np.zeros((2, 40), dtype=np.float32))
    with pytest.raises(ValueError, match="multiple of 256"):
        _quant.matmul_q8(12, np.zeros((4, 144), dtype=np.uint8), 4, 224, np.zeros((2, 224), dtype=np.float32),
                         y, ISAS[0], 1)


@pytest.mark.parametrize("isa", ISAS)
def test_the_dot_instructions_rate_is_measured_on_each_isa(isa: str) -> None:
    # Only that it runs and reports a rate: how fast is the machine's business (scripts/kernel_floor.py prints it).
    for floats in (0, 2, 3):
        rate = _quant.dot_peak(isa, 2, 1000, floats)
        assert np.isfinite(rate) and rate > 0, (isa, floats, rate)


def test_the_dot_peak_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="not available"):
        _quant.dot_peak("neon", 1, 10)
    with pytest.raises(ValueError, match="at least 1"):
        _quant.dot_peak(ISAS[0], 0, 10)
    with pytest.raises(ValueError, match="at least 1"):
        _quant.dot_peak(ISAS[0], 1, 0)
    with pytest.raises(ValueError, match="expected 0, 2 or 3"):
        _quant.dot_peak(ISAS[0], 1, 10, floats=1)
