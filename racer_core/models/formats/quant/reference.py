"""The kernel's reference in numpy: ggml's block layouts dequantized in the
same float32 operations, and the product in float64 (the kernel's float32
sums lie within a few ulps of it)."""

from __future__ import annotations

import numpy as np

BLOCK = 32
LAYOUT = {2: ("Q4_0", 18), 3: ("Q4_1", 20), 8: ("Q8_0", 34)}
"""ggml type id -> (name, bytes per 32-value block)."""


def dequantize(qtype: int, blocks: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The (rows, cols) float32 values of `blocks` (rows x bytes per row, uint8)."""
    _, size = LAYOUT[qtype]
    b = np.asarray(blocks, dtype=np.uint8).reshape(rows * cols // BLOCK, size)
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
