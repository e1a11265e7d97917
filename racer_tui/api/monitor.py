"""The live monitor of `racer-tui api`: the address, the queue, the request on
the engine as it runs (its reply so far, accepted draft tokens coloured as in
the chat) and every finished request, with totals.

The engine thread tells the monitor of each step through `observe`, which
posts one message per event (Textual's post_message is thread-safe); the
server runs in its own thread, started on mount and stopped on quit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Footer, Static

from racer_core.common.events import StepEvent
from racer_tui.api.protocol import ApiError
from racer_tui.api.reply import Tally
from racer_tui.api.worker import Job, batch_figures
from racer_tui.colors import SOURCE_STYLE
from racer_tui.redraw_pace import RedrawPace

if TYPE_CHECKING:
    from racer_tui.api.service import ApiService

LIVE_CHARS = 1200  # the end of the running reply that is shown
KEPT_ROWS = 200  # finished requests kept in the table


class JobEvent(Message):
    def __init__(self, kind: str, job: Job, event: StepEvent | None) -> None:
        super().__init__()
        self.kind = kind
        self.job = job
        self.event = event


class Refusal(Message):
    def __init__(self, route: str, client: str, error: ApiError) -> None:
        super().__init__()
        self.route = route
        self.client = client
        self.error = error


@dataclass
class Totals:
    """Sums over finished requests (no per-step lists: the server may run for days)."""

    tokens: int = 0
    seconds: float = 0.0
    steps: int = 0
    step_tokens: int = 0  # tokens the verification steps emitted (MAT's numerator)
    drafted: int = 0
    accepted: int = 0

    def add(self, tally: Tally) -> None:
        s = tally.stats
        self.tokens += s.tokens
        self.seconds += s.seconds
        self.steps += s.steps
        self.step_tokens += s.accepted
        self.drafted += tally.drafted
        self.accepted += tally.accepted


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


class ApiMonitor(App[int]):
    TITLE = "racer-tui api"
    CSS = """
    #address { height: 1; padding: 0 1; background: $boost; }
    #queue, #totals { height: 1; padding: 0 1; }
    #live { height: 1fr; min-height: 5; border: round $primary; padding: 0 1; }
    #requests { height: 1fr; }
    """
    BINDINGS = [Binding("ctrl+q", "quit", "quit")]

    def __init__(self, service: ApiService | None = None) -> None:
        super().__init__()
        self.service = service
        self.queued = 0
        self.running: Job | None = None  # the one whose reply is shown: the newest started
        self.active: dict[str, Job] = {}  # every running job (several when batched)
        self.requests = 0  # finished, whatever their outcome
        self.done = 0
        self.total = Totals()
        self.refusals = 0
        self.last_refusal = ""
        self._live = Text()
        # A step changes the running reply's line only: drawn at a pace, not at every step of
        # every request, so drawing does not take the CPU from the passes (racer_tui/redraw_pace.py)
        self.step_redraws = RedrawPace(self._show_running, self.set_timer)

    # -- told from other threads -------------------------------------------------

    def observe(self, kind: str, job: Job, event: StepEvent | None) -> None:
        self.post_message(JobEvent(kind, job, event))

    def refused(self, route: str, client: str, error: ApiError) -> None:
        self.post_message(Refusal(route, client, error))

    # -- the screen --------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="address")
        yield Static(id="queue")
        with Vertical(id="live"):
            yield Static(id="live-stats")
            yield Static(id="live-text")
        yield DataTable(id="requests", cursor_type="row", zebra_stripes=True)
        yield Static(id="totals")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#requests", DataTable)
        table.add_columns("request", "client", "kind", "method", "outcome", "tokens", "seconds", "tok/s", "MAT",
                          "accepted/drafted")
        self.query_one("#live", Vertical).border_title = "running"
        if self.service is not None:
            self.service.watch(self.observe, self.refused)
            self.service.start()
            info = self.service.engine.info
            key = "key required" if self.service.settings.api_key else "no key (loopback)"
            self.query_one("#address", Static).update(
                Text(f"{self.service.url}  │  {info.model} on {info.device} {info.dtype}  │  {key}  │  ctrl+q stops"))
        self._show_queue()
        self._show_live()
        self._show_totals()

    def on_unmount(self) -> None:
        if self.service is not None:
            self.service.stop()

    def on_job_event(self, message: JobEvent) -> None:
        job, kind = message.job, message.kind
        if kind == "queued":
            self.queued += 1
        elif kind == "started":
            self.queued = max(0, self.queued - 1)
            self.running = job
            self.active[job.id] = job
            self._live = Text()
        elif kind == "step" and message.event is not None and job is self.running:
            for piece in message.event.pieces:
                self._live.append(piece.text, style=SOURCE_STYLE[piece.source] or None)
            if len(self._live) > 2 * LIVE_CHARS:
                self._live = self._live[-LIVE_CHARS:]
        elif kind == "finished":
            if self.active.pop(job.id, None) is not None:
                if self.running is job:  # show another running one, if any (its reply from now on)
                    self.running = next(reversed(self.active.values()), None)
                    self._live = Text()
            elif job.outcome == "cancelled":  # left before it started
                self.queued = max(0, self.queued - 1)
            self._add_row(job)
        if kind == "step":
            self.step_redraws.request()
            return
        self.step_redraws.draw_now()
        if kind == "finished":
            self._show_totals()

    def on_refusal(self, message: Refusal) -> None:
        self.refusals += 1
        self.last_refusal = f"{message.client} {message.route} {message.error.status}: {message.error.message}"
        self._show_queue()

    # -- drawing ---------------------------------------------------------------------

    def _show_running(self) -> None:
        self._show_queue()
        self._show_live()

    def _show_queue(self) -> None:
        busy = f"{len(self.active)} running" if len(self.active) > 1 else ("busy" if self.running else "idle")
        batcher = self.service.batcher if self.service is not None else None
        if batcher is not None and batcher.passes:
            busy += f" ({batcher.last_rows} rows in the last pass, {batcher.rows / batcher.passes:.1f} on average)"
        line = f"queue: {self.queued} waiting  │  {busy}  │  refused: {self.refusals}"
        if self.last_refusal:
            line += f" (last: {self.last_refusal})"
        self.query_one("#queue", Static).update(Text(line, no_wrap=True, overflow="ellipsis"))

    def _show_live(self) -> None:
        job = self.running
        if job is None:
            stats = "waiting for requests"
        else:
            s = job.tally.stats
            stats = (f"{job.id}  {job.client}  {job.endpoint} {job.method}  │  {s.tokens} tokens  "
                     f"{_num(s.tokens_per_s, '.1f')} tok/s  MAT {_num(s.mat, '.2f')}  "
                     f"accepted {job.tally.accepted}/{job.tally.drafted}")
            rows = batch_figures(job)
            if rows:
                stats += f"  │  {rows}"
        self.query_one("#live-stats", Static).update(Text(stats, no_wrap=True, overflow="ellipsis"))
        self.query_one("#live-text", Static).update(self._live[-LIVE_CHARS:] if job is not None else "")

    def _add_row(self, job: Job) -> None:
        self.requests += 1
        self.done += job.outcome == "done"
        self.total.add(job.tally)
        table = self.query_one("#requests", DataTable)
        s, t = job.tally.stats, job.tally
        table.add_row(job.id[-8:], job.client, job.endpoint, job.method, job.outcome, str(s.tokens),
                      f"{job.seconds:.2f}", _num(s.tokens_per_s, ".1f"), _num(s.mat, ".2f"),
                      f"{t.accepted}/{t.drafted}" if t.drafted else "–", key=job.id)
        if table.row_count > KEPT_ROWS:
            table.remove_row(next(iter(table.rows)))
        table.move_cursor(row=table.row_count - 1)

    def _show_totals(self) -> None:
        t = self.total
        if not self.requests:
            self.query_one("#totals", Static).update("no requests yet")
            return
        speed = t.tokens / t.seconds if t.seconds > 0 else None
        mat = t.step_tokens / t.steps if t.steps else None
        self.query_one("#totals", Static).update(
            f"{self.requests} requests ({self.done} done)  │  {t.tokens} tokens  │  {_num(speed, '.1f')} tok/s  "
            f"│  MAT {_num(mat, '.2f')}  │  accepted {t.accepted}/{t.drafted}")
