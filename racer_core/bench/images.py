"""Images in benchmark questions: `"images": [["cat.png"], []]` on a question
line gives each turn its pictures (a plain string stands for one), paths
relative to the question file. Checked with the rest of the file, before
anything runs; read when the question's turn is sent."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from racer_core.common.errors import InputError

if TYPE_CHECKING:  # the headless command lines check question files without importing torch
    from racer_core.common.events import Engine
    from racer_core.engine.multimodal import ChatImage

TurnImages = tuple[tuple[str, ...], ...]


def parse_turn_images(value: Any, turns: int, base: Path, where: str) -> TurnImages:
    """One tuple of absolute image paths per turn (empty where it has none)."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > turns:
        raise InputError(f"{where}: images must be a list with one entry per turn (at most {turns})")
    out: list[tuple[str, ...]] = []
    for turn, entry in enumerate(value, start=1):
        paths = [entry] if isinstance(entry, str) else entry
        if not isinstance(paths, list) or not all(isinstance(p, str) and p.strip() for p in paths):
            raise InputError(f"{where}: images of turn {turn} must be a path or a list of paths")
        resolved = []
        for path in paths:
            file = (base / Path(path).expanduser()).resolve()
            if not file.is_file():
                raise InputError(f"{where}: image of turn {turn} not found: {file}")
            resolved.append(str(file))
        out.append(tuple(resolved))
    out += [()] * (turns - len(out))
    return tuple(out) if any(out) else ()


def takes_images(engine: Engine) -> bool:
    """Whether the engine's model reads images (a VL model with its processor)."""
    return engine.reads_images


def without_image_questions(questions: Sequence[Any], reads_images: bool) -> tuple[list[Any], int]:
    """The questions a model can answer, and how many were dropped for their
    images (a text-only model skips them; the run counts and reports them)."""
    if reads_images:
        return list(questions), 0
    kept = [q for q in questions if not q.images]
    return kept, len(questions) - len(kept)


def images_of_turn(images: TurnImages, turn: int) -> list[ChatImage]:
    """The turn's pictures, read now (a file changed since the check still gives one clear line)."""
    from racer_core.engine.multimodal import load_image

    if turn >= len(images):
        return []
    return [load_image(path) for path in images[turn]]
