"""The lean forward is batch-invariant: every row of a verified tree gets the
logits, bit for bit, that plain one-token decoding computes for its token
after the same prefix, and the cache after committing the accepted path is
plain decoding's cache, bit for bit. For every lean family, in float32,
bfloat16 and with fp16 weights (racer_core/verify/attention.py, docs/design.md
"Bit-exact verification")."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from engine_helpers import PROMPT, make_markov

from racer_core.common.events import GenerationConfig, Source
from racer_core.engine.engine import RacerEngine
from racer_core.models import lean_forward as lean_module
from racer_core.models.families import FAMILIES
from racer_core.models.formats.half_weights import half_works
from racer_core.models.lean_forward import LeanForward, lean_forward_for
from racer_core.testing import tiny_model
from racer_core.verify import attention
from racer_core.verify.kv_cache import TreeCache
from racer_core.verify.tree_attention import TreeMaskBuilder

pytestmark = pytest.mark.skipif(attention._attention is None, reason="the attention extension is not built")

DENSE = tuple(sorted(FAMILIES))
PRECISIONS = ("float32", "bfloat16", "fp16-weights")
# parents of each node; a parent comes before its children
SHAPES = {
    "chain": [-1, 0, 1, 2, 3],
    "siblings": [-1, 0, 0, 0, 0],
    "deep branch": [-1, 0, 1, 1, 3, 4, 2, 6, 5],
}
STEPS = ("chain", "siblings", "deep branch", "siblings", "deep branch", "chain")


def lean_for(family: str, precision: str) -> LeanForward:
    if precision == "fp16-weights" and not half_works():
        pytest.skip("no fbgemm fp16-weight linear here")
    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    lean = lean_forward_for(tiny_model(family, seed=4, dtype=dtype), half=precision == "fp16-weights")
    assert lean is not None
    return lean


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


def one_token(lean: LeanForward, cache: TreeCache, masks: TreeMaskBuilder, token: int) -> torch.Tensor:
    """Plain decoding's step: one token after the cache."""
    n = cache.length
    return lean(torch.tensor([token]), torch.tensor([n]), masks.causal(n, 1), cache)[0]


def mismatches(lean: LeanForward, steps: tuple[str, ...] = STEPS, seed: int = 0) -> list[str]:
    """Verify trees of the given shapes one after another, committing a path
    each time, beside plain decoding of the same tokens; every difference in
    a row's logits or in the cache, in words."""
    layers = len(lean.weights.layers)
    masks = TreeMaskBuilder(lean.dtype, "cpu", None)
    gen = torch.Generator().manual_seed(seed)
    tree_cache, plain_cache = TreeCache(layers), TreeCache(layers)
    prompt = torch.tensor(PROMPT)
    found = []
    with torch.inference_mode():
        for cache in (tree_cache, plain_cache):  # both prefill the prompt in one pass
            lean(prompt, torch.arange(len(prompt)), masks.causal(0, len(prompt)), cache)
        for step, shape in enumerate(steps):
            parents = SHAPES[shape]
            tokens = torch.randint(0, 100, (len(parents),), generator=gen)
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


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("family", DENSE)
def test_tree_rows_and_cache_equal_plain_decoding_bit_for_bit(family: str, precision: str) -> None:
    lean = lean_for(family, precision)
    assert mismatches(lean) == []


def layout_ordered(q, keys, values, mask, scale):
    """The kernel with one reduction order changed: keys a row may not see
    take part with a weight that underflows, so each row's softmax sum is laid
    out by the tree's indices instead of by the row's own keys in order."""
    return attention.attend(q, keys, values, mask.clamp(min=-1e4), scale)


def sdpa(q, keys, values, mask, scale):
    gqa = q.shape[1] != keys.shape[1]
    return torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale,
                                                            enable_gqa=gqa)


@pytest.mark.parametrize("changed", (layout_ordered, sdpa), ids=("softmax-sum-by-layout", "sdpa"))
def test_one_changed_reduction_order_is_caught(monkeypatch, changed) -> None:
    lean = lean_for("llama", "float32")
    assert mismatches(lean) == []
    monkeypatch.setattr(lean_module, "attend", changed)
    assert mismatches(lean) != []


def generate(engine: RacerEngine, **config) -> tuple[list[int], list[float], int]:
    """Tokens, their tie margins (from the logits that chose them) and the drafts accepted."""
    steps = list(engine.decoder().generate(PROMPT, GenerationConfig(max_new_tokens=64, **config)))
    tokens = [t for s in steps for t in s.tokens]
    margins = [m for s in steps for m in s.margins]
    accepted = sum(s.sources.count(src) for s in steps[1:] for src in Source if src != Source.MODEL)
    return tokens, margins, accepted


@pytest.mark.parametrize("family", DENSE)
def test_greedy_racer_equals_ar_bit_for_bit_in_bfloat16(family: str) -> None:
    model = make_markov(tiny_model(family, dtype=torch.bfloat16))  # cycles: drafts land
    engine = RacerEngine(model, None, f"tiny-{family}-bf16", eos_ids=frozenset(), forward="lean")
    assert (engine.info.dtype, engine.info.forward) == ("bfloat16", "lean")
    plain, plain_margins, _ = generate(engine, method="ar")
    for budget in (4, 16):
        tokens, margins, accepted = generate(engine, method="racer", max_num_draft=budget)
        assert tokens == plain, budget
        assert margins == plain_margins, budget  # the choosing logits' top-2 gaps: the same bits
        assert accepted > 0, budget  # drafts were verified in trees and accepted
