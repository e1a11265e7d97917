"""Choosing and loading a model without importing torch in the UI process's
main thread: the default factory imports the engine only when called (from a
worker thread)."""

from __future__ import annotations

import os
import sys
from typing import Any

from racer_core.common.events import Engine, Progress
from racer_core.models.embedded import EMBEDDED_NAME


def quiet_loading_bars() -> None:
    """racer-tui shows its own loading progress: keep the hub's and transformers'
    tqdm bars ("Loading weights") off the screen. transformers reads the
    variable when it is first imported; if it already is, switch its bars off."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    logging = sys.modules.get("transformers.utils.logging")
    if logging is not None:
        logging.disable_progress_bar()


def default_engine_factory(
    model_path: str | None, *, device: str = "auto", dtype: str = "auto", progress: Progress | None = None,
    **load: Any,
) -> Engine:
    """`load`: quantize / trust_remote_code, as the command line asked."""
    if progress:
        progress("Importing torch...", 0.05)
    from racer_core.engine.engine import load_engine  # imports torch: worker thread only

    # A chat never waits for the cost curve: one still to measure is measured in the background.
    return load_engine(model_path, device=device, dtype=dtype, progress=progress, measure_later=True, **load)


def describe(model_path: str | None) -> str:
    return EMBEDDED_NAME if not model_path else model_path
