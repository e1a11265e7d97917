"""The turns of a conversation: the user's prompt and the streamed reply."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from racer_core.common.events import Source, TokenPiece
from racer_tui.chat.session import INTERRUPTED, append_run
from racer_tui.colors import SOURCE_STYLE
from racer_tui.history import Run, StoredImage
from racer_tui.widgets.chat_image import ImageView
from racer_tui.widgets.reply_markdown import ReplyMarkdown, close_open_fences

FINISH_NOTES = {
    "cancelled": "stopped",
    "length": "max new tokens reached",
    "error": "error",
    INTERRUPTED: "interrupted: the app closed mid-reply",
}


class UserTurn(Vertical):
    """The user's message, below the images it carried."""

    def __init__(self, text: str, images: list[StoredImage] | None = None) -> None:
        super().__init__(classes="turn user-turn")
        self.border_title = "you"
        self.message = text
        self.images = list(images or [])

    def compose(self) -> ComposeResult:
        for image in self.images:
            yield ImageView(image)
        yield Static(Text(self.message), classes="user-text")

    def render_text(self) -> str:
        """What the turn shows, as plain text (image stand-ins, then the message)."""
        return "\n".join([*(v.label for v in self.query(ImageView)), self.message])


class ReplyTurn(Vertical):
    """Streams coloured tokens, or Markdown (the reply so far, its open code block closed)."""

    def __init__(self, runs: list[Run] | None = None, *, complete: bool = False, note: str = "") -> None:
        super().__init__(classes="turn reply-turn")
        self.border_title = "assistant"
        self.reply_id: int | None = None  # the chat screen's id of a reply made in this session
        self.runs: list[Run] = []
        self._text = Text()
        self.complete = False
        self._markdown_on = False
        self._body = Static(self._text, classes="reply-text")
        self._body.auto_links = False  # clickable tokens keep their colours, unlike links
        self._markdown: ReplyMarkdown | None = None
        for source, text in runs or []:
            self._append(source, text)
        if complete:
            self.finish(note)
        else:
            self.border_subtitle = "streaming… Esc stops"

    def compose(self) -> ComposeResult:
        yield self._body

    @property
    def content(self) -> str:
        return "".join(t for _, t in self.runs)

    def _append(self, source: Source, text: str, on_click: str | None = None) -> None:
        append_run(self.runs, source, text)
        style: str | Style | None = SOURCE_STYLE[source] or None
        if on_click is not None:
            style = Style.parse(style or "") + Style.from_meta({"@click": on_click})
        self._text.append(text, style=style)

    def add_pieces(self, pieces: tuple[TokenPiece, ...], on_click: str | None = None, show: bool = True) -> None:
        """Append streamed tokens; clicking them runs the action `on_click`.
        `show=False` only keeps them until `show_text` (the chat redraws a
        fast reply a few times a second, not every step)."""
        # one span per run of a source, not per token: the spans are what a redraw costs
        start = 0
        for end in range(1, len(pieces) + 1):
            if end == len(pieces) or pieces[end].source != pieces[start].source:
                self._append(pieces[start].source, "".join(p.text for p in pieces[start:end]), on_click)
                start = end
        if show:
            self.show_text()

    def show_text(self) -> None:
        """Draw the tokens added so far, as Markdown when it is on."""
        if self._markdown_on and self._markdown is not None:
            self._markdown.show(self._markdown_source())
        else:
            self._body.update(self._text)

    def _markdown_source(self) -> str:
        return self.content if self.complete else close_open_fences(self.content)

    def finish(self, note: str = "") -> None:
        self.complete = True
        self.border_subtitle = note
        self.show_text()

    def show_markdown(self, on: bool) -> None:
        """Markdown or coloured tokens, while streaming too: the reply keeps its
        layout when it ends."""
        if on == self._markdown_on:
            return
        self._markdown_on = on
        if on and self._markdown is None:
            self._markdown = ReplyMarkdown(self._markdown_source(), classes="reply-markdown")
            self.mount(self._markdown)
        self._body.display = not on
        if self._markdown is not None:
            self._markdown.display = on
        self.show_text()
