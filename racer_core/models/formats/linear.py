"""`Linear`: what every weight format the lean forward multiplies with offers.

The formats (plain float tensors, oneDNN-packed, fbgemm float16, a GGUF's
blocks of one type or of several) are one class each, chosen once at load
(formats/choose.py, the reader); the forward then calls `w(x, bias)` on
whatever it holds, with no check of which format it is. Formats that need
their concrete class (the fused decoder layer reads a GGUF's blocks) take it
once at load, in one place (quant_layer.FusedLayers.fits).
"""

from __future__ import annotations

import functools
from typing import Protocol

import torch
import torch.nn.functional as F


class Linear(Protocol):
    """A (out_features, in_features) linear weight: `w(x, bias)` is
    `F.linear(x, w.plain(), bias)`, up to the format's summation order."""

    @property
    def kind(self) -> str:
        """The format, for logs and descriptions: 'plain', 'packed', 'fp16', or the block type(s), e.g. 'Q4_1'."""
        ...

    @property
    def block_types(self) -> frozenset[str]:
        """The GGUF block types the weight is kept in; empty for float formats."""
        ...

    @property
    def acts(self) -> str | None:
        """How activations meet the blocks ('q8' or 'float', quant_weights.ACTS); None for float formats."""
        ...

    @property
    def shape(self) -> torch.Size:
        """(out_features, in_features)."""
        ...

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the activations it takes and gives."""
        ...

    @property
    def device(self) -> torch.device: ...

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor: ...

    def numel(self) -> int: ...

    def plain(self) -> torch.Tensor:
        """The weight's values in the usual (out, in) layout (the tensor itself where it is one)."""
        ...


class Embedding(Linear, Protocol):
    """A linear whose rows can be looked up: an embedding (tied to the lm_head or not)."""

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` of the weight (ids' shape + (in_features,))."""
        ...


class PlainLinear:
    """A plain float tensor as a Linear: `F.linear` (where no format is
    prepared: packing off or refused, another device, a transformers model's
    own parameters). `weight` is the tensor itself, shared, never copied."""

    __slots__ = ("weight", "rows")
    kind = "plain"
    block_types: frozenset[str] = frozenset()
    acts = None

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight
        # rows(ids): F.embedding itself, bound to the weight, so the lookup adds no Python call of its own
        self.rows = functools.partial(F.embedding, weight=weight)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return F.linear(x, self.weight, bias)

    @property
    def shape(self) -> torch.Size:
        return self.weight.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.weight.device

    def numel(self) -> int:
        return self.weight.numel()

    def plain(self) -> torch.Tensor:
        return self.weight
