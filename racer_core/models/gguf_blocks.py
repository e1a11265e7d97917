"""A GGUF's block-quantized linear weights, read straight from the file.

The file's tensor table is read here (gguf.GGUFReader parses every field,
the tokenizer's 49k strings included, 14 s on a small CPU), the tensor data
memory-mapped, and each supported tensor's bytes taken as they are: ggml's blocks are the kernel's layout
(formats/quant_weights.py), so nothing is dequantized or repacked. Only
llama.cpp's row order of q and k in Llama-architecture files is undone (as
transformers does when it dequantizes), by moving whole rows of blocks.

Tensors of other quantized types (Q5_K, IQ4_XS, ...) are left to the
dequantized checkpoint, named in one log line.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from racer_core.models.family import Family
from racer_core.models.formats.quant_weights import TYPE_NAMES, QuantWeight, row_bytes, supported, values_per_block

log = logging.getLogger(__name__)

LAYER_PARTS = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
"""llama.cpp's names of a layer's linears -> the families' default names (family.py)."""
TOP = {"output.weight": "lm_head.weight", "token_embd.weight": "model.embed_tokens.weight"}
PERMUTED_ARCHITECTURES = ("llama",)
"""Architectures whose converter interleaved q and k rows for llama.cpp's rope (transformers undoes it)."""
FLOAT_TYPES = (0, 1, 30)  # F32, F16, BF16: not quantized, read from the dequantized checkpoint as before


@dataclass
class Blocks:
    """The GGUF's quantized linears by checkpoint name, and those left out with why."""

    weights: dict[str, QuantWeight] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)  # "name (TYPE)"


def _name_map(family: Family, layers: int) -> dict[str, str]:
    names = dict(TOP)
    names["token_embd.weight"] = f"{family.embed}.weight"
    names["output.weight"] = f"{family.lm_head}.weight"
    for i in range(layers):
        for ours, theirs in LAYER_PARTS.items():
            names[f"blk.{i}.{ours}.weight"] = f"{family.layers}.{i}.{theirs}.weight"
    return names


def _unpermute(rows: np.ndarray, heads: int) -> np.ndarray:
    """transformers' _reverse_permute_weights on whole rows of blocks."""
    dim = rows.shape[0] // heads // 2
    return np.ascontiguousarray(rows.reshape(heads, dim, 2, rows.shape[1]).swapaxes(2, 1).reshape(rows.shape))


def family_fits(family: Family) -> bool:
    """Whether the family names its linears as llama.cpp's separate q/k/v and gate/up map to."""
    default = Family(model_type="")
    return family.qkv == default.qkv and family.gate_up == default.gate_up and family.o == default.o \
        and family.down == default.down


@dataclass
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml's order: the row length first
    qtype: int
    offset: int  # from the start of the file


SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9


class _Cursor:
    """Reads little-endian values from a buffer (the mapped file), moving on."""

    def __init__(self, buffer: Any) -> None:
        self.buffer, self.at = buffer, 0

    def read(self, fmt: str) -> tuple:
        values = struct.unpack_from("<" + fmt, self.buffer, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values

    def string(self) -> str:
        (length,) = self.read("Q")
        self.at += length
        return bytes(self.buffer[self.at - length : self.at]).decode("utf-8", errors="replace")

    def value(self, kind: int) -> object:
        """A field's value; an array's items are skipped (None)."""
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            item, count = self.read("IQ")
            if item == STRING:
                for _ in range(count):
                    self.at += struct.unpack_from("<Q", self.buffer, self.at)[0] + 8
            elif item in SCALAR:
                self.at += count * struct.calcsize(SCALAR[item])
            else:
                for _ in range(count):
                    self.value(item)
            return None
        if kind not in SCALAR:
            raise ValueError(f"unknown GGUF value type {kind}")
        return self.read(SCALAR[kind])[0]


def tensor_table(data: Any) -> tuple[dict[str, object], list[TensorInfo]]:
    """A GGUF's scalar fields and its tensors' names, shapes, types and data
    offsets, from the file's bytes (a memory map)."""
    cur = _Cursor(data)
    magic, (version,) = bytes(data[:4]), struct.unpack_from("<I", data, 4)
    if magic != b"GGUF" or version not in (2, 3):
        raise ValueError(f"not a GGUF file of version 2 or 3 ({magic!r}, {version})")
    cur.at = 8
    n_tensors, n_fields = cur.read("QQ")
    fields: dict[str, object] = {}
    for _ in range(n_fields):
        key = cur.string()
        fields[key] = cur.value(cur.read("I")[0])
    infos = []
    for _ in range(n_tensors):
        name = cur.string()
        (dims,) = cur.read("I")
        shape = cur.read("Q" * dims)
        qtype, offset = cur.read("IQ")
        infos.append(TensorInfo(name, tuple(int(n) for n in shape), int(qtype), int(offset)))
    align = int(fields.get("general.alignment", 32))  # type: ignore[call-overload]
    start = -(-cur.at // align) * align
    return fields, [TensorInfo(t.name, t.shape, t.qtype, start + t.offset) for t in infos]


def read_blocks(gguf: Path, family: Family, layers: int, heads: int, kv_heads: int) -> Blocks:
    """The block-quantized linears of `gguf` the kernel reads, as QuantWeights
    over the file's memory map (q and k rows reordered as transformers does)."""
    data = np.memmap(gguf, dtype=np.uint8, mode="r")
    fields, infos = tensor_table(data)
    arch = fields.get("general.architecture")
    names = _name_map(family, layers)
    found = Blocks()
    for tensor in infos:
        ours = names.get(tensor.name)
        if ours is None or tensor.qtype in FLOAT_TYPES:
            continue
        if not supported(tensor.qtype) or len(tensor.shape) != 2 or tensor.shape[0] % values_per_block(tensor.qtype):
            found.left_out.append(f"{tensor.name} ({_type_name(tensor.qtype)})")
            continue
        cols, rows = tensor.shape
        size = rows * row_bytes(tensor.qtype, cols)
        blocks = np.asarray(data[tensor.offset : tensor.offset + size]).reshape(rows, -1)
        if arch in PERMUTED_ARCHITECTURES and ".attn_q." in tensor.name:
            blocks = _unpermute(blocks, heads)
        elif arch in PERMUTED_ARCHITECTURES and ".attn_k." in tensor.name:
            blocks = _unpermute(blocks, kv_heads)
        found.weights[ours] = QuantWeight(blocks, tensor.qtype, rows, cols)
    return found


def _type_name(qtype: int) -> str:
    try:
        from gguf import GGMLQuantizationType

        return GGMLQuantizationType(qtype).name
    except (ImportError, ValueError):
        return f"type {qtype}"


def log_left_out(blocks: Blocks) -> None:
    """One line naming the quantized tensors kept dequantized, and why."""
    if blocks.left_out:
        shown = ", ".join(blocks.left_out[:6]) + (f" and {len(blocks.left_out) - 6} more" if len(blocks.left_out) > 6 else "")
        log.warning("4-bit weights: %d tensors dequantized to float32 instead, of types the kernel does not read "
                    "(it reads %s): %s", len(blocks.left_out), ", ".join(TYPE_NAMES.values()), shown)
