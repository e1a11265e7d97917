"""The embedded default model's checkpoint: its installed GGUF (racer_core.models.embedded)."""

from __future__ import annotations

from racer_core.common.events import Progress
from racer_core.models.checkpoint.gguf_file import GGUFCheckpoint, open_gguf
from racer_core.models.embedded import EMBEDDED_NAME, embedded_gguf


def open_embedded(blocks: bool, why_whole: str, progress: Progress | None = None) -> GGUFCheckpoint:
    """SmolLM2-135M-Instruct's Q4_1 GGUF (as open_gguf), shown under its embedded name."""
    return open_gguf(embedded_gguf(), blocks, why_whole, progress, name=EMBEDDED_NAME)
