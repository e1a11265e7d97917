"""Settings kept between runs as JSON: generation parameters and the model."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from racer_core.events import METHODS, GenerationConfig

log = logging.getLogger(__name__)

CHAT_METHODS = ("ar", "racer", "retrieval", "logits")
"""Methods that stream one event per step; `hf` and `pld` are benchmark anchors."""


@dataclass(frozen=True)
class Settings:
    method: str = "racer"
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    max_num_draft: int | str = "auto"
    ngram: int = 10
    max_nodes: int = 10000
    max_breadth: int = 8
    enable_thinking: bool = False
    model_path: str | None = None  # None: the embedded default model
    device: str = "auto"
    dtype: str = "auto"
    system_prompt: str = ""
    markdown: bool = False  # show finished replies as Markdown

    def generation_config(self) -> GenerationConfig:
        return GenerationConfig(
            method=self.method,
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            max_num_draft=self.max_num_draft,
            ngram=self.ngram,
            max_nodes=self.max_nodes,
            max_breadth=self.max_breadth,
            enable_thinking=self.enable_thinking,
        )


def validate(settings: Settings) -> list[str]:
    """Problems a user must fix, one readable line each (empty when valid)."""
    problems: list[str] = []
    s = settings
    if s.method not in METHODS:
        problems.append(f"method must be one of {', '.join(METHODS)}")
    if not 0.0 <= s.temperature <= 5.0:
        problems.append("temperature must be between 0 and 5 (0 = greedy)")
    if not 0.0 < s.top_p <= 1.0:
        problems.append("top-p must be in (0, 1]")
    if s.max_new_tokens < 1:
        problems.append("max new tokens must be at least 1")
    if s.max_num_draft != "auto" and (not isinstance(s.max_num_draft, int) or s.max_num_draft < 1):
        problems.append("draft budget must be 'auto' or a whole number >= 1")
    if s.ngram < 1:
        problems.append("ngram must be at least 1")
    if s.max_nodes < 1:
        problems.append("automaton capacity must be at least 1")
    if s.max_breadth < 1:
        problems.append("logits breadth must be at least 1")
    return problems


def parse_budget(text: str) -> int | str:
    """'auto' or a positive int; raises ValueError with a readable message."""
    text = text.strip().lower()
    if text == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        raise ValueError("draft budget must be 'auto' or a whole number") from None
    if value < 1:
        raise ValueError("draft budget must be at least 1")
    return value


class SettingsStore:
    """Reads and writes settings.json; a damaged file falls back to defaults."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> Settings:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return Settings()
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable settings %s: %s", self.path, exc)
            return Settings()
        if not isinstance(raw, dict):
            return Settings()
        known = {f.name: f.type for f in fields(Settings)}
        values = {k: v for k, v in raw.items() if k in known}
        try:
            settings = replace(Settings(), **values)
        except TypeError:
            return Settings()
        # A hand-edited file with a bad value must not stop the app from starting.
        return settings if not validate(settings) else Settings()

    def save(self, settings: Settings) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(settings), indent=2), encoding="utf-8")
        tmp.replace(self.path)
