"""The chat's speed inside the app against the engine's alone, side by side.

    python scripts/tui_speed.py --rounds 3 --max-new-tokens 128

Runs the real app headless (Textual's run_test, 120x36) on the embedded
model, its files in a temporary folder. Each round answers the same
question three ways, one after another: the engine alone on the app's worker
thread (no drawing), the app's chat with the shipped redraw pace, and the
app's chat redrawn at every step (as before the pace: racer_tui/redraw_pace.py at 0 s);
with --markdown a fourth: the paced chat with replies shown as Markdown (Ctrl+T),
which parses and lays out the whole reply at each redraw.
Each reply is a new chat, greedy, the default method, not learning from
earlier chats (so every way drafts from the question alone). Printed per way: wall
seconds from Enter to the reply's end, tokens/s, and the main thread's CPU
seconds meanwhile (drawing, mostly); then each way's median against the
engine alone.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from racer_core.budget.cpu_class import ISA_CHOICES, reexec_with_isa  # noqa: E402

QUESTION = "Explain how a hash table works, with an example in Python."


async def _until(condition, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for the app")
        await asyncio.sleep(0.05)


async def measure(rounds: int, max_new_tokens: int, method: str,
                  markdown: bool = False) -> dict[str, list[tuple[float, int, float]]]:
    from racer_core.common.events import GenerationConfig
    from racer_tui.app import RacerApp
    from racer_tui.engine_loader import default_engine_factory
    from racer_tui.redraw_pace import FASTEST_S, SLOWEST_S
    from racer_tui.screens.chat import ChatScreen

    results: dict[str, list[tuple[float, int, float]]] = {"engine alone": [], "app, paced": [], "app, every step": []}
    ways: list[tuple[str, tuple[float, float], bool]] = [
        ("app, paced", (FASTEST_S, SLOWEST_S), False), ("app, every step", (0.0, 0.0), False)]
    if markdown:
        results["app, Markdown"] = []
        ways.append(("app, Markdown", (FASTEST_S, SLOWEST_S), True))
    with tempfile.TemporaryDirectory() as folder:
        app = RacerApp(default_engine_factory, data_dir=Path(folder) / "data", config_dir=Path(folder) / "config")
        async with app.run_test(size=(120, 36)) as pilot:
            # learning from earlier chats off: each way drafts from the question alone, as the engine alone does
            app.update_settings(max_new_tokens=max_new_tokens, method=method, temperature=0.0, learn_from_chats=False)
            await _until(lambda: app.engine is not None and isinstance(app.screen, ChatScreen))
            chat = app.screen
            config = GenerationConfig(method=method, max_new_tokens=max_new_tokens)

            def alone() -> int:
                return sum(len(e.pieces) for e in app.engine.new_conversation().send(QUESTION, config))

            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, alone)  # the cost curve, measured once, outside the rounds
            for index in range(rounds):
                start, cpu = time.perf_counter(), time.thread_time()
                tokens = await loop.run_in_executor(None, alone)
                results["engine alone"].append((time.perf_counter() - start, tokens, time.thread_time() - cpu))
                for way, pace, as_markdown in ways:
                    chat.redraws.fastest, chat.redraws.slowest = pace
                    chat.redraws.every = pace[0]
                    app.update_settings(markdown=as_markdown)
                    await chat.action_new_chat()
                    await pilot.pause()
                    await pilot.press(*QUESTION)
                    start, cpu = time.perf_counter(), time.thread_time()
                    await pilot.press("enter")
                    await _until(lambda: chat.stats.steps and not chat.generating)
                    results[way].append((time.perf_counter() - start, chat.stats.tokens, time.thread_time() - cpu))
                print(f"round {index + 1}/{rounds}: " + ", ".join(
                    f"{way} {rows[-1][1] / rows[-1][0]:.1f} tok/s" for way, rows in results.items()), flush=True)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--method", default="racer")
    parser.add_argument("--isa", choices=ISA_CHOICES, default="native")
    parser.add_argument("--markdown", action="store_true", help="also the paced chat with replies as Markdown")
    args = parser.parse_args(argv)
    reexec_with_isa(args.isa)
    results = asyncio.run(measure(args.rounds, args.max_new_tokens, args.method, args.markdown))
    base = statistics.median(tokens / seconds for seconds, tokens, _ in results["engine alone"])
    print(f"\n{'way':<18}{'tok/s (median)':>16}{'vs alone':>10}{'main thread CPU s':>20}")
    for way, rows in results.items():
        speed = statistics.median(tokens / seconds for seconds, tokens, _ in rows)
        cpu = statistics.median(c for _, _, c in rows)
        print(f"{way:<18}{speed:>16.1f}{speed / base:>9.2f}x{cpu:>20.2f}")


if __name__ == "__main__":
    main()
