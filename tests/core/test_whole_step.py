"""A whole pass in one native call (FusedLayers.step, DecoderLayers.step): the
embedding's rows, every layer, the final norm and the head without Python
between them. It makes the same native calls as the pass in parts (the
embedding's `rows`, `run`, `final_norm`, the head), so every logit and every
cached key and value must be the same bits, for each kind of embedding the
step reads, and bad input is refused in one line."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch

from racer_core.models.formats.quant_weights import QuantWeight, kernel_isa
from racer_core.models.lean_forward import LeanForward, Part
from racer_core.testing import tiny_model
from racer_core.testing.bit_exact import SHAPES, tree_mask
from racer_core.verify.kv_cache import TreeCache
from racer_core.verify.tree_attention import TreeMaskBuilder

gguf = pytest.importorskip("gguf")
pytestmark = pytest.mark.skipif(kernel_isa() is None, reason="the 4-bit kernel does not run on this CPU")
MASKS = TreeMaskBuilder(torch.float32, "cpu", None)


def forwards(acts: str, embedding: str) -> LeanForward:
    """A lean forward on Q4_1 layers and a Q8_0 head, with its embedding as float32 rows
    (`plain`), as the head's own repacked blocks (`tied`, as the embedded model's) or as
    blocks in the file's layout (`file`)."""
    from quant_helpers import quant_weight, quantized_lean

    lean = quantized_lean(tiny_model("llama", seed=4), gguf.GGMLQuantizationType.Q4_1, acts)[0]
    w = lean.weights
    head = quant_weight(w.lm_head.plain(), gguf.GGMLQuantizationType.Q8_0, acts)
    if embedding == "plain":
        return LeanForward(replace(w, lm_head=head))
    if embedding == "tied":
        assert head.repacked == (acts == "q8")
        return LeanForward(replace(w, lm_head=head, embed=head))
    blocks = quant_weight(w.embed.plain(), gguf.GGMLQuantizationType.Q8_0, acts)
    file = QuantWeight(blocks.file_blocks(), blocks.qtype, *blocks.shape, acts, repacked=False)
    return LeanForward(replace(w, lm_head=head, embed=file))


def passes(lean: LeanForward) -> tuple[list[torch.Tensor], list[TreeCache]]:
    """A prompt (its last row's logits), a deep-branch tree (all rows, then its first 3), and
    three sequences in one batched pass: every pass's logits and the caches."""
    gen = torch.Generator().manual_seed(3)
    cache = TreeCache(len(lean.weights.layers))
    prompt = torch.randint(0, 512, (13,), generator=gen)
    outs = [lean(prompt, torch.arange(13), MASKS.causal(0, 13), cache, last_only=True)]
    parents = SHAPES["deep branch"]
    ancestors, depths = tree_mask(parents)
    tokens = torch.randint(0, 512, (len(parents),), generator=gen)
    mask = MASKS.build(13, ancestors, depths)
    outs.append(lean(tokens, torch.from_numpy(depths) + 13, mask, cache))
    cache.truncate(13)
    outs.append(lean(tokens, torch.from_numpy(depths) + 13, mask, cache, logit_rows=3))
    caches = [cache]
    parts = []
    for size, context in [(1, 5), (4, 9), (2, 0)]:
        c = TreeCache(len(lean.weights.layers))
        if context:
            lean(torch.randint(0, 512, (context,), generator=gen), torch.arange(context), MASKS.causal(0, context), c)
        ids = torch.randint(0, 512, (size,), generator=gen)
        parts.append(Part(ids, torch.arange(context, context + size), MASKS.causal(context, size), c))
        caches.append(c)
    outs += lean.batch(parts)
    return outs, caches


@pytest.mark.parametrize("acts", ["q8", "float"])
@pytest.mark.parametrize("embedding", ["plain", "tied", "file"])
def test_a_whole_pass_in_one_call_gives_the_bits_of_the_pass_in_parts(acts: str, embedding: str) -> None:
    lean = forwards(acts, embedding)
    assert lean.fused is not None and lean.fused.whole_step
    calls = []
    step = lean.fused.step
    lean.fused.step = lambda *a, **k: calls.append(1) or step(*a, **k)  # the one call is what ran
    in_parts = copy.copy(lean)
    in_parts.fused = copy.copy(lean.fused)
    in_parts.fused.whole_step = False
    with torch.inference_mode():
        (got, got_caches), (want, want_caches) = passes(lean), passes(in_parts)
    assert calls, "the whole pass was not taken"
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and torch.equal(a, b)
    for x, y in zip(got_caches, want_caches, strict=True):
        for a, b in zip(x.layers, y.layers, strict=True):
            assert a.length == b.length and torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def test_the_whole_pass_is_left_out_where_the_head_is_not_in_blocks() -> None:
    from racer_core.models.formats.linear import PlainLinear

    lean = forwards("q8", "plain")
    plain_head = LeanForward(replace(lean.weights, lm_head=PlainLinear(lean.weights.lm_head.plain())))
    assert plain_head.fused is not None and not plain_head.fused.whole_step


def test_bad_whole_pass_input_is_refused_in_one_line() -> None:
    from racer_core.models.formats.quant import _quant

    lean = forwards("q8", "tied")
    layers = lean.fused._layers
    w = lean.weights
    hidden, n = int(w.lm_head.shape[1]), len(w.layers)
    h = torch.zeros((1, hidden))
    logits = torch.zeros((1, 512))
    cos = lean._cos
    caches = np.zeros((1, n, 3), np.int64)
    keep = np.array([[0, 1]], np.int64)

    def call(ids: np.ndarray, positions: np.ndarray, ranges: np.ndarray = keep, target=layers) -> None:
        target.step(ids, h.data_ptr(), positions, cos.data_ptr(), cos.data_ptr(), cos.shape[0], [], caches, 1, True,
                    ranges, logits.data_ptr())

    cases = [
        (lambda: call(np.array([512], np.int64), np.array([0], np.int64)), "outside the embedding's 512 rows"),
        (lambda: call(np.array([1], np.int32), np.array([0], np.int64)), "ids must be"),
        (lambda: call(np.array([1], np.int64), np.array([cos.shape[0]], np.int64)), "outside the rope tables"),
        (lambda: call(np.array([1], np.int64), np.array([0, 1], np.int64)), "positions must be"),
        (lambda: call(np.array([1], np.int64), np.array([0], np.int64), np.array([[0, 2]], np.int64)),
         "keep's ranges"),
    ]
    for run, message in cases:
        with pytest.raises(ValueError, match=message) as error:
            run()
        assert "\n" not in str(error.value)
    first = w.layers[0]
    spec = (*(x.layer_spec() for x in (first.qkv, first.o, first.gate_up, first.down)),
            np.ones(hidden, np.float32), np.ones(hidden, np.float32), None, None, None)
    bare = _quant.DecoderLayers([spec], hidden, w.heads, w.kv_heads, w.head_dim, int(first.gate_up.shape[0]) // 2,
                                1e-6, 0.125, first.qkv.isa, True)
    assert not bare.whole_step
    with pytest.raises(ValueError, match="set_embedding and set_head first"):
        call(np.array([1], np.int64), np.array([0], np.int64), target=bare)
    with pytest.raises(ValueError, match="float rows must be"):
        bare.set_embedding(np.zeros((4, hidden), np.float64))
    with pytest.raises(ValueError, match="final_norm must be"):
        bare.set_head(w.lm_head.layer_spec(), 512, w.lm_head.isa, True, np.ones(3, np.float32))
