"""A model could not be loaded: say why in one line and offer the ways out."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, Footer, Static

from racer_tui.host import host_of


class ModelErrorScreen(Screen):
    BINDINGS = [
        Binding("r", "retry", "Retry"),
        Binding("d", "use_default", "Embedded model"),
        Binding("f5", "app.pick_model", "Choose model"),
    ]

    def __init__(self, model_label: str, error: str) -> None:
        super().__init__()
        self.model_label = model_label
        self.error = error

    def compose(self) -> ComposeResult:
        with Vertical(id="error-box", classes="center-box"):
            yield Static("The model could not be loaded", classes="box-title error-title")
            yield Static(Text(self.model_label), id="error-model")
            yield Static(Text(self.error), id="error-message")
            with Horizontal(classes="buttons"):
                yield Button("Retry", id="retry")
                yield Button("Use embedded model", id="use-default", variant="primary")
                yield Button("Choose model…", id="pick")
                yield Button("Quit", id="quit", variant="error")
        yield Footer()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        actions = {
            "retry": self.action_retry,
            "use-default": self.action_use_default,
            "pick": lambda: self.run_action("app.pick_model"),
            "quit": self.app.exit,
        }
        actions[event.button.id or ""]()

    def action_retry(self) -> None:
        host_of(self).load_model()

    def action_use_default(self) -> None:
        host_of(self).use_model(None)
