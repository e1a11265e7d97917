"""The repacked block layout the integer kernel reads fastest (quant_repack.hpp):
each eight rows' blocks interleaved, so one vector holds a 32-block's dot
product for eight rows and one multiply-add scales them all.

Only bytes move: a (rows, bytes per row) array stays the same size, and
`unpack` gives back the file's blocks exactly. A block (a K type's 256-value
super-block) is cut into fields, each of pieces of `unit` bytes; per group of
eight rows and block, each field in turn holds its pieces in order, piece i
of the eight rows side by side (row order). Q4_0 / Q4_1 / Q8_0: the eight fp16
d, Q4_1's eight m, then the quants in 32-byte chunks, chunk c holding bytes
4c..4c+3 of each row's quant bytes. Q4_K: eight d, eight dmin, the 12 bytes of
6-bit scales and mins byte by byte (byte i of the eight rows together), the 128
nibble bytes in 4-byte pieces. Q5_K: Q4_K's fields in Q4_K's order, then its
32 bytes of fifth bits in 4-byte pieces (so a Q5_K group block begins as a
Q4_K one). Q5_0 / Q5_1: eight d, Q5_1's eight m, the eight rows' 4-byte qh
(their fifth bits) side by side, then the nibbles as Q4_0's. Q6_K: its 128
low-nibble bytes and 64 bytes of high bit pairs in 4-byte pieces, its 16 int8
scales byte by byte, eight d.
"""

from __future__ import annotations

import numpy as np

Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K = 2, 3, 6, 7, 8, 12, 13, 14
REPACKED = 0x100
"""Added to a type id: the blocks are repacked (the kernel's type id for them)."""
GROUP = 8
FIELDS = {
    Q4_0: (18, ((0, 2, 2), (2, 16, 4))),
    Q4_1: (20, ((0, 2, 2), (2, 2, 2), (4, 16, 4))),
    Q5_0: (22, ((0, 2, 2), (2, 4, 4), (6, 16, 4))),
    Q5_1: (24, ((0, 2, 2), (2, 2, 2), (4, 4, 4), (8, 16, 4))),
    Q8_0: (34, ((0, 2, 2), (2, 32, 4))),
    Q4_K: (144, ((0, 2, 2), (2, 2, 2), (4, 12, 1), (16, 128, 4))),
    Q5_K: (176, ((0, 2, 2), (2, 2, 2), (4, 12, 1), (48, 128, 4), (16, 32, 4))),
    Q6_K: (210, ((0, 128, 4), (128, 64, 4), (192, 16, 1), (208, 2, 2))),
}
"""type -> (bytes per block, its fields as (start, length, unit) in the file's block, in repacked order)."""
FIELD_TABLES = {qtype: np.asarray(fields, dtype=np.int64) for qtype, (_, fields) in FIELDS.items()}
"""type -> its FIELDS as an int64 (n, 3) array, as _quant.unpack_rows reads them."""


def repackable(qtype: int, rows: int) -> bool:
    """Whether a (rows, ...) matrix of `qtype` can be repacked (a supported type, whole groups of eight)."""
    return qtype in FIELDS and rows > 0 and rows % GROUP == 0


def _split(qtype: int, rows: int, row_bytes: int) -> tuple[int, int, int]:
    size = FIELDS[qtype][0] if qtype in FIELDS else 0
    if not repackable(qtype, rows) or row_bytes % size:
        raise ValueError(f"({rows}, {row_bytes}) bytes of type {qtype} cannot be repacked")
    return rows // GROUP, row_bytes // size, size


def repack(qtype: int, blocks: np.ndarray) -> np.ndarray:
    """The file's (rows, bytes per row) blocks in the repacked layout (a new array, same shape)."""
    rows, row_bytes = blocks.shape
    groups, nb, size = _split(qtype, rows, row_bytes)
    b = np.ascontiguousarray(blocks, dtype=np.uint8).reshape(groups, GROUP, nb, size)
    out = np.empty((groups, nb, GROUP * size), dtype=np.uint8)
    first = 0
    for start, length, unit in FIELDS[qtype][1]:
        # Each piece moved whole through a void view (a load repacks every linear:
        # 5-7x faster than byte by byte). (g, 8, nb, piece) -> (g, nb, piece, 8).
        kind = np.dtype(f"V{unit}")
        into = out[..., GROUP * first : GROUP * (first + length)].view(kind).reshape(groups, nb, length // unit, GROUP)
        into[...] = b[..., start : start + length].view(kind).transpose(0, 2, 3, 1)
        first += length
    return out.reshape(rows, row_bytes)


def unpack(qtype: int, packed: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """The file's blocks back from repacked ones: all rows, or the rows `rows` (an index array) in its order."""
    total, row_bytes = packed.shape
    groups, nb, size = _split(qtype, total, row_bytes)
    p = np.asarray(packed, dtype=np.uint8).reshape(groups, nb, GROUP * size)
    if rows is None:
        rows = np.arange(total)
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    n, g, lane = rows.shape[0], rows // GROUP, rows % GROUP
    picked = p[g]  # (n, nb, 8 * size): each wanted row's group
    out = np.empty((n, nb, size), dtype=np.uint8)
    at = np.arange(n)
    first = 0
    for start, length, unit in FIELDS[qtype][1]:
        field = picked[:, :, GROUP * first : GROUP * (first + length)].reshape(n, nb, length // unit, GROUP, unit)
        out[..., start : start + length] = field[at, :, :, lane].reshape(n, nb, length)
        first += length
    return out.reshape(n, row_bytes)
