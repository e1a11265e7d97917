"""The fused decoder layers (racer_core/models/formats/quant/layer.hpp, one C++
call a layer where every linear is in a GGUF's blocks): the same values as the
torch layer body on the same weights, every row the same bits alone, in a
tree or beside other sequences, and bad input refused in one line. Whether
tree rows equal plain decoding bit for bit through them is
tests/core/test_bit_exact.py's q4_1 precisions."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from racer_core.models.families import FAMILIES
from racer_core.models.formats.quant_weights import kernel_isa
from racer_core.models.lean_forward import LeanForward
from racer_core.testing import tiny_model
from racer_core.testing.bit_exact import SHAPES, batch_mismatches, tree_mask
from racer_core.verify.kv_cache import TreeCache
from racer_core.verify.tree_attention import TreeMaskBuilder

gguf = pytest.importorskip("gguf")
pytestmark = pytest.mark.skipif(kernel_isa() is None, reason="the 4-bit kernel does not run on this CPU")
MASKS = TreeMaskBuilder(torch.float32, "cpu", None)


def fused_and_torch(family: str, acts: str, kv: torch.dtype = torch.float32) -> tuple[LeanForward, LeanForward]:
    """A lean forward on Q4_1 blocks through the fused layers, and one on the
    same weights through torch ops; the fused layers' cache of dtype `kv`
    (float32 by default here: the torch body's cache is float32)."""
    from quant_helpers import quantized_lean

    fused = quantized_lean(tiny_model(family, seed=4), gguf.GGMLQuantizationType.Q4_1, acts)[0]
    assert fused.fused is not None, "the fused layers were not used"
    assert fused.fused.kv_dtype == torch.float16  # the default
    fused.fused.kv_dtype = kv
    plain = copy.copy(fused)
    plain.fused = None
    return fused, plain


def run_steps(lean: LeanForward, capture: tuple[int, ...] = ()) -> tuple[list, TreeCache]:
    """A prompt, then a deep-branch tree: each pass's logits (and captured states), and the cache."""
    gen = torch.Generator().manual_seed(1)
    cache = TreeCache(len(lean.weights.layers))
    prompt = torch.randint(0, 100, (13,), generator=gen)
    outs = [lean(prompt, torch.arange(13), MASKS.causal(0, 13), cache, capture=capture)]
    parents = SHAPES["deep branch"]
    ancestors, depths = tree_mask(parents)
    tokens = torch.randint(0, 100, (len(parents),), generator=gen)
    outs.append(lean(tokens, torch.from_numpy(depths) + 13, MASKS.build(13, ancestors, depths), cache, capture=capture))
    return outs, cache


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fused_layers_compute_the_torch_layer_body(family: str) -> None:
    """Float activations: the two differ only in the order of RMSNorm's sum and in silu's exp."""
    fused, plain = fused_and_torch(family, "float")
    with torch.inference_mode():
        (got, got_cache), (want, want_cache) = run_steps(fused), run_steps(plain)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    for a, b in zip(got_cache.layers, want_cache.layers, strict=True):
        assert a.length == b.length
        torch.testing.assert_close(a.keys, b.keys, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(a.values, b.values, rtol=1e-4, atol=1e-4)


def test_the_final_norm_is_the_layers_norm_row_by_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's final RMSNorm runs natively, as the layers' norms (FusedLayers.final_norm: no torch
    ops between the layers and the head): each row the same bits alone or among others, on one
    thread or two, RMSNorm's value, and the fused forward reads no torch norm at all."""
    from racer_core.models import lean_forward as lean_module
    from racer_core.models.formats.quant import _quant

    fused, _ = fused_and_torch("llama", "float")
    hidden = int(fused.weights.final_norm.shape[0])
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(9, hidden, generator=gen) * torch.logspace(-3, 3, 9)[:, None]
    weight = fused.weights.final_norm.detach().float().contiguous().numpy()
    eps = float(fused.weights.eps)
    together = {}
    for threads in (1, 2):
        out = np.empty_like(x.numpy())
        _quant.rms_norm_rows(x.numpy(), weight, eps, out, threads)
        together[threads] = out
    alone = np.concatenate([fused.fused.final_norm(x[i : i + 1]).numpy() for i in range(9)])
    assert np.array_equal(together[1], together[2]) and np.array_equal(together[1], alone)
    assert np.array_equal(fused.fused.final_norm(x).numpy(), alone)
    x64 = x.double()
    want = fused.weights.final_norm.detach().double() * (x64 / torch.sqrt((x64 * x64).mean(-1, keepdim=True) + eps))
    torch.testing.assert_close(torch.from_numpy(alone).double(), want, rtol=2e-6, atol=1e-9)

    def no_torch_norm(*args: object) -> None:
        raise AssertionError("the fused forward ran a torch RMSNorm")

    monkeypatch.setattr(lean_module, "_rms", no_torch_norm)
    with torch.inference_mode():
        run_steps(fused)
    with pytest.raises(ValueError, match="weight must be") as error:
        _quant.rms_norm_rows(x.numpy(), weight[:-1], eps, np.empty_like(x.numpy()))
    assert "\n" not in str(error.value)


def test_captured_states_are_those_entering_the_layers() -> None:
    fused, plain = fused_and_torch("llama", "float")
    with torch.inference_mode():
        got, _ = run_steps(fused, capture=(0, 1))
        want, _ = run_steps(plain, capture=(0, 1))
    for (logits_a, states_a), (logits_b, states_b) in zip(got, want, strict=True):
        torch.testing.assert_close(logits_a, logits_b, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(states_a, states_b, rtol=1e-4, atol=1e-4)
    assert not torch.equal(got[0][1][:, :64], got[0][1][:, 64:])  # two different layers' states


def test_a_float16_cache_holds_the_float32_keys_and_values_rounded() -> None:
    """The first layer's keys and values are the float32 cache's rounded to
    nearest even (as torch's .to(float16)); the logits stay close."""
    fused, _ = fused_and_torch("qwen2", "float", torch.float16)
    wide, _ = fused_and_torch("qwen2", "float")
    with torch.inference_mode():
        (got, got_cache), (want, want_cache) = run_steps(fused), run_steps(wide)
    first, reference = got_cache.layers[0], want_cache.layers[0]
    assert first.keys.dtype == torch.float16 and reference.keys.dtype == torch.float32
    assert torch.equal(first.keys, reference.keys.half()) and torch.equal(first.values, reference.values.half())
    assert not torch.equal(first.keys.float(), reference.keys)  # something was rounded
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)


def test_the_cache_dtype_comes_from_the_environment_and_a_bad_one_is_refused_in_one_line(monkeypatch) -> None:
    from racer_core.common.errors import ModelLoadError
    from racer_core.models.formats.quant_layer import KV_CACHE_ENV, kv_cache_dtype

    monkeypatch.delenv(KV_CACHE_ENV, raising=False)
    assert kv_cache_dtype() == torch.float16
    monkeypatch.setenv(KV_CACHE_ENV, "float32")
    assert kv_cache_dtype() == torch.float32
    monkeypatch.setenv(KV_CACHE_ENV, "fp8")
    with pytest.raises(ModelLoadError, match="RACER_KV_CACHE='fp8': use one of float16, float32") as error:
        kv_cache_dtype()
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("kv", [torch.float16, torch.float32])
@pytest.mark.parametrize("acts", ["q8", "float"])
def test_a_batched_pass_gives_each_part_its_own_bits(acts: str, kv: torch.dtype) -> None:
    """Several sequences in one pass, of different lengths: each part's logits and cache
    torch.equal to its pass alone (more than 3 rows: the row-wise steps run threaded)."""
    fused, _ = fused_and_torch("qwen3", acts, kv)
    assert batch_mismatches(fused, [(1, 9), (7, 20), (4, 3)], torch.Generator().manual_seed(2)) == []


@pytest.mark.parametrize("wide", [True, False])
@pytest.mark.parametrize("kv", [torch.float16, torch.float32])
def test_one_row_parts_share_one_attention_region_and_keep_their_bits(kv: torch.dtype, wide: bool) -> None:
    """Many one-row sequences in one pass (a batched server's decoding steps): their
    attention runs as one parallel region of (row, key/value head) items
    (attend_rows), a small tree's rows among them, beside a tree part of more than
    16 rows that keeps its own; each part's logits and cache still equal its pass
    alone, whose attention took another path (one row over 1,100 keys splits its
    keys and outputs among the threads; a tree's rows share its keys). Small
    passes run the items on one thread: the same bits."""
    fused, _ = fused_and_torch("qwen3", "q8", kv)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # items enough for the threads: the shared region runs
    try:
        fused.fused.wide_attention = wide
        shapes = [(1, 1100), (1, 700), (1, 1), (4, 30), (1, 257), (1, 5), (17, 40)]
        assert batch_mismatches(fused, shapes, torch.Generator().manual_seed(3)) == []
        assert batch_mismatches(fused, [(1, 9), (1, 20), (1, 3)], torch.Generator().manual_seed(4)) == []
    finally:
        fused.fused.wide_attention = True
        torch.set_num_threads(threads)


def test_the_attentions_512_bit_path_changes_no_bit_of_a_pass() -> None:
    """The fused layers with the attention's 512-bit path (where the CPU has AVX-512F) and kept to
    its AVX2 path: the same logits and cache, bit for bit, over a prompt and a tree."""
    fused, _ = fused_and_torch("qwen3", "q8", torch.float16)
    with torch.inference_mode():
        fused.fused.wide_attention = True
        wide, wide_cache = run_steps(fused)
        fused.fused.wide_attention = False
        narrow, narrow_cache = run_steps(fused)
    fused.fused.wide_attention = True
    for a, b in zip(wide, narrow, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(wide_cache.layers, narrow_cache.layers, strict=True):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


@pytest.mark.parametrize("acts", ["q8", "float"])
def test_q_k_and_v_of_different_block_types_run_in_parts(acts: str) -> None:
    """Q4_K_M's layers with v in Q6_K: q|k|v as QuantParts (each part its own
    type), through the fused layers as through the torch body, each row its own
    bits beside others; the same values as the stack of one type where the types agree."""
    from dataclasses import replace

    from quant_helpers import quant_weight

    from racer_core.models.formats.quant_weights import QuantParts, QuantWeight

    fused, _ = fused_and_torch("llama", acts)
    w = fused.weights
    nq, nkv = w.heads * w.head_dim, w.kv_heads * w.head_dim
    layers = []
    for layer in w.layers:
        values = layer.qkv.plain()
        q, k, v = values[:nq], values[nq : nq + nkv], values[nq + nkv :]
        parts = [quant_weight(q, gguf.GGMLQuantizationType.Q4_1, acts),
                 quant_weight(k, gguf.GGMLQuantizationType.Q4_1, acts),
                 quant_weight(v, gguf.GGMLQuantizationType.Q8_0, acts)]
        layers.append(replace(layer, qkv=QuantParts(parts)))
    mixed = LeanForward(replace(w, layers=layers))
    assert mixed.fused is not None and mixed.quant == "gguf Q4_1+Q8_0"
    assert batch_mismatches(mixed, [(1, 9), (7, 20), (4, 3)], torch.Generator().manual_seed(2)) == []  # float16
    mixed.fused.kv_dtype = torch.float32  # as the torch body's cache
    plain = copy.copy(mixed)
    plain.fused = None
    with torch.inference_mode():
        (got, got_cache), (want, want_cache) = run_steps(mixed), run_steps(plain)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    for a, b in zip(got_cache.layers, want_cache.layers, strict=True):
        torch.testing.assert_close(a.keys, b.keys, rtol=1e-4, atol=1e-4)
    assert batch_mismatches(mixed, [(1, 9), (7, 20), (4, 3)], torch.Generator().manual_seed(2)) == []
    x = torch.randn(5, int(w.layers[0].qkv.shape[1]))
    same = QuantParts(layers[0].qkv.parts[:2])  # q and k alike: the same bits as their stack
    assert torch.equal(same(x), QuantWeight.stack(layers[0].qkv.parts[:2])(x))


def test_the_fused_layers_are_left_out_where_a_linear_is_not_in_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from racer_core.models.formats.linear import PlainLinear
    from racer_core.models.formats.quant_layer import DISABLE_ENV, FusedLayers

    fused, _ = fused_and_torch("llama", "q8")
    weights = fused.weights
    plain_o = PlainLinear(weights.layers[0].o.plain())
    mixed = replace(weights, layers=[replace(weights.layers[0], o=plain_o), *weights.layers[1:]])
    assert FusedLayers.fits(weights) and not FusedLayers.fits(mixed)
    monkeypatch.setenv(DISABLE_ENV, "0")
    assert not FusedLayers.fits(weights)


def test_bad_layer_input_is_refused_in_one_line() -> None:
    from racer_core.models.formats.quant import _quant

    fused, _ = fused_and_torch("llama", "q8")
    layers = fused.fused._layers
    qkv = fused.weights.layers[0].qkv
    norm = np.ones(int(qkv.shape[1]), dtype=np.float32)
    bad = [((qkv.qtype, qkv.blocks), (qkv.qtype, qkv.blocks), (qkv.qtype, qkv.blocks), (qkv.qtype, qkv.blocks),
            norm, norm, None, None, None)]
    w = fused.weights
    with pytest.raises(ValueError, match="do not hold") as error:
        _quant.DecoderLayers(bad, int(qkv.shape[1]), w.heads, w.kv_heads, w.head_dim, 64, 1e-6, 0.125, qkv.isa, True)
    assert "\n" not in str(error.value)
    h = torch.zeros((1, int(qkv.shape[1])))
    cos = torch.zeros((1, w.head_dim))
    with pytest.raises(ValueError, match="caches must be"):
        layers.run(0, 1, h.data_ptr(), 1, cos.data_ptr(), cos.data_ptr(), [], np.zeros((1, 1, 3), np.int64), 1)
    with pytest.raises(ValueError, match="bad layer range"):
        layers.run(0, len(layers) + 1, h.data_ptr(), 1, cos.data_ptr(), cos.data_ptr(), [],
                   np.zeros((0, len(layers), 3), np.int64), 1)


def test_the_cost_curve_key_tells_the_layer_bodies_and_activation_modes_apart() -> None:
    """A cost curve measured on one forward is never read for another (engine.cost_curve's key)."""
    fused, plain = fused_and_torch("llama", "q8")
    floats, _ = fused_and_torch("llama", "float")
    keys = {tuple(lean.cost_identity()) for lean in (fused, plain, floats)}
    assert len(keys) == 3
    assert fused.cost_identity() == ["gguf Q4_1", "q8", "fused layers", f"kernel {kernel_isa()}"]
