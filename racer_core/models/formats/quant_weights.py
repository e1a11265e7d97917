"""Linear weights kept in a GGUF's own blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), multiplied
by the tree kernel (quant/quant.hpp).

A small model's CPU step reads every weight once; a 4-bit block holds 32
weights in 18-20 bytes instead of 128, and the kernel reads each block once
per step for all the rows of a tree. By default each activation row is
quantized to 8 bits per 32-value block and multiplied in integers, as
llama.cpp does (quant_q8.hpp); RACER_QUANT_ACTS=float multiplies the unpacked
weights, the file's own values, with float32 activations. Either way each
output is summed in one fixed order whatever the number of rows, their
places, or the thread count: a row's result alone is bit for bit its result
beside other rows (tested), so greedy racer equals ar.

With q8 activations, weights of every type here (Q5_0, Q5_1 and Q5_K since 5 Dec 2026)
in whole groups of eight rows are repacked at load (quant/repack.py: each eight rows' blocks
interleaved, the same bytes moved) for the repacked kernel
(quant/quant_repack.hpp): on the embedded model's step 1.7x faster at one
row, 2x at 2 to 32 (docs/performance.md, 4 Dec 2026). RACER_QUANT_REPACK=0
keeps the file's layout and the previous kernel.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from racer_core.models.formats.quant import repack

log = logging.getLogger(__name__)

ACTS = ("q8", "float")
ACTS_ENV = "RACER_QUANT_ACTS"
"""How activations meet the blocks: 'q8' (the default) quantizes each row to 8 bits per 32-value block
and multiplies in integers, as llama.cpp does; 'float' multiplies the unpacked weights with float32
activations (the dequantized model's values, slower at few rows). Both are row-invariant."""
REPACK_ENV = "RACER_QUANT_REPACK"
"""'0' keeps q8 weights in the file's block layout (the previous kernel, for comparisons); else repacked where supported."""
ISA_ENV = "RACER_QUANT_ISA"
"""Limit the kernel, and the attention beside it (verify/attention.py), to an ISA class: 'avx2', or 'avxvnni'
(AVX2 with AVX-VNNI's integer dots, as Intel's CPUs from Alder Lake on); cpu_class.py sets it with the
libraries' limits."""
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K = 2, 3, 6, 7, 8, 12, 13, 14
TYPE_NAMES = {Q4_0: "Q4_0", Q4_1: "Q4_1", Q5_0: "Q5_0", Q5_1: "Q5_1", Q8_0: "Q8_0", Q4_K: "Q4_K", Q5_K: "Q5_K",
              Q6_K: "Q6_K"}
"""ggml's type ids the kernel reads."""


@functools.cache
def kernel_isa() -> str | None:
    """The ISA the kernel runs with here ('avx512', 'avxvnni' or 'avx2'), None where it cannot run.
    RACER_QUANT_ISA may ask for a lesser one the CPU has ('avx2', or 'avxvnni': AVX2 with AVX-VNNI)."""
    try:
        from racer_core.models.formats.quant import _quant
    except ImportError:
        log.warning("4-bit weights: the kernel extension is not built (python setup.py build_ext --inplace)")
        return None
    best = _quant.best()
    if best == "none":
        return None
    wanted = os.environ.get(ISA_ENV, best)
    if wanted in ("avx2", "avxvnni") and _quant.available(wanted):
        return wanted
    if wanted == "avxvnni":  # the class asked for is an AVX2 one: its nearest here
        log.warning("%s=avxvnni: this CPU has no AVX-VNNI, so the kernel runs avx2", ISA_ENV)
        return "avx2"
    return best


def activations() -> str:
    """The activation mode new QuantWeights take ('q8' unless RACER_QUANT_ACTS says 'float')."""
    wanted = os.environ.get(ACTS_ENV, "q8")
    if wanted not in ACTS:
        raise ValueError(f"{ACTS_ENV}={wanted!r}: expected one of {', '.join(ACTS)}")
    return wanted


@contextlib.contextmanager
def _env_as(name: str, value: str) -> Iterator[None]:
    """Environment variable `name` set to `value` inside, as before afterwards."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def activations_as(mode: str) -> contextlib.AbstractContextManager[None]:
    """QuantWeights made inside take activation mode `mode` (a model loaded
    inside, for comparisons); RACER_QUANT_ACTS is as before afterwards."""
    return _env_as(ACTS_ENV, mode)


def repacking() -> bool:
    """Whether new q8 QuantWeights repack their blocks where the type allows (unless RACER_QUANT_REPACK=0)."""
    return os.environ.get(REPACK_ENV, "1") != "0"


def repacking_as(on: bool) -> contextlib.AbstractContextManager[None]:
    """QuantWeights made inside repack (or keep the file's layout) as `on` says; RACER_QUANT_REPACK as before after."""
    return _env_as(REPACK_ENV, "1" if on else "0")


def supported(qtype: int) -> bool:
    return qtype in TYPE_NAMES


def bytes_per_block(qtype: int) -> int:
    """Bytes of one block (ggml's layouts: 32 values; 256 for the K types)."""
    return {Q4_0: 18, Q4_1: 20, Q5_0: 22, Q5_1: 24, Q8_0: 34, Q4_K: 144, Q5_K: 176, Q6_K: 210}[qtype]


def values_per_block(qtype: int) -> int:
    """Values in one block: 32, or 256 for the K types."""
    return 256 if qtype in (Q4_K, Q5_K, Q6_K) else 32


def row_bytes(qtype: int, cols: int) -> int:
    """Bytes of one row of `cols` values (a multiple of values_per_block)."""
    return cols // values_per_block(qtype) * bytes_per_block(qtype)


class QuantWeight:
    """A (rows, cols) linear weight in ggml blocks: `w(x, bias)` is
    `F.linear(x, w.plain(), bias)` summed in the kernel's fixed order.
    `blocks` are the file's blocks, or repacked ones where `repacked`
    (quant/repack.py; `file_blocks()` gives the file's back)."""

    __slots__ = ("blocks", "qtype", "shape", "dtype", "device", "isa", "acts", "repacked", "_multiply")

    def __init__(self, blocks: np.ndarray, qtype: int, rows: int, cols: int, acts: str | None = None,
                 repacked: bool | None = None) -> None:
        """`blocks` in the file's layout; `repacked`: whether to repack them (None: where the type, the
        row count and q8 activations allow, unless RACER_QUANT_REPACK=0; True where they do not is refused)."""
        from racer_core.models.formats.quant import _quant

        isa = kernel_isa()
        if isa is None:
            raise RuntimeError("the 4-bit kernel does not run on this CPU")
        if not supported(qtype):
            raise ValueError(f"block type {qtype} is not one the kernel reads")
        self.blocks = np.ascontiguousarray(blocks, dtype=np.uint8).reshape(rows, -1)
        if self.blocks.shape[1] != row_bytes(qtype, cols) or cols % values_per_block(qtype):
            raise ValueError(f"{self.blocks.shape} bytes do not hold a ({rows}, {cols}) {TYPE_NAMES[qtype]} matrix")
        self.qtype, self.isa = qtype, isa
        self.acts = acts or activations()
        if self.acts not in ACTS:
            raise ValueError(f"activations {self.acts!r}: expected one of {', '.join(ACTS)}")
        can = self.acts == "q8" and repack.repackable(qtype, rows)
        if repacked and not can:
            raise ValueError(f"a ({rows}, {cols}) {TYPE_NAMES[qtype]} weight with {self.acts} activations "
                             "cannot be repacked")
        self.repacked = can and (repacking() if repacked is None else repacked)
        if self.repacked:
            self.blocks = repack.repack(qtype, self.blocks)
        self._multiply = _quant.matmul_q8 if self.acts == "q8" else _quant.matmul  # looked up once: called per layer
        self.shape, self.dtype, self.device = torch.Size((rows, cols)), torch.float32, torch.device("cpu")

    @classmethod
    def stack(cls, parts: list[QuantWeight]) -> QuantWeight:
        """One weight holding `parts`' rows one after another (a fused q|k|v or gate|up)."""
        if len({p.qtype for p in parts}) != 1 or len({p.shape[1] for p in parts}) != 1:
            raise ValueError("only weights of one block type and width stack")
        if all(p.repacked for p in parts):
            # Each part is whole groups of eight rows, repacked group by group: the stack's repacked
            # blocks are the parts' one after another (no unpacking and repacking again at load).
            stacked = cls(np.concatenate([p.blocks for p in parts]), parts[0].qtype,
                          sum(int(p.shape[0]) for p in parts), int(parts[0].shape[1]), parts[0].acts, repacked=False)
            stacked.repacked = True
            return stacked
        blocks = np.concatenate([p.file_blocks() for p in parts])
        return cls(blocks, parts[0].qtype, blocks.shape[0], int(parts[0].shape[1]), parts[0].acts,
                   parts[0].repacked or None)

    @property
    def kernel_type(self) -> int:
        """The type id the kernel reads `blocks` as (the block type, plus REPACKED where repacked)."""
        return self.qtype | repack.REPACKED if self.repacked else self.qtype

    def file_blocks(self, ids: np.ndarray | None = None) -> np.ndarray:
        """The file's blocks (rows, bytes per row): all rows, or rows `ids` in their order."""
        if self.repacked:
            if ids is None:
                return repack.unpack(self.qtype, self.blocks)
            from racer_core.models.formats.quant import _quant

            # an embedding's rows each step: the bytes moved natively (repack.unpack, their reference, costs 0.1 ms)
            return _quant.unpack_rows(self.blocks, repack.FIELDS[self.qtype][0], repack.FIELD_TABLES[self.qtype],
                                      np.ascontiguousarray(ids, dtype=np.int64))
        return self.blocks if ids is None else np.ascontiguousarray(self.blocks[ids])

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        rows, cols = self.shape
        flat = x.detach().reshape(-1, cols).float().contiguous()
        out = torch.empty((flat.shape[0], rows), dtype=torch.float32)
        self._multiply(self.kernel_type, self.blocks, rows, cols, flat.numpy(), out.numpy(), self.isa, torch.get_num_threads())
        out = out.reshape(*x.shape[:-1], rows)
        return out if bias is None else out + bias

    def numel(self) -> int:
        return self.shape.numel()

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` of the weight as float32 (ids' shape + (cols,)): an
        embedding looked up in its blocks (a tied Q8_0 token_embd is both the
        embedding and the head, with no float32 copy)."""
        from racer_core.models.formats.quant import _quant

        picked = self.file_blocks(ids.reshape(-1).cpu().numpy())
        cols = int(self.shape[1])
        out = _quant.dequantize(self.qtype, picked, picked.shape[0], cols, self.isa)
        return torch.from_numpy(out).reshape(*ids.shape, cols)

    @property
    def type_name(self) -> str:
        return TYPE_NAMES[self.qtype]

    @property
    def kind(self) -> str:
        return self.type_name

    @property
    def block_types(self) -> frozenset[str]:
        return frozenset((self.type_name,))

    def layer_spec(self) -> tuple[int, np.ndarray]:
        """The weight as the fused decoder layer takes it (quant_layer.py): (kernel type, blocks)."""
        return (self.kernel_type, self.blocks)

    def plain(self) -> torch.Tensor:
        """The weight's float32 values (exactly those the kernel multiplies with), (rows, cols)."""
        from racer_core.models.formats.quant import _quant

        rows, cols = self.shape
        return torch.from_numpy(_quant.dequantize(self.qtype, self.file_blocks(), rows, cols, self.isa))


class QuantParts:
    """A fused linear (q|k|v) whose parts are QuantWeights of different block
    types (Q4_K_M and Q5_K_M give some layers' v Q6_K, their q and k Q4_K or
    Q5_K): each part multiplied alone, the outputs side by side, as a stack of
    one type would give them; still row-invariant."""

    __slots__ = ("parts", "shape", "dtype", "device", "isa", "acts")

    def __init__(self, parts: list[QuantWeight]) -> None:
        if len({(int(p.shape[1]), p.isa, p.acts) for p in parts}) != 1:
            raise ValueError("parts of one width, ISA and activation mode only")
        self.parts = list(parts)
        self.shape = torch.Size((sum(int(p.shape[0]) for p in parts), int(parts[0].shape[1])))
        self.dtype, self.device, self.isa, self.acts = torch.float32, torch.device("cpu"), parts[0].isa, parts[0].acts

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        out = torch.cat([part(x) for part in self.parts], dim=-1)
        return out if bias is None else out + bias

    def numel(self) -> int:
        return self.shape.numel()

    @property
    def block_types(self) -> frozenset[str]:
        return frozenset(part.type_name for part in self.parts)

    @property
    def kind(self) -> str:
        return "+".join(sorted(self.block_types))

    def layer_spec(self) -> list[tuple[int, np.ndarray]]:
        """The parts as the fused decoder layer takes them (q|k|v only): a list of (kernel type, blocks)."""
        return [part.layer_spec() for part in self.parts]

    def plain(self) -> torch.Tensor:
        return torch.cat([part.plain() for part in self.parts])


BLOCK_LINEARS = (QuantWeight, QuantParts)
"""The linears multiplied in their blocks."""


def stack_blocks(parts: list[QuantWeight]) -> QuantWeight | QuantParts:
    """One linear of `parts` stacked: a QuantWeight where they share a block type, else their QuantParts."""
    if len(parts) == 1:
        return parts[0]
    return QuantWeight.stack(parts) if len({p.qtype for p in parts}) == 1 else QuantParts(parts)


def describe(weights: Any) -> str | None:
    """'gguf Q4_1+Q8_0' for a LeanWeights with block-quantized linears (their types), else None."""
    found = {name for w in weights.linears() for name in w.block_types}
    return "gguf " + "+".join(sorted(found)) if found else None
