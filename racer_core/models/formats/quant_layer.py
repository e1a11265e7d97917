"""The lean forward's decoder layers as one C++ call each, where all of a
model's linears are in a GGUF's blocks (quant/layer.hpp).

With 4-bit weights the linears of a small model's step take a few
milliseconds, and the thirty-odd small torch ops around them in every layer
(norms, rope, the cache writes, residual adds, silu) take nearly as long
again in dispatch. Here each layer is one call into the extension, which runs
the same steps on the same buffers: the keys and values go straight into each
sequence's TreeCache buffers, attention is the same batch-invariant kernel
(racer_core/verify/attention_kernel.hpp). Every row is computed from its own
values in one fixed order, so a tree row still gets the bits plain decoding
gets for its token (tests/core/test_bit_exact.py).

RACER_FUSED_LAYERS=0 keeps the torch layer body (for comparisons).

The cache holds float16 keys and values, as llama.cpp's does by default: each
written row is rounded once (to nearest even), and every later read widens it
exactly, so a tree row and plain decoding still read the same values. A step
over a few hundred cached tokens reads the cache as much as the 4-bit
weights, and several conversations in one pass read one cache each: float16
halves those bytes. RACER_KV_CACHE=float32 keeps float32 rows (for comparisons).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from racer_core.common.errors import ModelLoadError
from racer_core.models.formats.linear import PlainLinear
from racer_core.models.formats.quant import repack
from racer_core.models.formats.quant_weights import BLOCK_LINEARS, QuantWeight
from racer_core.verify.attention import masked_below

DISABLE_ENV = "RACER_FUSED_LAYERS"
KV_CACHE_ENV = "RACER_KV_CACHE"
KV_CACHE_CHOICES = {"float16": torch.float16, "float32": torch.float32}


def kv_cache_dtype() -> torch.dtype:
    """The fused layers' cache dtype: float16 unless RACER_KV_CACHE says float32."""
    name = os.environ.get(KV_CACHE_ENV, "float16")
    if name not in KV_CACHE_CHOICES:
        raise ModelLoadError(f"{KV_CACHE_ENV}={name!r}: use one of {', '.join(KV_CACHE_CHOICES)}")
    return KV_CACHE_CHOICES[name]


def _vector(t: torch.Tensor | None) -> np.ndarray | None:
    return None if t is None else t.detach().float().contiguous().numpy()


class FusedLayers:
    """All the decoder layers of a LeanWeights whose linears are QuantWeights of one activation mode."""

    def __init__(self, weights: Any, scale: float) -> None:
        from racer_core.models.formats.quant import _quant

        first = weights.layers[0].qkv
        specs = []
        for layer in weights.layers:
            specs.append((
                *(w.layer_spec() for w in (layer.qkv, layer.o, layer.gate_up, layer.down)),
                _vector(layer.input_norm), _vector(layer.post_norm), _vector(layer.qkv_bias),
                _vector(layer.q_norm), _vector(layer.k_norm),
            ))
        self.kv_heads, self.head_dim = weights.kv_heads, weights.head_dim
        self._hidden = int(first.shape[1])
        self._final_norm, self._eps = _vector(weights.final_norm), float(weights.eps)
        self._norm_rows = _quant.rms_norm_rows  # looked up once: called every step
        self.kv_dtype = kv_cache_dtype()
        self.count = len(weights.layers)
        self._layers = _quant.DecoderLayers(
            specs, int(first.shape[1]), weights.heads, weights.kv_heads, weights.head_dim,
            int(weights.layers[0].gate_up.shape[0]) // 2, float(weights.eps), float(scale), first.isa,
            first.acts == "q8", first.isa == "avx512")  # (an AVX2 class asked for gives the kernel avx2 or avxvnni)
        self.whole_step = self._whole_step(weights, int(first.shape[1]))

    def _whole_step(self, weights: Any, hidden: int) -> bool:
        """Gives the layers the embedding and the head where `step` can run them: an embedding in
        blocks or float32 rows, a head in blocks (QuantWeight) of the layers' width."""
        embed, head = weights.embed, weights.lm_head
        if not isinstance(head, QuantWeight) or int(head.shape[1]) != hidden:
            return False
        if isinstance(embed, QuantWeight):
            if embed.repacked:
                size, _ = repack.FIELDS[embed.qtype]
                self._layers.set_embedding(embed.blocks, embed.qtype, True, size, repack.FIELD_TABLES[embed.qtype],
                                           embed.isa)
            else:
                self._layers.set_embedding(embed.blocks, embed.qtype, False, 0, None, embed.isa)
        elif isinstance(embed, PlainLinear) and embed.weight.dtype == torch.float32 \
                and embed.weight.device.type == "cpu" and embed.weight.dim() == 2 and int(embed.weight.shape[1]) == hidden:
            self._layers.set_embedding(embed.weight.detach().contiguous().numpy())
        else:
            return False
        self._layers.set_head(head.layer_spec(), int(head.shape[0]), head.isa, head.acts == "q8", self._final_norm)
        self._vocab = int(head.shape[0])
        return True

    @property
    def wide_attention(self) -> bool:
        """Whether the attention may take its 512-bit path (the same bits as its AVX2 path; for comparisons)."""
        return self._layers.wide_attention

    @wide_attention.setter
    def wide_attention(self, wide: bool) -> None:
        self._layers.wide_attention = wide

    @staticmethod
    def fits(weights: Any) -> bool:
        """Whether every layer's four linears are QuantWeights (or QuantParts) with one ISA and
        activation mode: the one place the forward asks for a concrete format, once at load."""
        if os.environ.get(DISABLE_ENV, "1") == "0" or not weights.layers:
            return False
        linears = [w for layer in weights.layers for w in (layer.qkv, layer.o, layer.gate_up, layer.down)]
        if not all(isinstance(w, BLOCK_LINEARS) for w in linears):
            return False
        if len({(w.isa, w.acts) for w in linears}) != 1:
            return False
        try:
            from racer_core.models.formats.quant import _quant
        except ImportError:
            return False
        return hasattr(_quant, "DecoderLayers")

    def final_norm(self, rows: torch.Tensor) -> torch.Tensor:
        """The model's final RMSNorm of `rows` ((T, hidden) float32), computed as the layers'
        norms are (one native call, no torch ops: it ran between the layers and the head each step)."""
        x = rows.contiguous()
        out = torch.empty_like(x)
        self._norm_rows(x.numpy(), self._final_norm, self._eps, out.numpy(), torch.get_num_threads())
        return out

    def run(self, h: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor, parts: Sequence[Any],
            capture: tuple[int, ...] = ()) -> dict[int, torch.Tensor]:
        """Every layer on h ((T, hidden) float32, contiguous, updated in place);
        cos and sin_signed (T, head_dim) for the rows' positions. Each part's
        rows are appended to its cache. Returns the states entering the
        `capture` layers (copies)."""
        t = h.shape[0]
        meta, keep, caches = self._open(parts)
        threads = torch.get_num_threads()
        captured: dict[int, torch.Tensor] = {}
        start = 0
        for stop in [*sorted(i for i in set(capture) if 0 <= i < self.count), self.count]:
            self._layers.run(start, stop, h.data_ptr(), t, cos.data_ptr(), sin_signed.data_ptr(), meta, caches,
                             threads, self.kv_dtype == torch.float16)
            if stop < self.count:
                captured[stop] = h.clone()
            start = stop
        for part in parts:
            part.cache.advance_all(part.ids.shape[0])
        return captured

    def step(self, ids: torch.Tensor, positions: torch.Tensor, cos_table: torch.Tensor, sin_table: torch.Tensor,
             parts: Sequence[Any], keep: Sequence[tuple[int, int]]) -> torch.Tensor:
        """A whole pass in one native call (`whole_step` models): the embedding's rows of `ids`, every
        layer, each part's rows appended to its cache, then the final norm and the head of the rows in
        the `keep` ranges ([first, last), in order): their logits (rows kept, vocab). The rope factors
        are the tables' (the forward's, float32) rows at `positions`. The same native calls as the
        embedding's `rows`, `run`, `final_norm` and the head one after another, so the same bits; only
        the Python between them is gone (a one-row step's caches are cold after its weights, and each
        Python or torch call then costs tens of microseconds)."""
        meta, masks, caches = self._open(parts)
        ranges = np.array(keep, dtype=np.int64).reshape(-1, 2)
        t = ids.shape[0]
        h = torch.empty((t, self._hidden), dtype=torch.float32)
        logits = torch.empty((int((ranges[:, 1] - ranges[:, 0]).sum()), self._vocab), dtype=torch.float32)
        self._layers.step(np.ascontiguousarray(ids.numpy(), dtype=np.int64), h.data_ptr(),
                          np.ascontiguousarray(positions.numpy(), dtype=np.int64), cos_table.data_ptr(),
                          sin_table.data_ptr(), cos_table.shape[0], meta, caches, torch.get_num_threads(),
                          self.kv_dtype == torch.float16, ranges, logits.data_ptr())
        for part in parts:
            part.cache.advance_all(part.ids.shape[0])
        return logits

    def _open(self, parts: Sequence[Any]) -> tuple[list[tuple], list[torch.Tensor], np.ndarray]:
        """Each part's (rows, cached length, mask pointer, its row stride, masked_below), the float32
        masks those pointers point into (kept alive by the caller), and every layer's cache buffers
        opened for the part's rows (int64 (parts, layers, 3))."""
        meta, masks = [], []
        caches = np.empty((len(parts), self.count, 3), dtype=np.int64)
        for p, part in enumerate(parts):
            rows = part.ids.shape[0]
            length = part.cache.layers[0].length
            mask = part.mask
            below = masked_below(mask)
            mask = mask.reshape(rows, -1).float().contiguous()
            if mask.shape[1] != length + rows:
                raise ValueError(f"mask {tuple(part.mask.shape)} for {rows} rows after {length} cached")
            masks.append(mask)
            meta.append((rows, length, mask.data_ptr(), mask.stride(0), below))
            caches[p] = part.cache.open_all(rows, self.kv_heads, self.head_dim, self.kv_dtype)
        return meta, masks, caches
