"""Row counts for fbgemm's fp16 kernels (half_rows.py): the probe finds the
counts whose rows all take the large kernels, and a padded call gives every
row the bits it gets anywhere else. On a kernel made like fbgemm's AVX2 one
(groups by row count, the small groups summing in another order), so this
holds on any CPU; the real kernel is tested in test_half_weights.py."""

from __future__ import annotations

import torch

from racer_core.models.formats.half_rows import ALL_EVEN, PROBE_ROWS, RowCounts, find_row_counts

WEIGHT = torch.randn(5, 24, generator=torch.Generator().manual_seed(3))


def _sum_in_order(x: torch.Tensor, order: range) -> torch.Tensor:
    """x @ WEIGHT.T summed over the inputs in `order`, elementwise: each row on its own."""
    out = torch.zeros(x.shape[0], WEIGHT.shape[0])
    for j in order:
        out = out + x[:, j : j + 1] * WEIGHT[:, j]
    return out


def grouped_kernel(x: torch.Tensor) -> torch.Tensor:
    """Groups of 6 rows and the rest; a rest of 1 or 2 rows sums backwards (fbgemm's AVX2 kernels
    for 1 and 2 rows sum in another order than those for 3 to 6)."""
    rows, width = x.shape
    rest = rows % 6
    small = rest if rest in (1, 2) else 0
    body = _sum_in_order(x[: rows - small], range(width))
    tail = _sum_in_order(x[rows - small :], range(width - 1, -1, -1))
    return torch.cat([body, tail])


def test_the_probe_pads_the_counts_whose_rows_take_a_small_kernel() -> None:
    counts = find_row_counts(grouped_kernel, width=24)
    assert counts.exact
    odd = [n for n in range(1, counts.chunk + 1) if counts.padded[n] != n]
    assert odd == [n for n in range(1, counts.chunk + 1) if n % 6 in (1, 2)]
    assert (counts.padded[1], counts.padded[2], counts.padded[7]) == (3, 3, 9)
    assert counts.chunk == max(n for n in range(PROBE_ROWS + 1) if n % 6 not in (1, 2))


def test_a_padded_call_gives_every_row_its_bits_alone_and_beside_others() -> None:
    counts = find_row_counts(grouped_kernel, width=24)
    x = torch.randn(2 * PROBE_ROWS + 7, 24, generator=torch.Generator().manual_seed(4))  # chunks, and a rest
    alone = torch.cat([counts.multiply(grouped_kernel, x[i : i + 1]) for i in range(len(x))])
    assert not torch.equal(grouped_kernel(x[:1]), alone[:1])  # unpadded, a lone row sums in the other order
    for rows in (1, 2, 3, 7, 14, 31, 32, PROBE_ROWS, PROBE_ROWS + 1, len(x)):
        assert torch.equal(counts.multiply(grouped_kernel, x[:rows]), alone[:rows]), rows


def test_where_every_count_is_even_nothing_is_padded() -> None:
    counts = find_row_counts(lambda x: _sum_in_order(x, range(x.shape[1])), width=24)
    assert counts is ALL_EVEN and counts.exact and not counts.padded


def test_where_no_count_is_even_it_says_so() -> None:
    def last_row_backwards(x: torch.Tensor) -> torch.Tensor:  # whatever the count, one row in another order
        width = x.shape[1]
        return torch.cat([_sum_in_order(x[:-1], range(width)), _sum_in_order(x[-1:], range(width - 1, -1, -1))])

    assert find_row_counts(last_row_backwards, width=24) == RowCounts((), PROBE_ROWS, exact=False)
