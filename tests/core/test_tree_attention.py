"""Tree attention (docs/design.md 1.4): one forward over a draft tree gives each
node the same logits as plain decoding of its root-to-node path, and the
cache keeps exactly the accepted rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_helpers import PROMPT, engine_for

from racer_core.testing import FAMILIES

# A tree over vocabulary ids: parents in breadth-first order (node 0 = root).
TOKENS = np.array([11, 12, 13, 14, 15, 16, 17, 18], dtype=np.int64)
PARENTS = np.array([-1, 0, 0, 1, 1, 2, 4, 4], dtype=np.int64)


def _ancestry() -> tuple[np.ndarray, np.ndarray]:
    n = len(TOKENS)
    mask = np.zeros((n, n), dtype=bool)
    depth = np.zeros(n, dtype=np.int64)
    for i in range(n):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = PARENTS[j]
        depth[i] = mask[i].sum() - 1
    return mask, depth


def _path(i: int) -> list[int]:
    out = []
    while i >= 0:
        out.append(i)
        i = PARENTS[i]
    return out[::-1]


@pytest.mark.parametrize("family", FAMILIES)
def test_tree_logits_equal_sequential_logits(family: str) -> None:
    engine = engine_for(family)
    mask, depth = _ancestry()
    with torch.inference_mode():
        tree_dec = engine.decoder()
        tree_dec._prefill(PROMPT)
        base = len(tree_dec.cached)
        tree_logits = tree_dec._forward(
            torch.from_numpy(TOKENS), torch.from_numpy(depth + base), engine.runtime.masks.build(base, mask, depth)
        )
        for node in range(len(TOKENS)):
            plain = engine.decoder()
            last = plain._prefill(PROMPT + [int(TOKENS[i]) for i in _path(node)])
            torch.testing.assert_close(tree_logits[node], last, rtol=1e-4, atol=1e-4)


def test_commit_keeps_accepted_rows_in_path_order() -> None:
    engine = engine_for("llama")
    mask, depth = _ancestry()
    accepted = _path(6)  # root -> 1 -> 4 -> 6: not a run of first children
    with torch.inference_mode():
        dec = engine.decoder()
        dec._prefill(PROMPT)
        base = len(dec.cached)
        dec._forward(torch.from_numpy(TOKENS), torch.from_numpy(depth + base), engine.runtime.masks.build(base, mask, depth))
        dec.cache.commit(base, accepted)
        plain = engine.decoder()
        plain._prefill(PROMPT + [int(TOKENS[i]) for i in accepted])
    assert dec.cache.length == plain.cache.length == base + len(accepted)
    for ours, theirs in zip(dec.cache.layers, plain.cache.layers, strict=True):
        torch.testing.assert_close(ours.keys, theirs.keys, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ours.values, theirs.values, rtol=1e-5, atol=1e-5)


def test_mask_is_float_in_model_dtype_with_min_for_blocked() -> None:
    engine = engine_for("llama")
    mask, depth = _ancestry()
    built = engine.runtime.masks.build(5, mask, depth)
    assert built.dtype == torch.float32 and built.shape == (1, 1, len(TOKENS), 5 + len(TOKENS))
    blocked = torch.finfo(torch.float32).min
    assert torch.all(built[0, 0, :, :5] == 0)
    assert torch.equal(built[0, 0, :, 5:] == 0, torch.from_numpy(mask))
    assert torch.all(built[0, 0, :, 5:][~torch.from_numpy(mask)] == blocked)


def test_sliding_window_mask_hides_old_positions() -> None:
    from racer_core.verify.tree_attention import TreeMaskBuilder

    builder = TreeMaskBuilder(torch.float32, "cpu", window=4)
    built = builder.causal(6, 2)[0, 0]
    # Query positions 6 and 7 see keys within distance < 4: 3..6 and 4..7.
    allowed = (built == 0).int().tolist()
    assert allowed[0] == [0, 0, 0, 1, 1, 1, 1, 0]
    assert allowed[1] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_a_lone_rows_mask_is_the_built_one_whatever_the_cache_length() -> None:
    # one row seeing every key comes from a kept buffer (grown as the cache grows):
    # the same values, shape and dtype as the mask built row by row
    from racer_core.verify.tree_attention import TreeMaskBuilder

    builder = TreeMaskBuilder(torch.float32, "cpu", window=None)
    for cached in (0, 3, 40, 7, 200, 0):
        lone = builder.build(cached, np.ones((1, 1), dtype=bool), np.zeros(1, dtype=np.int64))
        two = builder.build(cached, np.tril(np.ones((2, 2), dtype=bool)), np.arange(2))
        assert lone.shape == (1, 1, 1, cached + 1) and lone.dtype == torch.float32
        assert torch.equal(lone, two[:, :, :1, : cached + 1]) and torch.all(lone == 0)
    windowed = TreeMaskBuilder(torch.float32, "cpu", window=4).build(6, np.ones((1, 1), dtype=bool), np.zeros(1))
    assert (windowed[0, 0, 0] == 0).int().tolist() == [0, 0, 0, 1, 1, 1, 1]  # a window still hides the far keys


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_trees_mask_built_in_numpy_equals_torchs(dtype: torch.dtype) -> None:
    # on the CPU a tree's mask is built in numpy where the dtype has a numpy twin
    # (bfloat16 has none): the same values, shape and dtype as torch's build
    from racer_core.verify.tree_attention import TreeMaskBuilder

    rng = np.random.default_rng(0)
    fast, slow = TreeMaskBuilder(dtype, "cpu", window=None), TreeMaskBuilder(dtype, "cpu", window=None)
    slow._numpy = None
    assert (fast._numpy is None) == (dtype == torch.bfloat16)
    for cached, size in ((0, 2), (5, 3), (37, 9), (300, 16)):
        ancestors = np.tril(rng.random((size, size)) < 0.5)
        np.fill_diagonal(ancestors, True)
        ancestors[:, 0] = True
        ours, theirs = fast.build(cached, ancestors, np.arange(size)), slow.build(cached, ancestors, np.arange(size))
        assert ours.dtype == theirs.dtype == dtype and ours.shape == theirs.shape == (1, 1, size, cached + size)
        assert torch.equal(ours, theirs) and torch.any(ours != 0)
