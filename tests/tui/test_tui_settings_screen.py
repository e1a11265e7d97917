"""Settings (F4), issue 41 (13): saving keeps Thinking "unset" as unset, and
the sampling fields of settings.json (top-k, min-p, repetition penalty, seed)
are on the screen, shown, edited and checked like the others."""

from __future__ import annotations

import json
from pathlib import Path

from app_pilot import SMALL, StartApp
from fake_engine import ready_chat, wait_for
from textual.widgets import Input, Select

from racer_tui.screens.settings import SettingsScreen


def write_settings(tmp_path: Path, **fields: object) -> None:
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "settings.json").write_text(json.dumps(fields))


def saved(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "config" / "settings.json").read_text())


async def open_settings(pilot) -> SettingsScreen:
    await ready_chat(pilot)
    await pilot.press("f4")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, SettingsScreen) and pilot.app.screen.query("#seed"))
    return pilot.app.screen


async def test_saving_keeps_thinking_unset(start_app: StartApp, tmp_path: Path) -> None:
    write_settings(tmp_path, enable_thinking=None)
    pilot = await start_app()
    screen = await open_settings(pilot)
    assert screen.query_one("#enable_thinking", Select).value == "unset"
    await pilot.press("ctrl+s")
    await wait_for(pilot, lambda: not isinstance(pilot.app.screen, SettingsScreen))
    assert pilot.app.settings.generation.enable_thinking is None and saved(tmp_path)["enable_thinking"] is None


async def test_thinking_can_be_set_on_off_and_unset_again(start_app: StartApp, tmp_path: Path) -> None:
    pilot = await start_app()
    for choice, value in (("on", True), ("unset", None), ("off", False)):
        screen = await open_settings(pilot)
        screen.query_one("#enable_thinking", Select).value = choice
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(pilot.app.screen, SettingsScreen))
        assert pilot.app.settings.generation.enable_thinking is value and saved(tmp_path)["enable_thinking"] is value


async def test_the_sampling_fields_are_shown_edited_and_checked(start_app: StartApp, tmp_path: Path) -> None:
    write_settings(tmp_path, sample_top_k=40, min_p=0.05, repetition_penalty=1.1, seed=7)
    pilot = await start_app(size=SMALL)
    screen = await open_settings(pilot)
    fields = {name: screen.query_one(f"#{name}", Input) for name in ("sample_top_k", "min_p", "repetition_penalty",
                                                                     "seed")}
    assert {n: f.value for n, f in fields.items()} == {
        "sample_top_k": "40", "min_p": "0.05", "repetition_penalty": "1.1", "seed": "7"}
    # bad values: each says why in one line, and nothing is saved
    for name, bad in (("sample_top_k", "-1"), ("min_p", "2"), ("repetition_penalty", "0"), ("seed", "x")):
        fields[name].value = bad
    await pilot.press("ctrl+s")
    await pilot.pause()
    errors = str(screen.query_one("#settings-errors").render())
    assert isinstance(pilot.app.screen, SettingsScreen) and len(errors.splitlines()) == 4
    for name in fields:
        assert name in errors
    assert saved(tmp_path)["sample_top_k"] == 40
    # good ones are saved; an empty seed is a random one
    for name, good in (("sample_top_k", "20"), ("min_p", "0.1"), ("repetition_penalty", "1.3"), ("seed", "")):
        fields[name].value = good
    await pilot.press("ctrl+s")
    await wait_for(pilot, lambda: not isinstance(pilot.app.screen, SettingsScreen))
    g = pilot.app.settings.generation
    assert (g.sample_top_k, g.min_p, g.repetition_penalty, g.seed) == (20, 0.1, 1.3, None)
    assert {k: saved(tmp_path)[k] for k in fields} == {"sample_top_k": 20, "min_p": 0.1, "repetition_penalty": 1.3,
                                                       "seed": None}
