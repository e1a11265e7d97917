"""Generation settings, validated field by field and kept between runs."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static, Switch

from racer_core.common import registry
from racer_core.common.config import METHODS, ConfigError, GenerationConfig
from racer_tui.host import host_of
from racer_tui.settings import Settings

METHOD_HELP = {spec.name: spec.label for spec in registry.METHOD_SPECS}

# Thinking has three states: unset (None) leaves it to the model's chat template.
THINKING: list[tuple[str, bool | None]] = [("unset (chat template)", None), ("on", True), ("off", False)]


def thinking_key(value: bool | None) -> str:
    return "unset" if value is None else "on" if value else "off"


def thinking_value(key: object) -> bool | None:
    return {"on": True, "off": False}.get(str(key))


def field_text(value: object) -> str:
    """A field's value as the form shows it: an unset one (a random seed) is empty."""
    return "" if value is None else str(value)

# (field, label): each is read and checked by GenerationConfig.parse_field.
FORM: list[tuple[str, str]] = [
    ("temperature", "Temperature (0: greedy)"),
    ("top_p", "Top-p"),
    ("sample_top_k", "Top-k (0: all)"),  # settings.json's `top_k` is eagle3's tree width, not this
    ("min_p", "Min-p (0: off)"),
    ("repetition_penalty", "Repetition penalty"),
    ("seed", "Seed (empty: random)"),
    ("max_new_tokens", "Max new tokens"),
    ("max_num_draft", "Draft budget (auto|N)"),
    ("ngram", "N-gram length"),
    ("max_nodes", "Automaton max_nodes"),
    ("max_breadth", "Logits max_breadth"),
]


class SettingsScreen(ModalScreen[Settings | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel"), Binding("ctrl+s", "save", "Save")]

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings

    def compose(self) -> ComposeResult:
        g = self.settings.generation
        with Vertical(classes="dialog wide-dialog", id="settings-box"):
            yield Static("Settings", classes="box-title")
            with VerticalScroll(id="settings-scroll", can_focus=False), Grid(id="settings-grid"):
                yield Label("Method")
                yield Select(
                    [(Text(METHOD_HELP[m]), m) for m in METHODS],
                    value=g.method,
                    allow_blank=False,
                    id="method",
                )
                for name, label in FORM:
                    yield Label(label)
                    yield Input(field_text(getattr(g, name)), id=name, placeholder="random" if name == "seed" else "")
                yield Label("Thinking")
                yield Select([(Text(label), thinking_key(value)) for label, value in THINKING],
                             value=thinking_key(g.enable_thinking), allow_blank=False, id="enable_thinking")
                yield Label("Learn from chats")
                yield Switch(self.settings.learn_from_chats, id="learn_from_chats")
                yield Label("JSON mode (every reply)")
                yield Switch(self.settings.json_mode, id="json_mode")
            yield Static("", id="settings-errors")
            with Horizontal(classes="buttons"):
                yield Button("Save", id="save", variant="primary")
                yield Button("Cancel", id="cancel")
                yield Button("Clear learned drafts", id="clear-corpus")

    NARROW = 112  # below this many columns the form is one label and field per row

    def on_mount(self) -> None:
        self._fit()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        self.set_class(self.app.size.width < self.NARROW, "-narrow")

    def read_form(self) -> tuple[Settings | None, list[str]]:
        """The form's settings, or the problems (GenerationConfig's sentences)."""
        values: dict[str, object] = {}
        problems: list[str] = []
        for name, _label in FORM:
            try:
                values[name] = GenerationConfig.parse_field(name, self.query_one(f"#{name}", Input).value)
            except ConfigError as exc:
                problems.append(str(exc))
        if problems:
            return None, problems
        values["method"] = self.query_one("#method", Select).value
        values["enable_thinking"] = thinking_value(self.query_one("#enable_thinking", Select).value)
        values["learn_from_chats"] = self.query_one("#learn_from_chats", Switch).value
        values["json_mode"] = self.query_one("#json_mode", Switch).value
        return self.settings.replace(**values), []

    def action_save(self) -> None:
        settings, problems = self.read_form()
        if settings is None:
            self.query_one("#settings-errors", Static).update(Text("\n".join(problems)))
            return
        self.dismiss(settings)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        elif event.button.id == "clear-corpus":
            host_of(self).clear_learned_drafts()
        else:
            self.dismiss(None)
