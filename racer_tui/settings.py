"""Settings kept between runs as JSON: generation parameters and the model.

The generation parameters are one `GenerationConfig` (its own checks and
defaults); this module adds only what the app keeps besides them. The file
stays flat (`{"method": ..., "model_path": ...}`) as it always was.

Loading never stops the app: a field with a bad value falls back to its
default and the rest of the file is kept; a file that is not JSON is moved
aside (never deleted) and the defaults are used. Each case leaves a notice in
`SettingsStore.notices` for the app to show.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from racer_core.common.config import DEFAULTS, FIELDS, ConfigError, GenerationConfig
from racer_core.common.paths import move_aside


@dataclass(frozen=True)
class Settings:
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    model_path: str | None = None  # None: the embedded default model
    device: str = "auto"
    dtype: str = "auto"
    system_prompt: str = ""
    markdown: bool = False  # show replies as Markdown (while they stream too)
    learn_from_chats: bool = True  # drafts start from earlier chats (racer_core/drafting/corpus.py)
    json_mode: bool = False  # every chat reply is one JSON object (racer_tui/chat/json_mode.py; !!json for one)
    recent_models: tuple[str, ...] = ()  # model paths that loaded, the latest first (F5 offers them)

    def replace(self, **changes: Any) -> Settings:
        """A copy with `changes`; generation parameters among them go through
        GenerationConfig's checks (ConfigError for a bad one)."""
        tuned = {k: changes.pop(k) for k in list(changes) if k in FIELDS}
        generation = self.generation.replace(**tuned) if tuned else self.generation
        return dataclasses.replace(self, generation=generation, **changes)

    def to_json(self) -> dict[str, Any]:
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "generation"}
        generation = {k: v for k, v in dataclasses.asdict(self.generation).items() if k in FIELDS}  # not a reply's grammar
        return {**generation, **own}


# The app's own fields in the file: the JSON types each may have.
APP_FIELDS: dict[str, tuple[type, ...]] = {
    "model_path": (str, type(None)),
    "device": (str,),
    "dtype": (str,),
    "system_prompt": (str,),
    "markdown": (bool,),
    "learn_from_chats": (bool,),
    "json_mode": (bool,),
    "recent_models": (list,),
}
_JSON_TYPE = {str: "text", bool: "true or false", type(None): "null", list: "a list of paths"}
RECENT_MODELS = 8  # paths kept in recent_models


def _app_field(name: str, value: Any) -> Any:
    kinds = APP_FIELDS[name]
    if not isinstance(value, kinds):
        allowed = " or ".join(_JSON_TYPE[k] for k in kinds)
        raise ConfigError(name, f"{name} must be {allowed}, not {value!r}")
    if isinstance(value, list):
        if not all(isinstance(item, str) for item in value):
            raise ConfigError(name, f"{name} must be a list of paths, not {value!r}")
        return tuple(value[:RECENT_MODELS])
    return value


def with_recent(recent: tuple[str, ...], model_path: str | None) -> tuple[str, ...]:
    """`recent` with `model_path` (a model that just loaded) first; the embedded
    model (None) is always offered and is not kept."""
    if not model_path:
        return recent
    return (model_path, *(p for p in recent if p != model_path))[:RECENT_MODELS]


class SettingsStore:
    """Reads and writes settings.json; see the module docstring for damage."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.notices: list[str] = []  # what the last load had to repair, one line each

    def load(self) -> Settings:
        self.notices = []
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return Settings()
        except (OSError, UnicodeDecodeError) as exc:
            return self._damaged(f"cannot be read ({getattr(exc, 'strerror', None) or exc})")
        try:
            raw = json.loads(text)
        except ValueError:
            return self._damaged("is not valid JSON")
        if not isinstance(raw, dict):
            return self._damaged("does not hold a JSON object")
        return self._from_fields(raw)

    def _from_fields(self, raw: dict[str, Any]) -> Settings:
        generation: dict[str, Any] = {}
        own: dict[str, Any] = {}
        for name, value in raw.items():  # unknown keys (a newer version's) are ignored
            try:
                if name in FIELDS:
                    generation[name] = GenerationConfig.parse_field(name, value)
                elif name in APP_FIELDS:
                    own[name] = _app_field(name, value)
            except ConfigError as exc:
                default = getattr(DEFAULTS if name in FIELDS else Settings(), name)
                self.notices.append(f"Settings: {exc}; using the default {default!r} instead.")
        return Settings(GenerationConfig(**generation), **own)

    def _damaged(self, why: str) -> Settings:
        try:
            moved = move_aside(self.path)
        except OSError as exc:
            self.notices.append(
                f"Settings file {self.path} {why} and cannot be moved aside ({exc}); using the defaults."
            )
        else:
            self.notices.append(
                f"Settings file {self.path} {why}; moved it to {moved.name} and started with the defaults."
            )
        return Settings()

    def save(self, settings: Settings) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(settings.to_json(), indent=2), encoding="utf-8")
        tmp.replace(self.path)
