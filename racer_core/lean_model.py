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

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from racer_core.lean_forward import LeanForward, LeanWeights, _Layer, config_supported, point_into, rope_of
from racer_core.packed_linear import is_packed, maybe_pack, own_plain_tensors, plain

_SINGLE = "model.safetensors"
_INDEX = "model.safetensors.index.json"


class CheckpointConfig:
    """config.json as attributes (a missing key is an AttributeError, so
    getattr defaults work as with a transformers config)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_data"][name]
        except KeyError:
            raise AttributeError(name) from None

    def to_dict(self) -> dict[str, Any]:
        return dict(self._data)

    def get_text_config(self) -> CheckpointConfig:
        return self


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _weight_files(folder: Path) -> list[Path] | None:
    if (folder / _SINGLE).is_file():
        return [folder / _SINGLE]
    index = read_json(folder / _INDEX)
    if index is None or not isinstance(index.get("weight_map"), dict):
        return None
    files = sorted({str(name) for name in index["weight_map"].values()})
    paths = [folder / name for name in files]
    return paths if all(p.is_file() for p in paths) else None


def rope_inv_freq(config: CheckpointConfig, head_dim: int) -> torch.Tensor | None:
    """The rotary inverse frequencies of a default, linear or llama3 rope, None for others."""
    params, kind = rope_of(config)
    if kind is None:
        return None
    theta = params.get("rope_theta", getattr(config, "rope_theta", None))
    if not isinstance(theta, (int, float)) or getattr(config, "partial_rotary_factor", 1.0) != 1.0:
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

    def __init__(self, folder: Path, config: CheckpointConfig, weights: LeanWeights,
                 build_transformers: Callable[[], Any]) -> None:
        self.folder = folder
        self.config = config
        self.generation_config = CheckpointConfig(read_json(folder / "generation_config.json") or {})
        self.lean = LeanForward(weights)
        self.weights = self.lean.weights  # packed where the CPU's library takes them: the plain copy goes
        self._build_transformers = build_transformers
        self._transformers: Any = None

    def parameters(self) -> Iterator[torch.Tensor]:
        return iter(self.weights.tensors())

    def transformers_model(self) -> Any:
        """transformers' model of this checkpoint, loaded on first use, its
        parameters pointed at this model's tensors (no second copy kept)."""
        if self._transformers is None:
            model = self._build_transformers()
            share_weights(model, self.weights)
            self._transformers = model
        return self._transformers


def share_weights(model: Any, weights: LeanWeights) -> None:
    """Make a transformers Llama-shaped model use `weights`' tensors (the fused
    ones through views): same values, one copy in memory. Packed linear
    weights (packed_linear.py) are unpacked for it: transformers' modules
    need the plain layout, so a model that builds its transformers model
    (the `hf` and `pld` anchors) holds its linears twice from then on."""
    inner = model.model
    with torch.no_grad():
        inner.embed_tokens.weight.data = weights.embed
        inner.norm.weight.data = weights.final_norm
        if model.lm_head.weight is not inner.embed_tokens.weight:  # tied: set with the embedding
            model.lm_head.weight.data = plain(weights.lm_head)
        for layer, lean in zip(inner.layers, weights.layers, strict=True):
            attn, mlp = layer.self_attn, layer.mlp
            point_into(plain(lean.qkv), attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight)
            if lean.qkv_bias is not None:
                point_into(lean.qkv_bias, attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias)
            point_into(plain(lean.gate_up), mlp.gate_proj.weight, mlp.up_proj.weight)
            attn.o_proj.weight.data = plain(lean.o)
            mlp.down_proj.weight.data = plain(lean.down)
            layer.input_layernorm.weight.data = lean.input_norm
            layer.post_attention_layernorm.weight.data = lean.post_norm
            if lean.q_norm is not None:
                attn.q_norm.weight.data = lean.q_norm
                attn.k_norm.weight.data = lean.k_norm


class _Tensors:
    """Tensors by name over one or more safetensors files, cast on read."""

    def __init__(self, files: list[Path], dtype: torch.dtype, device: str) -> None:
        from safetensors import safe_open

        self.dtype, self.device = dtype, device
        self._handles = [safe_open(str(f), framework="pt", device="cpu") for f in files]
        self._where = {name: h for h in self._handles for name in h.keys()}  # noqa: SIM118 (not a dict)

    def names(self) -> set[str]:
        return set(self._where)

    def get(self, name: str) -> torch.Tensor:
        return self._where[name].get_tensor(name).to(device=self.device, dtype=self.dtype)

    def get_cat(self, *names: str) -> torch.Tensor:
        return torch.cat([self._where[n].get_tensor(n) for n in names]).to(device=self.device, dtype=self.dtype)


_LAYER_KEYS = {
    "input_layernorm.weight", "post_attention_layernorm.weight",
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
}


def load_lean_model(folder: Path, device: str, dtype: torch.dtype,
                    build_transformers: Callable[[], Any]) -> LeanModel | None:
    """The checkpoint in `folder` as a LeanModel, or None when it is not one
    this loader reads exactly (then load it through transformers)."""
    data = read_json(folder / "config.json")
    if data is None or "auto_map" in data or "quantization_config" in data:
        return None
    if data.get("model_type") in ("qwen2", "qwen3"):
        if data.get("use_sliding_window"):
            return None  # windows on some layers only (max_window_layers): transformers' config works them out
        data = {**data, "use_sliding_window": False}  # their configs' default
    config = CheckpointConfig(data)
    files = _weight_files(folder)
    if files is None or not config_supported(config):
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
    tensors = _Tensors(files, dtype, device)
    expected = {"model.embed_tokens.weight", "model.norm.weight"} | ({"lm_head.weight"} if not tied else set())
    allowed = expected | {"lm_head.weight"} | {f"model.layers.{i}.{k}" for i in range(layers) for k in _LAYER_KEYS}
    names = tensors.names()
    if not expected <= names or not names <= allowed:
        return None  # missing or unknown tensors (e.g. an o_proj bias): transformers knows better
    embed = tensors.get("model.embed_tokens.weight")
    # What transformers' class of the family has: q/k/v biases in Qwen2 (and
    # with attention_bias), q/k norms in Qwen3. A tensor it would ignore, or
    # one it would default, means this loader would compute something else.
    biased = config.model_type == "qwen2" or bool(getattr(config, "attention_bias", False))
    normed = config.model_type == "qwen3"
    built = [_read_layer(tensors, f"model.layers.{i}.", names, biased, normed) for i in range(layers)]
    if any(layer is None for layer in built):
        return None
    weights = LeanWeights(
        embed=embed, final_norm=tensors.get("model.norm.weight"),
        lm_head=maybe_pack(embed if tied else tensors.get("lm_head.weight")),
        layers=[layer for layer in built if layer is not None], eps=eps, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, inv_freq=inv_freq.to(device),
    )
    if is_packed(weights):
        weights = own_plain_tensors(weights)
    return LeanModel(folder, config, weights, build_transformers)


def _read_layer(tensors: _Tensors, prefix: str, names: set[str], biased: bool, normed: bool) -> _Layer | None:
    def has(key: str) -> bool:
        return prefix + key in names

    core = ("input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
            "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
            "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")
    if not all(has(k) for k in core):
        return None
    if any(has(f"self_attn.{p}_proj.bias") != biased for p in "qkv"):
        return None
    if any(has(f"self_attn.{p}_norm.weight") != normed for p in "qk"):
        return None
    qkv = [f"{prefix}self_attn.{p}_proj" for p in "qkv"]
    # Linears packed as they are read (packed_linear.py): one copy at a time.
    return _Layer(
        input_norm=tensors.get(prefix + "input_layernorm.weight"),
        qkv=maybe_pack(tensors.get_cat(*(f"{p}.weight" for p in qkv))),
        qkv_bias=tensors.get_cat(*(f"{p}.bias" for p in qkv)) if biased else None,
        q_norm=tensors.get(prefix + "self_attn.q_norm.weight") if normed else None,
        k_norm=tensors.get(prefix + "self_attn.k_norm.weight") if normed else None,
        o=maybe_pack(tensors.get(prefix + "self_attn.o_proj.weight")),
        post_norm=tensors.get(prefix + "post_attention_layernorm.weight"),
        gate_up=maybe_pack(tensors.get_cat(prefix + "mlp.gate_proj.weight", prefix + "mlp.up_proj.weight")),
        down=maybe_pack(tensors.get(prefix + "mlp.down_proj.weight")),
    )
