"""A lean verification forward for Llama-shaped decoders (Llama, Mistral,
Qwen2 and Qwen3 with dense MLPs).

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

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from racer_core.packed_linear import PackedWeight, is_packed, linear, pack_weights

# Families whose decoder layer is exactly: rmsnorm, attention (optional q/k
# rmsnorm, optional q/k/v bias), residual, rmsnorm, SiLU-gated MLP, residual.
_FAMILIES = {"llama", "mistral", "qwen2", "qwen3"}


@dataclass
class _Layer:
    input_norm: torch.Tensor
    qkv: torch.Tensor | PackedWeight
    qkv_bias: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    o: torch.Tensor | PackedWeight
    post_norm: torch.Tensor
    gate_up: torch.Tensor | PackedWeight
    down: torch.Tensor | PackedWeight


def _fuse(*linears: Any, name: str) -> torch.Tensor:
    """One tensor holding the linears' `name` tensors stacked on dim 0; each
    linear then holds a view into it, so fusing costs no extra memory and the
    stock forward (used by the transformers anchors) sees the same values."""
    parts = [getattr(linear, name) for linear in linears]
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


@dataclass
class LeanWeights:
    """What the lean forward needs: the weight tensors (fused where it pays)
    and the few numbers of the config; from a transformers model
    (`weights_from_model`) or straight from a checkpoint (lean_model.py)."""

    embed: torch.Tensor
    final_norm: torch.Tensor
    lm_head: torch.Tensor | PackedWeight
    layers: list[_Layer]
    eps: float
    heads: int
    kv_heads: int
    head_dim: int
    inv_freq: torch.Tensor
    rope_scale: float = 1.0

    def tensors(self) -> list[torch.Tensor | PackedWeight]:
        """Each distinct tensor once (a tied lm_head is the embedding)."""
        found: dict[int, torch.Tensor] = {}
        for layer in self.layers:
            for value in vars(layer).values():
                if value is not None:
                    found.setdefault(id(value), value)
        for value in (self.embed, self.final_norm, self.lm_head):
            found.setdefault(id(value), value)
        return list(found.values())


def weights_from_model(model: Any) -> LeanWeights:
    """The weights of a transformers Llama-shaped model; its q/k/v and
    gate/up linears become views into the fused tensors."""
    config = model.config
    inner = model.model
    heads = int(config.num_attention_heads)
    rotary = inner.rotary_emb
    return LeanWeights(
        embed=inner.embed_tokens.weight, final_norm=inner.norm.weight, lm_head=model.lm_head.weight,
        layers=[_layer(layer) for layer in inner.layers], eps=float(config.rms_norm_eps), heads=heads,
        kv_heads=int(config.num_key_value_heads),
        head_dim=int(getattr(config, "head_dim", None) or config.hidden_size // heads),
        inv_freq=rotary.inv_freq.float(), rope_scale=float(getattr(rotary, "attention_scaling", 1.0)),
    )


def _layer(layer: Any) -> _Layer:
    attn, mlp = layer.self_attn, layer.mlp
    q_norm = getattr(attn, "q_norm", None)
    k_norm = getattr(attn, "k_norm", None)
    return _Layer(
        input_norm=layer.input_layernorm.weight,
        qkv=_fuse(attn.q_proj, attn.k_proj, attn.v_proj, name="weight"),
        qkv_bias=_fuse(attn.q_proj, attn.k_proj, attn.v_proj, name="bias") if attn.q_proj.bias is not None else None,
        q_norm=q_norm.weight if q_norm is not None else None, k_norm=k_norm.weight if k_norm is not None else None,
        o=attn.o_proj.weight, post_norm=layer.post_attention_layernorm.weight,
        gate_up=_fuse(mlp.gate_proj, mlp.up_proj, name="weight"), down=mlp.down_proj.weight,
    )


class LeanForward:
    """logits = forward(ids, positions, mask, cache): one call per verification.

    The linear weights are packed once for the CPU's matrix library
    (packed_linear.py) where that works; `weights` is then the packed set
    (hold it instead of the plain one, so the plain copy can go)."""

    def __init__(self, weights: LeanWeights, pack: bool = True) -> None:
        self.weights = pack_weights(weights) if pack else weights
        self.packed = is_packed(self.weights)
        self.scale = weights.head_dim**-0.5
        self.dtype = weights.embed.dtype
        self._cos = self._sin = torch.empty(0)
        self._grow_rope(1024)

    def _grow_rope(self, needed: int) -> None:
        w = self.weights
        size = max(needed, 2 * self._cos.shape[0])
        positions = torch.arange(size, dtype=torch.float32, device=w.inv_freq.device)
        freqs = positions[:, None] * w.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        self._cos = (emb.cos() * w.rope_scale).to(self.dtype)
        self._sin = (emb.sin() * w.rope_scale).to(self.dtype)

    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Any,
                 logit_rows: int | None = None) -> torch.Tensor:
        """Logits (T, vocab) for the T fed tokens; only the first `logit_rows` rows if given."""
        w = self.weights
        if int(positions.max()) >= self._cos.shape[0]:
            self._grow_rope(int(positions.max()) + 1)
        t = ids.shape[0]
        cos = self._cos[positions][None, None]  # (1, 1, T, D)
        sin = self._sin[positions][None, None]
        h = F.embedding(ids, w.embed)[None]  # (1, T, H)
        nq, nkv, d = w.heads * w.head_dim, w.kv_heads * w.head_dim, w.head_dim
        gqa = w.heads != w.kv_heads
        for layer, cache_layer in zip(w.layers, cache.layers, strict=True):
            x = _rms(h, layer.input_norm, w.eps)
            qkv = linear(x, layer.qkv, layer.qkv_bias)
            q = qkv[..., :nq].view(1, t, w.heads, d)
            k = qkv[..., nq : nq + nkv].view(1, t, w.kv_heads, d)
            v = qkv[..., nq + nkv :].view(1, t, w.kv_heads, d)
            if layer.q_norm is not None:
                q = _rms(q, layer.q_norm, w.eps)
                k = _rms(k, layer.k_norm, w.eps)
            q = _rotate(q.transpose(1, 2), cos, sin)
            k = _rotate(k.transpose(1, 2), cos, sin)
            keys, values = cache_layer.update(k, v.transpose(1, 2))
            a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scale, enable_gqa=gqa)
            h = h + linear(a.transpose(1, 2).reshape(1, t, nq), layer.o)
            x = _rms(h, layer.post_norm, w.eps)
            gate, up = linear(x, layer.gate_up).chunk(2, dim=-1)
            h = h + linear(F.silu(gate) * up, layer.down)
        rows = h[0] if logit_rows is None else h[0, :logit_rows]
        return linear(_rms(rows, w.final_norm, w.eps), w.lm_head)


def config_supported(config: Any) -> bool:
    """Whether a config (transformers' or lean_model.CheckpointConfig) names a
    decoder the lean forward computes exactly."""
    if config is None or getattr(config, "model_type", None) not in _FAMILIES:
        return False
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False):
        return False
    if getattr(config, "pretraining_tp", 1) not in (1, None):
        return False
    kind = rope_of(config)[1]
    if kind is not None and kind not in ROPE_TYPES:
        return False  # e.g. dynamic: its frequencies change with the sequence length
    if getattr(config, "attention_bias", False) and config.model_type not in ("qwen2",):
        return False  # biased o_proj in llama-style configs; not worth a special case here
    return True


ROPE_TYPES = ("default", "linear", "llama3")


def rope_of(config: Any) -> tuple[dict[str, Any], str | None]:
    """The config's rope parameters (transformers 5's rope_parameters or the
    older rope_scaling) and its rope type; the type is None when the
    parameters are not a dict (then transformers' rotary module is the authority)."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if not isinstance(params, dict):
        return {}, None
    return params, params.get("rope_type", params.get("type", "default"))


def lean_forward_for(model: Any) -> LeanForward | None:
    """A LeanForward for a supported dense decoder, else None (keep the stock forward)."""
    if not config_supported(getattr(model, "config", None)):
        return None
    if not type(model).__module__.startswith("transformers.models."):
        return None  # remote code may differ from the stock class it names
    if getattr(model, "hf_quantizer", None) is not None or getattr(model, "is_quantized", False):
        return None  # quantized linears are not plain weight matrices
    if len({p.device for p in model.parameters()}) > 1:
        return None  # spread over devices (device_map): the stock forward moves activations between them
    try:
        return LeanForward(weights_from_model(model))
    except AttributeError:
        return None
