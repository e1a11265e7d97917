"""What a screen may ask of the app: one small interface, so that screens never
import the app module (no import cycle) nor reach into its attributes.

`RacerApp` implements `Host`; a screen reaches it through `host_of(self)`.
Tests can hand screens any object with these members.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from racer_core.common.events import Engine, EngineInfo

if TYPE_CHECKING:
    from textual.dom import DOMNode
    from textual.signal import Signal

    from racer_tui.history import HistoryStore
    from racer_tui.settings import Settings

EngineUser = Literal["chat", "bench"]


class Host(Protocol):
    @property
    def settings(self) -> Settings:
        """The saved settings (read-only; change them with update_settings)."""
        ...

    def update_settings(self, **changes: Any) -> None:
        """Change and save settings."""
        ...

    @property
    def history(self) -> HistoryStore: ...

    @property
    def engine(self) -> Engine | None:
        """The loaded engine, None while loading or after a failed load."""
        ...

    @property
    def engine_info(self) -> EngineInfo | None: ...

    @property
    def engine_changed(self) -> Signal[Engine]:
        """Published after every successful (re)load."""
        ...

    def ready_engine(self) -> Engine | None:
        """The loaded engine; None, and the notice "No model is loaded yet.", while there is none."""
        ...

    def claim_engine(self, user: EngineUser) -> bool:
        """Take the engine for a reply or a benchmark; False (and a notice) when it is in use."""
        ...

    def release_engine(self) -> None: ...

    @property
    def engine_user(self) -> EngineUser | None:
        """Who uses the engine now: "chat", "bench" or None."""
        ...

    @property
    def export_dir(self) -> Path: ...

    def show_path(self, path: Path) -> str:
        """A path for display: the real one, the home folder written as ~."""
        ...

    def clear_learned_drafts(self) -> None:
        """Forget what chats taught the drafts (every model's chat corpus), with a notice."""
        ...

    def load_model(self) -> None:
        """(Re)load the chosen model, showing the loading view."""
        ...

    def use_model(self, model_path: str | None, device: str | None = None, dtype: str | None = None) -> None:
        """Load another model; it is saved as the choice once it loaded."""
        ...


def host_of(node: DOMNode) -> Host:
    """The running app, seen through the interface screens may use."""
    return cast(Host, node.app)
