"""A checkpoint folder (config.json, safetensors, tokenizer files), read where it is."""

from __future__ import annotations

from pathlib import Path

from racer_core.models.checkpoint.base import Checkpoint


class FolderCheckpoint(Checkpoint):
    """A transformers checkpoint folder: its own files are everything."""

    def __init__(self, folder: Path, name: str | None = None) -> None:
        super().__init__(name or folder.name, folder, folder)
