"""Python time of one sequence's cache bookkeeping in a fused step: the
buffer addresses for every layer, the count of the new rows, the commit.

    python scripts/cache_bookkeeping_cost.py [--layers 30] [--steps 3000]

Runs TreeCache.open_all / advance_all / commit (what formats/quant_layer.py
calls per sequence and step) against the per-layer calls it replaced
(open_rows and advance on each layer), on one thread, by CPU time; no model
is loaded. A batched pass pays this once per request in it.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from racer_core.verify.kv_cache import TreeCache

KV_HEADS, HEAD_DIM = 3, 64  # the embedded model's


def per_layer(cache: TreeCache, rows: int) -> None:
    """The bookkeeping as it was: each layer asked for its buffers and counted its rows."""
    length = cache.layers[0].length
    addresses = np.empty((len(cache.layers), 3), dtype=np.int64)
    for index, layer in enumerate(cache.layers):
        if layer.length != length:
            raise ValueError("the cache's layers hold different lengths")
        k, v = layer.open_rows(rows, KV_HEADS, HEAD_DIM, torch.float32)
        addresses[index] = (k.data_ptr(), v.data_ptr(), k.stride(1))
    for layer in cache.layers:
        layer.advance(rows)
    cache.commit(length, [0])


def whole_cache(cache: TreeCache, rows: int) -> None:
    length = cache.length
    cache.open_all(rows, KV_HEADS, HEAD_DIM, torch.float32)
    cache.advance_all(rows)
    cache.commit(length, [0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name, step in (("per-layer calls", per_layer), ("open_all", whole_cache)):
        cache = TreeCache(args.layers)
        cache.open_all(200, KV_HEADS, HEAD_DIM, torch.float32)
        cache.advance_all(200)
        for _ in range(100):
            step(cache, 1)
        start = time.thread_time()
        for _ in range(args.steps):
            step(cache, 1)
        print(f"{name:<20} {1e6 * (time.thread_time() - start) / args.steps:7.1f} us per sequence and step")


if __name__ == "__main__":
    main()
