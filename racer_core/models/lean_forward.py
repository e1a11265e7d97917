"""A lean verification forward for Llama-shaped decoders (the families in
racer_core/models/families: Llama, Mistral, Qwen2 and Qwen3 with dense MLPs, Phi-3).

On a small model and a CPU, most of a transformers forward is Python and
small-op bookkeeping (mask preparation, rope module calls, cache plumbing,
output dataclasses), not matrix multiplies. This runs the same math on the
model's own weight tensors with a few fused projections (q|k|v and
gate|up in one matmul each) and a rope table built once, and writes keys and
values into the same TreeCache the stock path uses. Models of other shapes
(mixtures of experts, unusual norms or activations) keep the stock forward:
`lean_forward_for` returns None for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

import torch
import torch.nn.functional as F

from racer_core.models.families import family_of
from racer_core.models.family import Family
from racer_core.models.formats import half_weights
from racer_core.models.formats.choose import format_for, with_format
from racer_core.models.formats.linear import Embedding, Linear, PlainLinear
from racer_core.models.formats.quant_layer import FusedLayers
from racer_core.models.formats.quant_weights import describe
from racer_core.verify.attention import attend
from racer_core.verify.tree_attention import rope_of


@dataclass
class _Layer:
    input_norm: torch.Tensor
    qkv: Linear
    qkv_bias: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    o: Linear
    post_norm: torch.Tensor
    gate_up: Linear
    down: Linear


def _fuse(*linears: Any, name: str) -> torch.Tensor:
    """One tensor holding the linears' `name` tensors stacked on dim 0; each
    linear then holds a view into it, so fusing costs no extra memory and the
    stock forward (used by the transformers anchors) sees the same values."""
    parts = [getattr(linear, name) for linear in linears]
    if len(parts) == 1:  # stored fused already (Phi-3's qkv_proj, gate_up_proj)
        return parts[0]
    with torch.no_grad():
        fused = torch.cat([p.detach() for p in parts])
        point_into(fused, *parts)
    return fused


def point_into(fused: torch.Tensor, *parts: torch.Tensor) -> None:
    """Make each part hold its consecutive rows of `fused` (a view, no copy)."""
    start = 0
    for part in parts:
        size = part.shape[0]
        if part.shape != fused[start : start + size].shape:
            raise ValueError("the transformers model's shapes differ from the fused weights'")
        part.data = fused[start : start + size]
        start += size


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # The same order of operations as transformers' RMSNorm: in fp32, then cast back.
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _rotate_rolled(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """_rotate in four ops instead of seven, the same bits: (-a) * s is -(a * s)
    exactly, so the sign moves into the table (sin_signed = [-sin, sin] by halves)."""
    return x * cos + torch.roll(x, x.shape[-1] // 2, dims=-1) * sin_signed


@dataclass
class LeanWeights:
    """What the lean forward needs: the weights (the linears fused where it pays,
    each in one format, formats/linear.py) and the few numbers of the config; from
    a transformers model (`weights_from_model`) or straight from a checkpoint (reader.py)."""

    embed: Embedding
    final_norm: torch.Tensor
    lm_head: Linear
    layers: list[_Layer]
    eps: float
    heads: int
    kv_heads: int
    head_dim: int
    inv_freq: torch.Tensor
    rope_scale: float = 1.0

    def linears(self) -> list[Linear]:
        """The layers' linears and the lm_head."""
        return [*(w for layer in self.layers for w in (layer.qkv, layer.o, layer.gate_up, layer.down)), self.lm_head]

    def tensors(self) -> list[torch.Tensor | Linear]:
        """Each distinct tensor or linear once (a tied lm_head is the embedding)."""
        found: dict[int, torch.Tensor | Linear] = {}
        for layer in self.layers:
            for value in vars(layer).values():
                if value is not None:
                    found.setdefault(id(value), value)
        for value in (self.embed, self.final_norm, self.lm_head):
            found.setdefault(id(value), value)
        return list(found.values())


def submodule(root: Any, path: str) -> Any:
    """The module at a dotted path (a Family's names are paths in the model too)."""
    return reduce(getattr, path.split("."), root)


def weights_from_model(model: Any, family: Family) -> LeanWeights:
    """The weights of a transformers model of the family, its own parameters as
    PlainLinears; its q/k/v and gate/up linears become views into the fused tensors."""
    config = model.config
    heads = int(config.num_attention_heads)
    rotary = model.model.rotary_emb
    embed = PlainLinear(submodule(model, family.embed).weight)
    head = submodule(model, family.lm_head).weight
    return LeanWeights(
        embed=embed, final_norm=submodule(model, family.final_norm).weight,
        lm_head=embed if head is embed.weight else PlainLinear(head),  # tied: one linear, as one tensor
        layers=[_layer(layer, family) for layer in submodule(model, family.layers)], eps=float(config.rms_norm_eps),
        heads=heads, kv_heads=int(config.num_key_value_heads),
        head_dim=int(getattr(config, "head_dim", None) or config.hidden_size // heads),
        inv_freq=rotary.inv_freq.float(), rope_scale=float(getattr(rotary, "attention_scaling", 1.0)),
    )


def _layer(layer: Any, family: Family) -> _Layer:
    qkv = [submodule(layer, path) for path in family.qkv]
    gate_up = [submodule(layer, path) for path in family.gate_up]
    return _Layer(
        input_norm=submodule(layer, family.input_norm).weight,
        qkv=PlainLinear(_fuse(*qkv, name="weight")),
        qkv_bias=_fuse(*qkv, name="bias") if qkv[0].bias is not None else None,
        q_norm=submodule(layer, family.q_norm).weight if family.qk_norm else None,
        k_norm=submodule(layer, family.k_norm).weight if family.qk_norm else None,
        o=PlainLinear(submodule(layer, family.o).weight), post_norm=submodule(layer, family.post_norm).weight,
        gate_up=PlainLinear(_fuse(*gate_up, name="weight")), down=PlainLinear(submodule(layer, family.down).weight),
    )


class LeanForward:
    """logits = forward(ids, positions, mask, cache): one call per verification.

    The plain linear weights take their format here, once (formats/choose.py):
    packed for the CPU's matrix library (packed_linear.py) where that works, or
    with `half` stored in float16 for fbgemm (half_weights.py); `weights` is then
    the prepared set (hold it instead of the plain one, so the plain copy can go).
    The forward calls each linear as it is (formats/linear.py), whatever its format."""

    def __init__(self, weights: LeanWeights, pack: bool = True, half: bool = False) -> None:
        self.weights = with_format(weights, format_for(half, pack, weights.lm_head.device))
        self.packed = self.weights.lm_head.kind == "packed"
        self.half = self.weights.lm_head.kind == "fp16"
        self.quant = describe(self.weights)  # e.g. 'gguf Q4_1+Q8_0': a GGUF's own blocks (quant_weights.py)
        self.scale = weights.head_dim**-0.5
        self.dtype = weights.embed.dtype
        # every linear in a GGUF's blocks: each layer is one C++ call (quant_layer.py)
        self.fused = FusedLayers(self.weights, self.scale) if FusedLayers.fits(self.weights) else None
        self._cos = self._sin = self._sin_signed = torch.empty(0)
        self._grow_rope(1024)

    def _grow_rope(self, needed: int) -> None:
        w = self.weights
        size = max(needed, 2 * self._cos.shape[0])
        positions = torch.arange(size, dtype=torch.float32, device=w.inv_freq.device)
        freqs = positions[:, None] * w.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        self._cos = (emb.cos() * w.rope_scale).to(self.dtype)
        self._sin = (emb.sin() * w.rope_scale).to(self.dtype)
        half = self._sin.shape[-1] // 2
        self._sin_signed = torch.cat((-self._sin[:, :half], self._sin[:, half:]), dim=-1)

    def cost_identity(self) -> list[str]:
        """What sets this forward's costs apart, for the cost curve's cache key: packed
        weights; fp16 weights' calls padded to fbgemm's row-invariant counts (a curve
        measured before 4 Dec 2026 did without); a GGUF's blocks with their activation
        mode, layer body and kernel ISA (the AVX2 and AVX-VNNI builds give the same bits at other costs)."""
        found = ["packed"] if self.packed else []
        if self.half and half_weights.row_counts().padded:
            found.append("fp16 rows padded")
        if self.quant:
            acts = {w.acts for w in self.weights.linears() if w.acts is not None}
            isas = {w.isa for w in self.weights.linears() if getattr(w, "isa", None)}
            found += [self.quant, *sorted(acts), "fused layers" if self.fused is not None else "torch layers",
                      *(f"kernel {isa}" for isa in sorted(isas))]
        return found

    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Any,
                 logit_rows: int | None = None, capture: tuple[int, ...] = (), last_only: bool = False) -> Any:
        """Logits (T, vocab) for the T fed tokens; only the first `logit_rows` rows if given,
        only the last row's ((1, vocab)) with `last_only`.

        With `capture` (layer ids, as an EAGLE-3 head names them): (logits, the
        states entering those layers concatenated, (T, len(capture) * hidden))."""
        (logits, captured), = self._run([Part(ids, positions, mask, cache, logit_rows, last_only)], capture)
        return (logits, captured) if capture else logits

    def batch(self, parts: Sequence[Part]) -> list[torch.Tensor]:
        """The logits of several sequences' rows in one pass (continuous batching):
        every linear runs once over all the parts' rows, attention per part over
        its own cache and mask (racer_core/verify/attention.py). Each part's
        logits are what a pass of that part alone gives, as far as the linears
        are row-invariant (packed float32 is, by test)."""
        return [logits for logits, _ in self._run(list(parts), ())]

    def _run(self, parts: list[Part], capture: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        w = self.weights
        top = max(int(part.positions.max()) for part in parts)
        if top >= self._cos.shape[0]:
            self._grow_rope(top + 1)
        sizes = [part.ids.shape[0] for part in parts]
        ids = parts[0].ids if len(parts) == 1 else torch.cat([part.ids for part in parts])
        positions = parts[0].positions if len(parts) == 1 else torch.cat([part.positions for part in parts])
        fused = self.fused
        if fused is not None and fused.whole_step and not capture and self._cos.dtype == torch.float32:
            # the embedding, the layers, the final norm and the head in one native call (quant_layer.py)
            keep = _kept_rows(parts, sizes)
            return _split(fused.step(ids.cpu(), positions.cpu(), self._cos, self._sin_signed, parts, keep), keep)
        cos, sin_signed = self._cos[positions], self._sin_signed[positions]  # (T, D)
        # a GGUF's tied embedding stays in its blocks (quant_weights.py): rows dequantized as looked up
        h = w.embed.rows(ids)[None]  # (1, T, H)
        if fused is not None and h.dtype == torch.float32 and h.device.type == "cpu":
            flat = h[0].contiguous()
            captured = fused.run(flat, cos, sin_signed, parts, capture)
            h = flat[None]
        else:
            h, captured = self._layers(h, cos[None, None], sin_signed[None, None], parts, sizes, capture)
        return self._head(h, parts, sizes, captured, capture)

    def _layers(self, h: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor, parts: list[Part],
                sizes: list[int], capture: tuple[int, ...]) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """The decoder layers in torch ops: h (1, T, H) in, out; the states entering the `capture` layers."""
        w = self.weights
        t = h.shape[1]
        nq, nkv, d = w.heads * w.head_dim, w.kv_heads * w.head_dim, w.head_dim
        captured: dict[int, torch.Tensor] = {}
        for index, layer in enumerate(w.layers):
            if index in capture:
                captured[index] = h[0]
            x = _rms(h, layer.input_norm, w.eps)
            qkv = layer.qkv(x, layer.qkv_bias)
            v = qkv[..., nq + nkv :].view(1, t, w.kv_heads, d).transpose(1, 2)
            if layer.q_norm is None:  # q and k rotated together: their heads side by side
                qk = _rotate_rolled(qkv[..., : nq + nkv].view(1, t, w.heads + w.kv_heads, d).transpose(1, 2),
                                    cos, sin_signed)
                q, k = qk[:, : w.heads], qk[:, w.heads :]
            else:
                q = _rms(qkv[..., :nq].view(1, t, w.heads, d), layer.q_norm, w.eps)
                k = _rms(qkv[..., nq : nq + nkv].view(1, t, w.kv_heads, d), layer.k_norm, w.eps)
                q = _rotate_rolled(q.transpose(1, 2), cos, sin_signed)
                k = _rotate_rolled(k.transpose(1, 2), cos, sin_signed)
            outs = []
            start = 0
            for part, size in zip(parts, sizes, strict=True):
                rows = slice(start, start + size)
                keys, values = part.cache.layers[index].update(k[:, :, rows], v[:, :, rows])
                outs.append(attend(q[:, :, rows], keys, values, part.mask, self.scale))
                start += size
            a = outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)
            h = h + layer.o(a.transpose(1, 2).reshape(1, t, nq))
            x = _rms(h, layer.post_norm, w.eps)
            gate, up = layer.gate_up(x).chunk(2, dim=-1)
            h = h + layer.down(F.silu(gate) * up)
        return h, captured

    def _head(self, h: torch.Tensor, parts: list[Part], sizes: list[int], captured: dict[int, torch.Tensor],
              capture: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        w = self.weights
        keep = _kept_rows(parts, sizes)
        if len(parts) == 1:
            whole = parts[0].logit_rows is None and not parts[0].last_only
            rows = h[0] if whole else h[0, keep[0][0] : keep[0][1]]
        else:
            rows = torch.cat([h[0, a:b] for a, b in keep])
        # the fused layers' final norm is theirs (their norms' order, no torch ops between them and the head)
        fused = self.fused if rows.dtype == torch.float32 and rows.device.type == "cpu" else None
        logits = w.lm_head(fused.final_norm(rows) if fused is not None else _rms(rows, w.final_norm, w.eps))
        out = _split(logits, keep)
        if capture:  # one part only (eagle3 runs per conversation): every fed row's states
            out = [(out[0][0], torch.cat([captured[i] for i in capture], dim=-1))]
        return out


def _kept_rows(parts: Sequence[Part], sizes: list[int]) -> list[tuple[int, int]]:
    """Each part's rows whose logits are asked for, [first, last) in the pass's rows: only
    those go through the head."""
    keep, start = [], 0
    for part, size in zip(parts, sizes, strict=True):
        if part.last_only:
            keep.append((start + size - 1, start + size))
        else:
            keep.append((start, start + (size if part.logit_rows is None else min(part.logit_rows, size))))
        start += size
    return keep


def _split(logits: torch.Tensor, keep: list[tuple[int, int]]) -> list[tuple[torch.Tensor, None]]:
    """The head's rows (the `keep` ranges' one after another) back into one entry per part."""
    out, at = [], 0
    for first, last in keep:
        out.append((logits[at : at + last - first], None))
        at += last - first
    return out


@dataclass
class Part:
    """One sequence's rows in a (batched) verification pass."""

    ids: torch.Tensor  # (T,) the fed tokens
    positions: torch.Tensor  # (T,) their rope positions
    mask: torch.Tensor  # (1, 1, T, L + T) additive, over the sequence's cache then these rows
    cache: Any  # the sequence's TreeCache; the rows' keys and values are appended to it
    logit_rows: int | None = None  # only the first rows' logits (None: all)
    last_only: bool = False  # only the last row's logits (a prompt chunk whose other rows no drafter reads)


def config_supported(config: Any) -> bool:
    """Whether a config (transformers' or reader.CheckpointConfig) names a
    decoder of one of the families (racer_core/models/families) that the lean
    forward computes exactly."""
    family = family_of(config) if config is not None else None
    if family is None:
        return False
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False):
        return False
    if getattr(config, "pretraining_tp", 1) not in (1, None):
        return False
    params, kind = rope_of(config)
    if kind is not None and kind not in family.rope_types:
        return False  # e.g. dynamic: its frequencies change with the sequence length
    if params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", None)) not in (1, 1.0, None):
        return False  # rotary on part of each head only: this forward rotates all of it
    if getattr(config, "attention_bias", False) and not family.qkv_bias:
        return False  # biased o_proj in llama-style configs; not worth a special case here
    return True


def lean_forward_for(model: Any, half: bool = False) -> LeanForward | None:
    """A LeanForward for a supported dense decoder (its linears in float16
    with `half`), else None (keep the stock forward)."""
    config = getattr(model, "config", None)
    family = family_of(config) if config_supported(config) else None
    if family is None:
        return None
    if not type(model).__module__.startswith("transformers.models."):
        return None  # remote code may differ from the stock class it names
    if getattr(model, "hf_quantizer", None) is not None or getattr(model, "is_quantized", False):
        return None  # quantized linears are not plain weight matrices
    if len({p.device for p in model.parameters()}) > 1:
        return None  # spread over devices (device_map): the stock forward moves activations between them
    try:
        return LeanForward(weights_from_model(model, family), half=half)
    except AttributeError:
        return None
