"""A Llama-shaped GGUF of any size, random blocks in a download's mix of types,
for measuring costs at the sizes users run (scripts/sized_gguf.py).

Its weights are random, at a trained model's magnitudes (values of about
0.02's spread around zero, norms of one), so its text is noise: it is for
step and prefill costs only, which depend on the shape and the block types,
not on the values. The tokenizer is the embedded model's (its
`tokenizer.*` fields copied), so that racer-tui and llama.cpp both load the
file. The blocks are random bytes with their fp16 scales set (any bytes are a
valid block once those are finite): no quantizer runs, so a 0.8B file takes
seconds, not the minutes a quantizer of 800M values would.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from racer_core.models.formats.quant import reference

K_BYTES = {12: 144, 13: 176, 14: 210}
"""Q4_K, Q5_K, Q6_K: bytes per 256-value super-block."""

BLOCKS = {2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), **{t: (256, b) for t, b in K_BYTES.items()}}
"""Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K types: (values, bytes) a block."""

SCALE_AT = {2: (0,), 3: (0, 2), 6: (0,), 7: (0, 2), 8: (0,), 12: (0, 2), 13: (0, 2), 14: (208,)}
"""Byte offsets of a block's fp16 fields: its scale d, then its minimum m (Q4_1, Q5_1) or dmin (Q4_K, Q5_K)."""

SPREAD = {2: 4.61, 3: 4.61, 6: 9.23, 7: 9.23, 8: 73.9, 12: 258.0, 13: 527.0, 14: 1366.0}
"""The standard deviation of a random block's values with d = 1 (and its minimum as MIDDLE says): the quants'
spread (uniform 4- or 5-bit, int8), times the 6-bit or int8 sub-block scales' of the K types."""

MIDDLE = {3: -7.5, 7: -15.5, 12: 7.5, 13: 15.5}
"""The minimum field as a multiple of d that centres the values on zero: m = -7.5 d for Q4_1's d * q + m
(q in 0..15); dmin = 7.5 d for Q4_K's d * sc * q - dmin * mins (sc and mins alike in 0..63)."""


def random_blocks(qtype: int, rows: int, cols: int, rng: np.random.Generator, std: float | None = None) -> np.ndarray:
    """(rows, bytes per row) random blocks of `qtype` (a GGML type number in BLOCKS).

    With `std`, the values spread about `std` around zero, each block's scale drawn
    within half of it either way (a trained model's linears, near enough for
    costs); without, every fp16 field is drawn in 1e-3..0.05 (a kernel test's any-bytes blocks)."""
    per, size = BLOCKS[qtype]
    if cols % per:
        raise ValueError(f"a row of {cols} values is no whole number of {per}-value blocks")
    if std is None:
        return reference.random_blocks(qtype, rows, cols, rng)
    n = rows * cols // per
    b = rng.integers(0, 256, (n, size), dtype=np.uint8)
    d = std / SPREAD[qtype] * rng.uniform(0.5, 1.5, n)
    fields = [d, d * MIDDLE[qtype]] if len(SCALE_AT[qtype]) == 2 else [d]
    for offset, values in zip(SCALE_AT[qtype], fields, strict=True):
        b[:, offset : offset + 2] = values.astype(np.float16).view(np.uint8).reshape(n, 2)
    return b.reshape(rows, -1)


def random_k_blocks(qtype: int, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """(rows, bytes per row) random Q4_K, Q5_K or Q6_K blocks (gguf's numpy has no K
    quantizer), their fp16 scales in 1e-3..0.05: the kernel tests' blocks."""
    if qtype not in K_BYTES:
        raise ValueError(f"GGML type {qtype} is no K type")
    return random_blocks(qtype, rows, cols, rng)


@dataclass(frozen=True)
class Shape:
    """A Llama model's size: hidden width, layers, FFN width, attention heads and key-value heads."""

    hidden: int
    layers: int
    ffn: int
    heads: int
    kv_heads: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def linears(self, layer: int) -> dict[str, tuple[int, int]]:
        """Layer `layer`'s linears under llama.cpp's names: (rows, cols) each, rows the outputs."""
        kv = self.kv_heads * self.head_dim
        blk = f"blk.{layer}."
        return {f"{blk}attn_q.weight": (self.hidden, self.hidden), f"{blk}attn_k.weight": (kv, self.hidden),
                f"{blk}attn_v.weight": (kv, self.hidden), f"{blk}attn_output.weight": (self.hidden, self.hidden),
                f"{blk}ffn_gate.weight": (self.ffn, self.hidden), f"{blk}ffn_up.weight": (self.ffn, self.hidden),
                f"{blk}ffn_down.weight": (self.hidden, self.ffn)}

    def check(self) -> None:
        """Refuse, in one line, a shape no Llama model has."""
        if min(self.hidden, self.layers, self.ffn, self.heads, self.kv_heads) < 1:
            raise ValueError("every size must be at least 1")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"--hidden {self.hidden} must split into --heads {self.heads}, "
                             f"and the heads into --kv-heads {self.kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"a head of {self.head_dim} values: rope needs an even head size")
        if self.hidden % 32 or self.ffn % 32 or (self.kv_heads * self.head_dim) % 32:
            raise ValueError("--hidden, --ffn and the key-value width must be multiples of 32 (the blocks' size)")


PRESETS = {"0.8b": Shape(hidden=2048, layers=16, ffn=5632, heads=32, kv_heads=8)}
"""0.8b: TinyLlama's widths (2048 wide, FFN 5632, heads of 64) at 16 layers and 8 key-value heads;
with the 49152-token vocabulary, 0.82B parameters (0.10B of them the tied embedding)."""

MIXES = ("q4_1", "q4_k_m", "q5_k_m", "q8_0")


def use_more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's choice of the Q4_K_M and Q5_K_M layers whose attn_v and ffn_down get Q6_K (llama-quant.cpp): the first and
    last eighth, and every third between; half of them at 16 layers."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def tensor_types(shape: Shape, mix: str) -> dict[str, int]:
    """Every quantized tensor's GGML type in `mix`, as llama.cpp's quantizer chooses them for a tied model:
    the embedding (the head too) Q6_K where its rows are whole 256-value blocks, else Q8_0 (the embedded
    model's 576 wide); q4_1 every linear Q4_1; q4_k_m Q4_K (q5_k_m Q5_K), with Q6_K for attn_v and
    ffn_down in use_more_bits' layers; q8_0 every tensor Q8_0, the embedding too (llama.cpp keeps a
    Q8_0 file's output in Q8_0)."""
    if mix not in MIXES:
        raise ValueError(f"unknown mix {mix!r}; choose one of {', '.join(MIXES)}")
    if mix in K_MIXES and (shape.hidden % 256 or shape.ffn % 256):
        raise ValueError(f"{mix} needs --hidden and --ffn in multiples of 256 (the K types' blocks)")
    if mix == "q8_0":
        return {"token_embd.weight": 8} | {name: 8 for layer in range(shape.layers) for name in shape.linears(layer)}
    types = {"token_embd.weight": 14 if shape.hidden % 256 == 0 else 8}
    for layer in range(shape.layers):
        for name in shape.linears(layer):
            more = mix in K_MIXES and name.endswith(("attn_v.weight", "ffn_down.weight"))
            types[name] = 3 if mix == "q4_1" else 14 if more and use_more_bits(layer, shape.layers) else K_MIXES[mix]
    return types


K_MIXES = {"q4_k_m": 12, "q5_k_m": 13}
"""The K mixes' main type: Q4_K, Q5_K."""
FILE_TYPES = {"q4_1": "MOSTLY_Q4_1", "q4_k_m": "MOSTLY_Q4_K_M", "q5_k_m": "MOSTLY_Q5_K_M", "q8_0": "MOSTLY_Q8_0"}


@dataclass(frozen=True)
class Written:
    """What write_sized_gguf wrote: parameters, bytes, and how many tensors of each GGML type name."""

    path: Path
    params: int
    bytes: int
    types: dict[str, int]


def write_sized_gguf(path: Path, shape: Shape, mix: str, tokenizer_from: Path, seed: int = 0,
                     std: float = 0.02) -> Written:
    """Write a tied Llama GGUF of `shape` in `mix` at `path`, its tokenizer fields copied from the GGUF
    `tokenizer_from` (its vocabulary sets the embedding's rows)."""
    import gguf

    shape.check()
    types = tensor_types(shape, mix)
    source = gguf.GGUFReader(str(tokenizer_from))
    if "tokenizer.ggml.tokens" not in source.fields:
        raise ValueError(f"{tokenizer_from.name} has no tokenizer.ggml.tokens to copy")
    vocab = len(source.fields["tokenizer.ggml.tokens"].data)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"random llama {mix} (costs only)")
    writer.add_block_count(shape.layers)
    writer.add_context_length(8192)
    writer.add_embedding_length(shape.hidden)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(100000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType[FILE_TYPES[mix]])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for key, field in source.fields.items():
        if key.startswith("tokenizer."):
            writer.add_key_value(key, field.contents(), field.types[0], field.types[-1] if len(field.types) > 1 else None)
    rng = np.random.default_rng(seed)
    sizes = {"token_embd.weight": (vocab, shape.hidden)}
    for layer in range(shape.layers):
        sizes |= shape.linears(layer)
    counts: dict[str, int] = {"F32": 0}
    params = 0
    for name, (rows, cols) in sizes.items():
        qtype = types[name]
        writer.add_tensor(name, random_blocks(qtype, rows, cols, rng, std), raw_dtype=gguf.GGMLQuantizationType(qtype))
        counts[gguf.GGMLQuantizationType(qtype).name] = counts.get(gguf.GGMLQuantizationType(qtype).name, 0) + 1
        params += rows * cols
    ones = np.ones(shape.hidden, dtype=np.float32)
    for name in [f"blk.{i}.{norm}_norm.weight" for i in range(shape.layers) for norm in ("attn", "ffn")] + ["output_norm.weight"]:
        writer.add_tensor(name, ones)
        counts["F32"] += 1
        params += shape.hidden
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Written(path, params, path.stat().st_size, counts)
