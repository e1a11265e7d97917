"""Choosing and loading a model without importing torch in the UI process's
main thread: the default factory imports the engine only when called (from a
worker thread)."""

from __future__ import annotations

from pathlib import Path

from racer_core.events import Engine, Progress

EMBEDDED_LABEL = "SmolLM2-135M-Instruct (embedded, Q4_1 GGUF)"
GGUF_MAGIC = b"GGUF"


def default_engine_factory(
    model_path: str | None, *, device: str = "auto", dtype: str = "auto", progress: Progress | None = None
) -> Engine:
    from racer_core.engine import load_engine  # imports torch: worker thread only

    return load_engine(model_path, device=device, dtype=dtype, progress=progress)


def describe(model_path: str | None) -> str:
    return EMBEDDED_LABEL if not model_path else model_path


def validate_model_path(text: str) -> str | None:
    """Why `text` cannot be a model (one line), or None when it looks usable:
    a checkpoint folder with config.json, or a .gguf file with the GGUF header."""
    if not text.strip():
        return "Enter a checkpoint folder or a .gguf file path."
    path = Path(text.strip()).expanduser()
    if not path.exists():
        return f"No such file or folder: {path}"
    if path.is_dir():
        if not (path / "config.json").is_file():
            return f"{path} is a folder without config.json: not a transformers checkpoint."
        return None
    if path.suffix.lower() != ".gguf":
        return f"{path.name} is neither a checkpoint folder nor a .gguf file."
    try:
        with path.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        return f"Cannot read {path}: {exc.strerror or exc}"
    if magic != GGUF_MAGIC:
        return f"{path.name} does not start with the GGUF header: not a GGUF model file."
    return None
