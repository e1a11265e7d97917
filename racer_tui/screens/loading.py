"""Shown while the engine loads: which model, what the loader is doing, how
far, and a prompt to type the first message meanwhile (it is sent as soon as
the model is ready: a later start is mostly importing torch, so the chat is
usable for typing at the first frame, not seconds later)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, ProgressBar, Static

from racer_tui.widgets.prompt_input import PromptInput

EARLY_HINT = "Type your message now: it is sent as soon as the model is ready."


class LoadingScreen(Screen):
    def __init__(self, model_label: str, queued: str | None = None, draft: str = "") -> None:
        """`queued` and `draft`: what was typed during an earlier load that failed (`carry`)."""
        super().__init__()
        self.model_label = model_label
        self.queued = queued  # the message sent meanwhile: the chat sends it once the model is ready
        self._draft = draft

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
        with Vertical(id="early-box", classes="center-box"):
            yield Static(self._hint(), id="early-hint")
            yield PromptInput(id="early-prompt")
        yield Footer()

    def on_mount(self) -> None:
        prompt = self.query_one(PromptInput)
        if self._draft:
            prompt.text = self._draft
        prompt.focus()

    def show_progress(self, text: str, fraction: float | None) -> None:
        self.query_one("#loading-message", Static).update(Text(text))
        bar = self.query_one(ProgressBar)
        if fraction is None:
            bar.update(total=None)
        else:
            bar.update(total=1.0, progress=max(0.0, min(1.0, fraction)))

    def on_prompt_input_submitted(self, message: PromptInput.Submitted) -> None:
        message.stop()
        text = message.text.strip()
        if not text:
            return
        if self.queued is not None:
            self.notify("One message already waits for the model; this one stays typed.", severity="warning")
            return
        self.queued = text
        message.prompt.clear()
        self.query_one("#early-hint", Static).update(self._hint())

    def on_prompt_input_edit_last(self, message: PromptInput.EditLast) -> None:
        message.stop()  # no chat yet: nothing to edit

    def carry(self) -> tuple[str | None, str]:
        """(the message sent meanwhile or None, what the prompt holds)."""
        return self.queued, self.query_one(PromptInput).text

    def _hint(self) -> Text:
        if self.queued is None:
            return Text(EARLY_HINT)
        first = self.queued.splitlines()[0]
        shown = first if len(first) <= 50 and first == self.queued else first[:50] + "…"
        return Text(f"Waiting for the model, then sent: {shown}")
