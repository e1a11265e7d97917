"""SVG screenshots of every screen of racer-tui, on the real engine and the
embedded model (not the test fake), into screenshots/.

    python scripts/screenshots.py [--out screenshots] [--size 120x36] [--only NAME,...] [--max-new-tokens N]

Chat history and settings go to a temporary folder; the model cache is the
user's (the first run dequantizes the embedded model, about 20 s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

PROMPT = "Write a Python function that returns the n-th Fibonacci number, then explain it briefly."


async def until(pilot, condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {condition}")
        await pilot.pause(0.05)


async def capture(out: Path, size: tuple[int, int], only: set[str] | None = None, tokens: int = 160) -> list[Path]:
    from racer_tui.app import RacerApp
    from racer_tui.screens.bench import BenchScreen
    from racer_tui.screens.chat import ChatScreen
    from racer_tui.screens.loading import LoadingScreen
    from racer_tui.screens.model_error import ModelErrorScreen

    saved: list[Path] = []

    def shot(app, name: str) -> None:
        if only is not None and name not in only:
            return
        app.save_screenshot(filename=f"{name}.svg", path=str(out))
        saved.append(out / f"{name}.svg")
        print(f"  {name}.svg", flush=True)

    app = RacerApp()
    app.animation_level = "none"
    app.update_settings(max_new_tokens=tokens, method="racer", markdown=False)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: isinstance(app.screen, LoadingScreen), 30)
        await pilot.pause(1.0)
        shot(app, "01-loading")
        await until(pilot, lambda: app.engine is not None and isinstance(app.screen, ChatScreen), 600)
        chat = app.screen
        await pilot.press(*PROMPT)
        await pilot.press("enter")
        await until(pilot, lambda: chat.stats.steps >= 12 or not chat.generating, 300)
        shot(app, "02-chat-streaming")
        await until(pilot, lambda: not chat.generating, 600)
        await pilot.pause(0.3)
        shot(app, "03-chat-done")
        chart = chat.query_one("#accept-chart")
        busiest = max(range(len(chart.lengths)), key=chart.lengths.__getitem__)
        chat.inspect_step(chat.reply_id, busiest)  # the step that accepted the most tokens
        await pilot.pause(0.5)
        shot(app, "03a-step-inspector")
        await pilot.press("escape")
        if only is not None and only <= {s.stem for s in saved}:
            return saved
        await pilot.press("ctrl+t")
        await pilot.pause(0.5)
        app.clear_notifications()
        await pilot.pause(0.2)
        shot(app, "04-chat-markdown")
        await pilot.press("ctrl+t")
        app.clear_notifications()

        await pilot.press("f3")
        bench = app.screen
        assert isinstance(bench, BenchScreen)
        bench.query_one("#max-new-tokens").value = "64"  # the run's own field (the chat's stays)
        bench.query_one("#q-end").value = "3"
        bench.action_start()
        await until(pilot, lambda: bench.board.per_method["ar"].replies >= 1 and len(bench.board.flight.accept_lengths) >= 8, 900)
        shot(app, "05-dashboard-running")
        await until(pilot, lambda: bench.result is not None or not bench.running, 1800)
        await pilot.pause(0.3)
        shot(app, "06-dashboard-done")

        await pilot.press("f2")
        for key, name, settle in (("f4", "07-settings", 0.3), ("f5", "08-model-picker", 0.3),
                                  ("ctrl+r", "09-system-prompt", 0.3), ("f1", "10-help", 0.3),
                                  ("ctrl+p", "11-command-palette", 0.5)):
            await pilot.press(key)  # each dialog over the chat, shot, closed
            await pilot.pause(settle)
            shot(app, name)
            await pilot.press("escape")

    bad = RacerApp(model_path=str(out / "no-such-model.gguf"))
    bad.animation_level = "none"
    async with bad.run_test(size=size) as pilot:
        await until(pilot, lambda: isinstance(bad.screen, ModelErrorScreen), 120)
        await pilot.pause(0.3)
        shot(bad, "12-model-error")
    return saved


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "screenshots")
    p.add_argument("--size", default="120x36", help="terminal WIDTHxHEIGHT")
    p.add_argument("--only", help="take only these screenshots (names without .svg, comma-separated)")
    p.add_argument("--max-new-tokens", type=int, default=160, help="the length of the chat's reply")
    args = p.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RACER_TUI_DATA_DIR"] = str(Path(tmp) / "data")
        os.environ["RACER_TUI_CONFIG_DIR"] = str(Path(tmp) / "config")
        print(f"screenshots of racer-tui on the embedded model into {args.out}", flush=True)
        only = set(args.only.split(",")) if args.only else None
        saved = asyncio.run(capture(args.out.resolve(), (width, height), only, args.max_new_tokens))
    print(f"{len(saved)} screenshots written", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
