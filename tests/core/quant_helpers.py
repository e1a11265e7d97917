"""Tiny models on GGUF block weights (made here with the gguf package), for the
4-bit kernel's tests."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import ModuleType

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants

from racer_core.bench.sized_gguf import K_BYTES
from racer_core.models.families import family_of
from racer_core.models.formats.quant_weights import QuantParts, QuantWeight
from racer_core.models.lean_forward import LeanForward, weights_from_model


def the_kernel() -> tuple[ModuleType, list[str]]:
    """The built kernel and the instruction sets this CPU runs it with; the
    calling test module is skipped where the kernel is not built or cannot run."""
    kernel = pytest.importorskip("racer_core.models.formats.quant._quant")
    if kernel.best() == "none":
        pytest.skip("the kernel needs AVX2+FMA+F16C", allow_module_level=True)
    return kernel, [isa for isa in ("avx2", "avxvnni", "avx512") if kernel.available(isa)]


def repacked_types(weights) -> set[str]:
    """The block types of a LeanWeights' linears (the head and QuantParts' parts too) multiplied repacked."""
    linears = [w for layer in weights.layers for w in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    parts = [p for w in [*linears, weights.lm_head] for p in (w.parts if isinstance(w, QuantParts) else [w])]
    return {p.type_name for p in parts if isinstance(p, QuantWeight) and p.repacked}


def quant_weight(plain: torch.Tensor, qtype: GGMLQuantizationType, acts: str | None = None) -> QuantWeight:
    rows, cols = plain.shape
    values = plain.detach().float().numpy()
    return QuantWeight(quantize(values, qtype), int(qtype), rows, cols, acts)


def quantize(values: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """(rows, cols) float32 as `qtype` blocks: gguf's numpy quantizer, quantize_k for the K types it lacks."""
    return quantize_k(values, int(qtype)) if int(qtype) in K_BYTES else quants.quantize(values, qtype)


def wide_tiny_model(family: str, seed: int, vocab_size: int):
    """tiny_model with rows of 256 and 512 values (K types' 256-value blocks)."""
    from transformers import AutoModelForCausalLM

    from racer_core.testing import tiny_config

    torch.manual_seed(seed)
    config = tiny_config(family, vocab_size)
    config.hidden_size, config.intermediate_size, config.initializer_range = 256, 512, 0.2
    config.head_dim = 64  # 4 heads of 64: o_proj's rows of 256
    return AutoModelForCausalLM.from_config(config).eval()


def quantized_lean(model, qtype: GGMLQuantizationType, acts: str | None = None) -> tuple[LeanForward, LeanForward]:
    """A lean forward multiplying `model`'s linears as `qtype` blocks (activations
    as `acts`), and a plain float32 one on the same dequantized values (the
    model's own tensors are overwritten with them)."""
    weights = weights_from_model(model, family_of(model.config))
    names = ("qkv", "o", "gate_up", "down")
    layers = [replace(layer, **{name: quant_weight(getattr(layer, name).plain(), qtype, acts) for name in names})
              for layer in weights.layers]
    quantized = replace(weights, layers=layers, lm_head=quant_weight(weights.lm_head.plain(), qtype, acts))
    with torch.no_grad():  # the transformers model (and the plain forward) on the same values
        for lean, plain in zip(layers, weights.layers, strict=True):
            for name in names:
                getattr(plain, name).plain().copy_(getattr(lean, name).plain())
        weights.lm_head.plain().copy_(quantized.lm_head.plain())
    return LeanForward(quantized), LeanForward(weights, pack=False)


def _f16(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).view(np.uint8).reshape(-1, 2)


def quantize_k(values: np.ndarray, qtype: int) -> np.ndarray:
    """A plain Q4_K / Q5_K / Q6_K quantizer for tests (round to nearest, no search as
    llama.cpp's makes): (rows, cols) float32 -> (rows, bytes per row), cols a
    multiple of 256. gguf's numpy dequantizes what this writes."""
    rows, cols = values.shape
    x = values.astype(np.float32).reshape(-1, 256)
    n = x.shape[0]
    if qtype == 14:  # Q6_K: d * sc[16] * (q - 32), q in 0..63
        groups = x.reshape(n, 16, 16)
        scale = np.abs(groups).max(-1) / 31 + 1e-12
        d = (scale.max(-1) / 127).astype(np.float16).astype(np.float32)
        sc = np.clip(np.round(scale / d[:, None]), -128, 127).astype(np.int8)
        step = d[:, None, None] * sc.astype(np.float32)[..., None]
        q = (np.clip(np.round(groups / np.where(step == 0, 1, step)), -32, 31) + 32).astype(np.uint8).reshape(n, 2, 4, 32)
        ql = np.zeros((n, 2, 64), dtype=np.uint8)
        qh = np.zeros((n, 2, 32), dtype=np.uint8)
        for k in range(4):  # quarter k of each 128: nibbles in ql[(k & 1) * 32 ...] at shift 4 * (k >> 1), 2 bits in qh
            ql[:, :, 32 * (k & 1) : 32 * (k & 1) + 32] |= (q[:, :, k] & 0x0F) << (4 * (k >> 1))
            qh |= (q[:, :, k] >> 4) << (2 * k)
        out = np.concatenate([ql.reshape(n, 128), qh.reshape(n, 64), sc.view(np.uint8), _f16(d)], axis=1)
    else:  # Q4_K / Q5_K: (d * sc[8]) * q - dmin * m[8], q in 0..15 / 0..31, sc and m in 0..63
        top = 31 if qtype == 13 else 15
        subs = x.reshape(n, 8, 32)
        low = np.minimum(subs.min(-1), 0)
        scale = (subs.max(-1) - low) / top + 1e-12
        d = (scale.max(-1) / 63).astype(np.float16).astype(np.float32)
        dmin = (-low.min(-1) / 63 + 1e-12).astype(np.float16).astype(np.float32)
        sc = np.clip(np.round(scale / d[:, None]), 1, 63).astype(np.uint8)
        m = np.clip(np.round(-low / dmin[:, None]), 0, 63).astype(np.uint8)
        step = d[:, None, None] * sc.astype(np.float32)[..., None]
        q = np.clip(np.round((subs + (dmin[:, None] * m.astype(np.float32))[..., None]) / step), 0, top).astype(np.uint8)
        packed = np.zeros((n, 12), dtype=np.uint8)  # get_scale_min's layout, inverted
        packed[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
        packed[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
        packed[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
        qs = ((q[:, 0::2] & 0x0F) | ((q[:, 1::2] & 0x0F) << 4)).reshape(n, 128)  # chunk j: sub-blocks 2j, 2j+1
        qh = [(((q[:, s] >> 4) & 1) << s).astype(np.uint8) for s in range(8)] if qtype == 13 else []
        fifth = [np.bitwise_or.reduce(np.stack(qh), axis=0)] if qh else []  # byte l: bit s is sub-block s's
        out = np.concatenate([_f16(d), _f16(dmin), packed, *fifth, qs], axis=1)
    return np.ascontiguousarray(out.reshape(rows, -1))


def permute_for_llama_cpp(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's row order for q and k (convert_hf_to_gguf's permute)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


Q = GGMLQuantizationType
KERNEL_TYPES = (Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q4_K, Q.Q5_K, Q.Q6_K)
"""The block types the 4-bit kernel reads."""


def write_gguf(path: Path, tensors: dict[str, tuple[np.ndarray, Q]], arch: str = "llama") -> None:
    """A GGUF of `tensors` (values, type), written by gguf's own writer: F32 as they are, uint8 arrays as
    blocks, floats quantized to a type gguf's numpy quantizes, zero blocks of any other type."""
    writer = gguf.GGUFWriter(str(path), arch)
    for name, (values, qtype) in tensors.items():
        if qtype in (Q.F32,):
            writer.add_tensor(name, values.astype(np.float32))
        elif values.dtype == np.uint8:  # blocks as they are
            writer.add_tensor(name, values, raw_dtype=qtype)
        elif qtype in KERNEL_TYPES:
            writer.add_tensor(name, quantize(values, qtype), raw_dtype=qtype)
        else:  # a type the kernel lacks: its bytes only matter for the name and type
            size = gguf.GGML_QUANT_SIZES[qtype]
            data = np.zeros((values.shape[0], values.shape[1] // size[0] * size[1]), dtype=np.uint8)
            writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
