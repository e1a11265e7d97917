"""Checks that a lean forward is batch-invariant: trees verified one after
another beside plain one-token decoding of the same tokens, every row's logits
and the cache after each commit compared bit for bit (tests/core/test_bit_exact.py
on tiny models, scripts/bit_exact_check.py on a real one)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from racer_core.verify.kv_cache import TreeCache
from racer_core.verify.tree_attention import TreeMaskBuilder

# parents of each node; a parent comes before its children
SHAPES = {
    "chain": [-1, 0, 1, 2, 3],
    "siblings": [-1, 0, 0, 0, 0],
    "deep branch": [-1, 0, 1, 1, 3, 4, 2, 6, 5],
}
STEPS = ("chain", "siblings", "deep branch", "siblings", "deep branch", "chain")


def path_to(parents: list[int], node: int) -> list[int]:
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def tree_mask(parents: list[int]) -> tuple[np.ndarray, np.ndarray]:
    size = len(parents)
    ancestors = np.zeros((size, size), dtype=bool)
    for node in range(size):
        ancestors[node, path_to(parents, node)] = True
    return ancestors, ancestors.sum(1) - 1


def one_token(lean: Any, cache: TreeCache, masks: TreeMaskBuilder, token: int) -> torch.Tensor:
    """Plain decoding's step: one token after the cache."""
    n = cache.length
    return lean(torch.tensor([token]), torch.tensor([n]), masks.causal(n, 1), cache)[0]


def mismatches(lean: Any, prompt: list[int], steps: tuple[str, ...] = STEPS, seed: int = 0, vocab: int = 100) -> list[str]:
    """Verify trees of the given shapes one after another, committing a path
    each time, beside plain decoding of the same tokens; every difference in
    a row's logits or in the cache, in words."""
    layers = len(lean.weights.layers)
    masks = TreeMaskBuilder(lean.dtype, "cpu", None)
    gen = torch.Generator().manual_seed(seed)
    tree_cache, plain_cache = TreeCache(layers), TreeCache(layers)
    prompt_ids = torch.tensor(prompt)
    found = []
    with torch.inference_mode():
        for cache in (tree_cache, plain_cache):  # both prefill the prompt in one pass
            lean(prompt_ids, torch.arange(len(prompt)), masks.causal(0, len(prompt)), cache)
        for step, shape in enumerate(steps):
            parents = SHAPES[shape]
            tokens = torch.randint(0, vocab, (len(parents),), generator=gen)
            ancestors, depths = tree_mask(parents)
            base = tree_cache.length
            logits = lean(tokens, torch.from_numpy(depths) + base, masks.build(base, ancestors, depths), tree_cache)
            for row in range(len(parents)):
                alone = copy.deepcopy(plain_cache)
                for node in path_to(parents, row):
                    want = one_token(lean, alone, masks, int(tokens[node]))
                if not torch.equal(logits[row], want):
                    found.append(f"step {step} ({shape}) row {row}: logits differ by up to "
                                 f"{(logits[row].float() - want.float()).abs().max().item():.3g}")
            accepted = path_to(parents, len(parents) - 1)  # the last node's path: a branch, not always a prefix
            tree_cache.commit(base, accepted)
            for node in accepted:
                one_token(lean, plain_cache, masks, int(tokens[node]))
            for index, (a, b) in enumerate(zip(tree_cache.layers, plain_cache.layers, strict=True)):
                if not (torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)):
                    found.append(f"step {step} ({shape}): layer {index}'s cache differs")
    return found




def batch_mismatches(lean: Any, shapes: list[tuple[int, int]], gen: torch.Generator, vocab: int = 100) -> list[str]:
    """Sequences of (rows, cached tokens) each set up twice: one copy passed
    alone, the other beside the rest in one LeanForward.batch; every
    difference in a part's logits or in its cache, in words."""
    from racer_core.models.lean_forward import Part

    layers = len(lean.weights.layers)
    masks = TreeMaskBuilder(lean.dtype, "cpu", None)
    alone: list[Part] = []
    together: list[Part] = []
    with torch.inference_mode():
        for size, context in shapes:
            before = torch.randint(0, vocab, (context,), generator=gen)
            ids = torch.randint(0, vocab, (size,), generator=gen)
            for parts in (alone, together):
                cache = TreeCache(layers)
                lean(before, torch.arange(context), masks.causal(0, context), cache)
                parts.append(Part(ids, torch.arange(context, context + size), masks.causal(context, size), cache))
        expected = [lean(p.ids, p.positions, p.mask, p.cache) for p in alone]
        got = lean.batch(together)
    found = []
    for i, (want, have, a, b) in enumerate(zip(expected, got, alone, together, strict=True)):
        if want.shape != have.shape:
            found.append(f"part {i}: logits of shape {tuple(have.shape)}, alone {tuple(want.shape)}")
        elif not torch.equal(want, have):
            found.append(f"part {i}: logits differ by up to {(want.float() - have.float()).abs().max().item():.3g}")
        for index, (x, y) in enumerate(zip(a.cache.layers, b.cache.layers, strict=True)):
            if not (torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values)):
                found.append(f"part {i}: layer {index}'s cache differs")
    return found
