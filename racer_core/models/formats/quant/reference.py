"""The kernel's reference in numpy: ggml's block layouts dequantized in the
same float32 operations (the formulas of ggml and gguf's numpy dequantizer),
and the product in float64 (the kernel's float32 sums lie within a few ulps
of it)."""

from __future__ import annotations

import numpy as np

BLOCK = 32
LAYOUT = {2: ("Q4_0", 18), 3: ("Q4_1", 20), 6: ("Q5_0", 22), 7: ("Q5_1", 24), 8: ("Q8_0", 34), 12: ("Q4_K", 144),
          13: ("Q5_K", 176), 14: ("Q6_K", 210)}
"""ggml type id -> (name, bytes per block: 32 values, 256 for the K types)."""
SUPER = 256
K_TYPES = (12, 13, 14)
"""Q4_K, Q5_K, Q6_K: 256 values a super-block."""


SCALES = {2: (0,), 3: (0, 2), 6: (0,), 7: (0, 2), 8: (0,), 12: (0, 2), 13: (0, 2), 14: (208,)}
"""type -> byte offsets of its fp16 scales (d; Q4_1's and Q5_1's m; the K types' d and dmin, Q6_K's d)."""


def random_blocks(qtype: int, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """(rows, bytes per row) random blocks of `qtype` (for tests and benchmarks): random bytes,
    which are a valid block once its fp16 scales are finite (here 0.001 to 0.05)."""
    values, size = (SUPER if qtype in K_TYPES else BLOCK), LAYOUT[qtype][1]
    n = rows * cols // values
    b = rng.integers(0, 256, (n, size), dtype=np.uint8)
    for offset in SCALES[qtype]:
        b[:, offset : offset + 2] = rng.uniform(1e-3, 0.05, n).astype(np.float16).view(np.uint8).reshape(n, 2)
    return b.reshape(rows, -1)


def _half(b: np.ndarray) -> np.ndarray:
    return b.copy().view(np.float16).astype(np.float32)


def _k_scales(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K's / Q5_K's 12 scale bytes (..., 12) -> 6-bit scales and mins (..., 8) int32 (ggml's get_scale_min_k4)."""
    scales = scales.astype(np.int32)
    lo, hi, mix = scales[..., 0:4], scales[..., 4:8], scales[..., 8:12]
    sc = np.concatenate([lo & 63, (mix & 0x0F) | ((lo >> 6) << 4)], axis=-1)
    m = np.concatenate([hi & 63, (mix >> 4) | ((hi >> 6) << 4)], axis=-1)
    return sc, m


def _k_nibbles(qs: np.ndarray) -> np.ndarray:
    """A K super-block's 128 nibble bytes (n, 128) -> its 8 sub-blocks' quants (n, 8, 32) int32:
    sub-blocks 2j and 2j+1 are chunk j's low, then high nibbles."""
    chunks = qs.reshape(-1, 4, 32).astype(np.int32)
    return np.stack([chunks & 0x0F, chunks >> 4], axis=2).reshape(-1, 8, 32)


def _q4_k(b: np.ndarray) -> np.ndarray:
    """Q4_K super-blocks (n, 144) -> (n, 256): (d * sc) * q - dmin * m per 32-value sub-block."""
    d, dmin = _half(b[:, 0:2]), _half(b[:, 2:4])
    sc, m = (v.astype(np.float32) for v in _k_scales(b[:, 4:16]))
    q = _k_nibbles(b[:, 16:]).astype(np.float32)
    return ((d * sc)[..., None] * q - (dmin * m)[..., None]).reshape(-1, SUPER)


def _q5_k(b: np.ndarray) -> np.ndarray:
    """Q5_K super-blocks (n, 176) -> (n, 256): Q4_K's scales and nibbles, each
    quant's fifth bit in qh (32 bytes: sub-block s's bit s of byte l)."""
    d, dmin = _half(b[:, 0:2]), _half(b[:, 2:4])
    sc, m = (v.astype(np.float32) for v in _k_scales(b[:, 4:16]))
    q = _q5_k_quants(b).astype(np.float32)
    return ((d * sc)[..., None] * q - (dmin * m)[..., None]).reshape(-1, SUPER)


def _q5_k_quants(b: np.ndarray) -> np.ndarray:
    """Q5_K super-blocks (n, 176) -> their 8 sub-blocks' quants (n, 8, 32) int32, 0..31."""
    qh = b[:, 16:48]
    high = np.stack([(qh >> s) & 1 for s in range(8)], axis=1).astype(np.int32)  # (n, 8, 32)
    return _k_nibbles(b[:, 48:]) | (high << 4)


def _q5(qtype: int, b: np.ndarray) -> np.ndarray:
    """Q5_0 (22 bytes: d, qh, 16 nibble bytes; d * (q - 16)) and Q5_1 (24: d, m,
    qh, 16; d * q + m) blocks (n, size) -> (n, 32); value j's fifth bit is bit j of qh."""
    d, q = _half(b[:, 0:2]), _q5_quants(qtype, b)
    if qtype == 6:
        return d * (q - 16).astype(np.float32)
    return d * q.astype(np.float32) + _half(b[:, 2:4])


def _q5_quants(qtype: int, b: np.ndarray) -> np.ndarray:
    """Q5_0 / Q5_1 blocks (n, size) -> their quants (n, 32) int32, 0..31, in element order."""
    first = 4 if qtype == 7 else 2
    qh = np.ascontiguousarray(b[:, first : first + 4]).view("<u4").reshape(-1, 1)
    qs = b[:, first + 4 :]
    bits = ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int32)
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int32) | (bits << 4)


def _q6_k_quants(b: np.ndarray) -> np.ndarray:
    """Q6_K super-blocks (n, 210) -> their quants minus 32 (n, 256) int32, in element order."""
    ql, qh = b[:, :128], b[:, 128:192]
    q = np.empty((b.shape[0], 2, 4, 32), dtype=np.int32)
    for n in range(2):  # each 128 values: four 32-value quarters
        low, high = ql[:, 64 * n : 64 * n + 64].reshape(-1, 2, 32), qh[:, 32 * n : 32 * n + 32]
        for k in range(4):
            nibble = (low[:, k & 1] >> (4 * (k >> 1))) & 0x0F
            q[:, n, k] = (nibble | (((high >> (2 * k)) & 3) << 4)).astype(np.int32) - 32
    return q.reshape(-1, SUPER)


def _q6_k(b: np.ndarray) -> np.ndarray:
    """Q6_K super-blocks (n, 210) -> (n, 256): (d * sc) * (q - 32), one int8 scale per 16 values."""
    sc, d = b[:, 192:208].view(np.int8).astype(np.float32), _half(b[:, 208:210])
    return ((d * sc)[..., None] * _q6_k_quants(b).reshape(-1, 16, 16).astype(np.float32)).reshape(-1, SUPER)


def dequantize(qtype: int, blocks: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The (rows, cols) float32 values of `blocks` (rows x bytes per row, uint8)."""
    _, size = LAYOUT[qtype]
    if qtype in K_TYPES:
        b = np.asarray(blocks, dtype=np.uint8).reshape(rows * cols // SUPER, size)
        return {12: _q4_k, 13: _q5_k, 14: _q6_k}[qtype](b).reshape(rows, cols)
    b = np.asarray(blocks, dtype=np.uint8).reshape(rows * cols // BLOCK, size)
    if qtype in (6, 7):
        return _q5(qtype, b).reshape(rows, cols)
    d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
    if qtype == 8:  # Q8_0: d, 32 int8
        return (d * b[:, 2:].view(np.int8).astype(np.float32)).reshape(rows, cols)
    first = 4 if qtype == 3 else 2
    qs = b[:, first:]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int32)  # low nibbles are values 0-15
    if qtype == 2:  # Q4_0: d, 16 bytes; (q - 8) * d
        return (d * (nibbles - 8).astype(np.float32)).reshape(rows, cols)
    m = b[:, 2:4].copy().view(np.float16).astype(np.float32)  # Q4_1: d, m, 16 bytes; q * d + m
    return (d * nibbles.astype(np.float32) + m).reshape(rows, cols)


def matmul(qtype: int, blocks: np.ndarray, rows: int, cols: int, x: np.ndarray) -> np.ndarray:
    """x (T, cols) times the weights' transpose, in float64: (T, rows)."""
    return np.asarray(x, dtype=np.float64) @ dequantize(qtype, blocks, rows, cols).astype(np.float64).T


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Activations as the integer kernel quantizes them, per row and 32-value
    block: d = amax / 127, q = nearest-even(x * (127 / amax)), s = d * sum(q);
    the same float32 operations, so equal bit for bit."""
    x = np.asarray(x, dtype=np.float32)
    t, cols = x.shape
    xb = x.reshape(t, cols // BLOCK, BLOCK)
    amax = np.abs(xb).max(axis=-1)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(xb * inv[..., None]).astype(np.int8)
    d = (amax / np.float32(127)).astype(np.float32)
    s = (d * q.astype(np.int32).sum(axis=-1).astype(np.float32)).astype(np.float32)
    return q.reshape(t, cols), d, s


def matmul_q8(qtype: int, blocks: np.ndarray, rows: int, cols: int, x: np.ndarray) -> np.ndarray:
    """The integer kernel's product in float64: the quantized activations
    (q * d) times the weights' transpose (T, rows)."""
    q, d, _ = quantize_rows(x)
    t = q.shape[0]
    xs = (q.reshape(t, cols // BLOCK, BLOCK).astype(np.float64) * d[..., None].astype(np.float64)).reshape(t, cols)
    return xs @ dequantize(qtype, blocks, rows, cols).astype(np.float64).T


def _fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 fma(a, b, c), rounded once, as the hardware's: a * b is exact in
    float64; the sum's float64 rounding is made round-to-odd (its exact error
    by TwoSum decides), which then rounds to float32 correctly."""
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = c.astype(np.float64)
    s = p + c64
    back = s - p
    err = (p - (s - back)) + (c64 - back)
    even = (s.view(np.int64) & 1) == 0
    bump = (err != 0) & even  # the exact value lies between s and its neighbour toward err: take the odd one
    s = np.where(bump, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(np.float32)


def _integer_parts(qtype: int, blocks: np.ndarray, rows: int, cols: int):
    """Blocks of any type in LAYOUT as (quants int64 (rows, nb, 32) in element order,
    d float32 (rows, nb), offset per unit of s float32 (rows, nb) or None), per 32-block:
    Q4_K's and Q5_K's d is d * sc and their offset -(dmin * m); Q6_K's quants are q - 32 times
    their int8 scale."""
    if qtype in K_TYPES:
        b = np.asarray(blocks, dtype=np.uint8).reshape(rows * cols // SUPER, LAYOUT[qtype][1])
        if qtype == 14:
            sc = b[:, 192:208].view(np.int8).astype(np.int64)
            quants = _q6_k_quants(b).reshape(-1, 16, 16).astype(np.int64) * sc[..., None]
            d = np.repeat(_half(b[:, 208:210]), 8, axis=1)
            return quants.reshape(rows, -1, BLOCK), d.reshape(rows, -1), None
        sc, m = _k_scales(b[:, 4:16])
        d = _half(b[:, 0:2]) * sc.astype(np.float32)
        offset = -(_half(b[:, 2:4]) * m.astype(np.float32))
        quants = _k_nibbles(b[:, 16:]) if qtype == 12 else _q5_k_quants(b)
        return quants.astype(np.int64).reshape(rows, -1, BLOCK), d.reshape(rows, -1), offset.reshape(rows, -1)
    _, size = LAYOUT[qtype]
    b = np.asarray(blocks, dtype=np.uint8).reshape(rows, cols // BLOCK, size)
    d = _half(np.ascontiguousarray(b[..., 0:2])).reshape(rows, -1)
    if qtype == 8:
        return np.ascontiguousarray(b[..., 2:]).view(np.int8).astype(np.int64), d, None
    if qtype in (6, 7):  # Q5_0: d * (q - 16); Q5_1: d * q + m
        quants = _q5_quants(qtype, b.reshape(-1, size)).astype(np.int64).reshape(rows, -1, BLOCK)
        offset = np.float32(-16) * d if qtype == 6 else _half(np.ascontiguousarray(b[..., 2:4])).reshape(rows, -1)
        return quants, d, offset
    qs = b[..., 4 if qtype == 3 else 2:]
    quants = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.int64)
    offset = _half(np.ascontiguousarray(b[..., 2:4])).reshape(rows, -1) if qtype == 3 else np.float32(-8) * d
    return quants, d, offset


def matmul_q8_repacked(qtype: int, blocks: np.ndarray, rows: int, cols: int, x: np.ndarray) -> np.ndarray:
    """The repacked kernel's float32 result bit for bit (quant_repack.hpp), from
    the file's blocks: per output, over 32-blocks b ascending,
    acc = fma(f32(dw * dx), f32(integer dot), acc) and off = fma(offset, s, off);
    then acc + off (Q8_0, Q6_K: acc)."""
    q, dx, sx = quantize_rows(x)
    t = q.shape[0]
    wq, dw, offset = _integer_parts(qtype, blocks, rows, cols)
    dots = np.einsum("tbk,obk->tob", q.reshape(t, -1, BLOCK).astype(np.int64), wq).astype(np.float32)
    acc = np.zeros((t, rows), dtype=np.float32)
    off = np.zeros((t, rows), dtype=np.float32)
    for b in range(cols // BLOCK):
        acc = _fma32(dw[None, :, b] * dx[:, None, b], dots[..., b], acc)
        if offset is not None:
            off = _fma32(np.broadcast_to(offset[None, :, b], off.shape), np.broadcast_to(sx[:, None, b], off.shape), off)
    return acc if offset is None else acc + off
