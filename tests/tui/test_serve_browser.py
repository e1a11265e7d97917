"""`racer-tui --serve` end to end in a real browser.

The command serves the app (textual-serve) on a tiny random-weight checkpoint
written to disk. Headless Chromium from the system's packages, driven by
playwright pointed at that browser (never a browser download), opens the
page, starts the app, sends a message and sees the reply, its accepted drafts
in their colours.

The terminal is drawn on a canvas, so the page records what the server sends
it (the ANSI stream xterm.js draws) and the test reads the reply and its
colours from there; the served app's history file says what the reply was.

Needs Debian's `chromium` and `pip install playwright`; skipped with the
reason when either is missing, except where RACER_TESTS_NEED_BROWSER=1 (set by
.ci/run where it can install Chromium): there a missing one fails the test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from racer_core.common.events import Source
from racer_tui.colors import LOGITS_GREEN, RETRIEVAL_GREEN, SOURCE_STYLE

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(autouse=True)
def _browser() -> None:
    """Skip without playwright or Chromium, with the reason; but where CI could
    install the browser (.ci/run sets RACER_TESTS_NEED_BROWSER) a missing one
    fails the test: a skip there would hide that it never ran."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing = "playwright is not installed (pip install playwright)"
    else:
        missing = "" if CHROMIUM else "no system Chromium (apt-get install -y chromium)"
    if missing and os.environ.get("RACER_TESTS_NEED_BROWSER") == "1":
        pytest.fail(f"{missing}, and RACER_TESTS_NEED_BROWSER=1 says this run must drive the browser", pytrace=False)
    if missing:
        pytest.skip(missing)

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 420  # the whole test: the served app imports torch and loads the model first

# Records every binary frame the page's websocket receives, decoded as the
# terminal's UTF-8 stream, for the test to read back.
RECORD_FRAMES = """
(() => {
  const frames = [];
  const decoder = new TextDecoder();
  window.__racerFrames = frames;
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener("message", (event) => {
        if (typeof event.data !== "string") frames.push(decoder.decode(new Uint8Array(event.data), {stream: true}));
      });
    }
  };
})();
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _racer_tui() -> list[str]:
    """The installed `racer-tui` command of this interpreter's environment."""
    script = Path(sys.executable).with_name("racer-tui")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from racer_tui.cli import main; sys.exit(main())"]


def _until(what: str, condition: Callable[[], object], deadline: float, log: Path, every: float = 0.5) -> None:
    while not condition():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise AssertionError(f"timed out waiting for {what}; the server said:\n{tail}")
        time.sleep(every)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A tiny llama saved as a checkpoint folder, made to repeat itself so that
    drafts get accepted: with the attention and MLP outputs zeroed each next
    token depends on the last one only, so the reply soon cycles, and a zero
    end-of-turn row keeps it from stopping early."""
    import torch

    from racer_core.testing import tiny_model, tiny_tokenizer

    model, tokenizer = tiny_model("llama"), tiny_tokenizer()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight[tokenizer.convert_tokens_to_ids("<|im_end|>")].zero_()
    folder = tmp_path / "tiny-llama"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def served(tmp_path: Path, checkpoint: Path) -> Iterator[tuple[str, Path]]:
    """`racer-tui --serve` on a free loopback port; yields (url, its log).
    Its own process group, so the app processes it starts go with it."""
    port = _free_port()
    config = tmp_path / "config"
    config.mkdir()
    # short replies, drafting on with a fixed budget (no cost curve to measure first)
    (config / "settings.json").write_text('{"max_new_tokens": 24, "method": "racer", "max_num_draft": 16}')
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "RACER_TUI_DATA_DIR": str(tmp_path / "data"),
        "RACER_TUI_CONFIG_DIR": str(config),
    }
    cmd = [*_racer_tui(), "--serve", "--host", "127.0.0.1", "--port", str(port),
           "--model", str(checkpoint), "--device", "cpu", "--dtype", "float32"]
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def listening() -> bool:
            assert proc.poll() is None, f"the server exited: {log.read_text(errors='replace')[-2000:]}"
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        _until("the server to listen", listening, time.monotonic() + 120, log)
        yield f"http://127.0.0.1:{port}", log
    finally:
        # the server and the app processes it started: asked, then made to stop
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass


def _stored_replies(data_dir: Path) -> list[tuple[str, str | None]]:
    """(content, runs) of the served app's finished replies, read from its
    history file (a streaming reply's row is there from the start, marked
    interrupted until it ends)."""
    path = data_dir / "history.sqlite3"
    if not path.exists():
        return []
    db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return db.execute(
            "SELECT content, runs FROM messages WHERE role = 'assistant' "
            "AND coalesce(json_extract(stats, '$.finish_reason'), '') != 'interrupted'"
        ).fetchall()
    except sqlite3.OperationalError:  # not created yet
        return []
    finally:
        db.close()


def _drawn_in(stream: str, rgb: tuple[int, int, int]) -> str:
    """The characters the ANSI stream draws with foreground `rgb` (truecolor
    SGR, as Textual writes), in stream order; cursor moves are ignored."""
    drawn, foreground = [], None
    for escape, params, final, text in re.findall(r"(\x1b\[([0-9;?]*)([A-Za-z]))|([^\x1b]+)", stream):
        if text:
            if foreground == rgb:
                drawn.append(text)
        elif escape and final == "m":
            codes = [int(c) for c in params.split(";") if c.isdigit()] or [0]
            i = 0
            while i < len(codes):
                if codes[i] in (0, 39):
                    foreground = None
                elif codes[i] == 38 and codes[i + 1 : i + 2] == [2]:
                    foreground = tuple(codes[i + 2 : i + 5])
                    i += 4
                elif codes[i] in (38, 48) and codes[i + 1 : i + 2] == [5]:
                    i += 2
                elif codes[i] == 48 and codes[i + 1 : i + 2] == [2]:
                    i += 4
                i += 1
    return "".join(drawn)


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return r, g, b


def _green_pixels(shot: Path) -> int:
    """Pixels of either draft green in the conversation column: the left 70%
    of the page, clear of the chart and its legend (green too) on the right."""
    from PIL import Image

    image = Image.open(shot).convert("RGB")
    column = image.crop((0, 0, int(image.width * 0.7), image.height))
    greens = {_rgb(RETRIEVAL_GREEN), _rgb(LOGITS_GREEN)}
    return sum(count for count, colour in column.getcolors(1 << 24) or [] if colour in greens)


def test_served_app_answers_in_a_real_browser(served: tuple[str, Path], tmp_path: Path) -> None:
    url, log = served
    deadline = time.monotonic() + DEADLINE_S
    stream = ""
    from playwright import sync_api

    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.add_init_script(RECORD_FRAMES)
            fetched: list[str] = []
            page.on("request", lambda request: fetched.append(request.url))
            page.goto(url)  # textual-serve starts an app process for the page
            # a title for the tab, and nothing fetched from another site (the font is served here)
            assert page.title() == "racer-tui"

            def screen() -> str:
                """Everything drawn so far, escape sequences removed."""
                nonlocal stream
                stream += "".join(page.evaluate("window.__racerFrames.splice(0)"))
                return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream)

            # the status line names the device and dtype once the model loaded
            _until("the app to load the model", lambda: "cpu float32" in screen(), deadline, log, every=1)
            page.screenshot(path=str(tmp_path / "before.png"))
            assert fetched and [u for u in fetched if not u.startswith(url + "/")] == []
            assert any(u.endswith(".ttf") for u in fetched)
            page.focus(".xterm-helper-textarea")  # the terminal's keyboard input
            page.keyboard.type("fox")
            _until("the typed message to show", lambda: "fox" in screen(), deadline, log)
            page.keyboard.press("Enter")
            _until("the reply to be stored", lambda: _stored_replies(tmp_path / "data"), deadline, log)
            time.sleep(1)  # the last frame reaches the browser
            screen()
            page.screenshot(path=str(tmp_path / "after.png"))
        finally:
            browser.close()
            (tmp_path / "stream.txt").write_text(stream)  # kept when the test fails

    (content, runs), *_ = _stored_replies(tmp_path / "data")
    drafted = [(Source(source), text) for source, text in json.loads(runs or "[]") if source != Source.MODEL]
    assert content and drafted, f"the looping model's reply accepted no drafts: {runs}"
    for source, text in drafted:
        # each accepted draft reached the browser in its source's colour
        shown = _drawn_in(stream, _rgb(SOURCE_STYLE[source])).replace(" ", "")
        assert text.replace(" ", "") in shown, (source, text)
    # and the browser drew them: draft green appeared in the conversation
    assert _green_pixels(tmp_path / "before.png") == 0
    assert _green_pixels(tmp_path / "after.png") > 20
