"""Command-palette entries: every main action, by name."""

from __future__ import annotations

from collections.abc import Iterator

from textual.app import App, SystemCommand
from textual.screen import Screen

PaletteEntry = tuple[str, str, str]  # (title, help, action on the app, or on the active screen via "screen.")

APP_COMMANDS: list[PaletteEntry] = [
    ("Chat", "Go to the chat", "app.switch_mode('chat')"),
    ("Benchmark dashboard", "Run or open a benchmark", "app.switch_mode('bench')"),
    ("Settings", "Method, temperature, budget, automaton…", "app.settings_screen"),
    ("Model", "Embedded model, a checkpoint folder or a GGUF file", "app.pick_model"),
    ("Help: all keys", "Every key of the app, by screen", "app.help"),
    ("Clear learned drafts", "Forget what earlier chats taught the drafts (every model)", "app.clear_learned_drafts"),
]
CHAT_COMMANDS: list[PaletteEntry] = [
    ("New chat", "Start an empty chat", "screen.new_chat"),
    ("Stop generation", "Stop the reply that is streaming", "screen.stop"),
    ("System prompt", "Set the system prompt", "screen.system_prompt"),
    ("Toggle Markdown", "Show replies as Markdown or as coloured tokens (Ctrl+T)", "screen.toggle_markdown"),
    ("Toggle sidebar", "Show or hide the list of chats", "screen.toggle_sidebar"),
    ("Export chat", "Write the open chat as Markdown", "screen.export_chat"),
    ("Delete chat", "Delete the open chat", "screen.delete_chat"),
    ("Attach an image", "Attach an image file to the next message (F10; or <image>PATH</image> in the text)",
     "screen.attach_image"),
    ("Remove the attached images", "Send the next message without the images attached to it", "screen.detach_all"),
]
BENCH_COMMANDS: list[PaletteEntry] = [
    ("Start benchmark", "Run the chosen suite and methods", "screen.start"),
    ("Stop benchmark", "Stop after the current step", "screen.stop"),
    ("Open results", "Show a previous results folder", "screen.open_results"),
]


def racer_commands(app: App, screen: Screen) -> Iterator[SystemCommand]:
    """The app's entries, then those the active screen declares in its PALETTE list."""
    entries = APP_COMMANDS + list(getattr(screen, "PALETTE", ()))
    for title, help_text, action in entries:
        yield SystemCommand(title, help_text, _runner(app, screen, action))


def _runner(app: App, screen: Screen, action: str):
    async def run() -> None:
        await app.run_action(action, screen)

    return run
