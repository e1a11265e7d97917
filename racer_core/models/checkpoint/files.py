"""The one place that reads a checkpoint folder's own files: its JSON files
(config, generation config, weight index, tokenizer config) and where its
safetensors weights are. Reading never fails loudly here: a missing or
damaged file is None, and each caller decides what that means (the reader
leaves the model to transformers, the GGUF cache makes the folder again)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIG = "config.json"
GENERATION_CONFIG = "generation_config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
SINGLE_WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file's contents; None when missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def indexed_weight_files(folder: Path) -> set[str] | None:
    """The file names the weight index maps tensors to; None without a readable index."""
    index = read_json(folder / WEIGHTS_INDEX)
    if index is None or not isinstance(index.get("weight_map"), dict):
        return None
    return {str(name) for name in index["weight_map"].values()}


def weight_files(folder: Path) -> list[Path] | None:
    """The checkpoint's safetensors files (one, or those its index names), None when some are missing."""
    if (folder / SINGLE_WEIGHTS).is_file():
        return [folder / SINGLE_WEIGHTS]
    names = indexed_weight_files(folder)
    if names is None:
        return None
    paths = [folder / name for name in sorted(names)]
    return paths if all(p.is_file() for p in paths) else None


class CheckpointConfig:
    """config.json as attributes (a missing key is an AttributeError, so
    getattr defaults work as with a transformers config)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_data"][name]
        except KeyError:
            raise AttributeError(name) from None

    def to_dict(self) -> dict[str, Any]:
        return dict(self._data)

    def get_text_config(self) -> CheckpointConfig:
        return self


def is_vision_config(config: Any) -> bool:
    """Whether a (transformers) config describes a vision-language model."""
    return getattr(config, "vision_config", None) is not None and hasattr(config, "text_config")
