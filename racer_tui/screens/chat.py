"""The chat: past chats, the streamed conversation, its live chart and stats.

The engine runs in a thread worker that puts each decoding step in a
StepInbox and posts a ReplySteps only when the screen asked to hear of the
next step or the reply ends (racer_tui/chat/step_inbox.py); Escape sets a
threading.Event that the engine polls before every step.
"""

from __future__ import annotations

import threading

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Markdown, Static
from textual.worker import get_current_worker

from racer_core.common import registry
from racer_core.common.errors import InputError, RacerError
from racer_core.common.events import ContextUsage, Conversation, Engine, GenerationConfig
from racer_core.common.stats import Stats, is_verification_step
from racer_core.engine.chat_image import ChatImage, split_inline_images
from racer_tui.chat.attachments import read_attachment, stored
from racer_tui.chat.json_mode import JSON_GRAMMAR, JSON_PREFIX, grammar_label, split_json_prefix
from racer_tui.chat.session import ChatSession
from racer_tui.chat.step_inbox import StepInbox
from racer_tui.chat.step_log import StepLog
from racer_tui.commands import CHAT_COMMANDS
from racer_tui.history import HistoryError
from racer_tui.host import Host, host_of
from racer_tui.layout import Folding, Panel
from racer_tui.messages import ReplyEnded, ReplyFailed, ReplySteps
from racer_tui.redraw_pace import RedrawPace
from racer_tui.screens.attach_image import AttachImageScreen
from racer_tui.screens.chat_actions import ACTION_COMMANDS, ChatActions
from racer_tui.screens.confirm import ConfirmScreen
from racer_tui.screens.inspector import InspectorScreen
from racer_tui.screens.system_prompt import SystemPromptScreen
from racer_tui.thread_priority import ThreadPriority
from racer_tui.widgets.chat_image import AttachmentBar
from racer_tui.widgets.chat_list import ChatList
from racer_tui.widgets.prompt_input import PromptInput
from racer_tui.widgets.scroll_anchor import ScrollAnchor
from racer_tui.widgets.status_line import StatusLine
from racer_tui.widgets.step_chart import StepChart
from racer_tui.widgets.turns import FINISH_NOTES, ReplyTurn, UserTurn

PENDING_COUNT_DELAY_S = 0.3  # the typed message is counted once typing pauses this long (a count reads the whole chat)
SAMPLED_TEMPERATURE = 0.8  # Shift+F12's: a different reply than greedy F12 gives again


def stored_stats(stats: dict) -> Stats:
    """A finished reply's stored statistics as the Stats the status line
    showed while it ran, so both give one MAT (docs/design.md: tokens per
    verification step, the prefill's token left out)."""
    lengths = list(stats.get("accept_lengths", []))
    tokens, steps = stats.get("tokens", 0), stats.get("steps", 0)
    # the steps' tokens; without their lengths (older records), all but the prefill's one
    accepted = sum(lengths) if lengths else max(tokens - 1, 0) if steps else 0
    return Stats(tokens=tokens, accepted=accepted, steps=steps, seconds=stats.get("seconds", 0.0),
                 accept_lengths=lengths)


def reply_note(stats: dict) -> str:
    parts = [f"{stats.get('tokens', 0)} tokens"]
    mat = stored_stats(stats).mat
    if mat is not None:
        parts.append(f"MAT {mat:.2f}")
    if stats.get("method"):
        parts.append(stats["method"])
    if stats.get("temperature"):
        parts.append(f"T {stats['temperature']:g}")
    if label := grammar_label(stats.get("grammar")):
        parts.append(label)
    note = FINISH_NOTES.get(stats.get("finish_reason") or "")
    if note:
        parts.append(note)
    return " · ".join(parts)


def legend() -> Text:
    text = Text()
    for source in registry.sources()[1:]:  # each method's own sources, in its colour
        text.append("■ ", style=source.colour)
        text.append(f"draft from the {source.label}\n")
    text.append("plain: sampled by the model")
    return text


class ChatScreen(ChatActions, Screen):
    BINDINGS = [
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+n", "new_chat", "New chat"),
        Binding("ctrl+t", "toggle_markdown", "Markdown"),
        Binding("ctrl+b", "toggle_sidebar", "Chats"),
        Binding("ctrl+g", "toggle_chart", "Chart"),
        Binding("ctrl+r", "system_prompt", "System prompt", show=False),
        Binding("f9", "export_chat", "Export", show=False),  # ctrl+e, f6, f7 belong to the prompt
        Binding("f8", "delete_chat", "Delete chat", show=False),
        Binding("ctrl+l", "focus_prompt", "Focus prompt", show=False),
        Binding("ctrl+o", "inspect", "Inspect step", show=False),
        Binding("f12", "regenerate", "Regenerate the last reply", show=False),
        Binding("shift+f12", f"regenerate({SAMPLED_TEMPERATURE})",
                f"Regenerate the last reply sampled at temperature {SAMPLED_TEMPERATURE}", show=False),
        Binding("ctrl+f", "search_chats", "Search chats", show=False),
        Binding("ctrl+s", "save_chat", "Save the chat as JSON", show=False),
        Binding("f10", "attach_image", "Attach image", show=False),
        Binding("f11", "copy_code", "Copy the last code block (a click copies any)", show=False),
    ]

    PALETTE = CHAT_COMMANDS + ACTION_COMMANDS
    SIDEBAR_WIDTH = 110  # below this many columns the chat list folds away (ctrl+b floats it back)
    CHART_WIDTH = 90  # below this the acceptance chart becomes a sparkline in the status line

    def __init__(self) -> None:
        super().__init__()
        self.folding = Folding(Panel("sidebar", self.SIDEBAR_WIDTH, floats=True), Panel("chart", self.CHART_WIDTH))
        self._session: ChatSession | None = None  # made once the screen has its app (the host)
        self.stats = Stats()  # what the status line and chart show: the streaming reply's, or a stored one's
        self.budget: int | str | None = None
        self.context: ContextUsage | None = None  # the open chat's tokens of the model's maximum
        self.pending_tokens = 0  # what the typed, unsent message would add to them
        self._pending_timer: Timer | None = None  # the count of the typed message, once typing pauses
        self._stop = threading.Event()
        self._reply_turn: ReplyTurn | None = None  # the streaming reply's view
        self._reply_method = ""
        self._reply_grammar: str | None = None  # the shown reply's grammar kind (its constraint), if any
        self.steps = StepLog()  # the open chat's draft trees, for the inspector
        self._chart_reply: int | None = None  # whose steps the chart shows (None: a stored reply)
        self._end_after_markdown = False  # scroll to the end once the last reply's Markdown is laid out
        self._anchor: ScrollAnchor | None = None  # where the last Markdown toggle keeps the view
        self._editing: int | None = None  # the chat whose last message the prompt holds to resend
        self.attached: list[ChatImage] = []  # images the next message carries
        self._unshown_bars: list[tuple[int, tuple]] = []  # the streaming reply's steps not yet in the chart
        self._inbox = StepInbox()  # the streaming reply's steps, from the engine's thread
        self._finish_reason: str | None = None  # the streaming reply's, once its last step is taken
        self._ended = False  # ...and whether it was
        self.redraws = RedrawPace(self._show_reply, self.set_timer)  # the streaming reply's (redraw_pace.py)
        self.priority = ThreadPriority()  # the app's thread niced while a reply streams (thread_priority.py)

    def compose(self) -> ComposeResult:
        with Horizontal(id="chat-body"):
            chats = ChatList(id="sidebar")
            chats.border_title = "chats"
            yield chats
            with Vertical(id="chat-main"):
                yield VerticalScroll(id="conversation")
                yield AttachmentBar(id="attachments")
                yield PromptInput(id="prompt")
            with Vertical(id="chat-side"):
                yield StepChart("accepted per step", id="accept-chart")
                yield Static(legend(), id="legend")
        yield StatusLine(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self._fit()
        self.host.engine_changed.subscribe(self, self._engine_changed)
        self.refresh_sidebar()
        self.count_context()
        self._show_system_prompt()
        self.query_one(PromptInput).focus()
        self.run_worker(self._reopen_latest(), exclusive=True, group="open")

    async def _reopen_latest(self) -> None:
        """Start in the latest chat, as chat apps do (Ctrl+N starts a new one)."""
        try:
            chats = self.host.history.list_chats()
        except HistoryError:
            return  # refresh_sidebar has said so
        if chats and self.chat_id is None and not self.generating:
            await self.open_chat(chats[0].id)

    # -- helpers ---------------------------------------------------------

    @property
    def host(self) -> Host:
        return host_of(self)

    @property
    def session(self) -> ChatSession:
        """The open chat, its conversation and the turn in flight: what this screen shows."""
        if self._session is None:
            host = self.host
            self._session = ChatSession(
                host.history, lambda: host.settings, on_history_error=self._history_failed,
                on_notice=lambda text: self.notify(text, title="Your data", severity="warning", timeout=30),
            )
        return self._session

    @property
    def chat_id(self) -> int | None:
        return self.session.chat_id

    @property
    def conv(self) -> Conversation | None:
        return self.session.conv

    @property
    def reply_id(self) -> int:
        return self.session.reply_id

    @property
    def generating(self) -> bool:
        return self.session.turn is not None

    @property
    def conversation_view(self) -> VerticalScroll:
        return self.query_one("#conversation", VerticalScroll)

    def refresh_sidebar(self) -> None:
        try:
            chats = self.host.history.list_chats()
        except HistoryError as exc:
            self._history_failed(exc)
            chats = []
        self.query_one(ChatList).show_chats(chats, self.chat_id)

    def _history_failed(self, exc: HistoryError) -> None:
        """The history could not be read or written: say so; the app goes on."""
        self.notify(str(exc), title="Chat history", severity="error", timeout=15)

    def show_status(self) -> None:
        budget = self.budget if self.budget is not None else self.host.settings.generation.max_num_draft
        method = self._reply_method or self.host.settings.generation.method
        # the shown reply's constraint; before any reply, the one the next gets from the settings
        kind = self._reply_grammar if self._reply_method else JSON_GRAMMAR.kind if self.host.settings.json_mode else None
        trend = None if self.folding.shown("chart", self.size.width) else self.query_one(StepChart).lengths
        self.query_one(StatusLine).show(self.stats, budget, method, self.host.engine_info, trend, self.context,
                                        self.pending_tokens, grammar_label(kind))

    def count_context(self) -> None:
        """The open chat's context use, as the model would read it next (after
        each reply, when a chat opens or the model changes), and the typed
        message's. None while no model is loaded or it cannot say."""
        self.context = self.session.context_usage(self.host.engine)
        self._count_pending()

    def on_text_area_changed(self, event: PromptInput.Changed) -> None:
        """The prompt changed: its message is counted once typing pauses (at
        once when it is empty: nothing to count)."""
        if self._pending_timer is not None:
            self._pending_timer.stop()
            self._pending_timer = None
        if not isinstance(event.text_area, PromptInput):
            return
        if event.text_area.text.strip():
            self._pending_timer = self.set_timer(PENDING_COUNT_DELAY_S, self._count_pending)
        elif self.pending_tokens:
            self._count_pending()

    def _count_pending(self) -> None:
        """The tokens the typed message would add to the chat (a long paste
        shows before it fails). Not counted while the engine is in use (its
        tokenizer is the reply's; the reply's end counts again), for a `!!`
        command, or while editing the last message (it replaces that one)."""
        self._pending_timer = None
        self.pending_tokens = 0
        text = self.query_one(PromptInput).text.strip()
        if text and not text.startswith("!!") and self._editing is None and self.context is not None \
                and self.host.engine_user is None:
            try:
                words = split_inline_images(text)[0] if "<image>" in text else text
            except InputError:
                words = text  # sending says what is wrong with the tag
            with_it = self.session.context_usage(self.host.engine, words)
            if with_it is not None:
                self.pending_tokens = max(0, with_it.used - self.context.used)
        self.show_status()

    # -- layout ----------------------------------------------------------

    def on_resize(self) -> None:
        self._fit()

    def on_screen_resume(self) -> None:
        self._fit()  # the terminal may have changed size while another mode showed

    def _fit(self) -> None:
        self.update_classes(self.folding.classes(self.size.width))
        # Narrow: the footer's keys closer together and without the palette's key (Ctrl+P still
        # works; F1 lists it), so F1 stays on screen.
        footer = self.query_one(Footer)
        footer.compact = self.size.width < self.SIDEBAR_WIDTH
        footer.show_command_palette = self.size.width >= self.SIDEBAR_WIDTH
        self.show_status()

    def action_toggle_sidebar(self) -> None:
        if self.folding.toggle("sidebar", self.size.width):
            self.query_one(ChatList).focus()
        else:
            self.query_one(PromptInput).focus()
        self._fit()

    def action_toggle_chart(self) -> None:
        self.folding.toggle("chart", self.size.width)
        self._fit()

    def _close_floating_sidebar(self) -> bool:
        if not self.has_class("-sidebar-floating"):
            return False
        self.folding.reset("sidebar")
        self._fit()
        self.query_one(PromptInput).focus()
        return True

    def _engine_changed(self, _engine: object) -> None:
        self.session.forget_conversation()  # rebuilt from history on the next message
        self.steps.clear()  # their token ids belong to the old model
        self.count_context()

    def _show_system_prompt(self) -> None:
        for old in self.query(".system-turn"):
            old.remove()
        text = self.session.system_prompt()
        if text:
            turn = Static(Text(text), classes="turn system-turn")
            turn.border_title = "system"
            view = self.conversation_view
            view.mount(turn, before=0 if view.children else None)

    def _busy(self) -> bool:
        if self.generating:
            self.notify("A reply is streaming: press Escape to stop it first.", severity="warning")
        return self.generating

    def _scroll_to_end(self) -> None:
        self.conversation_view.scroll_end(animate=False, immediate=False)

    # -- sending ---------------------------------------------------------

    def on_prompt_input_submitted(self, message: PromptInput.Submitted) -> None:
        self._submit(message.text, message.prompt)

    def take_early(self, queued: str | None, draft: str) -> None:
        """What was typed on the loading view (LoadingScreen.carry): the
        message sent there is sent now, as if from the prompt, and the prompt
        then holds what was still being typed."""
        prompt = self.query_one(PromptInput)
        if queued:
            prompt.text = queued
            self._submit(queued, prompt)
        if draft:
            prompt.text = f"{prompt.text}\n{draft}" if prompt.text else draft
        prompt.focus()

    def _submit(self, typed: str, prompt: PromptInput) -> None:
        """The prompt's text sent (or run as a command); `prompt` is cleared once it went."""
        text = typed.strip()
        if not text or self._busy():
            return
        text, as_json = split_json_prefix(text)
        if as_json and not text:
            self.notify(f"usage: {JSON_PREFIX} PROMPT (the reply is one JSON object)", severity="warning")
            return
        if text.startswith("!!") and not as_json:  # the original chat's commands
            self.run_bang_from(prompt, text)
            return
        if self._editing is not None and self._editing == self.chat_id:
            if self.resend_edited(text, as_json):
                prompt.clear()
            return
        engine = self.host.ready_engine()
        if engine is None:
            return
        try:
            words, images = self._message_images(text)
        except InputError as exc:  # nothing was sent: the prompt and the attachments stay
            self.notify(str(exc), title="Image", severity="error", timeout=10)
            return
        attached = self.attached
        if self.send(engine, words, images, typed=typed.strip(), attached=attached, as_json=as_json):
            prompt.clear()
            self.attached = []
            self.query_one(AttachmentBar).show([])

    def _message_images(self, text: str) -> tuple[str, list[ChatImage]]:
        """The message's words and its images: the attached ones, then those of
        the original's inline `<image>PATH</image>` tags; InputError when one
        cannot be read or no words are left."""
        words, paths = split_inline_images(text) if "<image>" in text else (text, [])
        images = [*self.attached, *(read_attachment(path) for path in paths)]
        if images and not words:
            raise InputError("the message has only images: ask something about them")
        return words, images

    # -- attachments -------------------------------------------------------

    def action_attach_image(self) -> None:
        def attached(image: ChatImage | None) -> None:
            if image is not None:
                self.attached.append(image)
                self.query_one(AttachmentBar).show(self.attached)
                self.notify(f"Attached {image.path}; it goes with the next message.", title="Image")
            self.query_one(PromptInput).focus()

        self.app.push_screen(AttachImageScreen(), attached)

    def action_detach(self, index: int) -> None:
        if 0 <= index < len(self.attached):
            del self.attached[index]
            self.query_one(AttachmentBar).show(self.attached)

    def action_detach_all(self) -> None:
        if not self.attached:
            self.notify("No image is attached.", severity="warning")
            return
        self.attached = []
        self.query_one(AttachmentBar).show([])

    @work(group="bang")
    async def run_bang_from(self, prompt: PromptInput, text: str) -> None:
        if await self.run_bang(text) and prompt.text.strip() == text:
            prompt.clear()  # done: a command that failed stays typed, to fix

    def send(self, engine: Engine, text: str, images: list[ChatImage] | None = None, *,
             typed: str | None = None, attached: list[ChatImage] | None = None,
             temperature: float | None = None, as_json: bool = False) -> bool:
        """Start a reply to `text` with its `images`; False when it could not
        start (the user was told why). Should the reply fail, the prompt gets
        back `typed` (default: `text`) and the attachments `attached` (default: `images`).
        `temperature`: this reply's, instead of the settings' (a sampled regeneration);
        `as_json`: this reply is one JSON object (`!!json`)."""
        if not self.host.claim_engine("chat"):
            return False
        try:
            turn = self.session.begin(engine, text, images, typed=typed, attached=attached, temperature=temperature,
                                      as_json=as_json)
        except RacerError as exc:  # HistoryError included: nothing was sent, the text stays typed
            self.host.release_engine()
            self.notify(str(exc), severity="error", timeout=10)
            return False
        if turn.dropped:
            self.notify(f"The chat is longer than the model's context: the oldest {turn.dropped} messages are left "
                        "out of what it reads for this reply (they stay in the chat).", title="Context",
                        severity="warning", timeout=10)
        self.stats = turn.stats
        self.budget = None
        self._reply_method = turn.config.method
        self._reply_grammar = turn.config.grammar.kind if turn.config.grammar is not None else None
        self._stop.clear()
        view = self.conversation_view
        self._reply_turn = ReplyTurn()
        self._reply_turn.reply_id = turn.reply_id
        view.mount(UserTurn(text, [stored(i) for i in turn.images]))
        view.mount(self._reply_turn)
        self._reply_turn.show_markdown(self.host.settings.markdown)
        self._anchor = None  # the view follows the new reply
        self.redraws.cancel()
        self._unshown_bars.clear()
        self._inbox.open(turn.reply_id)
        self._finish_reason, self._ended = None, False
        self.query_one(StepChart).reset()
        self._chart_reply = turn.reply_id
        self.show_status()
        self.refresh_sidebar()
        self._scroll_to_end()
        self.generate(turn.conv, text, turn.images, turn.config, turn.reply_id)
        self.priority.lower()
        return True

    @work(thread=True, exclusive=True, group="generate")
    def generate(self, conv: Conversation, text: str, images: list[ChatImage], config: GenerationConfig,
                 reply_id: int) -> None:
        worker = get_current_worker()
        stop, inbox = self._stop, self._inbox

        def should_stop() -> bool:
            return worker.is_cancelled or stop.is_set()

        try:
            # Only a message with images hands them over: every engine takes plain text.
            pictures = {"images": images} if images else {}
            for event in conv.send(text, config, should_stop=should_stop, **pictures):
                if inbox.put(reply_id, event):  # the screen waits for this step (or it is the last)
                    self.post_message(ReplySteps(reply_id))
            self.post_message(ReplyEnded(reply_id))
        except RacerError as exc:
            self.post_message(ReplyFailed(reply_id, str(exc)))
        except Exception as exc:  # an engine bug must not take the UI down
            self.post_message(ReplyFailed(reply_id, f"{type(exc).__name__}: {exc}"))

    def on_reply_steps(self, message: ReplySteps) -> None:
        """Steps are waiting: drawn now, or at the pace (the last step at once)."""
        if self.session.current(message.reply_id) is None or not self._take_steps():
            return
        if self._ended:
            self.redraws.draw_now()
        else:
            self.redraws.request()

    def _take_steps(self) -> bool:
        """Keep the steps waiting in the inbox (text, statistics, chart bars,
        draft trees) without drawing them; False when there were none."""
        turn, steps = self._reply_turn, self._inbox.take()
        if turn is None or turn.reply_id is None or not steps:
            return False
        reply_id = turn.reply_id
        for event in steps:
            if self.session.add_step(event):  # the reply's statistics and text, saved every few seconds
                if is_verification_step(event):  # the chart, like MAT, leaves out the prefill
                    self._unshown_bars.append((event.accept_length, tuple(p.source for p in event.pieces)))
                self.budget = event.budget
                self.steps.add(reply_id, event)
            turn.add_pieces(event.pieces, f"screen.inspect_step({reply_id}, {event.step - 1})", show=False)
            if event.finished:
                self._finish_reason, self._ended = event.finish_reason, True
        return True

    def _show_reply(self) -> None:
        """Draw the streaming reply's steps so far: text, chart, status line;
        then hear of the next step, or finish the reply after its last."""
        if self._reply_turn is None:
            return
        self._take_steps()
        chart = self.query_one(StepChart)
        for length, sources in self._unshown_bars:
            chart.add(length, sources)
        self._unshown_bars.clear()
        self._reply_turn.show_text()
        self.show_status()
        self._scroll_to_end()
        if self._ended:
            self._finish(self._finish_reason)
        else:
            self._inbox.arm()

    def on_reply_ended(self, message: ReplyEnded) -> None:
        if message.reply_id == self.reply_id:
            self.count_context()

    def _finish(self, finish_reason: str | None) -> None:
        turn = self._reply_turn
        assert turn is not None
        stats = self.session.finish(finish_reason)
        turn.finish(reply_note(stats))
        self._inbox.open(None)
        self.priority.restore()
        self._end_after_markdown = True
        turn.show_markdown(self.host.settings.markdown)
        self.host.release_engine()
        self._reply_turn = None
        self.refresh_sidebar()

    def on_reply_failed(self, message: ReplyFailed) -> None:
        if message.reply_id != self.reply_id:
            return
        # Roll back the turn so history, screen and engine agree; keep the prompt.
        turn = self.session.roll_back()
        self.host.release_engine()
        self.redraws.cancel()
        self._unshown_bars.clear()
        self._inbox.open(None)
        self.priority.restore()
        self._reply_turn = None
        for widget in list(self.conversation_view.children)[-2:]:
            widget.remove()
        self.refresh_sidebar()  # a chat made by this first message is gone
        self.count_context()
        prompt = self.query_one(PromptInput)
        prompt.text = turn.typed
        self.attached = [*turn.attached, *self.attached]  # any attached meanwhile stay too
        self.query_one(AttachmentBar).show(self.attached)
        self.notify(message.error, title="Generation failed", severity="error", timeout=15)

    # -- actions ---------------------------------------------------------

    def action_stop(self) -> None:
        """Escape: the topmost thing first. The floating chat list over the
        conversation closes; only with nothing over it does the reply stop
        (else an edit is dropped)."""
        if self._close_floating_sidebar():
            return
        if self.generating:
            self._stop.set()
        elif self.cancel_edit():
            self._count_pending()  # the prompt's text is a new message now

    def action_focus_prompt(self) -> None:
        self.query_one(PromptInput).focus()

    async def action_new_chat(self) -> None:
        if self._busy():
            return
        self.session.open(None)
        await self._clear_view()
        self.refresh_sidebar()
        self.query_one(PromptInput).focus()

    async def _clear_view(self) -> None:
        await self.conversation_view.remove_children()
        self._anchor = None
        self._editing = None
        self.steps.clear()
        self._chart_reply = None
        self.stats = Stats()
        self.budget = None
        self._reply_method = ""
        self._reply_grammar = None
        self.query_one(StepChart).reset()
        self._show_system_prompt()
        self.count_context()  # the chat now open (chat_id), or a new one

    async def open_chat(self, chat_id: int) -> None:
        if chat_id == self.chat_id or self._busy():
            return
        self.session.open(chat_id)
        await self._clear_view()
        view = self.conversation_view
        try:
            messages = self.host.history.messages(chat_id)
        except HistoryError as exc:  # this chat only: shown in its place, the others still open
            error = Static(Text(f"{exc}\nIt stays in the history file; the other chats are not affected."))
            error.add_class("turn", "error-turn")
            error.border_title = "unreadable chat"
            await view.mount(error)
            self.refresh_sidebar()
            return
        last_stats: dict = {}
        markdown = self.host.settings.markdown
        for msg in messages:
            if msg.role == "user":
                await view.mount(UserTurn(msg.content, msg.images))
            else:
                turn = ReplyTurn(msg.runs or [], complete=True, note=reply_note(msg.stats))
                await view.mount(turn)
                turn.show_markdown(markdown)
                last_stats = msg.stats
        self.show_stored_stats(last_stats, None)
        self.refresh_sidebar()
        self._end_after_markdown = True
        self._scroll_to_end()

    def on_markdown_table_of_contents_updated(self, message: Markdown.TableOfContentsUpdated) -> None:
        """A reply's Markdown lays itself out after it is mounted, and grows
        the conversation then: the view follows to the end once the last
        reply's has (else it stays where the plain text ended, or at the top)."""
        replies = self.query(ReplyTurn)
        if self._reply_turn is not None and message.markdown in self._reply_turn.children:
            self.call_after_refresh(self._scroll_to_end)  # the streaming reply's, drawn as it grew
        elif self._end_after_markdown and replies and message.markdown in replies.last().children:
            self._end_after_markdown = False
            self.call_after_refresh(self._scroll_to_end)
        elif self._anchor is not None:
            self.call_after_refresh(self._anchor.restore, self.conversation_view)

    def show_stored_stats(self, stats: dict, reply_id: int | None) -> None:
        """The chart and status line of a finished reply, from its stored
        statistics; `reply_id` when its draft trees are in the step log."""
        self.stats = stored_stats(stats)
        self.query_one(StepChart).reset(self.stats.accept_lengths)
        self._chart_reply = reply_id
        self.budget = None
        self._reply_method = stats.get("method", "")
        self._reply_grammar = stats.get("grammar")
        self.show_status()

    def on_option_list_option_selected(self, event: ChatList.OptionSelected) -> None:
        self._close_floating_sidebar()  # it floated over the conversation: make way
        if event.option.id:
            self.run_worker(self.open_chat(int(event.option.id)), exclusive=True, group="open")

    def on_chat_list_delete(self, message: ChatList.Delete) -> None:
        self.delete_chat(message.chat_id)

    def on_chat_list_export(self, message: ChatList.Export) -> None:
        self.export_chat(message.chat_id)

    def on_chat_list_rename(self, message: ChatList.Rename) -> None:
        self.rename_chat(message.chat_id)

    def on_prompt_input_edit_last(self, _message: PromptInput.EditLast) -> None:
        self.action_edit_last()

    def delete_chat(self, chat_id: int) -> None:
        if chat_id == self.chat_id and self._busy():
            return
        try:
            title = self.host.history.title(chat_id)
        except HistoryError:
            title = f"chat {chat_id}"  # an unreadable chat can still be deleted

        async def confirmed(yes: bool | None) -> None:
            if not yes:
                return
            try:
                self.host.history.delete_chat(chat_id)
            except HistoryError as exc:
                self._history_failed(exc)
                return
            if chat_id == self.chat_id:
                self.session.open(None)
                await self._clear_view()
            self.refresh_sidebar()
            self.notify(f"Deleted “{title}”.")

        self.app.push_screen(ConfirmScreen(f"Delete the chat “{title}”?"), confirmed)

    def export_chat(self, chat_id: int) -> None:
        path = self.host.export_dir / f"chat-{chat_id}.md"
        try:
            text = self.host.history.export_markdown(chat_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except HistoryError as exc:
            self._history_failed(exc)
            return
        except OSError as exc:
            self.notify(f"Cannot write {path}: {exc.strerror or exc}", title="Export", severity="error")
            return
        self.notify(f"Exported to {path}", title="Export", timeout=10)

    def action_export_chat(self) -> None:
        if self.chat_id is None:
            self.notify("Nothing to export yet.", severity="warning")
            return
        self.export_chat(self.chat_id)

    def action_delete_chat(self) -> None:
        if self.chat_id is None:
            self.notify("This chat is not saved yet.", severity="warning")
            return
        self.delete_chat(self.chat_id)

    def action_toggle_markdown(self) -> None:
        """Replies as Markdown or as coloured tokens; the view keeps the turn at
        its top where it was (the replies above change height)."""
        on = not self.host.settings.markdown
        self.host.update_settings(markdown=on)
        view = self.conversation_view
        self._anchor = ScrollAnchor.keep(view, list(view.query_children(".turn")), self._anchor)
        self._end_after_markdown = False  # a reply that ended before stays where the anchor puts it
        for turn in self.query(ReplyTurn):
            turn.show_markdown(on)
        self.call_after_refresh(self._anchor.restore, view)  # again as each reply's Markdown is laid out
        self.notify("Replies as Markdown." if on else "Replies as coloured tokens.")

    def action_system_prompt(self) -> None:
        if self._busy():
            return

        def saved(text: str | None) -> None:
            if text is None:
                return
            self.host.update_settings(system_prompt=text)
            self.session.set_system_prompt(text)
            self._show_system_prompt()
            self.count_context()

        self.app.push_screen(SystemPromptScreen(self.session.system_prompt()), saved)

    # -- the step inspector -------------------------------------------------

    def on_step_chart_open(self, message: StepChart.Open) -> None:
        if self._chart_reply is None:
            self.notify("Draft trees are kept only for replies made since this chat was opened.",
                        severity="warning")
            return
        self.inspect_step(self._chart_reply, message.index + self._uncharted(self._chart_reply))

    def action_inspect(self) -> None:
        """The chart's selected step, else the latest step."""
        chart = self.query_one(StepChart)
        if not chart.lengths:
            self.notify("No steps to inspect yet.", severity="warning")
            return
        chart.action_open()

    def action_inspect_step(self, reply_id: int, index: int) -> None:
        self.inspect_step(reply_id, index)

    def _uncharted(self, reply_id: int) -> int:
        """Logged steps before the chart's first bar: the prefill is logged
        (the inspector explains it) but is not a step of the chart."""
        steps = self.steps.steps(reply_id)
        return 1 if steps and steps[0].step == 1 else 0

    def inspect_step(self, reply_id: int, index: int) -> None:
        steps = self.steps.steps(reply_id)
        engine = self.app.engine
        if not steps or engine is None:
            dropped = reply_id in self.steps.dropped
            self.notify("That reply's draft trees were let go to bound memory." if dropped
                        else "Draft trees are kept only for replies made since this chat was opened.",
                        severity="warning")
            return
        chart = self.query_one(StepChart)

        def closed(last: int | None) -> None:
            if last is not None and reply_id == self._chart_reply:
                chart.select(max(0, last - self._uncharted(reply_id)))

        self.app.push_screen(InspectorScreen(list(steps), index, engine.token_text), closed)
