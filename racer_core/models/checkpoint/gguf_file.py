"""A GGUF file as a checkpoint: parsed once, memory-mapped, by gguf's own
reader (at its first load; later loads map it and take the blocks where the
parse's tensor table, kept in the parts folder, says they lie); its quantized
linears served in their blocks (gguf_blocks.py), its config, tokenizer and
float tensors from a folder in the user cache.

With the blocks (the default on a CPU whose 4-bit kernel runs) that folder
holds only what the blocks do not give (gguf_parts.py); otherwise, or
where that folder cannot be made, it is the whole model dequantized
(gguf_dequantized.py), made once, and one line says why it is needed.
"""

from __future__ import annotations

import logging
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from racer_core.common.events import Progress
from racer_core.models.checkpoint.base import Checkpoint
from racer_core.models.checkpoint.files import read_json
from racer_core.models.checkpoint.gguf_table import tensors_from_table

if TYPE_CHECKING:
    from racer_core.models.checkpoint.gguf_reader import MappedReader
    from racer_core.models.formats.quant_weights import QuantWeight

log = logging.getLogger(__name__)


class GGUFCheckpoint(Checkpoint):
    """A GGUF file (`path`) over its cache folder (`folder`); with `use_blocks`
    its quantized linears are served in their blocks."""

    def __init__(self, path: Path, folder: Path, use_blocks: bool, name: str | None = None,
                 reader: MappedReader | None = None) -> None:
        super().__init__(name or path.stem, path, folder)
        self.use_blocks = use_blocks
        if reader is not None:
            self.__dict__["reader"] = reader  # already parsed (cached_property's slot)

    @cached_property
    def reader(self) -> MappedReader:
        from racer_core.models.checkpoint.gguf_reader import open_reader  # imports gguf: a parse only

        return open_reader(self.path)

    def parsed_reader(self) -> MappedReader | None:
        """The reader if the file was parsed already, else None (nothing is parsed for it)."""
        return self.__dict__.get("reader")

    @cached_property
    def _blocks(self) -> dict[str, QuantWeight]:
        from racer_core.models.checkpoint.gguf_blocks import blocks_of, field_value

        if not self.use_blocks:
            return {}
        from racer_core.models.checkpoint.gguf_dequantized import SOURCE

        table = (read_json(self.folder / SOURCE) or {}).get("tensor_table")
        if table is not None and self.parsed_reader() is None:  # a later load: no second parse of the file
            return blocks_of(tensors_from_table(self.path, table), table["architecture"], self.config, self.path.name)
        if table is None and self.holds_parts_only():  # a folder made before the table was kept
            from racer_core.models.checkpoint.gguf_parts import record_tensor_table

            record_tensor_table(self.folder, self.reader)
        return blocks_of(self.reader.tensors, field_value(self.reader, "general.architecture"), self.config,
                         self.path.name)

    def blocks(self, name: str) -> QuantWeight | None:
        return self._blocks.get(name)

    def block_names(self) -> set[str]:
        return set(self._blocks)

    def holds_parts_only(self) -> bool:
        """Whether the cache folder holds only what the blocks do not give (gguf_parts.py)."""
        from racer_core.models.checkpoint.gguf_parts import is_blocks_folder

        return is_blocks_folder(self.folder)

    def full_folder(self, reason: str, progress: Progress | None = None) -> Path:
        from racer_core.models.checkpoint.gguf_dequantized import ensure_dequantized

        if not self.holds_parts_only():
            return self.folder
        return ensure_dequantized(self.path, progress, reason=reason, reader=self.parsed_reader())

    def on_full_copy(self, reason: str, progress: Progress | None = None) -> GGUFCheckpoint:
        """The same file over its dequantized copy, the blocks still offered (the reader checks them again)."""
        return GGUFCheckpoint(self.path, self.full_folder(reason, progress), self.use_blocks, self.name,
                              self.parsed_reader())


def open_gguf(path: Path, blocks: bool, why_whole: str, progress: Progress | None = None,
              name: str | None = None) -> GGUFCheckpoint:
    """`path` as a checkpoint: with `blocks`, parsed now and over the folder of
    its parts (made on its first load); otherwise, or where that folder cannot
    be made, over its dequantized copy, `why_whole` saying what needs it."""
    from racer_core.models.checkpoint.gguf_dequantized import ensure_dequantized
    from racer_core.models.checkpoint.gguf_parts import cached_parts, ensure_blocks_checkpoint

    if not blocks:
        return GGUFCheckpoint(path, ensure_dequantized(path, progress, reason=why_whole), False, name)
    parts = cached_parts(path, progress)
    if parts is not None:  # its tensor table is there: the file is mapped, not parsed
        return GGUFCheckpoint(path, parts, True, name)
    from racer_core.models.checkpoint.gguf_reader import open_checked  # imports gguf: a first load only

    reader = open_checked(path)
    folder = ensure_blocks_checkpoint(path, reader, progress) or ensure_dequantized(
        path, progress, reason="a model its blocks alone cannot serve (the line above says why)", reader=reader)
    return GGUFCheckpoint(path, folder, True, name, reader)
