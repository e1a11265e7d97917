"""Every key of the app, built from the BINDINGS it actually uses."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.markup import escape
from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

Section = tuple[str, Iterable[BindingType]]

# Keys that come from Textual itself rather than from a BINDINGS list here.
BUILTIN_KEYS: list[tuple[str, str]] = [
    ("ctrl+p", "Command palette: every action by name"),
    ("ctrl+q", "Quit"),
    ("ctrl+c", "Copy the selected text"),
    ("tab / shift+tab", "Move the focus"),
]


def _bindings(items: Iterable[BindingType]) -> list[Binding]:
    out = []
    for item in items:
        if isinstance(item, Binding):
            out.append(item)
        else:
            key, action, description = (list(item) + ["", ""])[:3]
            out.append(Binding(key, action, description))
    return out


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f1,q", "dismiss(None)", "Close")]

    def __init__(self, sections: list[Section], commands: Sequence[tuple[str, str]] = ()) -> None:
        """`commands`: what may be typed in the prompt box, as (usage, what it does)."""
        super().__init__()
        self.sections = sections
        self.commands = commands

    def _table(self) -> Table:
        table = Table(box=None, show_header=False, expand=True, padding=(0, 1))
        table.add_column("key", style="bold", no_wrap=True, min_width=14)
        table.add_column("what it does")
        table.add_row("[b u]Anywhere[/]", "")
        for key, text in BUILTIN_KEYS:
            table.add_row(escape(key), escape(text))
        for title, items in self.sections:
            table.add_row("", "")
            table.add_row(f"[b u]{escape(title)}[/]", "")
            for binding in _bindings(items):
                if binding.action in ("quit",) or binding.system:
                    continue
                key = ", ".join(self.app.get_key_display(Binding(k, "")) for k in binding.key.split(","))
                table.add_row(escape(key), escape(binding.description or binding.action.replace("_", " ")))
        if self.commands:
            table.add_row("", "")
            table.add_row("[b u]Typed in the prompt (Enter runs them)[/]", "")
            for usage, text in self.commands:
                table.add_row(escape(usage), escape(text))
        return table

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide-dialog", id="help-box"):
            yield Static("Keys", classes="box-title")
            with VerticalScroll(id="help-scroll"):
                yield Static(self._table())
            yield Static("Escape closes this screen.", classes="hint")
