"""A GGUF's block-quantized linear weights, read straight from the file.

The file is parsed once, by the checkpoint's reader (gguf's GGUFReader over
the file's memory map, checkpoint/gguf_file.py), and each supported tensor's
bytes taken from it as they are: ggml's blocks are the kernel's layout
(formats/quant_weights.py), so nothing is dequantized or repacked. Only
llama.cpp's row order of q and k in Llama-architecture files is undone (as
transformers does when it dequantizes), by moving whole rows of blocks.

Tensors of other quantized types (Q2_K, Q3_K, IQ4_XS, ...) are left to the
dequantized checkpoint (float32 weights), named in one log line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from racer_core.common.errors import first_line
from racer_core.models.family import Family
from racer_core.models.formats.quant_weights import TYPE_NAMES, QuantWeight, row_bytes, supported, values_per_block

log = logging.getLogger(__name__)

SEPARATE = {"attn_q": 0, "attn_k": 1, "attn_v": 2}
"""llama.cpp's separate q, k, v linears -> their place in a family's qkv."""
TOP = {"output.weight": "lm_head.weight", "token_embd.weight": "model.embed_tokens.weight"}
PERMUTED_ARCHITECTURES = ("llama",)
"""Architectures whose converter interleaved q and k rows for llama.cpp's rope (transformers undoes it)."""
FLOAT_TYPES = (0, 1, 30)  # F32, F16, BF16: not quantized, read from the dequantized checkpoint as before


@dataclass
class Blocks:
    """The GGUF's quantized linears by checkpoint name, and those left out with why."""

    weights: dict[str, QuantWeight] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)  # "name (TYPE)"


def _linear_names(family: Family) -> dict[str, str]:
    """llama.cpp's names of a layer's linears -> the family's (separate or fused:
    Phi-3's attn_qkv and its ffn_up holding gate|up, gate first, as its checkpoint)."""
    names = {"attn_output": family.o, "ffn_down": family.down}
    if len(family.qkv) == 1:
        names["attn_qkv"] = family.qkv[0]
    else:
        names |= {ours: family.qkv[at] for ours, at in SEPARATE.items()}
    if len(family.gate_up) == 1:
        names["ffn_up"] = family.gate_up[0]
    else:
        names |= {"ffn_gate": family.gate_up[0], "ffn_up": family.gate_up[1]}
    return names


def _name_map(family: Family, layers: int) -> dict[str, str]:
    names = dict(TOP)
    names["token_embd.weight"] = f"{family.embed}.weight"
    names["output.weight"] = f"{family.lm_head}.weight"
    for i in range(layers):
        for ours, theirs in _linear_names(family).items():
            names[f"blk.{i}.{ours}.weight"] = f"{family.layers}.{i}.{theirs}.weight"
    return names


def all_names(family: Family, layers: int) -> dict[str, str]:
    """Every llama.cpp tensor name of a family that family_fits -> its checkpoint name: the
    linears, the norms and the q/k/v biases."""
    names = _name_map(family, layers)
    names["output_norm.weight"] = f"{family.final_norm}.weight"
    norms = {"attn_norm": family.input_norm, "ffn_norm": family.post_norm, "attn_q_norm": family.q_norm,
             "attn_k_norm": family.k_norm}
    biased = {"attn_qkv": family.qkv[0]} if len(family.qkv) == 1 else \
        {ours: family.qkv[at] for ours, at in SEPARATE.items()}
    for i in range(layers):
        for ours, theirs in norms.items():
            names[f"blk.{i}.{ours}.weight"] = f"{family.layers}.{i}.{theirs}.weight"
        for ours, theirs in biased.items():
            names[f"blk.{i}.{ours}.bias"] = f"{family.layers}.{i}.{theirs}.bias"
    return names


def row_order(values: np.ndarray, gguf_name: str, arch: str, heads: int, kv_heads: int) -> np.ndarray:
    """A tensor's rows in the checkpoint's order: llama.cpp's q and k rows of
    Llama-architecture files put back (as transformers does), the rest as they are."""
    if arch in PERMUTED_ARCHITECTURES and ".attn_q." in gguf_name:
        return _unpermute(values, heads)
    if arch in PERMUTED_ARCHITECTURES and ".attn_k." in gguf_name:
        return _unpermute(values, kv_heads)
    return values


def _unpermute(rows: np.ndarray, heads: int) -> np.ndarray:
    """transformers' _reverse_permute_weights on whole rows of blocks."""
    dim = rows.shape[0] // heads // 2
    return np.ascontiguousarray(rows.reshape(heads, dim, 2, rows.shape[1]).swapaxes(2, 1).reshape(rows.shape))


def family_fits(family: Family) -> bool:
    """Whether the family's linears are llama.cpp's: q/k/v separate or fused in
    that order, gate/up separate or fused gate first, and the default o and down."""
    default = Family(model_type="")
    return len(family.qkv) in (1, 3) and len(family.gate_up) in (1, 2) and family.o == default.o \
        and family.down == default.down


def read_blocks(tensors: Iterable[Any], arch: str, family: Family, layers: int, heads: int, kv_heads: int) -> Blocks:
    """The block-quantized linears the kernel reads, from a GGUF's tensors (gguf
    ReaderTensors or gguf_reader.TensorEntry, over the file's memory map) and
    its architecture, as QuantWeights by checkpoint name (q and k rows
    reordered as transformers does)."""
    names = _name_map(family, layers)
    found = Blocks()
    for tensor in tensors:
        ours = names.get(tensor.name)
        qtype = int(tensor.tensor_type)
        if ours is None or qtype in FLOAT_TYPES:
            continue
        shape = tuple(int(n) for n in tensor.shape)  # ggml's order: the row length first
        if not supported(qtype) or len(shape) != 2 or shape[0] % values_per_block(qtype):
            found.left_out.append(f"{tensor.name} ({_type_name(qtype)})")
            continue
        cols, rows = shape
        blocks = row_order(np.asarray(tensor.data).reshape(rows, row_bytes(qtype, cols)), tensor.name, arch,
                           heads, kv_heads)
        found.weights[ours] = QuantWeight(blocks, qtype, rows, cols)
    return found


def field_value(reader: Any, key: str) -> Any:
    """A scalar or string field of the GGUF (None where it has none)."""
    field = reader.get_field(key)
    return None if field is None else field.contents()


def blocks_of(tensors: Iterable[Any], arch: str, config: Any, file_name: str) -> dict[str, QuantWeight]:
    """The GGUF's linears the kernel reads, by checkpoint name (none when its
    family's names do not map onto llama.cpp's, or its config lacks a number
    this needs: said in one log line), those left out named in one log line."""
    from racer_core.models.families import family_of

    family = family_of(config)
    if family is None or not family_fits(family):
        return {}
    try:
        heads = int(config.num_attention_heads)
        found = read_blocks(tensors, arch, family, int(config.num_hidden_layers), heads,
                            int(getattr(config, "num_key_value_heads", None) or heads))
    except (AttributeError, TypeError, ValueError, KeyError) as error:
        log.warning("4-bit weights: cannot read %s's blocks (%s); using float32", file_name, first_line(error))
        return {}
    log_left_out(found)
    return found.weights


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
