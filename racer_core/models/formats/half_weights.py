"""Linear weights stored in float16 for fbgemm, multiplied in float32.

On a CPU a step of a small model reads every weight once, so the bytes per
weight set the pace of plain decoding. fbgemm (torch's x86 quantized engine)
keeps a weight in float16, packed once for its kernels, and multiplies it
with float32 activations (`quantized::linear_dynamic_fp16`): half of fp32's
bytes, and on the embedded model a whole step's linears about 3x faster than
fp32 for one token (docs/performance.md). A row gets the same bits alone as
beside other rows: fbgemm's AVX-512 kernels sum every row in one order, and
with its AVX2 kernels, whose 1- and 2-row kernels sum in another order than
the rest, each call is padded to a row count that avoids them (half_rows.py).
So greedy racer equals ar bit for bit on both CPU classes, as in float32.

int8 was tried first and dropped: with each token's activations quantized
on its own scale the int8 products are row-exact, but attention over a tree
and over one token round differently in the last bit, and that bit moved
activations across a quantization step (logits apart by up to 6): racer
differed from ar on every question (docs/design.md, "Compact weights").
"""

from __future__ import annotations

import functools
import logging

import torch

from racer_core.models.formats.half_rows import row_counts

log = logging.getLogger(__name__)

PROBE_TOLERANCE = 2e-3
"""Largest |fp16-weight - fp32| on the probe, relative to the largest |output|."""
ROW_TOLERANCE = 1e-5
"""Largest |row alone - row beside others|, relative: a summation order, not another product."""


def _engine() -> bool:
    """Select fbgemm's x86 engine for quantized ops (the default on x86); False where there is none."""
    if torch.backends.quantized.engine in ("x86", "fbgemm"):
        return True
    for name in ("x86", "fbgemm"):
        if name in torch.backends.quantized.supported_engines:
            torch.backends.quantized.engine = name
            return True
    return False


class HalfWeight:
    """A linear weight in float16, packed by fbgemm: `w(x, bias)` is
    `F.linear(x, plain, bias)` with the weight rounded to float16."""

    __slots__ = ("packed", "shape", "dtype", "device")
    kind = "fp16"
    block_types: frozenset[str] = frozenset()
    acts = None

    def __init__(self, plain: torch.Tensor) -> None:
        with torch.no_grad():
            self.packed = torch.ops.quantized.linear_prepack_fp16(plain.detach().float().contiguous(), None)
        self.shape, self.dtype, self.device = plain.shape, torch.float32, plain.device

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        counts = row_counts()
        if counts.padded:  # the AVX2 kernels: rows padded to counts that sum every row in one order
            flat = counts.multiply(self._multiply, x.reshape(-1, x.shape[-1]).contiguous())
            y = flat.reshape(*x.shape[:-1], flat.shape[-1])
        else:
            y = self._multiply(x.contiguous())
        return y if bias is None else y + bias

    def _multiply(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic_fp16(x, self.packed)

    def numel(self) -> int:
        return self.shape.numel()

    def plain(self) -> torch.Tensor:
        """The weight (its float16 values) in the usual (out, in) layout, as float32 (a new tensor)."""
        weight, _ = torch.ops.quantized.linear_unpack_fp16(self.packed)
        return weight.float()


@functools.cache
def half_works() -> bool:
    """Whether this torch has fbgemm's fp16-weight linear and it behaves on a
    probe: close to fp32, each row the same alone as beside other rows (up
    to summation order), and the weight given back as float16 values."""
    try:
        if not _engine():
            return False
        gen = torch.Generator().manual_seed(0)
        w = torch.randn(48, 80, generator=gen)
        x = torch.randn(1, 6, 80, generator=gen)
        weight = HalfWeight(w)
        got, want = weight(x), x @ w.t()
        if (got - want).abs().max() > PROBE_TOLERANCE * want.abs().max():
            raise ValueError("fp16-weight result far from fp32")
        alone = torch.cat([weight(x[:, i : i + 1]) for i in range(6)], dim=1)
        if (alone - got).abs().max() > ROW_TOLERANCE * got.abs().max():
            raise ValueError("a row's result depends on the rows beside it")
        if not torch.equal(weight.plain(), w.half().float()):
            raise ValueError("the packed weight does not give its float16 values back")
    except (RuntimeError, ValueError, AttributeError) as error:
        log.warning("fp16 weights: fbgemm's fp16 linear failed its check (%s)",
                    str(error).splitlines()[0] if str(error) else type(error).__name__)
        return False
    return True
