"""The step inspector: one step's draft tree; arrow keys move between steps.

Dismissed with the index of the step shown last, so the acceptance chart can
keep that step selected.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from racer_core.common.stats import is_verification_step
from racer_tui.chat.step_log import LoggedStep
from racer_tui.widgets.step_tree import TokenText, step_view


def step_title(steps: list[LoggedStep], index: int) -> str:
    """'Step i of N' counted as the status line and MAT count steps: verification
    steps only; the prompt's forward pass, logged first, is not one of them."""
    total = sum(map(is_verification_step, steps))
    if not is_verification_step(steps[index]):
        return f"The prompt's forward pass, before step 1 of {total}"
    return f"Step {sum(map(is_verification_step, steps[: index + 1]))} of {total}"


class InspectorScreen(ModalScreen[int]):
    BINDINGS = [
        Binding("escape,q", "close", "Close"),
        Binding("left,k", "move(-1)", "Previous step", priority=True),
        Binding("right,j", "move(1)", "Next step", priority=True),
        Binding("home", "go(0)", "First step", show=False),
        Binding("end", "go(-1)", "Last step", show=False),
    ]
    DEFAULT_CSS = """
    InspectorScreen { align: center middle; }
    #inspector-box { width: 90%; height: 90%; border: thick $primary; background: $surface; padding: 0 1; }
    #inspector-title { height: 1; text-style: bold; }
    #inspector-scroll { height: 1fr; }
    #inspector-keys { height: 1; color: $text-muted; }
    """

    def __init__(self, steps: list[LoggedStep], index: int, token_text: TokenText) -> None:
        super().__init__()
        self.steps = steps
        self.index = max(0, min(index, len(steps) - 1))
        self.token_text = token_text

    def compose(self) -> ComposeResult:
        with Vertical(id="inspector-box"):
            yield Static(id="inspector-title")
            with VerticalScroll(id="inspector-scroll"):
                yield Static(id="inspector-body")
            yield Static("←/→ steps · Home/End first/last · ↑/↓ scroll · Esc closes", id="inspector-keys")

    def on_mount(self) -> None:
        self.show()

    def show(self) -> None:
        entry = self.steps[self.index]
        self.query_one("#inspector-title", Static).update(Text(step_title(self.steps, self.index)))
        self.query_one("#inspector-body", Static).update(step_view(entry, self.token_text))
        self.query_one("#inspector-scroll", VerticalScroll).scroll_home(animate=False)

    def action_move(self, delta: int) -> None:
        index = max(0, min(self.index + delta, len(self.steps) - 1))
        if index != self.index:
            self.index = index
            self.show()

    def action_go(self, index: int) -> None:
        self.index = index % len(self.steps)
        self.show()

    def action_close(self) -> None:
        self.dismiss(self.index)
