"""The batch-invariant attention kernel (racer_core/verify/attention.py):
a row's result is the same bits alone as inside any tree, any batch, any
thread count, on any of its code paths (portable, AVX2, 512-bit); and it is
attention (against a float64 reference, to a tolerance)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from racer_core.verify import attention
from racer_core.verify.attention import exact_attend

pytestmark = pytest.mark.skipif(attention._attention is None, reason="the attention extension is not built")

DTYPES = (torch.float32, torch.bfloat16)
TOLERANCE = {torch.float32: 2e-6, torch.bfloat16: 1e-2}


def reference(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: np.ndarray, scale: float) -> torch.Tensor:
    """Softmax attention in float64, each row over its visible keys."""
    heads, group = q.shape[1], q.shape[1] // keys.shape[1]
    k = keys.double().repeat_interleave(group, dim=1)[0]
    v = values.double().repeat_interleave(group, dim=1)[0]
    scores = torch.einsum("htd,hld->htl", q.double()[0], k) * scale
    scores = scores.masked_fill(~torch.from_numpy(visible)[None], float("-inf"))
    return torch.einsum("htl,hld->htd", scores.softmax(-1), v)[None].reshape(1, heads, -1, q.shape[-1])


def additive(visible: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    mask = torch.zeros((1, 1, *visible.shape), dtype=dtype)
    return mask.masked_fill_(~torch.from_numpy(visible), torch.finfo(dtype).min)


@st.composite
def problems(draw: st.DrawFn) -> tuple:
    kv_heads = draw(st.integers(1, 3))
    heads = kv_heads * draw(st.integers(1, 4))
    dim = draw(st.integers(1, 80))
    prefix = draw(st.integers(0, 70))
    rows = draw(st.integers(1, 12))
    # A tree: each node's parent comes before it (tree_attention's ancestor mask).
    parents = [-1] + [draw(st.integers(-1 if prefix else 0, i - 1)) for i in range(1, rows)]
    visible = np.zeros((rows, prefix + rows), dtype=bool)
    window = draw(st.one_of(st.none(), st.integers(1, 40)))  # a sliding window hides the far prefix
    for node in range(rows):
        start = 0 if window is None else max(0, prefix - window)
        visible[node, start:prefix] = True
        at = node
        while at >= 0:
            visible[node, prefix + at] = True
            at = parents[at]
    seed = draw(st.integers(0, 2**31 - 1))
    dtype = draw(st.sampled_from(DTYPES))
    return kv_heads, heads, dim, visible, seed, dtype


def tensors(kv_heads: int, heads: int, dim: int, visible: np.ndarray, seed: int, dtype: torch.dtype):
    gen = torch.Generator().manual_seed(seed)
    rows, length = visible.shape
    q = (torch.randn(1, heads, rows, dim, generator=gen) * 2).to(dtype)
    keys = (torch.randn(1, kv_heads, length, dim, generator=gen) * 2).to(dtype)
    values = torch.randn(1, kv_heads, length, dim, generator=gen).to(dtype)
    return q, keys, values


def row_alone(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: np.ndarray, row: int,
              scale: float, threads: int | None = None) -> torch.Tensor:
    """What plain decoding has for `row`'s token: its visible keys, in order, packed in a cache of their own."""
    seen = torch.from_numpy(np.flatnonzero(visible[row]))
    return exact_attend(q[:, :, row : row + 1], keys[:, :, seen], values[:, :, seen],
                        torch.zeros((1, 1, 1, len(seen)), dtype=q.dtype), scale, threads=threads)


def on_every_path(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                  scale: float) -> torch.Tensor:
    """The call on one thread, checked equal bit for bit on the portable path, the AVX2 path where the
    512-bit one would run, and on 2, 3 and 8 threads."""
    one = exact_attend(q, keys, values, mask, scale, threads=1)
    assert torch.equal(one, exact_attend(q, keys, values, mask, scale, threads=1, portable=True))
    assert torch.equal(one, exact_attend(q, keys, values, mask, scale, threads=1, wide=False))
    for threads in (2, 3, 8):
        assert torch.equal(one, exact_attend(q, keys, values, mask, scale, threads=threads)), threads
        assert torch.equal(one, exact_attend(q, keys, values, mask, scale, threads=threads, portable=True))
        assert torch.equal(one, exact_attend(q, keys, values, mask, scale, threads=threads, wide=False))
    return one


def assert_attention(got: torch.Tensor, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                     visible: np.ndarray, scale: float) -> None:
    """`got` is attention: the float64 reference's, within the dtype's tolerance."""
    want = reference(q, keys, values, visible, scale)
    assert (got.double() - want).abs().max() <= TOLERANCE[got.dtype] * max(1.0, want.abs().max().item())


@settings(max_examples=150, deadline=None)
@given(problems())
def test_a_row_alone_equals_the_row_in_its_tree(problem: tuple) -> None:
    kv_heads, heads, dim, visible, seed, dtype = problem
    q, keys, values = tensors(kv_heads, heads, dim, visible, seed, dtype)
    scale = dim**-0.5
    together = exact_attend(q, keys, values, additive(visible, dtype), scale)
    for row in range(visible.shape[0]):
        assert torch.equal(row_alone(q, keys, values, visible, row, scale), together[:, :, row : row + 1]), row
    assert_attention(together, q, keys, values, visible, scale)


@settings(max_examples=40, deadline=None)
@given(problems())
def test_portable_path_and_thread_counts_give_the_same_bits(problem: tuple) -> None:
    kv_heads, heads, dim, visible, seed, dtype = problem
    q, keys, values = tensors(kv_heads, heads, dim, visible, seed, dtype)
    mask = additive(visible, dtype)
    first = exact_attend(q, keys, values, mask, 0.3, threads=1)
    assert torch.equal(first, exact_attend(q, keys, values, mask, 0.3, threads=1, portable=True))
    assert torch.equal(first, exact_attend(q, keys, values, mask, 0.3, threads=4))
    assert torch.equal(first, exact_attend(q, keys, values, mask, 0.3, threads=1, wide=False))
    assert torch.equal(first, exact_attend(q, keys, values, mask, 0.3, threads=4, wide=True))


@settings(max_examples=60, deadline=None)
@given(problems(), st.sampled_from([torch.float32, torch.float16]), st.integers(0, 600))
def test_the_512_bit_path_gives_the_avx2_paths_bits(problem: tuple, cache: torch.dtype, more: int) -> None:
    """Longer prefixes and any width (the 512-bit path's 8-key, 16-output steps and what they leave
    over), a float32 or float16 cache: its bits are the AVX2 path's and the portable one's."""
    kv_heads, heads, dim, visible, seed, _ = problem
    visible = np.concatenate([np.ones((visible.shape[0], more), dtype=bool), visible], axis=1)
    q, keys, values = tensors(kv_heads, heads, dim, visible, seed, torch.float32)
    keys, values = keys.to(cache), values.to(cache)
    mask = additive(visible, torch.float32)
    for threads in (1, 2):
        wide = exact_attend(q, keys, values, mask, 0.3, threads=threads, wide=True)
        assert torch.equal(wide, exact_attend(q, keys, values, mask, 0.3, threads=threads, wide=False)), threads
        assert torch.equal(wide, exact_attend(q, keys, values, mask, 0.3, threads=threads, portable=True)), threads


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="reads the CPU's flags from /proc/cpuinfo")
def test_the_512_bit_path_runs_where_the_cpu_has_it_unless_kept_to_avx2(monkeypatch: pytest.MonkeyPatch) -> None:
    flags = Path("/proc/cpuinfo").read_text().split()
    vector = "avx2" if attention._attention.avx2_available() else "portable"
    assert attention._attention.path_for(False, True) == ("avx512" if vector == "avx2" and "avx512f" in flags
                                                           else vector)
    assert attention._attention.path_for(False, False) == vector
    assert attention._attention.path_for(True, True) == "portable"
    monkeypatch.delenv(attention.ISA_ENV, raising=False)
    assert attention.wide_allowed()
    monkeypatch.setenv(attention.ISA_ENV, "avx2")  # what --isa avx2 sets (racer_core/budget/cpu_class.py)
    assert not attention.wide_allowed()


@pytest.mark.parametrize("dtype", DTYPES)
def test_threads_split_a_large_call_without_changing_a_bit(dtype: torch.dtype) -> None:
    # large enough that the kernel hands items to its worker threads
    visible = np.ones((16, 600), dtype=bool)
    visible[:, 584:] = np.tril(np.ones((16, 16), dtype=bool))
    q, keys, values = tensors(2, 8, 128, visible, 1, dtype)
    mask = additive(visible, dtype)
    one = exact_attend(q, keys, values, mask, 0.1, threads=1)
    for threads in (2, 3, 8):
        assert torch.equal(one, exact_attend(q, keys, values, mask, 0.1, threads=threads)), threads


@pytest.mark.parametrize("kv_heads, heads, dim, length", [(3, 9, 64, 600), (2, 8, 128, 300), (4, 4, 64, 700),
                                                          (1, 2, 32, 1500), (2, 10, 64, 999)])
@pytest.mark.parametrize("shape", ["all", "window", "scattered"])
def test_one_row_shares_its_keys_and_outputs_among_threads_without_changing_a_bit(kv_heads, heads, dim, length,
                                                                                  shape) -> None:
    # One query row over enough keys splits its scores by keys and its values by
    # outputs among the threads (attention_kernel.cpp, one_row_split); one thread
    # computes it whole, and the same row inside a tree goes by run()'s items.
    visible = np.ones((1, length), dtype=bool)
    if shape == "window":
        visible[0, : length // 3] = False
    elif shape == "scattered":
        visible[0] = np.random.default_rng(length).random(length) < 0.7
    q, keys, values = tensors(kv_heads, heads, dim, visible, 3, torch.float32)
    one = on_every_path(q, keys, values, additive(visible, torch.float32), dim**-0.5)
    # the row inside a tree of three (its own key last, two siblings after it)
    tree = np.zeros((3, length + 2), dtype=bool)
    tree[:, :length] = visible
    tree[1, length] = tree[2, length + 1] = True
    q3 = torch.cat([q, torch.randn(1, heads, 2, dim)], dim=2)
    k3 = torch.cat([keys, torch.randn(1, kv_heads, 2, dim)], dim=2)
    v3 = torch.cat([values, torch.randn(1, kv_heads, 2, dim)], dim=2)
    together = exact_attend(q3, k3, v3, additive(tree, torch.float32), dim**-0.5, threads=2)
    assert torch.equal(one, together[:, :, :1])
    assert_attention(one, q, keys, values, visible, dim**-0.5)


@pytest.mark.parametrize("kv_heads, heads, dim, length", [(3, 9, 64, 600), (2, 8, 128, 300), (1, 2, 32, 1500)])
@pytest.mark.parametrize("shape", ["all", "window", "scattered"])
@pytest.mark.parametrize("rows", [2, 5, 16, 17])
def test_a_trees_rows_over_a_cache_equal_themselves_alone_whatever_the_threads(kv_heads, heads, dim, length, shape,
                                                                               rows) -> None:
    # A tree's rows over a cache (whole, windowed, scattered) go by run()'s
    # items, split among the threads by key/value head and share of the rows;
    # every row equals itself alone, which one_row_split computes on 2 threads.
    rng = np.random.default_rng(length + rows)
    prefix = np.ones(length, dtype=bool)
    if shape == "window":
        prefix[: length // 3] = False
    elif shape == "scattered":
        prefix = rng.random(length) < 0.7
    parents = [-1] + [int(rng.integers(-1, i)) for i in range(1, rows)]
    visible = np.zeros((rows, length + rows), dtype=bool)
    for node in range(rows):
        visible[node, :length] = prefix
        at = node
        while at >= 0:
            visible[node, length + at] = True
            at = parents[at]
    q, keys, values = tensors(kv_heads, heads, dim, visible, 5, torch.float32)
    one = on_every_path(q, keys, values, additive(visible, torch.float32), dim**-0.5)
    for row in range(rows):
        assert torch.equal(row_alone(q, keys, values, visible, row, dim**-0.5, threads=2), one[:, :, row : row + 1]), row
    assert_attention(one, q, keys, values, visible, dim**-0.5)


@settings(max_examples=60, deadline=None)
@given(problems())
def test_a_float16_cache_gives_the_bits_of_its_values_widened(problem: tuple) -> None:
    # A float16 cache (the fused layers' default) is read by widening each
    # value exactly: the call equals the float32 call on the widened cache,
    # on every path and thread count, and a row still equals itself alone.
    kv_heads, heads, dim, visible, seed, _ = problem
    q, keys, values = tensors(kv_heads, heads, dim, visible, seed, torch.float32)
    k16, v16 = keys.half(), values.half()
    mask = additive(visible, torch.float32)
    got = on_every_path(q, k16, v16, mask, 0.3)
    assert torch.equal(got, exact_attend(q, k16.float(), v16.float(), mask, 0.3, threads=1))
    for row in range(visible.shape[0]):
        assert torch.equal(row_alone(q, k16, v16, visible, row, 0.3), got[:, :, row : row + 1]), row


@pytest.mark.parametrize("kv_heads, heads, dim, length", [(3, 9, 64, 600), (2, 8, 128, 300), (1, 2, 32, 1500)])
@pytest.mark.parametrize("rows", [1, 3, 17])
def test_a_float16_cache_over_many_keys_splits_among_threads_without_changing_a_bit(kv_heads, heads, dim, length,
                                                                                   rows) -> None:
    # one row over many keys goes by one_row_split, reading float16 directly;
    # tree rows go by run()'s items, widening each block of keys
    visible = np.ones((rows, length + rows), dtype=bool)
    visible[:, length:] = np.tril(np.ones((rows, rows), dtype=bool))
    q, keys, values = tensors(kv_heads, heads, dim, visible, 7, torch.float32)
    k16, v16 = keys.half(), values.half()
    got = on_every_path(q, k16, v16, additive(visible, torch.float32), dim**-0.5)
    assert torch.equal(got, exact_attend(q, k16.float(), v16.float(), additive(visible, torch.float32), dim**-0.5))
    for row in range(rows):
        assert torch.equal(row_alone(q, k16, v16, visible, row, dim**-0.5, threads=2), got[:, :, row : row + 1])
    assert_attention(got, q, k16.float(), v16.float(), visible, dim**-0.5)


def test_a_float16_cache_takes_float32_queries_only() -> None:
    q = torch.randn(1, 2, 1, 8).bfloat16()
    keys = torch.randn(1, 1, 4, 8).half()
    with pytest.raises(ValueError, match="dtypes") as error:
        exact_attend(q, keys, keys, torch.zeros(1, 1, 1, 4), 0.5)
    assert "\n" not in str(error.value)
    # attend() falls back to SDPA for what the kernel does not take, as before
    assert not attention._kernel_dtypes(torch.bfloat16, torch.float16, torch.float16)
    assert attention._kernel_dtypes(torch.float32, torch.float16, torch.float16)


def test_strided_inputs_as_the_lean_forward_hands_them() -> None:
    # q transposed from (T, heads, D), keys a prefix view of a larger cache buffer
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(1, 5, 6, 16, generator=gen).transpose(1, 2)
    buffer = torch.randn(1, 2, 64, 16, generator=gen)
    keys, values = buffer[:, :, :30], buffer.flip(2)[:, :, :30]
    visible = np.ones((5, 30), dtype=bool)
    visible[:, 25:] = np.tril(np.ones((5, 5), dtype=bool))
    got = exact_attend(q, keys, values, additive(visible, torch.float32), 0.25)
    assert torch.equal(got, exact_attend(q.contiguous(), keys.contiguous(), values.contiguous(),
                                         additive(visible, torch.float32), 0.25))
    assert (got.double() - reference(q, keys, values, visible, 0.25)).abs().max() < 1e-5


def test_attend_takes_the_kernel_and_falls_back_to_sdpa(monkeypatch) -> None:
    gen = torch.Generator().manual_seed(3)
    q, keys, values = torch.randn(1, 2, 3, 8, generator=gen), torch.randn(1, 2, 7, 8, generator=gen), torch.randn(1, 2, 7, 8, generator=gen)
    visible = np.ones((3, 7), dtype=bool)
    visible[:, 4:] = np.tril(np.ones((3, 3), dtype=bool))
    mask = additive(visible, torch.float32)
    assert torch.equal(attention.attend(q, keys, values, mask, 0.5), exact_attend(q, keys, values, mask, 0.5))
    monkeypatch.setenv(attention.DISABLE_ENV, "0")
    sdpa = attention.attend(q, keys, values, mask, 0.5)
    assert (sdpa.double() - reference(q, keys, values, visible, 0.5)).abs().max() < 1e-5
    assert not attention.exact_available(torch.float32)
    assert not attention.exact_available(torch.float16)


def test_bad_shapes_are_refused_in_one_line() -> None:
    q, keys = torch.zeros(1, 3, 2, 8), torch.zeros(1, 2, 5, 8)
    with pytest.raises(ValueError, match="not a multiple"):
        exact_attend(q, keys, keys, torch.zeros(1, 1, 2, 5), 1.0)
    with pytest.raises(ValueError, match="mask"):
        exact_attend(torch.zeros(1, 2, 2, 8), keys, keys, torch.zeros(1, 1, 2, 4), 1.0)
