"""Row counts at which fbgemm's float16-weight kernels give every row one summation order.

fbgemm multiplies a call's rows in groups, each group by a kernel made for
its size (1 to 6 rows with the AVX2 kernels, 1 to 14 with AVX-512's; a
table in fbgemm splits n rows into groups). The AVX2 kernels for groups of
one and two rows sum in other orders than those for 3 to 6, so a token's
row alone (plain decoding: one row) gets other last bits than beside others
(a tree), and so do some rows of 2, 7 (5 + 2), 14, 31, 32, ... rows. A call
padded with zero rows to a count made of large groups only ("even") gives
every row the one order of those kernels, whatever is beside it; rows do not
mix, so padding changes no other row's bits. Which counts are even is found
by a probe on this process's kernels, not copied from fbgemm's table: on
AVX-512 every count is even and nothing is padded (docs/design.md, "Bit-exact
verification").
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)

PROBE_ROWS = 64
"""Counts the probe covers; a larger call goes in chunks of the largest even count."""

Multiply = Callable[[torch.Tensor], torch.Tensor]
"""(rows, in) -> (rows, out)"""


@dataclass(frozen=True)
class RowCounts:
    """`padded[n]`: how many rows to hand the kernels for n rows (n itself where even;
    empty where every count is); `chunk`: the largest even count, for calls of more
    rows; `exact`: whether every row then gets the same bits alone as beside others
    (False where no count is even)."""

    padded: tuple[int, ...]
    chunk: int
    exact: bool

    def multiply(self, multiply: Multiply, x: torch.Tensor) -> torch.Tensor:
        """`multiply(x)` for x of shape (rows, in), each row through the even kernels."""
        rows = x.shape[0]
        if not self.padded:
            return multiply(x)
        if rows > self.chunk:
            return torch.cat([self.multiply(multiply, x[i : i + self.chunk]) for i in range(0, rows, self.chunk)])
        extra = self.padded[rows] - rows
        if extra == 0:
            return multiply(x)
        return multiply(torch.cat([x, x.new_zeros(extra, x.shape[1])]))[:rows]


ALL_EVEN = RowCounts((), PROBE_ROWS, exact=True)


def find_row_counts(multiply: Multiply, width: int = 320) -> RowCounts:
    """Probe `multiply` with 1 to PROBE_ROWS copies of one row: the bits most
    placements give are the large kernels' ("reference"), and a count is even
    where all its rows get them."""
    row = torch.randn(1, width, generator=torch.Generator().manual_seed(7))
    results = [multiply(row.expand(n, width).contiguous()) for n in range(1, PROBE_ROWS + 1)]
    bits = [[line.tobytes() for line in r.numpy()] for r in results]
    reference = Counter(b for rows in bits for b in rows).most_common(1)[0][0]
    even = [n for n, rows in enumerate(bits, start=1) if all(b == reference for b in rows)]
    if len(even) == PROBE_ROWS:
        return ALL_EVEN
    if not even:
        return RowCounts((), PROBE_ROWS, exact=False)
    chunk = even[-1]
    padded = tuple(0 if n == 0 else min(e for e in even if e >= n) for n in range(chunk + 1))
    return RowCounts(padded, chunk, exact=True)


@functools.cache
def row_counts() -> RowCounts:
    """This process's counts for fbgemm's fp16 kernels (its ISA is fixed when torch loads)."""
    gen = torch.Generator().manual_seed(8)
    packed = torch.ops.quantized.linear_prepack_fp16(torch.randn(48, 320, generator=gen), None)
    counts = find_row_counts(lambda x: torch.ops.quantized.linear_dynamic_fp16(x, packed))
    if not counts.exact:
        log.warning("fp16 weights: no row count gives every row one summation order here; a tree row may "
                    "differ from plain decoding in the last bits (greedy racer equals ar up to near-ties)")
    return counts
