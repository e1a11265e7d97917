"""A reply shown as Markdown, while it streams and once it is done.

Two things the plain Markdown widget does not do for a chat reply:

- A streaming reply often ends inside a code block. CommonMark runs an open
  fence to the end of its container, but the closing fence arrives a few
  characters at a time ("`", "``"), and those show as code for a redraw or
  two; `close_open_fences` drops such a partial closer and closes the block,
  so it is drawn as the code block it will become (no jump at the end).
- Redrawn at the chat's pace, `Markdown.update` may be asked again before the
  last one has mounted its blocks; `ReplyMarkdown.show` keeps one update in
  flight and then draws only the newest source (none piles up behind it).

Long code lines wrap instead of scrolling sideways (Textual's default, with
no scrollbar): a code block in the conversation cannot take the keyboard
focus to scroll without becoming a stop for Tab, and wrapped, every line is
on screen at once. The copy key (or a click on the block) copies the code
itself, unwrapped.
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt
from textual import events
from textual.widgets import Markdown
from textual.widgets.markdown import MarkdownFence

_FENCE = re.compile(r"^(?P<prefix>(?:[ \t]*(?:>|[-*+][ \t]|\d{1,9}[.)][ \t]))*[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_PARTIAL_FENCE = re.compile(r"^[ \t>]*(?P<fence>`+|~+)[ \t]*$")


def close_open_fences(text: str) -> str:
    """`text` with a code block it leaves open closed (after the text it has
    so far, less a closing fence cut short at the very end). Closed under the
    opener's container: a list item's fence by one indented as its text, a
    quote's by one after the same `>`s."""
    fence = ""  # the open block's fence ("" outside one)
    prefix = ""
    lines = text.split("\n")
    for line in lines:
        match = _FENCE.match(line)
        if not match:
            continue
        if not fence:
            if match["fence"][0] == "`" and "`" in match["info"]:
                continue  # an inline code span, not a fence
            fence, prefix = match["fence"], match["prefix"]
        elif match["fence"][0] == fence[0] and len(match["fence"]) >= len(fence) and not match["info"].strip():
            fence = ""
    if not fence:
        return text
    partial = _PARTIAL_FENCE.match(lines[-1])
    if partial and partial["fence"][0] == fence[0]:
        lines.pop()  # the closing fence, still arriving
    closer = re.sub(r"[^>\t]", " ", prefix) + fence
    if lines and lines[-1] == "":
        lines.pop()
    return "\n".join([*lines, closer, ""])


def code_blocks(text: str) -> list[str]:
    """The code of each code block in the Markdown `text`, in order (as the
    Markdown view shows it: without the fences and the last newline)."""
    return [token.content.rstrip() for token in MarkdownIt("gfm-like").parse(text)
            if token.type in ("fence", "code_block")]


class CodeFence(MarkdownFence):
    """A code block that a click copies (the chat's copy key copies the last one)."""

    def on_mount(self) -> None:
        self.tooltip = "Click to copy the code"

    def on_click(self, event: events.Click) -> None:
        event.stop()
        self.app.copy_to_clipboard(self.code)
        self.notify(f"Copied the code block ({len(self.code.splitlines())} lines).")


class ReplyMarkdown(Markdown):
    """A reply's Markdown: `show` draws the newest source, one update at a time."""

    BLOCKS = {**Markdown.BLOCKS, "fence": CodeFence, "code_block": CodeFence}

    # Code wraps at the block's width (the module doc says why not a sideways scroll).
    DEFAULT_CSS = """
    ReplyMarkdown MarkdownFence {
        overflow-x: hidden;
        & > Label {
            width: 1fr;
        }
    }
    """

    def __init__(self, source: str, *, classes: str | None = None) -> None:
        super().__init__(source, classes=classes)
        self._wanted = self._shown = source  # the constructor's is drawn when mounted
        self._updating = False

    @property
    def settled(self) -> bool:
        """The newest source is drawn (no update in flight or waiting)."""
        return self.is_mounted and not self._updating and self._wanted == self._shown

    def show(self, source: str) -> None:
        """Draw `source` (a streaming reply's calls come faster than updates end)."""
        self._wanted = source
        self._catch_up()

    def _catch_up(self) -> None:
        # Not before the mount's own update is done: it would land after ours.
        if self.is_mounted and not self._updating and self._wanted != self._shown:
            self._updating = True
            self.run_worker(self._update_to_newest(), group="markdown")

    async def _update_to_newest(self) -> None:
        try:
            while self._wanted != self._shown:
                source = self._wanted
                await self.update(source)
                self._shown = source
        finally:
            self._updating = False

    def on_markdown_table_of_contents_updated(self, _message: Markdown.TableOfContentsUpdated) -> None:
        """Posted as the mount's update ends: a source shown before that is drawn now.
        (The message goes on to the chat screen, which follows the reply's end.)"""
        self._catch_up()
