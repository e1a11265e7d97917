"""The linears' format, chosen once at load.

A plain float linear becomes fbgemm's float16 weight (`--fp16-weights`,
half_weights.py), a oneDNN-packed one where packing works for its device and
dtype (packed_linear.py), or stays a PlainLinear (F.linear); a format
prepared already (packed, fp16, a GGUF's blocks) stays as it is. This is the
one place that asks which format a weight is in; the forward only calls them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from racer_core.models.formats.half_weights import HalfWeight
from racer_core.models.formats.linear import Linear, PlainLinear
from racer_core.models.formats.packed_linear import PackedWeight, packing_works

Make = Callable[[torch.Tensor], Linear]
"""A plain tensor to the chosen format."""


def format_for(half: bool, pack: bool, device: torch.device | str) -> Make:
    """The format new linears on `device` take: float16 weights with `half`, else
    packed where `pack` and packing works on the CPU for their dtype, else plain."""
    if half:
        return HalfWeight
    if pack and torch.device(device).type == "cpu":
        return packed_where_it_works
    return PlainLinear


def packed_where_it_works(weight: torch.Tensor) -> Linear:
    """A PackedWeight where packing works for the weight's dtype, else a PlainLinear.
    The probe runs on the first plain weight: a model whose linears are all in
    blocks never starts oneDNN."""
    return PackedWeight(weight) if packing_works(weight.dtype) else PlainLinear(weight)


def prepared(weight: Linear, make: Make) -> Linear:
    """`weight` in the chosen format: a plain one made into it (its tensor can go
    afterwards: a loader prepares each weight as it reads it, so one plain copy is
    alive at a time); one prepared already, or one the format leaves plain, as it is."""
    if weight.kind != "plain":
        return weight
    made = make(weight.plain())
    return weight if made.kind == "plain" else made


def with_format(weights: Any, make: Make) -> Any:
    """A lean_forward.LeanWeights with every plain linear (the lm_head included) in
    the chosen format; the same object where none changes. The embedding stays as
    it is (the lookup needs its rows), so a tied lm_head is prepared beside it."""
    layers = [replace(layer, qkv=prepared(layer.qkv, make), o=prepared(layer.o, make),
                      gate_up=prepared(layer.gate_up, make), down=prepared(layer.down, make))
              for layer in weights.layers]
    head = prepared(weights.lm_head, make)
    changed = head is not weights.lm_head or any(
        getattr(new, name) is not getattr(old, name)
        for new, old in zip(layers, weights.layers, strict=True) for name in ("qkv", "o", "gate_up", "down"))
    return replace(weights, layers=layers, lm_head=head) if changed else weights


def own_plain_tensors(weights: Any) -> Any:
    """`weights` with its plain tensors (embedding, norms, biases) copied out
    of whatever memory they share. A checkpoint read in its own dtype hands
    out tensors mapped from the file; once the linears are prepared, those few
    would keep the whole file mapped, and its pages read for packing resident."""
    def own(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.clone()
        return PlainLinear(value.weight.clone()) if isinstance(value, PlainLinear) else value

    layers = [replace(layer, **{k: own(v) for k, v in vars(layer).items()}) for layer in weights.layers]
    return replace(weights, layers=layers, embed=own(weights.embed), final_norm=own(weights.final_norm))
