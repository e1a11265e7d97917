"""Where user data lives: platformdirs directories, each overridable by an
environment variable so tests and CI never touch the real home directory."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import platformdirs

APP_NAME = "racer-tui"


def _dir(env: str, default: str) -> Path:
    path = Path(os.environ.get(env) or default)
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_dir() -> Path:
    """Dequantized models and measured cost curves (safe to delete)."""
    return _dir("RACER_TUI_CACHE_DIR", platformdirs.user_cache_dir(APP_NAME))


def data_dir() -> Path:
    """Chat history and benchmark answer files."""
    return _dir("RACER_TUI_DATA_DIR", platformdirs.user_data_dir(APP_NAME))


def models_dir() -> Path:
    """Where `racer-tui install-model` puts the embedded model's GGUF: the data
    folder's `models/`, or RACER_TUI_MODELS_DIR (tests point it at the installed
    model while their data folder is a temporary one). Not created here: a
    lookup must not make folders."""
    override = os.environ.get("RACER_TUI_MODELS_DIR")
    if override:
        return Path(override)
    return Path(os.environ.get("RACER_TUI_DATA_DIR") or platformdirs.user_data_dir(APP_NAME)) / "models"


def config_dir() -> Path:
    """Settings."""
    return _dir("RACER_TUI_CONFIG_DIR", platformdirs.user_config_dir(APP_NAME))


def cache_key(parts: Sequence[str]) -> str:
    """A short file name for what `parts` identify (a model, device, dtype...)."""
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:20]


def move_aside(path: Path) -> Path:
    """Rename a damaged file to `NAME.damaged-UTCSTAMP` next to it (never
    deleted: the user may want it back) and return the new path."""
    from datetime import UTC, datetime

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while target.exists():  # two in one second: keep both
        n += 1
        target = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    path.rename(target)
    return target
