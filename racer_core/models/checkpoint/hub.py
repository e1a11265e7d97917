"""A model named by hub id: the Hugging Face cache's folder, downloaded first
where it is not there yet (racer_core.models.hub)."""

from __future__ import annotations

from pathlib import Path

from racer_core.common.events import Progress
from racer_core.models import hub
from racer_core.models.checkpoint.folder import FolderCheckpoint


def open_hub(hub_id: str, folder: Path | None, progress: Progress | None = None) -> FolderCheckpoint:
    """The cached snapshot of `hub_id` (`folder`; None: download it now), named by the id."""
    return FolderCheckpoint(folder if folder is not None else hub.download(hub_id, progress), name=hub_id)
