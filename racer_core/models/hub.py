"""Models named by Hugging Face hub id (`org/name`), found in the local
Hugging Face cache, or downloaded into it when the user is online.

Offline (`HF_HUB_OFFLINE` set, read at call time) only the cache is used; a
model missing from it is refused with the command that fetches it. Checking
a name never downloads: that happens only when the model is loaded.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from racer_core.common.errors import ModelLoadError
from racer_core.common.events import Progress

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_ALLOW = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.py", "*.tiktoken"]


def looks_like_hub_id(text: str) -> bool:
    return bool(_HUB_ID.match(text)) and ".." not in text


def is_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def cache_folder() -> Path:
    """The hub cache, honouring HF_HUB_CACHE and HF_HOME as set now."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def fetch_hint(repo_id: str) -> str:
    return f"fetch it first with: hf download {repo_id}"


def cached_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot folder of the model, or None when it is not cached."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo_id, cache_dir=cache_folder(), local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None
    return folder if (folder / "config.json").is_file() else None


def check_available(repo_id: str) -> Path | None:
    """The cached folder; None when it must be downloaded at load time; a
    ModelLoadError when it is not cached and the hub is off."""
    folder = cached_snapshot(repo_id)
    if folder is None and is_offline():
        raise ModelLoadError(
            f"{repo_id}: no such folder, and not in the Hugging Face cache (HF_HUB_OFFLINE is set); "
            f"for the hub model, {fetch_hint(repo_id)}"
        )
    return folder


def download(repo_id: str, progress: Progress | None = None) -> Path:
    """Download the model's weights, tokenizer and processor files into the cache."""
    from huggingface_hub import snapshot_download

    if progress:
        progress(f"Downloading {repo_id} from the Hugging Face hub...", 0.0)
    try:
        folder = snapshot_download(repo_id, cache_dir=cache_folder(), allow_patterns=_ALLOW,
                                   tqdm_class=_progress_bar(repo_id, progress))
    except Exception as error:  # network, missing repository, gated model...
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ModelLoadError(f"cannot download {repo_id}: {first}; {fetch_hint(repo_id)}") from error
    return Path(folder)


def _progress_bar(repo_id: str, progress: Progress | None) -> Any:
    """A tqdm class that reports the download's byte count to `progress`."""
    from tqdm.auto import tqdm

    class Reporting(tqdm):  # type: ignore[misc, valid-type]
        # Silent on the terminal when a progress callback shows it instead;
        # counted here because a disabled tqdm counts nothing.
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.bytes_total = kwargs.get("total") or 0
            self.bytes_done = kwargs.get("initial") or 0
            self.counts_bytes = kwargs.get("unit") == "B"
            if progress is not None:
                kwargs["disable"] = True
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            self.bytes_done += n or 0
            if progress and self.counts_bytes and self.bytes_total:
                done, total = self.bytes_done, self.bytes_total
                progress(f"Downloading {repo_id}: {done / 1e6:,.0f} of {total / 1e6:,.0f} MB", min(1.0, done / total))
            return super().update(n)

    return Reporting
