"""Shown while the engine loads: which model, what the loader is doing, how far."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, ProgressBar, Static


class LoadingScreen(Screen):
    def __init__(self, model_label: str) -> None:
        super().__init__()
        self.model_label = model_label

    def compose(self) -> ComposeResult:
        with Vertical(id="loading-box", classes="center-box"):
            yield Static("Loading model", classes="box-title")
            yield Static(Text(self.model_label), id="loading-model")
            # Determinate until a step cannot say how far it is: the
            # indeterminate bar redraws 15 times a second, and on a small CPU
            # that slowed the loader thread's imports by a few tenths of a second.
            yield ProgressBar(total=1.0, show_eta=False, id="loading-bar")
            # Only what this start does, as the loader reports it: a first start's
            # steps (dequantizing, timing this machine) say so in their own lines.
            yield Static("starting…", id="loading-message")
        yield Footer()

    def show_progress(self, text: str, fraction: float | None) -> None:
        self.query_one("#loading-message", Static).update(Text(text))
        bar = self.query_one(ProgressBar)
        if fraction is None:
            bar.update(total=None)
        else:
            bar.update(total=1.0, progress=max(0.0, min(1.0, fraction)))
