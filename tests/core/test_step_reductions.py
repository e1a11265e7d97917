"""The per-step reductions over a row of the vocabulary that the engine loop
takes through numpy on the CPU give torch's results bit for bit: the greedy
choice (the first index of the maximum) and the top two logits of the tie margins."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from racer_core.verify.near_tie import tie_margins, top_two  # noqa: E402
from racer_core.verify.sampling import greedy_choices  # noqa: E402


def rows_with_ties(dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(7)
    rows = torch.randn(6, 4099, generator=generator).to(dtype)
    rows[1, 10] = rows[1, 3000] = rows[1].max() + 1  # a tied maximum: the first index, twice the value
    rows[2, :] = 0.5  # all equal
    rows[3, -1] = rows[3].max() + 2  # the maximum last
    rows[4, 0] = rows[4].max() + 2  # and first
    rows[5, 7] = rows[5].max() + 1e-3  # a near tie
    rows[5, 8] = rows[5, 7] - (1e-3 if dtype == torch.float32 else 0.0)
    return rows


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_numpy_reductions_equal_torchs(dtype) -> None:
    rows = rows_with_ties(dtype)
    assert greedy_choices(rows) == rows.float().argmax(dim=-1).tolist()
    assert greedy_choices(rows)[1] == 10 and greedy_choices(rows)[2] == 0
    assert torch.equal(torch.from_numpy(top_two(rows)), rows.topk(2, dim=-1).values.float())
    assert top_two(rows[1:3]).tolist() == [[rows[1, 10].item()] * 2, [0.5, 0.5]]
    # the tie margins, once computed from torch's topk (the formula of near_tie.tie_margins)
    eps = torch.finfo(dtype).eps
    top = rows.topk(2, dim=-1).values.float()
    _, exponent = top[:, 0].abs().frexp()
    ulp = (exponent.float() - 1).exp2() * eps
    expected = [round(g, 2) for g in ((top[:, 0] - top[:, 1]) / ulp).clamp(max=1000.0).tolist()]
    assert tie_margins(rows, eps) == expected


def test_a_column_of_a_larger_tensor_is_read_where_it_lies() -> None:
    # the decoder hands over views (the tree's rows, a path's rows): strides are honoured
    wide = rows_with_ties(torch.float32)
    view = wide[::2, 1:]
    assert greedy_choices(view) == view.argmax(dim=-1).tolist()
    assert torch.equal(torch.from_numpy(top_two(view)), view.topk(2, dim=-1).values)


def test_top_two_hides_one_occurrence_of_the_maximum_on_any_row() -> None:
    # the reference: the row copied with its first maximum hidden (top_two's way
    # before it read the slices either side), NaN and infinities included
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    values = np.array([0.5, 1.0, -1.0, 2.0, np.nan, np.inf, -np.inf], dtype=np.float32)
    for _ in range(2000):
        rows = rng.choice(values, size=(int(rng.integers(1, 5)), int(rng.integers(1, 9))))
        every = np.arange(len(rows))
        at = rows.argmax(axis=-1)
        rest = rows.copy()
        rest[every, at] = -np.inf
        want = np.stack([rows[every, at], rest.max(axis=-1)], axis=1)
        assert np.array_equal(top_two(torch.from_numpy(rows)), want, equal_nan=True), rows
