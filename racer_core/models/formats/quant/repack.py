"""The repacked block layout the integer kernel reads fastest (quant_repack.hpp):
each eight rows' blocks interleaved, so one vector holds a 32-block's dot
product for eight rows and one multiply-add scales them all.

Only bytes move: a (rows, bytes per row) array stays the same size, and
`unpack` gives back the file's blocks exactly. Per group of eight rows and
32-block b: the eight rows' fp16 d, Q4_1's eight fp16 m, then 32-byte chunks,
chunk c holding bytes 4c..4c+3 of each row's quant bytes in row order.
"""

from __future__ import annotations

import numpy as np

Q4_0, Q4_1, Q8_0 = 2, 3, 8
REPACKED = 0x100
"""Added to a type id: the blocks are repacked (the kernel's type id for them)."""
GROUP = 8
_LAYOUT = {Q4_0: (18, 2), Q4_1: (20, 4), Q8_0: (34, 2)}
"""type -> (bytes per block, bytes of scales before the quants)."""


def repackable(qtype: int, rows: int) -> bool:
    """Whether a (rows, ...) matrix of `qtype` can be repacked (a supported type, whole groups of eight)."""
    return qtype in _LAYOUT and rows > 0 and rows % GROUP == 0


def _split(qtype: int, rows: int, row_bytes: int) -> tuple[int, int, int, int]:
    size, head = _LAYOUT.get(qtype, (0, 0))
    if not repackable(qtype, rows) or row_bytes % size:
        raise ValueError(f"({rows}, {row_bytes}) bytes of type {qtype} cannot be repacked")
    return rows // GROUP, row_bytes // size, size, head


def repack(qtype: int, blocks: np.ndarray) -> np.ndarray:
    """The file's (rows, bytes per row) blocks in the repacked layout (a new array, same shape)."""
    rows, row_bytes = blocks.shape
    groups, nb, size, head = _split(qtype, rows, row_bytes)
    b = np.ascontiguousarray(blocks, dtype=np.uint8).reshape(groups, GROUP, nb, size)
    out = np.empty((groups, nb, GROUP * size), dtype=np.uint8)
    # One field of the blocks at a time (a 2-byte scale, a 4-byte chunk of quants) for the eight rows, moved
    # whole through numpy's void views: 5-7x faster than byte by byte, and a load repacks every linear.
    # A field at byte `at` of a block lands at GROUP * at of its group's block: each field before it is 8x wider.
    for at, width in [(at, 2) for at in range(0, head, 2)] + [(at, 4) for at in range(head, size, 4)]:
        field = np.dtype(f"V{width}")
        moved = b[..., at : at + width].view(field)[..., 0].transpose(0, 2, 1)  # (g, nb, 8)
        out[..., GROUP * at : GROUP * (at + width)].view(field)[...] = moved
    return out.reshape(rows, row_bytes)


def unpack(qtype: int, packed: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """The file's blocks back from repacked ones: all rows, or the rows `rows` (an index array) in its order."""
    total, row_bytes = packed.shape
    groups, nb, size, head = _split(qtype, total, row_bytes)
    p = np.asarray(packed, dtype=np.uint8).reshape(groups, nb, GROUP * size)
    if rows is None:
        rows = np.arange(total)
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    g, lane = rows // GROUP, rows % GROUP
    picked = p[g]  # (n, nb, 8 * size): each wanted row's group
    out = np.empty((rows.shape[0], nb, size), dtype=np.uint8)
    at = np.arange(rows.shape[0])
    out[..., 0:2] = picked[:, :, 0:16].reshape(rows.shape[0], nb, GROUP, 2)[at, :, lane]
    if qtype == Q4_1:
        out[..., 2:4] = picked[:, :, 16:32].reshape(rows.shape[0], nb, GROUP, 2)[at, :, lane]
    n, chunks = rows.shape[0], (size - head) // 4
    quants = picked[:, :, GROUP * head:].reshape(n, nb, chunks, GROUP, 4)  # (n, nb, chunk, row, 4)
    out[..., head:] = quants[at, :, :, lane].reshape(n, nb, size - head)
    return out.reshape(rows.shape[0], row_bytes)
