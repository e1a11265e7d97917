"""A key/value cache for tree verification on stock transformers models.

Each layer keeps preallocated buffers that grow by doubling, so appending a
tree is an in-place copy instead of the `torch.cat` of the whole cache that
transformers' DynamicCache does every step. After verification `commit`
keeps the cached prefix plus the accepted tree rows, in path order.

The classes here do not import transformers: the lean forward (lean_forward.py)
uses them as they are, so a start that never needs transformers' forward never
imports it. `stock_tree_cache` gives the same cache as a transformers `Cache`
for the stock forward.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

_MIN_CAPACITY = 256


class TreeCacheLayer:
    is_sliding = False
    is_croppable = True

    def __init__(self) -> None:
        super().__init__()
        self.is_initialized = False
        self.length = 0
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self._k = key_states.new_empty(self._shape(key_states, _MIN_CAPACITY))
        self._v = value_states.new_empty(self._shape(value_states, _MIN_CAPACITY))
        self.is_initialized = True

    @staticmethod
    def _shape(states: torch.Tensor, capacity: int) -> tuple[int, ...]:
        return (*states.shape[:-2], capacity, states.shape[-1])

    def _reserve(self, needed: int) -> None:
        assert self._k is not None and self._v is not None
        capacity = self._k.shape[-2]
        if needed <= capacity:
            return
        while capacity < needed:
            capacity *= 2
        k = self._k.new_empty(self._shape(self._k, capacity))
        v = self._v.new_empty(self._shape(self._v, capacity))
        k[..., : self.length, :] = self._k[..., : self.length, :]
        v[..., : self.length, :] = self._v[..., : self.length, :]
        self._k, self._v = k, v

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        self._reserve(self.length + n)
        assert self._k is not None and self._v is not None
        self._k[..., self.length : self.length + n, :] = key_states
        self._v[..., self.length : self.length + n, :] = value_states
        self.advance(n)
        return self.keys, self.values

    def open_rows(self, n: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The key and value buffers, (1, kv_heads, capacity, head_dim), with room
        for n more rows at [length, length + n): a kernel writes them there in
        place (formats/quant_layer.py), then `advance(n)`."""
        if not self.is_initialized:
            shape = torch.empty((1, kv_heads, 0, head_dim), dtype=dtype)  # the buffers' shape and dtype, on the CPU
            self.lazy_initialization(shape, shape)
        elif self._k is not None and self._k.dtype != dtype:  # a kernel would write rows of another width
            raise ValueError(f"the cache holds {self._k.dtype} rows, not {dtype}")
        self._reserve(self.length + n)
        assert self._k is not None and self._v is not None
        return self._k, self._v

    # The cached keys and values are views of the buffers made when read: the
    # fused layers never read them, and making two views per layer per step
    # cost more than the rest of the cache's bookkeeping.
    @property
    def keys(self) -> torch.Tensor | None:
        return None if self._k is None else self._k[..., : self.length, :]

    @keys.setter
    def keys(self, value: torch.Tensor | None) -> None:
        _only_none(value)

    @property
    def values(self) -> torch.Tensor | None:
        return None if self._v is None else self._v[..., : self.length, :]

    @values.setter
    def values(self, value: torch.Tensor | None) -> None:
        _only_none(value)

    def advance(self, n: int) -> None:
        """Count the n rows written after the cached ones (by `update`, or by a kernel after `open_rows`)."""
        self.length += n

    def keep(self, base: int, rows: torch.Tensor | None, count: int) -> None:
        """Keep [0, base) plus rows base + rows[i] moved to base + i."""
        if self._k is not None and rows is not None:
            src = rows + base
            self._k[..., base : base + count, :] = self._k.index_select(-2, src)
            self._v[..., base : base + count, :] = self._v.index_select(-2, src)
        self.length = base + count

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1

    def crop(self, max_length: int) -> None:
        if max_length < 0:
            max_length = self.length + max_length
        self.keep(min(max_length, self.length), None, 0)

    def reset(self) -> None:
        self.length = 0
        self._k = self._v = None
        self.is_initialized = False


def _only_none(value: torch.Tensor | None) -> None:
    """transformers' layer base class clears `keys` and `values` with None; nothing else may set them."""
    if value is not None:
        raise AttributeError("a TreeCacheLayer's keys and values are views of its buffers: write with update()")


class TreeCache:
    """The cache handed to the forward; one TreeCacheLayer per layer."""

    def __init__(self, num_layers: int) -> None:
        self.layers: list[TreeCacheLayer] = [TreeCacheLayer() for _ in range(num_layers)]
        self._pointers: np.ndarray | None = None  # open_all's answer while no buffer moves
        self._buffers: list[torch.Tensor | None] = []  # the key buffers it was read from
        self._room = 0  # the fewest rows any of them holds

    def open_all(self, n: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> np.ndarray:
        """Every layer's `open_rows(n, ...)` as (layers, 3) int64 rows of (key
        buffer address, value buffer address, their stride between heads, in
        elements), for a kernel that writes n rows into each layer at once
        (formats/quant_layer.py). The addresses are kept until a buffer grows."""
        layers = self.layers
        length = layers[0].length
        if any(layer.length != length for layer in layers):
            raise ValueError("the cache's layers hold different lengths")
        fresh = (self._pointers is not None and length + n <= self._room
                 and all(layer._k is k for layer, k in zip(layers, self._buffers, strict=True))
                 and layers[0]._k.dtype == dtype)  # else open_rows refuses the other dtype
        if not fresh:
            rows = []
            for layer in layers:
                k, v = layer.open_rows(n, kv_heads, head_dim, dtype)
                rows.append((k.data_ptr(), v.data_ptr(), k.stride(1)))
            self._pointers = np.array(rows, dtype=np.int64)
            self._buffers = [layer._k for layer in layers]
            self._room = min(int(layer._k.shape[-2]) for layer in layers if layer._k is not None)
        return self._pointers

    def advance_all(self, n: int) -> None:
        """Count n rows written into every layer after `open_all`."""
        for layer in self.layers:
            layer.length += n

    @property
    def length(self) -> int:
        return self.layers[0].length

    def commit(self, base: int, accepted: list[int]) -> None:
        """After verifying a tree appended at `base`, keep only the accepted
        nodes (tree indices, root first, in path order)."""
        count = len(accepted)
        # The root and a run of first children are already in place: the common
        # case of a chain accepted from its start needs no copy at all.
        in_place = accepted == list(range(count))
        rows = None
        if not in_place:
            device = self.layers[0].device
            rows = torch.tensor(accepted, dtype=torch.long, device=device)
        for layer in self.layers:
            layer.keep(base, rows, count)

    def truncate(self, length: int) -> None:
        for layer in self.layers:
            layer.keep(min(length, layer.length), None, 0)


@functools.cache
def _stock_classes() -> tuple[type, type]:
    """TreeCache and its layer as transformers' Cache classes, built on first use."""
    from transformers.cache_utils import Cache, CacheLayerMixin

    class StockTreeCacheLayer(TreeCacheLayer, CacheLayerMixin):
        pass

    class StockTreeCache(TreeCache, Cache):
        def __init__(self, num_layers: int) -> None:
            Cache.__init__(self, layers=[StockTreeCacheLayer() for _ in range(num_layers)])

    return StockTreeCache, StockTreeCacheLayer


def stock_tree_cache(num_layers: int) -> TreeCache:
    """A TreeCache that transformers' own forward accepts as its cache."""
    cache_class, _ = _stock_classes()
    return cache_class(num_layers)
