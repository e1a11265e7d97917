"""Dialogs at the smallest terminal the layout is designed for (80x24), and
their focus order (issue 29, bugs 5 and 8)."""

from __future__ import annotations

from app_pilot import SMALL, StartApp
from fake_engine import ready_chat, wait_for
from textual.widgets import Input, RadioSet, Select

from racer_tui.screens.model_picker import ModelPickerScreen


async def test_tab_goes_from_the_model_choice_to_its_path_box(start_app: StartApp) -> None:
    pilot = await start_app()
    app = pilot.app
    await ready_chat(pilot)
    await pilot.press("f5")
    await wait_for(pilot, lambda: isinstance(app.screen, ModelPickerScreen) and app.screen.query(RadioSet))
    await pilot.pause()
    assert isinstance(app.focused, RadioSet)
    await pilot.press("down", "enter")  # choose "A checkpoint folder or a .gguf file"
    await pilot.pause()
    assert app.screen.query_one("#custom").value
    await pilot.press("tab")
    await pilot.pause()
    assert isinstance(app.focused, Input) and app.focused.id == "model-path"
    await pilot.press("tab")
    await pilot.pause()
    assert isinstance(app.focused, Select) and app.focused.id == "device"
