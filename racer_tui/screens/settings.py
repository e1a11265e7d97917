"""Generation settings, validated field by field and kept between runs."""

from __future__ import annotations

from dataclasses import replace

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static, Switch

from racer_core.events import METHODS
from racer_tui.settings import Settings, parse_budget, validate

METHOD_HELP = {
    "ar": "ar (plain decoding)",
    "racer": "racer (both sources)",
    "retrieval": "retrieval (automaton)",
    "logits": "logits (logits tree)",
    "hf": "hf (transformers)",
    "pld": "pld (prompt lookup)",
}

# (field, label, kind): kind is how the text becomes a value.
FIELDS: list[tuple[str, str, str]] = [
    ("temperature", "Temperature (0: greedy)", "float"),
    ("top_p", "Top-p", "float"),
    ("max_new_tokens", "Max new tokens", "int"),
    ("max_num_draft", "Draft budget (auto|N)", "budget"),
    ("ngram", "N-gram length", "int"),
    ("max_nodes", "Automaton max_nodes", "int"),
    ("max_breadth", "Logits max_breadth", "int"),
]


def _convert(kind: str, text: str) -> object:
    text = text.strip()
    if kind == "budget":
        return parse_budget(text)
    try:
        return float(text) if kind == "float" else int(text)
    except ValueError:
        raise ValueError("a number" if kind == "float" else "a whole number") from None


class SettingsScreen(ModalScreen[Settings | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel"), Binding("ctrl+s", "save", "Save")]

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings

    def compose(self) -> ComposeResult:
        s = self.settings
        with Vertical(classes="dialog wide-dialog", id="settings-box"):
            yield Static("Settings", classes="box-title")
            with Grid(id="settings-grid"):
                yield Label("Method")
                yield Select(
                    [(METHOD_HELP[m], m) for m in METHODS],
                    value=s.method,
                    allow_blank=False,
                    id="method",
                )
                for name, label, _kind in FIELDS:
                    yield Label(label)
                    yield Input(str(getattr(s, name)), id=name)
                yield Label("Thinking")
                yield Switch(s.enable_thinking, id="enable_thinking")
            yield Static("", id="settings-errors")
            with Horizontal(classes="buttons"):
                yield Button("Save", id="save", variant="primary")
                yield Button("Cancel", id="cancel")

    def read_form(self) -> tuple[Settings | None, list[str]]:
        values: dict[str, object] = {}
        problems: list[str] = []
        for name, label, kind in FIELDS:
            text = self.query_one(f"#{name}", Input).value
            try:
                values[name] = _convert(kind, text)
            except ValueError as exc:
                problems.append(f"{label}: {exc}")
        values["method"] = self.query_one("#method", Select).value
        values["enable_thinking"] = self.query_one("#enable_thinking", Switch).value
        if problems:
            return None, problems
        settings = replace(self.settings, **values)
        problems = validate(settings)
        return (None, problems) if problems else (settings, [])

    def action_save(self) -> None:
        settings, problems = self.read_form()
        if settings is None:
            self.query_one("#settings-errors", Static).update("\n".join(problems))
            return
        self.dismiss(settings)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.dismiss(None)
