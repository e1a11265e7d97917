"""The parse's tensor table of a GGUF (gguf_reader.py parses the file once):
kept in the parts folder, it lets a later load map the file and take its
blocks without parsing it again, and without importing gguf (0.05 s of CPU
after numpy on the 2-core AVX2 machine)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from racer_core.models.checkpoint.gguf_reader import MappedReader


class TensorEntry(NamedTuple):
    """One tensor of the file, with the attribute names of gguf's ReaderTensor that the blocks read."""

    name: str
    tensor_type: int
    shape: tuple[int, ...]  # ggml's order: the row length first
    data: np.ndarray  # the tensor's bytes (or values) in the file's memory map


def tensor_table(reader: MappedReader) -> dict[str, Any]:
    """The parse's result the blocks need, as JSON: the architecture and each
    tensor's name, type, shape, and where its bytes lie in the file. Kept in
    the parts folder (named by the file's content), so that a later load maps
    the file and takes the blocks without parsing it again."""
    from racer_core.models.checkpoint.gguf_blocks import field_value

    return {"architecture": field_value(reader, "general.architecture"),
            "tensors": [[t.name, int(t.tensor_type), [int(n) for n in t.shape], int(t.data_offset), int(t.n_bytes)]
                        for t in reader.tensors]}


def tensors_from_table(path: Path, table: dict[str, Any]) -> list[TensorEntry]:
    """tensor_table's tensors over a fresh memory map of `path` (bytes; F32 ones as float32 values)."""
    data = np.asarray(np.memmap(path, dtype=np.uint8, mode="r"))
    entries = []
    for name, qtype, shape, offset, size in table["tensors"]:
        raw = data[offset : offset + size]
        entries.append(TensorEntry(name, qtype, tuple(shape), raw.view(np.float32) if qtype == 0 else raw))
    return entries

