"""TreeCache.open_all: the buffer addresses the fused layers write into,
kept between steps and read again when a buffer grows (racer_core/verify/kv_cache.py)."""

from __future__ import annotations

import pytest
import torch

from racer_core.verify.kv_cache import TreeCache

HEADS, DIM = 2, 4


def _expected(cache: TreeCache, n: int) -> list[tuple[int, int, int]]:
    out = []
    for layer in cache.layers:
        k, v = layer.open_rows(n, HEADS, DIM, torch.float32)
        out.append((k.data_ptr(), v.data_ptr(), k.stride(1)))
    return out


def test_addresses_are_each_layers_buffers_and_follow_a_growth() -> None:
    cache = TreeCache(3)
    first = cache.open_all(5, HEADS, DIM, torch.float32)
    assert [tuple(int(x) for x in row) for row in first] == _expected(cache, 5)
    cache.advance_all(5)
    assert cache.length == 5 and all(layer.length == 5 for layer in cache.layers)
    kept = cache.open_all(1, HEADS, DIM, torch.float32)
    assert kept is first  # no buffer moved: the same answer
    capacity = cache.layers[0]._k.shape[-2]
    grown = cache.open_all(capacity, HEADS, DIM, torch.float32)  # past the room: every buffer doubles
    assert cache.layers[0]._k.shape[-2] > capacity
    assert [tuple(int(x) for x in row) for row in grown] == _expected(cache, capacity)
    assert grown[0, 0] != first[0, 0]


def test_a_buffer_grown_elsewhere_is_read_again() -> None:
    cache = TreeCache(2)
    before = cache.open_all(1, HEADS, DIM, torch.float32).copy()
    layer = cache.layers[1]
    layer._reserve(4 * layer._k.shape[-2])  # this layer alone moves (as transformers' update() may)
    after = cache.open_all(1, HEADS, DIM, torch.float32)
    assert after[1, 0] == layer._k.data_ptr() != before[1, 0]
    assert after[0, 0] == before[0, 0]


def test_layers_of_different_lengths_are_refused() -> None:
    cache = TreeCache(2)
    cache.open_all(2, HEADS, DIM, torch.float32)
    cache.layers[0].advance(2)
    with pytest.raises(ValueError, match="different lengths"):
        cache.open_all(1, HEADS, DIM, torch.float32)


def test_a_cache_opened_in_one_dtype_is_not_handed_out_as_another() -> None:
    # a kernel told float32 would write rows twice as wide as a float16 buffer's
    cache = TreeCache(2)
    cache.open_all(2, HEADS, DIM, torch.float16)
    assert cache.layers[0]._k.dtype == torch.float16
    cache.advance_all(2)
    with pytest.raises(ValueError, match="holds torch.float16 rows, not torch.float32"):
        cache.open_all(1, HEADS, DIM, torch.float32)  # the kept addresses are not handed out either
    assert cache.open_all(1, HEADS, DIM, torch.float16).shape == (2, 3)


def test_keys_and_values_are_views_of_the_written_rows() -> None:
    cache = TreeCache(1)
    layer = cache.layers[0]
    assert layer.keys is None and layer.values is None
    k = torch.arange(2 * HEADS * 3 * DIM, dtype=torch.float32).reshape(2, HEADS, 3, DIM)[:1]
    keys, values = layer.update(k, k + 1)
    assert torch.equal(keys, k) and torch.equal(values, k + 1)
    assert torch.equal(layer.keys, k) and layer.keys.data_ptr() == layer._k.data_ptr()
    cache.truncate(2)
    assert layer.keys.shape[-2] == 2
    layer.keys = None  # transformers' base class clears them so; anything else is refused
    with pytest.raises(AttributeError):
        layer.values = k
