"""Choosing and loading a model without importing torch in the UI process's
main thread: the default factory imports the engine only when called (from a
worker thread)."""

from __future__ import annotations

from typing import Any

from racer_core.embedded import EMBEDDED_NAME
from racer_core.events import Engine, Progress


def default_engine_factory(
    model_path: str | None, *, device: str = "auto", dtype: str = "auto", progress: Progress | None = None,
    **load: Any,
) -> Engine:
    """`load`: quantize / trust_remote_code, as the command line asked."""
    from racer_core.engine import load_engine  # imports torch: worker thread only

    return load_engine(model_path, device=device, dtype=dtype, progress=progress, **load)


def describe(model_path: str | None) -> str:
    return EMBEDDED_NAME if not model_path else model_path
