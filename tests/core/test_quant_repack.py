"""The repacked integer kernel (quant/quant_repack.hpp, layout quant/repack.py):
the layout only moves the file's bytes, the kernel's answer is its numpy
reference's bit for bit (the same float32 operations in the same order, for
every row count, tile and thread count, so a row alone equals it in a tree),
and QuantWeight repacks exactly where it may."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

gguf = pytest.importorskip("gguf")
from gguf import quants  # noqa: E402
from quant_helpers import the_kernel  # noqa: E402

from racer_core.bench.sized_gguf import random_k_blocks  # noqa: E402
from racer_core.models.formats.quant import reference, repack  # noqa: E402
from racer_core.models.formats.quant_weights import QuantWeight, repacking_as  # noqa: E402

_quant, ISAS = the_kernel()
Q = gguf.GGMLQuantizationType
TYPES = {2: Q.Q4_0, 3: Q.Q4_1, 6: Q.Q5_0, 7: Q.Q5_1, 8: Q.Q8_0, 12: Q.Q4_K, 13: Q.Q5_K, 14: Q.Q6_K}
K_TYPES = (12, 13, 14)
Q5_TYPES = (6, 7, 13)
"""Q5_0, Q5_1, Q5_K: repacked since 5 Dec 2026."""


def _values(qtype: int) -> int:
    """Values per block: 32, a K type's 256."""
    return 256 if qtype in K_TYPES else 32


def _blocks(qtype: int, rows: int, cols: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if qtype in K_TYPES:  # random bytes: every 6-bit scale and min, every int8 scale (-128 included) occurs
        return random_k_blocks(qtype, rows, cols, rng)
    w = rng.standard_normal((rows, cols)).astype(np.float32) * rng.uniform(0.01, 3.0, (rows, 1)).astype(np.float32)
    if qtype == 8:
        w[0, :32] = 0.0  # an all-zero block (d = 0)
    return np.ascontiguousarray(quants.quantize(w, TYPES[qtype]))


def _x(t: int, cols: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((t, cols)).astype(np.float32) * rng.uniform(1e-3, 1e3, (t, 1)).astype(np.float32)
    x[:, :16] = np.round(x[:, :16])  # ties in the activations' quantization
    x[-1, -32:] = 0.0  # an all-zero activation block
    return x


def _repacked(qtype: int, packed: np.ndarray, rows: int, cols: int, x: np.ndarray, isa: str = "avx2",
              threads: int = 1) -> np.ndarray:
    y = np.full((x.shape[0], rows), np.nan, dtype=np.float32)
    _quant.matmul_q8(qtype | _quant.REPACKED, packed, rows, cols, np.ascontiguousarray(x), y, isa, threads)
    return y


@settings(max_examples=40, deadline=None)
@given(qtype=st.sampled_from(sorted(TYPES)), groups=st.integers(1, 6), blocks_per_row=st.integers(1, 9),
       seed=st.integers(0, 2**16), picks=st.lists(st.integers(0, 47), max_size=12))
def test_repacking_only_moves_the_files_bytes(qtype, groups, blocks_per_row, seed, picks) -> None:
    rows, cols = 8 * groups, _values(qtype) * blocks_per_row
    blocks = _blocks(qtype, rows, cols, seed)
    packed = repack.repack(qtype, blocks)
    assert packed.shape == blocks.shape and packed.dtype == np.uint8
    assert np.array_equal(np.sort(packed, axis=None), np.sort(blocks, axis=None))  # the same bytes, moved
    assert np.array_equal(repack.unpack(qtype, packed), blocks)
    ids = np.array([p % rows for p in picks], dtype=np.int64)
    assert np.array_equal(repack.unpack(qtype, packed, ids), blocks[ids])


@settings(max_examples=60, deadline=None)
@given(qtype=st.sampled_from(sorted(TYPES)), groups=st.integers(1, 6), blocks_per_row=st.integers(1, 9),
       seed=st.integers(0, 2**16), picks=st.lists(st.integers(0, 47), max_size=12))
def test_rows_unpacked_natively_are_the_references(qtype, groups, blocks_per_row, seed, picks) -> None:
    """An embedding's rows each step (QuantWeight.rows): _quant.unpack_rows gives repack.unpack's bytes,
    repeated and unordered ids included."""
    rows, cols = 8 * groups, _values(qtype) * blocks_per_row
    blocks = _blocks(qtype, rows, cols, seed)
    packed = repack.repack(qtype, blocks)
    ids = np.array([p % rows for p in picks], dtype=np.int64)
    got = _quant.unpack_rows(packed, repack.FIELDS[qtype][0], repack.FIELD_TABLES[qtype], ids)
    assert got.shape == (len(ids), packed.shape[1]) and got.dtype == np.uint8
    assert np.array_equal(got, repack.unpack(qtype, packed, ids))
    assert np.array_equal(got, blocks[ids])


def test_rows_unpacked_natively_refuse_bad_input_in_one_line() -> None:
    blocks = _blocks(3, 16, 64, 0)
    packed = repack.repack(3, blocks)
    size, table = repack.FIELDS[3][0], repack.FIELD_TABLES[3]
    bad = [
        (packed, size, table, np.array([16], dtype=np.int64), "outside"),
        (packed, size, table, np.array([-1], dtype=np.int64), "outside"),
        (packed, size, table, np.array([0], dtype=np.int32), "ids must be"),
        (packed, size + 1, table, np.array([0], dtype=np.int64), "not repacked blocks"),
        (packed, size, table[:-1], np.array([0], dtype=np.int64), "cover"),
        (packed[:12], size, table, np.array([0], dtype=np.int64), "not repacked blocks"),
        (packed.astype(np.int8), size, table, np.array([0], dtype=np.int64), "packed must be"),
    ]
    for arrays in bad:
        with pytest.raises(ValueError, match=arrays[-1]) as error:
            _quant.unpack_rows(*arrays[:-1])
        assert "\n" not in str(error.value)


def test_the_layout_is_the_documented_one() -> None:
    """Group 0, block 1 of a Q4_1 matrix: eight d, eight m, then chunk c = bytes 4c..4c+3 of each row's quants."""
    blocks = _blocks(3, 16, 64, seed=1)
    b = blocks.reshape(16, 2, 20)
    packed = repack.repack(3, blocks).reshape(2, 2, 160)[0, 1]
    assert np.array_equal(packed[:16], b[:8, 1, 0:2].reshape(-1))
    assert np.array_equal(packed[16:32], b[:8, 1, 2:4].reshape(-1))
    for c in range(4):
        assert np.array_equal(packed[32 + 32 * c : 64 + 32 * c], b[:8, 1, 4 + 4 * c : 8 + 4 * c].reshape(-1))


def test_the_k_layouts_are_the_documented_ones() -> None:
    """Group 1, super-block 1. Q4_K: eight d, eight dmin, scale byte i of the eight rows at 32 + 8i,
    then 4-byte pieces of the nibble bytes; Q6_K: 4-byte pieces of ql, then of qh, int8 scale i at
    1536 + 8i, eight d."""
    def q4_k_fields(packed: np.ndarray, b: np.ndarray, nibbles_at: int) -> None:
        """Q4_K's fields at Q4_K's places: d, dmin, the 12 scale bytes, the 128 nibble bytes (at `nibbles_at` in b)."""
        assert np.array_equal(packed[:16], b[:, 0:2].reshape(-1)) and np.array_equal(packed[16:32], b[:, 2:4].reshape(-1))
        for i in range(12):
            assert np.array_equal(packed[32 + 8 * i : 40 + 8 * i], b[:, 4 + i])
        for c in range(32):
            at = nibbles_at + 4 * c
            assert np.array_equal(packed[128 + 32 * c : 160 + 32 * c], b[:, at : at + 4].reshape(-1))

    blocks = _blocks(12, 16, 512, seed=1)
    q4_k_fields(repack.repack(12, blocks).reshape(2, 2, 1152)[1, 1], blocks.reshape(16, 2, 144)[8:, 1], 16)
    blocks = _blocks(13, 16, 512, seed=1)  # Q5_K: Q4_K's fields at Q4_K's places, then qh in 4-byte pieces
    b = blocks.reshape(16, 2, 176)[8:, 1]
    packed = repack.repack(13, blocks).reshape(2, 2, 1408)[1, 1]
    q4_k_fields(packed, b, 48)
    for c in range(8):
        assert np.array_equal(packed[1152 + 32 * c : 1184 + 32 * c], b[:, 16 + 4 * c : 20 + 4 * c].reshape(-1))
    blocks = _blocks(14, 16, 512, seed=1)
    b = blocks.reshape(16, 2, 210)[8:, 1]
    packed = repack.repack(14, blocks).reshape(2, 2, 1680)[1, 1]
    for c in range(48):  # ql's 32 pieces, then qh's 16
        assert np.array_equal(packed[32 * c : 32 * c + 32], b[:, 4 * c : 4 * c + 4].reshape(-1))
    for i in range(16):
        assert np.array_equal(packed[1536 + 8 * i : 1544 + 8 * i], b[:, 192 + i])
    assert np.array_equal(packed[1664:], b[:, 208:210].reshape(-1))


@pytest.mark.parametrize(("qtype", "size"), [(6, 22), (7, 24)])
def test_the_q5_layouts_are_the_documented_ones(qtype: int, size: int) -> None:
    """Group 0, block 1 of a Q5_0 / Q5_1 matrix: eight d (Q5_1: eight m), the eight rows' 4-byte qh,
    then chunk c = bytes 4c..4c+3 of each row's nibble bytes (as Q4_0's)."""
    blocks = _blocks(qtype, 16, 64, seed=1)
    b = blocks.reshape(16, 2, size)[:8, 1]
    packed = repack.repack(qtype, blocks).reshape(2, 2, 8 * size)[0, 1]
    first = size - 20  # where qh begins in the file's block: 2 (Q5_0), 4 (Q5_1)
    for f in range(0, first, 2):
        assert np.array_equal(packed[8 * f : 8 * f + 16], b[:, f : f + 2].reshape(-1))
    assert np.array_equal(packed[8 * first : 8 * first + 32], b[:, first : first + 4].reshape(-1))
    for c in range(4):
        at = 8 * first + 32 * (c + 1)
        assert np.array_equal(packed[at : at + 32], b[:, first + 4 + 4 * c : first + 8 + 4 * c].reshape(-1))


@settings(max_examples=100, deadline=None)
@given(qtype=st.sampled_from(sorted(TYPES)), groups=st.integers(1, 9), blocks_per_row=st.integers(1, 11),
       t=st.integers(1, 33), isa=st.sampled_from(ISAS), threads=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_the_repacked_kernel_is_its_reference_bit_for_bit(qtype, groups, blocks_per_row, t, isa, threads,
                                                           seed) -> None:
    rows, cols = 8 * groups, _values(qtype) * (blocks_per_row if qtype not in K_TYPES else 1 + blocks_per_row % 4)
    blocks = _blocks(qtype, rows, cols, seed)
    x = _x(t, cols, seed + 1)
    got = _repacked(qtype, repack.repack(qtype, blocks), rows, cols, x, isa, threads)
    assert np.array_equal(got, reference.matmul_q8_repacked(qtype, blocks, rows, cols, x))


@pytest.mark.parametrize("qtype", sorted(TYPES))
def test_rows_of_a_few_activations_keep_their_bits_on_either_side_of_the_narrow_tiles_width(qtype: int) -> None:
    """At 5-8 rows the VNNI build takes its 256-bit tiles for rows of at most 1,024 values and its
    512-bit tiles for wider ones (quant_repack_wide.hpp's NARROW_COLS): both are the reference's bits."""
    for cols in ((768, 1280) if qtype in K_TYPES else (992, 1024, 1056, 1280)):
        blocks = _blocks(qtype, 24, cols, seed=cols)
        packed = repack.repack(qtype, blocks)
        x = _x(8, cols, seed=cols + 1)
        for isa in ISAS:
            for t in (5, 6, 7, 8):
                got = _repacked(qtype, packed, 24, cols, x[:t].copy(), isa, threads=2)
                assert np.array_equal(got, reference.matmul_q8_repacked(qtype, blocks, 24, cols, x[:t])), (cols, isa, t)


@settings(max_examples=50, deadline=None)
@given(qtype=st.sampled_from(sorted(TYPES)), groups=st.integers(1, 7), blocks_per_row=st.integers(1, 8),
       t=st.integers(2, 33), isa=st.sampled_from(ISAS), seed=st.integers(0, 2**16))
def test_a_row_alone_equals_it_in_a_tree(qtype, groups, blocks_per_row, t, isa, seed) -> None:
    rows, cols = 8 * groups, _values(qtype) * (blocks_per_row if qtype not in K_TYPES else 1 + blocks_per_row % 3)
    packed = repack.repack(qtype, _blocks(qtype, rows, cols, seed))
    x = _x(t, cols, seed + 1)
    together = _repacked(qtype, packed, rows, cols, x, isa, threads=2)
    for i in range(t):
        assert np.array_equal(_repacked(qtype, packed, rows, cols, x[i : i + 1], isa)[0], together[i]), i
    some = np.random.default_rng(seed).permutation(t)[: max(1, t // 2)]
    assert np.array_equal(_repacked(qtype, packed, rows, cols, x[some], isa, threads=2), together[some])


@pytest.mark.parametrize("qtype", sorted(TYPES))
def test_the_repacked_kernel_is_as_close_to_the_float64_product_as_the_file_layouts(qtype: int) -> None:
    """A different summation order, the same arithmetic (int8 activations per 32-block, integer dots):
    both kernels lie within float32 summation error of the quantized activations' float64 product."""
    rows, cols = 64, 768
    blocks = _blocks(qtype, rows, cols, seed=qtype)
    x = _x(9, cols, seed=7)
    want = reference.matmul_q8(qtype, blocks, rows, cols, x)
    scale = np.abs(x).astype(np.float64) @ np.abs(reference.dequantize(qtype, blocks, rows, cols)).T.astype(np.float64)
    file_layout = np.empty_like(want, dtype=np.float32)
    _quant.matmul_q8(qtype, blocks, rows, cols, x, file_layout, "avx2", 1)
    for got in (_repacked(qtype, repack.repack(qtype, blocks), rows, cols, x), file_layout):
        assert np.all(np.abs(got - want) <= 1.2e-7 * (cols + 16) * scale + 1e-30)


@pytest.mark.skipif(len(ISAS) < 2, reason="one ISA on this CPU")
@pytest.mark.parametrize("qtype", sorted(TYPES))
def test_the_repacked_kernel_gives_the_same_bits_on_every_isa(qtype: int) -> None:
    cols = 256 * 3 if qtype in K_TYPES else 32 * 7
    blocks = repack.repack(qtype, _blocks(qtype, 40, cols, seed=qtype))
    x = _x(11, cols, seed=3)
    want = _repacked(qtype, blocks, 40, cols, x, "avx2")
    for isa in ISAS[1:]:  # AVX-VNNI's and AVX-512 VNNI's dpbusd where the CPU has them
        for t in (1, 2, 5, 8, 11):  # every tile shape (the VNNI builds tile more rows)
            assert np.array_equal(want[:t], _repacked(qtype, blocks, 40, cols, x[:t].copy(), isa)), (isa, t)


def test_quant_weight_repacks_where_it_may() -> None:
    blocks = _blocks(3, 16, 64, seed=2)
    x = torch.from_numpy(_x(3, 64, seed=4))
    w = QuantWeight(blocks, 3, 16, 64, acts="q8")
    assert w.repacked and w.kernel_type == 3 | repack.REPACKED
    assert np.array_equal(w.file_blocks(), blocks)
    assert torch.equal(w(x), torch.from_numpy(reference.matmul_q8_repacked(3, blocks, 16, 64, x.numpy())))
    with repacking_as(False):
        plain = QuantWeight(blocks, 3, 16, 64, acts="q8")
    assert not plain.repacked and plain.kernel_type == 3
    assert torch.equal(w.plain(), plain.plain())
    ids = torch.tensor([[3, 15], [0, 3]])
    assert torch.equal(w.rows(ids), plain.rows(ids))
    stacked = QuantWeight.stack([w, plain])
    assert stacked.repacked and np.array_equal(stacked.file_blocks(), np.concatenate([blocks, blocks]))
    assert not QuantWeight(blocks, 3, 16, 64, acts="float").repacked  # the float kernel reads the file's layout
    assert not QuantWeight(_blocks(3, 12, 64, seed=2), 3, 12, 64, acts="q8").repacked  # not whole groups of 8
    with pytest.raises(ValueError, match="cannot be repacked"):
        QuantWeight(_blocks(3, 12, 64, seed=2), 3, 12, 64, acts="q8", repacked=True)


@pytest.mark.parametrize("qtype", sorted({*K_TYPES, *Q5_TYPES}))
def test_quant_weight_multiplies_k_and_q5_blocks_repacked_by_default(qtype: int) -> None:
    """A K or Q5 type's weight of whole groups of eight rows goes through the repacked kernel (its answer is
    the repacked order's, which here differs from the file layout's); RACER_QUANT_REPACK=0 keeps the file's,
    and so do rows that are no whole groups of eight."""
    rows, cols = 24, 1024
    blocks = _blocks(qtype, rows, cols, seed=5)
    x = torch.from_numpy(_x(5, cols, seed=6))
    w = QuantWeight(blocks, qtype, rows, cols, acts="q8")
    assert w.repacked and w.kernel_type == qtype | repack.REPACKED
    assert np.array_equal(w.file_blocks(), blocks)
    got = w(x)
    assert torch.equal(got, torch.from_numpy(reference.matmul_q8_repacked(qtype, blocks, rows, cols, x.numpy())))
    with repacking_as(False):
        plain = QuantWeight(blocks, qtype, rows, cols, acts="q8")
    assert not plain.repacked
    file_layout = np.empty((5, rows), dtype=np.float32)
    _quant.matmul_q8(qtype, blocks, rows, cols, x.numpy(), file_layout, "avx2", 1)
    assert torch.equal(plain(x), torch.from_numpy(file_layout))
    assert not torch.equal(got, plain(x))  # the two orders differ: the first check above tells them apart
    assert torch.equal(w.plain(), plain.plain())
    ids = torch.tensor([1, 23, 8])
    assert torch.equal(w.rows(ids), plain.rows(ids))
    odd = QuantWeight(blocks[:12].copy(), qtype, 12, cols, acts="q8")  # not whole groups of eight: the file's layout
    assert not odd.repacked and odd.kernel_type == qtype
    assert torch.equal(odd(x), torch.from_numpy(file_layout[:, :12].copy()))  # row-invariant: the same outputs


@pytest.mark.parametrize("t", [1, 2, 3, 8, 16, 32])
@pytest.mark.parametrize("qtype", Q5_TYPES)
def test_the_q5_types_at_tree_row_counts(qtype: int, t: int) -> None:
    """A tree's row counts, every tile shape (one row: four groups a tile; two: pairs of sub-blocks): the
    repacked kernel is its reference bit for bit, each row alone too, and within the float32 summation
    error of the float64 product, as the file layout's kernel is."""
    rows, cols = 40, 768 if qtype in K_TYPES else 224
    blocks = _blocks(qtype, rows, cols, seed=t)
    x = _x(t, cols, seed=t + 100)
    got = _repacked(qtype, repack.repack(qtype, blocks), rows, cols, x, threads=2)
    assert np.array_equal(got, reference.matmul_q8_repacked(qtype, blocks, rows, cols, x))
    assert np.array_equal(_repacked(qtype, repack.repack(qtype, blocks), rows, cols, x[-1:])[0], got[-1])
    file_layout = np.empty_like(got)
    _quant.matmul_q8(qtype, blocks, rows, cols, x, file_layout, "avx2", 1)
    want = reference.matmul_q8(qtype, blocks, rows, cols, x)
    scale = np.abs(x).astype(np.float64) @ np.abs(reference.dequantize(qtype, blocks, rows, cols)).T.astype(np.float64)
    for out in (got, file_layout):
        assert np.all(np.abs(out - want) <= 1.2e-7 * (cols + 16) * scale + 1e-30)


@pytest.mark.parametrize("qtype", sorted(TYPES))
def test_a_stack_of_repacked_parts_takes_their_blocks_as_they_are(qtype: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A load stacks q|k|v and gate|up of every layer: repacked parts (whole groups of eight rows) are
    put one after another, not unpacked and repacked again (a start's load paid for it three times)."""
    cols = 256 if qtype in K_TYPES else 64
    parts = [QuantWeight(_blocks(qtype, rows, cols, seed=rows), qtype, rows, cols, acts="q8") for rows in (16, 8, 24)]
    files = np.concatenate([p.file_blocks() for p in parts])

    def moved_again(*args: object) -> None:
        raise AssertionError("the parts' blocks were unpacked or repacked again")

    with monkeypatch.context() as patched:
        patched.setattr(repack, "unpack", moved_again)
        patched.setattr(repack, "repack", moved_again)
        stacked = QuantWeight.stack(parts)
    assert stacked.repacked and stacked.shape == (48, cols) and stacked.kernel_type == qtype | repack.REPACKED
    assert np.array_equal(stacked.blocks, repack.repack(qtype, files))
    assert np.array_equal(stacked.file_blocks(), files)
    x = torch.from_numpy(_x(5, cols, seed=1))
    assert torch.equal(stacked(x), torch.cat([p(x) for p in parts], dim=-1))  # row-invariant: each part's bits

def test_repacked_blocks_are_refused_where_they_cannot_be_read() -> None:
    blocks = repack.repack(3, _blocks(3, 16, 64, seed=0))
    x = np.zeros((2, 64), dtype=np.float32)
    y = np.zeros((2, 16), dtype=np.float32)
    rp = 3 | _quant.REPACKED
    for call in (lambda: _quant.matmul(rp, blocks, 16, 64, x, y, "avx2", 1),
                 lambda: _quant.dequantize(rp, blocks, 16, 64, "avx2")):
        with pytest.raises(ValueError, match="read by matmul_q8 only") as error:
            call()
        assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="groups of 8 rows"):
        _quant.matmul_q8(rp, blocks[:12].copy(), 12, 64, x, np.zeros((2, 12), dtype=np.float32), "avx2", 1)
    with pytest.raises(ValueError, match="unsupported block type"):  # Q8_1: the kernel has no such blocks
        _quant.matmul_q8(9 | _quant.REPACKED, np.zeros((8, 36), dtype=np.uint8), 8, 32,
                         np.zeros((2, 32), dtype=np.float32), np.zeros((2, 8), dtype=np.float32), "avx2", 1)
    with pytest.raises(ValueError, match="cannot be repacked"):
        repack.repack(9, np.zeros((8, 36), dtype=np.uint8))
    with pytest.raises(ValueError, match="cannot be repacked"):
        repack.repack(13, np.zeros((12, 176), dtype=np.uint8))
