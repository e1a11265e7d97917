"""A Llama-shaped checkpoint loaded straight from its config.json and
safetensors, without transformers.

Importing transformers and its Llama modeling code takes about 2 s on a small
CPU, longer than everything else in a later start together. When the lean
forward (lean_forward.py) will verify anyway, the engine needs only the
weights and a few numbers of the config, so `load_lean_model` reads those
itself. The transformers model is built only if something asks for it (the
`hf` and `pld` anchors, a script's stock forward): `LeanModel.transformers_model`
loads it then and points its parameters at the tensors already loaded.

Anything this loader is unsure of (remote code, quantization, a rope type or
a tensor it does not know, sharded .bin weights) returns None, and the caller
loads through transformers as before.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

import torch

from racer_core.models.checkpoint.base import Checkpoint
from racer_core.models.checkpoint.files import CheckpointConfig
from racer_core.models.families import family_of
from racer_core.models.family import Family
from racer_core.models.formats.choose import format_for, own_plain_tensors, prepared
from racer_core.models.formats.linear import Linear, PlainLinear
from racer_core.models.formats.quant_weights import QuantWeight, stack_blocks
from racer_core.models.lean_forward import (
    LeanForward,
    LeanWeights,
    _Layer,
    config_supported,
    point_into,
    submodule,
)
from racer_core.verify.tree_attention import rope_of

log = logging.getLogger(__name__)


def rope_inv_freq(config: CheckpointConfig, head_dim: int) -> torch.Tensor | None:
    """The rotary inverse frequencies of a default, linear or llama3 rope, None for others."""
    params, kind = rope_of(config)
    if kind is None:
        return None
    theta = params.get("rope_theta", getattr(config, "rope_theta", None))
    partial = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0))
    if not isinstance(theta, (int, float)) or partial != 1.0:
        return None
    inv_freq = 1.0 / (float(theta) ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / float(params["factor"])
    if kind == "llama3":
        return _llama3(inv_freq, params)
    return None


def _llama3(inv_freq: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
    """Llama 3's rope: long wavelengths divided by `factor`, short ones kept,
    a linear blend between the two bands."""
    factor = float(params["factor"])
    low, high = float(params["low_freq_factor"]), float(params["high_freq_factor"])
    context = float(params["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > context / low, inv_freq / factor, inv_freq)
    blend = (context / wavelen - low) / (high - low)
    smoothed = (1 - blend) * scaled / factor + blend * scaled
    medium = (wavelen >= context / high) & (wavelen <= context / low)
    return torch.where(medium, smoothed, scaled)


class LeanModel:
    """What the engine asks of a model, from the checkpoint's own files: the
    config, the generation config's end ids, the parameters (for the device,
    dtype and the cache keys) and the lean forward."""

    def __init__(self, checkpoint: Checkpoint, config: CheckpointConfig, family: Family, weights: LeanWeights,
                 build_transformers: Callable[[], Any], half: bool = False) -> None:
        self.checkpoint = checkpoint
        self.folder = checkpoint.folder
        self.config = config
        self.family = family
        self.generation_config = checkpoint.generation_config
        self.lean = LeanForward(weights, half=half)
        self.weights = self.lean.weights  # packed (or fp16 weights) where the CPU's library takes them: the plain copy goes
        self._build_transformers = build_transformers
        self._transformers: Any = None

    def parameters(self) -> Iterator[torch.Tensor]:
        return iter(self.weights.tensors())

    def transformers_model(self) -> Any:
        """transformers' model of this checkpoint, loaded on first use, its
        parameters pointed at this model's tensors (no second copy kept)."""
        if self._transformers is None:
            model = self._build_transformers()
            share_weights(model, self.weights, self.family)
            self._transformers = model
        return self._transformers


def share_weights(model: Any, weights: LeanWeights, family: Family) -> None:
    """Make a transformers model of the family use `weights`' tensors (the fused
    ones through views): same values, one copy in memory. Packed linear
    weights (packed_linear.py) are unpacked for it: transformers' modules
    need the plain layout, so a model that builds its transformers model
    (the `hf` and `pld` anchors) holds its linears twice from then on."""
    with torch.no_grad():
        embed = submodule(model, family.embed).weight
        embed.data = weights.embed.plain()
        submodule(model, family.final_norm).weight.data = weights.final_norm
        head = submodule(model, family.lm_head).weight
        if head is not embed:  # tied: set with the embedding
            head.data = weights.lm_head.plain()
        elif weights.lm_head.kind == "fp16":  # the lean head holds the embedding rounded to float16: so must transformers'
            submodule(model, family.lm_head).weight = torch.nn.Parameter(weights.lm_head.plain(), requires_grad=False)
        for layer, lean in zip(submodule(model, family.layers), weights.layers, strict=True):
            part = partial(submodule, layer)
            point_into(lean.qkv.plain(), *(part(p).weight for p in family.qkv))
            if lean.qkv_bias is not None:
                point_into(lean.qkv_bias, *(part(p).bias for p in family.qkv))
            point_into(lean.gate_up.plain(), *(part(p).weight for p in family.gate_up))
            part(family.o).weight.data = lean.o.plain()
            part(family.down).weight.data = lean.down.plain()
            part(family.input_norm).weight.data = lean.input_norm
            part(family.post_norm).weight.data = lean.post_norm
            if lean.q_norm is not None:
                part(family.q_norm).weight.data = lean.q_norm
                part(family.k_norm).weight.data = lean.k_norm


class _Tensors:
    """A checkpoint's tensors by name, cast on read (a name only a GGUF's
    blocks hold dequantized by the checkpoint)."""

    def __init__(self, checkpoint: Checkpoint, dtype: torch.dtype, device: str) -> None:
        self.checkpoint, self.dtype, self.device = checkpoint, dtype, device

    def in_files(self) -> set[str]:
        return self.checkpoint.float_names()

    def get(self, name: str) -> torch.Tensor:
        return self.checkpoint.tensor(name).to(device=self.device, dtype=self.dtype)

    def get_cat(self, *names: str) -> torch.Tensor:
        return torch.cat([self.checkpoint.tensor(n) for n in names]).to(device=self.device, dtype=self.dtype)


def load_lean_model(checkpoint: Checkpoint, device: str, dtype: torch.dtype,
                    build_transformers: Callable[[], Any], half: bool = False) -> LeanModel | None:
    """`checkpoint` as a LeanModel, or None when it is not one this loader
    reads exactly (then load it through transformers); with `half` its
    linears stored in float16 as they are read (half_weights.py); the linears
    the checkpoint has in blocks (a GGUF's own, checkpoint/gguf_blocks.py) taken in them
    instead of a float32 copy."""
    data = checkpoint.config_data()
    if data is None or "auto_map" in data or "quantization_config" in data:
        return None
    family = family_of(CheckpointConfig(data))
    if family is None:
        return None
    if family.window_switch is not None:
        if data.get(family.window_switch):
            return None  # windows on some layers only (max_window_layers): transformers' config works them out
        data = {**data, family.window_switch: False}  # their configs' default
    config = CheckpointConfig(data)
    if checkpoint.weight_files() is None or not config_supported(config):
        return None
    try:
        layers = int(config.num_hidden_layers)
        heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        eps = float(config.rms_norm_eps)
        kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        tied = bool(config.tie_word_embeddings)
    except (AttributeError, TypeError, ValueError):
        return None  # a field the family's transformers config would default: let it decide
    inv_freq = rope_inv_freq(config, head_dim)
    if inv_freq is None:
        return None
    tensors = _Tensors(checkpoint, dtype, device)
    quantized: Mapping[str, QuantWeight] = {name: checkpoint.blocks(name) for name in checkpoint.block_names()}
    embed_name, head_name = f"{family.embed}.weight", f"{family.lm_head}.weight"
    expected = {embed_name, f"{family.final_norm}.weight"} | ({head_name} if not tied else set())
    # Exactly the tensors transformers' class of the family has: a tensor it
    # would ignore (an o_proj bias), or one it would default, means this
    # reader would compute something else.
    per_layer = family.layer_tensors()
    layer_names = {f"{family.layers}.{i}.{name}" for i in range(layers) for name in per_layer}
    left_to_blocks = set(quantized) - tensors.in_files()  # a GGUF's blocks folder holds no copy of these
    names = tensors.in_files() | left_to_blocks
    if not expected | layer_names <= names or not names <= expected | layer_names | {head_name}:
        return None
    make = format_for(half, True, device)  # the linears' format, chosen once (formats/choose.py)
    quantized = _checked(quantized, tensors, f"{family.layers}.0.", family)
    if left_to_blocks and not quantized:
        return None  # blocks whose row order failed the check cannot stand in for the missing floats
    embed = quantized.get(embed_name) or PlainLinear(tensors.get(embed_name))  # blocks: rows dequantized as looked up

    def linear(*names: str, mixed: bool = False) -> Linear:
        """The linear of the stacked `names`: their blocks where all are quantized alike (or, `mixed`, in
        any block types: q|k|v, which the fused layer takes in parts), else read and prepared."""
        parts = [quantized.get(name) for name in names]
        if all(parts) and (mixed or len({p.qtype for p in parts}) == 1):  # type: ignore[union-attr]
            return stack_blocks(parts)  # type: ignore[arg-type]
        if any(parts):
            log.warning("4-bit weights: %s mix block types or float tensors; dequantized to float32", ", ".join(names))
        return make(tensors.get_cat(*names))

    weights = LeanWeights(
        embed=embed, final_norm=tensors.get(f"{family.final_norm}.weight"),
        lm_head=linear(head_name) if not tied else prepared(embed, make),  # tied blocks stay the embedding
        layers=[_read_layer(tensors, f"{family.layers}.{i}.", family, linear) for i in range(layers)],
        eps=eps, heads=heads, kv_heads=kv_heads, head_dim=head_dim, inv_freq=inv_freq.to(device),
    )
    if weights.lm_head.kind != "plain":  # prepared (packed, fp16, blocks): the file's plain tensors can go
        weights = own_plain_tensors(weights)
    return LeanModel(checkpoint, config, family, weights, build_transformers, half)


def _checked(quantized: Mapping[str, QuantWeight], tensors: _Tensors, prefix: str,
             family: Family) -> Mapping[str, QuantWeight]:
    """`quantized`, or nothing if the first layer's q/k/v blocks do not give
    the checkpoint's own float32 values back (a row order this reader does
    not know): a wrong model must never run quietly."""
    for name in (f"{prefix}{part}.weight" for part in family.qkv):
        weight = quantized.get(name)
        if weight is not None and not torch.equal(weight.plain(), tensors.get(name).float().cpu()):
            log.warning("4-bit weights: %s's blocks differ from the dequantized checkpoint; using float32", name)
            return {}
    return quantized


def _read_layer(tensors: _Tensors, prefix: str, family: Family, linear: Callable[..., Any]) -> _Layer:
    qkv = [f"{prefix}{name}" for name in family.qkv]
    # Linears prepared (packed or fp16) as they are read: one plain copy at a time.
    return _Layer(
        input_norm=tensors.get(f"{prefix}{family.input_norm}.weight"),
        qkv=linear(*(f"{p}.weight" for p in qkv), mixed=True),
        qkv_bias=tensors.get_cat(*(f"{p}.bias" for p in qkv)) if family.qkv_bias else None,
        q_norm=tensors.get(f"{prefix}{family.q_norm}.weight") if family.qk_norm else None,
        k_norm=tensors.get(f"{prefix}{family.k_norm}.weight") if family.qk_norm else None,
        o=linear(f"{prefix}{family.o}.weight"),
        post_norm=tensors.get(f"{prefix}{family.post_norm}.weight"),
        gate_up=linear(*(f"{prefix}{name}.weight" for name in family.gate_up)),
        down=linear(f"{prefix}{family.down}.weight"),
    )
