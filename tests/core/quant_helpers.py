"""Tiny models on GGUF block weights (made here with the gguf package), for the
4-bit kernel's tests."""

from __future__ import annotations

from dataclasses import replace

import torch
from gguf import GGMLQuantizationType, quants

from racer_core.models.families import family_of
from racer_core.models.formats.quant_weights import QuantWeight
from racer_core.models.lean_forward import LeanForward, weights_from_model


def quant_weight(plain: torch.Tensor, qtype: GGMLQuantizationType, acts: str | None = None) -> QuantWeight:
    rows, cols = plain.shape
    return QuantWeight(quants.quantize(plain.detach().float().numpy(), qtype), int(qtype), rows, cols, acts)


def quantized_lean(model, qtype: GGMLQuantizationType, acts: str | None = None) -> tuple[LeanForward, LeanForward]:
    """A lean forward multiplying `model`'s linears as `qtype` blocks (activations
    as `acts`), and a plain float32 one on the same dequantized values (the
    model's own tensors are overwritten with them)."""
    weights = weights_from_model(model, family_of(model.config))
    layers = [replace(layer, qkv=quant_weight(layer.qkv, qtype, acts), o=quant_weight(layer.o, qtype, acts),
                      gate_up=quant_weight(layer.gate_up, qtype, acts), down=quant_weight(layer.down, qtype, acts))
              for layer in weights.layers]
    quantized = replace(weights, layers=layers, lm_head=quant_weight(weights.lm_head, qtype, acts))
    with torch.no_grad():  # the transformers model (and the plain forward) on the same values
        for lean, plain in zip(layers, weights.layers, strict=True):
            for name in ("qkv", "o", "gate_up", "down"):
                getattr(plain, name).copy_(getattr(lean, name).plain())
        weights.lm_head.copy_(quantized.lm_head.plain())
    return LeanForward(quantized), LeanForward(weights, pack=False)
