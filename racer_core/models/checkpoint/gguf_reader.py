"""gguf's own reader of a GGUF file, the one parse of it a load makes (a first load:
later ones take the blocks through the parse's tensor table, gguf_table.py, without
importing gguf)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from racer_core.common.errors import ModelLoadError, first_line

ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "qwen3_moe")
"""general.architecture values of the GGUFs racer-tui runs (Mistral's and Mixtral's files say llama)."""


def open_checked(path: Path) -> MappedReader:
    """open_reader's reader of a GGUF of an architecture racer-tui runs; else one
    line saying which it is, before anything is read into the cache."""
    from racer_core.models.checkpoint.gguf_blocks import field_value

    reader = open_reader(path)
    arch = field_value(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise ModelLoadError(f"{path.name} is a GGUF of architecture {arch!r}, which racer-tui does not run "
                             f"(it runs GGUFs of {', '.join(ARCHITECTURES)})")
    return reader


def open_reader(path: Path) -> MappedReader:
    """gguf's GGUFReader over `path`, or a one-line ModelLoadError for a file it cannot parse (damaged, cut short)."""
    try:
        return MappedReader(path)
    except Exception as error:  # the reader raises ValueError, KeyError, IndexError... on a bad file
        raise ModelLoadError(f"cannot read GGUF file {path}: damaged or cut short ({first_line(error)})") from None


class MappedReader(gguf.GGUFReader):
    """GGUFReader over a plain ndarray view of its memory map: its parse slices
    the map once per value (about 250k slices for a 49k-token vocabulary), and
    each numpy.memmap slice runs a Python hook: 2.7 s against 1.0 s for the
    embedded model on the 2-core AVX2 machine. The view keeps the map open."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        super().__init__(path, "r")

    @property  # type: ignore[override]
    def data(self) -> np.ndarray:
        return self._data

    @data.setter
    def data(self, value: np.ndarray) -> None:
        self._data = np.asarray(value)
