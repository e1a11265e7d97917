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


def _inside(screen, box_id: str, width: int) -> None:
    """Every widget of the dialog lies within the terminal's columns."""
    box = screen.query_one(f"#{box_id}")
    assert 0 <= box.region.x and box.region.right <= width, box.region
    for widget in box.query("*"):
        if widget.display and widget.region.width:
            assert 0 <= widget.region.x and widget.region.right <= box.region.right, (widget, widget.region)


async def test_settings_and_help_fit_80_columns(start_app: StartApp) -> None:
    from racer_tui.screens.help import HelpScreen
    from racer_tui.screens.settings import SettingsScreen

    pilot = await start_app(size=SMALL)
    app = pilot.app
    await ready_chat(pilot)
    await pilot.press("f4")
    await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen) and app.screen.query("#temperature"))
    await pilot.pause()
    _inside(app.screen, "settings-box", SMALL[0])
    for field in ("#temperature", "#max_new_tokens", "#method"):  # the right-hand column of the wide form
        widget = app.screen.query_one(field)
        widget.focus()  # scrolled into view
        await pilot.pause()
        assert widget.region.width >= 10 and widget.region.right <= SMALL[0]
    await pilot.press("escape")
    await pilot.press("f1")
    await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
    await pilot.pause()
    _inside(app.screen, "help-box", SMALL[0])


async def test_the_status_line_and_footer_keep_their_essentials_at_80_columns(start_app: StartApp) -> None:
    from textual.widgets._footer import FooterKey

    from racer_tui.widgets.status_line import StatusLine

    pilot = await start_app(size=SMALL)
    chat = await ready_chat(pilot)
    await pilot.press(*"hello", "enter")
    await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)
    await pilot.pause()
    status = chat.query_one(StatusLine)
    text = "".join(s.text for s in status.render_lines(status.region.reset_offset))
    assert "cpu float32" in text and "MAT" in text and "tok/s" in text
    keys = {k.key: k for k in chat.query(FooterKey)}
    assert keys["f1"].region.right <= SMALL[0]
    assert not chat.query("FooterKey.-command-palette")  # nothing docked over the keys


def test_a_long_status_line_drops_parts_and_keeps_device_and_dtype() -> None:
    from racer_core.common.events import EngineInfo
    from racer_tui.widgets.status_line import fit_parts, status_parts

    parts = status_parts(None, "auto", "racer", EngineInfo("SmolLM2-135M-Instruct (Q4_1, embedded)", "cpu", "float32"))
    assert fit_parts(parts, 200).endswith("SmolLM2-135M-Instruct (Q4_1, embedded) │ cpu float32")
    line = fit_parts(parts, 60)
    assert len(line) <= 60 and line.endswith("cpu float32") and "racer" in line and "steps" not in line


async def test_markdown_mode_follows_a_streaming_reply(start_app: StartApp) -> None:
    """Issue 29, bug 4: with Markdown on, the conversation keeps its end in
    view while a reply streams and when it turns into Markdown."""
    from fake_engine import REPLY, FakeEngine

    engine = FakeEngine(reply=REPLY * 3, gate_after=40)
    pilot = await start_app(engine, size=SMALL)
    chat = await ready_chat(pilot)
    await pilot.press("ctrl+t")
    assert chat.host.settings.markdown
    await pilot.press(*"go", "enter")
    await wait_for(pilot, lambda: engine.paused.is_set())
    view = chat.conversation_view
    # the last steps are drawn at the redraw pace and Markdown lays out after
    # that, so wait for the view to reach the end rather than for a fixed time
    await wait_for(pilot, lambda: view.max_scroll_y > 0 and view.scroll_y == view.max_scroll_y, timeout=5)
    engine.release()
    await wait_for(pilot, lambda: not chat.generating)
    await wait_for(pilot, lambda: view.max_scroll_y > 0 and view.scroll_y == view.max_scroll_y, timeout=5)
    # a chat reopened with Markdown on shows its end too
    chat_id = chat.chat_id
    await pilot.press("ctrl+n")
    await pilot.pause()
    await chat.open_chat(chat_id)
    await wait_for(pilot, lambda: view.max_scroll_y > 0 and view.scroll_y == view.max_scroll_y, timeout=5)


async def test_f5_lists_recent_models(start_app: StartApp, tmp_path) -> None:
    """Issue 29: models that loaded are offered again in F5, the latest first;
    picking one fills in its path."""
    from fake_engine import FakeEngine
    from textual.widgets import OptionList

    from racer_tui.screens.chat import ChatScreen
    from racer_tui.settings import SettingsStore

    engine = FakeEngine()
    loads: list[str | None] = []

    def factory(model_path, **kwargs):
        loads.append(model_path)
        return engine

    folders = []
    for name in ("first-ckpt", "second-ckpt"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        folders.append(str(folder))
    pilot = await start_app(factory)
    app = pilot.app
    for folder in folders:
        await ready_chat(pilot)
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelPickerScreen) and app.screen.query("#model-path"))
        picker = app.screen
        await pilot.click("#custom")
        picker.query_one("#model-path").value = folder
        picker.action_load()
        await wait_for(pilot, lambda f=folder: loads[-1] == f and isinstance(app.screen, ChatScreen))
    saved = SettingsStore(tmp_path / "config" / "settings.json").load()
    assert saved.recent_models == (folders[1], folders[0])
    await ready_chat(pilot)
    await pilot.press("f5")
    await wait_for(pilot, lambda: isinstance(app.screen, ModelPickerScreen) and app.screen.query(OptionList))
    await pilot.pause()
    recent = app.screen.query_one("#recent-models", OptionList)
    assert [o.prompt.plain for o in recent.options] == [folders[1], folders[0]]
    recent.focus()
    recent.highlighted = 1
    await pilot.press("enter")
    await pilot.pause()
    assert app.screen.query_one("#model-path", Input).value == folders[0]
    assert app.screen.query_one("#custom").value
