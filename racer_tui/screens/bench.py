"""Benchmark dashboard on top of racer_core.bench.runner.run_benchmark.

The runner does the benchmarking and writes the answer files (as --bench
does); this screen only picks its inputs, relays its progress from a worker
thread, and draws what came back.
"""

from __future__ import annotations

import threading
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, Label, Select, SelectionList, Static
from textual.worker import Worker, WorkerState, get_current_worker

from racer_core.bench.answers import default_answer_dir
from racer_core.bench.board import BenchBoard
from racer_core.bench.results import BenchResult, load_results
from racer_core.bench.runner import BenchProgress, check_repeats, run_benchmark, with_suite_grammar
from racer_core.bench.suites import Question, load_suite, suite_name
from racer_core.common.capabilities import check_methods_for
from racer_core.common.config import DEFAULTS
from racer_core.common.counts import counted
from racer_core.common.errors import RacerError
from racer_core.common.events import METHODS, Engine, GenerationConfig
from racer_tui.commands import BENCH_COMMANDS
from racer_tui.host import Host, host_of
from racer_tui.layout import Folding, Panel
from racer_tui.redraw_pace import RedrawPace
from racer_tui.widgets.bench_charts import CategoryChart, FlightChart, HistogramChart, SpeedChart, SpeedLegend
from racer_tui.widgets.bench_tables import progress_table, speedup_table

SUITES = [("built-in questions", "builtin"), ("HumanEval prompts", "humaneval"),
          ("structured output (JSON schemas)", "structured"), ("a question file…", "file")]
DEFAULT_METHODS = ("ar", "racer")
BENCH_MAX_NEW_TOKENS = DEFAULTS.max_new_tokens  # as `racer-tui bench` runs by default


class BenchStep(Message):
    def __init__(self, run_id: int, progress: BenchProgress) -> None:
        super().__init__()
        self.run_id = run_id
        self.progress = progress


class BenchDone(Message):
    def __init__(self, run_id: int, result: BenchResult | None, error: str | None) -> None:
        super().__init__()
        self.run_id = run_id
        self.result = result
        self.error = error


class RunClaim:
    """Who ends a run whose worker was cancelled: its thread, by its BenchDone,
    once it began; else the screen, and the thread (should it start late) does
    nothing. Textual's cancel stops waiting for the thread, not the thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._begun: set[int] = set()
        self._given_up: set[int] = set()

    def begin(self, run_id: int) -> bool:
        """In the worker thread, first: False when the run was given up already."""
        with self._lock:
            if run_id in self._given_up:
                return False
            self._begun.add(run_id)
            return True

    def give_up(self, run_id: int) -> bool:
        """The worker was cancelled: True when its thread never began (the screen ends the run)."""
        with self._lock:
            if run_id in self._begun:
                return False
            self._given_up.add(run_id)
            return True


def stopped_text(board: BenchBoard) -> str:
    """The status of a run stopped early: how far it came, and what starts again."""
    done = min((board.finished(m) for m in board.methods), default=0)
    kept = " (their answers are in the table)" if done else ""
    return f"stopped after {done} of {board.question_count or '?'} questions{kept}; Start (ctrl+g) runs again"


def select_questions(suite: str, begin: str, end: str) -> list[Question]:
    """The questions [begin, end) of a suite; raises RacerError with a readable line."""
    try:
        first = int(begin) if begin.strip() else 0
        last = int(end) if end.strip() else None
    except ValueError:
        raise RacerError("question range: whole numbers, 0-based, end excluded") from None
    if first < 0 or (last is not None and last < 0):
        raise RacerError("question range: numbers must be 0 or more")
    questions = load_suite(suite)[first:last]
    if not questions:
        raise RacerError(f"no questions selected from {suite} (it has {len(load_suite(suite))})")
    return questions


class BenchScreen(Screen):
    BINDINGS = [
        Binding("ctrl+g", "start", "Start"),
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+o", "open_results", "Open results"),
        Binding("ctrl+b", "toggle_controls", "Setup"),
    ]

    PALETTE = BENCH_COMMANDS
    CONTROLS_WIDTH = 110  # below this many columns the setup column folds away (ctrl+b floats it back)

    def __init__(self) -> None:
        super().__init__()
        self.board = BenchBoard(methods=list(DEFAULT_METHODS))
        self.result: BenchResult | None = None
        self.running = False
        self.run_id = 0
        self._stop = threading.Event()
        self._claim = RunClaim()
        self._worker: Worker | None = None  # the run's, to tell its end from an older one's
        self.folding = Folding(Panel("controls", self.CONTROLS_WIDTH, floats=True))
        # The in-flight chart, redrawn at a pace while the engine is measured (redraw_pace.py)
        self.flight_redraws = RedrawPace(lambda: self.query_one(FlightChart).sync(), self.set_timer)

    def compose(self) -> ComposeResult:
        with Horizontal(id="bench-body"):
            with VerticalScroll(id="bench-controls"):
                yield Label("Suite")
                yield Select(SUITES, value="builtin", allow_blank=False, id="suite")
                yield Input(placeholder="question file (.jsonl)", id="suite-file", disabled=True)
                yield Label("Methods")
                yield SelectionList[str](*[(m, m, m in DEFAULT_METHODS) for m in METHODS], id="methods")
                yield Label("Questions (0-based)")
                with Horizontal(classes="form-row"):
                    # empty is the default (from the first, to the end), not a mistake
                    yield Input(placeholder="from 0", id="q-begin", type="integer", valid_empty=True)
                    yield Input(placeholder="to end", id="q-end", type="integer", valid_empty=True)
                yield Static("0 to 10 runs the first ten", classes="field-hint")
                yield Label("Max new tokens · repeats")
                with Horizontal(classes="form-row"):
                    # the run's own, as --max-new-tokens is `bench`'s: the chat's stays in Settings
                    yield Input(str(BENCH_MAX_NEW_TOKENS), id="max-new-tokens", type="integer")
                    yield Input("1", id="repeats", type="integer")
                yield Static("repeats: median of N tries", classes="field-hint")
                with Horizontal(classes="buttons"):
                    yield Button("Start", id="start", variant="success")
                    yield Button("Stop", id="stop", variant="error", disabled=True)
                yield Label("Previous results folder")
                yield Input(placeholder="folder of METHOD.jsonl answer files", id="results-dir")
                yield Button("Open results", id="open")
            with VerticalScroll(id="bench-main"):
                yield Static("", id="bench-info")
                yield Static("", id="bench-progress")
                with Grid(id="bench-charts"):
                    with Vertical(id="speed-cell"):
                        yield SpeedLegend(self.board, id="speed-legend")
                        yield SpeedChart(self.board, id="speed-chart")
                    yield CategoryChart(self.board, id="category-chart")
                    yield FlightChart(self.board, id="flight-chart")
                    yield HistogramChart(self.board, id="histogram-chart")
                yield Static("", id="bench-table")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#bench-info", Static).update(
            "Choose a suite, methods and questions (Setup: ctrl+b), then Start (ctrl+g). "
            "Max new tokens and repeats are this run's; temperature, draft budget and the rest "
            "come from Settings (f4)."
        )
        self.show_board()
        self._fit()

    def on_screen_resume(self) -> None:
        self._fit()

    # -- layout ----------------------------------------------------------

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        self.update_classes(self.folding.classes(self.size.width))

    def action_toggle_controls(self) -> None:
        if self.folding.toggle("controls", self.size.width):
            self.query_one("#suite", Select).focus()
        self._fit()

    def _close_floating_controls(self) -> bool:
        if not self.has_class("-controls-floating"):
            return False
        self.folding.reset("controls")
        self._fit()
        return True

    @property
    def host(self) -> Host:
        return host_of(self)

    # -- drawing ---------------------------------------------------------

    def show_board(self) -> None:
        self.query_one("#bench-progress", Static).update(progress_table(self.board))
        for chart in (SpeedLegend, SpeedChart, CategoryChart, FlightChart, HistogramChart):
            self.query_one(chart).show(self.board)

    def _set_running(self, running: bool) -> None:
        self.running = running
        flight = self.query_one(FlightChart)
        flight.running = running
        flight.sync()
        self.query_one("#start", Button).disabled = running
        self.query_one("#stop", Button).disabled = not running
        self.query_one("#open", Button).disabled = running

    # -- inputs ----------------------------------------------------------

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "suite":
            field = self.query_one("#suite-file", Input)
            field.disabled = event.value != "file"
            if not field.disabled:
                field.focus()

    def _suite(self) -> str:
        choice = str(self.query_one("#suite", Select).value)
        if choice != "file":
            return choice
        path = self.query_one("#suite-file", Input).value.strip()
        if not path:
            raise RacerError("enter the path of a question file")
        return str(Path(path).expanduser())

    def _max_new_tokens(self) -> int:
        """The dashboard's field, checked by the one rule for it (ConfigError, a RacerError)."""
        return GenerationConfig.parse_field("max_new_tokens", self.query_one("#max-new-tokens", Input).value)

    def _repeats(self) -> int:
        """Tries per question, read by the runner's rule (as --repeats is)."""
        return check_repeats(self.query_one("#repeats", Input).value)

    def _methods(self) -> list[str]:
        chosen = set(self.query_one("#methods", SelectionList).selected)
        return [m for m in METHODS if m in chosen]  # the runner's fixed order

    def on_button_pressed(self, event: Button.Pressed) -> None:
        actions = {"start": self.action_start, "stop": self.action_stop, "open": self.action_open_results}
        actions[event.button.id or ""]()

    # -- running ---------------------------------------------------------

    def action_start(self) -> None:
        if self.running:
            return
        engine = self.host.ready_engine()
        if engine is None:
            return
        try:
            suite = self._suite()
            methods = self._methods()
            if not methods:
                raise RacerError("choose at least one method")
            questions = select_questions(
                suite, self.query_one("#q-begin", Input).value, self.query_one("#q-end", Input).value
            )
            max_new_tokens = self._max_new_tokens()
            repeats = self._repeats()
            config = self.host.settings.generation.replace(max_new_tokens=max_new_tokens)
            check_methods_for(engine, with_suite_grammar(config, questions), methods)  # schemas: a grammar
        except RacerError as exc:
            self.notify(str(exc), title="Cannot start", severity="error", timeout=10)
            return
        if not self.host.claim_engine("bench"):
            return
        name = suite_name(suite)
        answer_dir = default_answer_dir(name, engine.info.model)
        self.run_id += 1
        self.result = None
        self.board = BenchBoard(methods=methods, question_count=len(questions))
        self.query_one("#bench-table", Static).update("")
        tries = f" · {repeats} tries each, the median kept" if repeats > 1 else ""
        cpu = f" ({engine.info.cpu})" if engine.info.cpu else ""  # which CPU and class the figures are for
        self.query_one("#bench-info", Static).update(Text(
            f"{name}: {counted(len(questions), 'question')} × {', '.join(methods)} on {engine.info.model}{cpu}{tries} "
            f"· answers in {self.host.show_path(answer_dir)}"
        ))
        self.show_board()
        self._stop.clear()
        self._set_running(True)
        self._close_floating_controls()  # make way for the charts
        self._worker = self.run_bench(engine, questions, methods, config, answer_dir, name, repeats, self.run_id)

    @work(thread=True, exclusive=True, group="bench")
    def run_bench(
        self,
        engine: Engine,
        questions: list[Question],
        methods: list[str],
        config: GenerationConfig,
        answer_dir: Path,
        suite: str,
        repeats: int,
        run_id: int,
    ) -> None:
        if not self._claim.begin(run_id):
            return  # cancelled before it began: the screen has ended the run
        worker = get_current_worker()
        stop = self._stop

        def should_stop() -> bool:
            return worker.is_cancelled or stop.is_set()

        try:
            result = run_benchmark(
                engine,
                questions,
                methods,
                config,
                answer_dir=answer_dir,
                should_stop=should_stop,
                on_progress=lambda p: self.post_message(BenchStep(run_id, p)),
                suite=suite,
                repeats=repeats,
            )
        except RacerError as exc:
            self.post_message(BenchDone(run_id, None, str(exc)))
        except Exception as exc:  # an engine bug must not take the UI down
            self.post_message(BenchDone(run_id, None, f"{type(exc).__name__}: {exc}"))
        else:
            self.post_message(BenchDone(run_id, result, None))

    def on_bench_step(self, message: BenchStep) -> None:
        if message.run_id != self.run_id:
            return
        self.board.update(message.progress)
        if message.progress.event is None:
            self.flight_redraws.cancel()
            self.show_board()  # question start or end: every panel changes
        else:
            self.flight_redraws.request()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A cancelled run's thread may never begin, and then never says it
        ended: the run ends here (a thread that began ends it by its BenchDone)."""
        if (event.worker is self._worker and event.state == WorkerState.CANCELLED and self.running
                and self._claim.give_up(self.run_id)):
            self._end_run()
            self.query_one("#bench-info", Static).update(Text(stopped_text(self.board)))

    def _end_run(self) -> None:
        self._set_running(False)
        self.flight_redraws.cancel()
        self.host.release_engine()

    def on_bench_done(self, message: BenchDone) -> None:
        if message.run_id != self.run_id or not self.running:
            return
        self._end_run()
        if message.error is not None:
            self.query_one("#bench-info", Static).update(Text(f"failed: {message.error}"))
            self.notify(message.error, title="Benchmark failed", severity="error", timeout=15)
            return
        self.result = message.result
        if self.result is not None and not self.result.completed:
            self.query_one("#bench-info", Static).update(Text(stopped_text(self.board)))
        self.show_result()
        if self.result is not None and (failed := self.result.failure_count()):  # the run went on past them
            self.notify(f"{counted(failed, 'question')} failed: see the warning under the table",
                        title="Benchmark", severity="warning", timeout=15)

    def show_result(self) -> None:
        if self.result is None:
            return
        self.query_one("#bench-table", Static).update(speedup_table(self.result))
        self.show_board()

    def action_stop(self) -> None:
        """Escape: the floating setup first; with nothing over the charts, the run stops."""
        if self._close_floating_controls():
            return
        if self.running:
            self._stop.set()
            self.query_one("#bench-info", Static).update(Text("stopping after this step…"))

    def action_open_results(self) -> None:
        if self.running:
            return
        text = self.query_one("#results-dir", Input).value.strip()
        if not text:
            self.query_one("#results-dir", Input).focus()
            self.notify("Enter a results folder, then Open.", severity="warning")
            return
        self.open_results(Path(text).expanduser())

    def open_results(self, folder: Path) -> None:
        try:
            result = load_results(folder)
        except RacerError as exc:
            self.notify(str(exc), title="Cannot open results", severity="error", timeout=10)
            return
        except OSError as exc:
            self.notify(f"{folder}: {exc.strerror or exc}", title="Cannot open results", severity="error")
            return
        self.result = result
        self.board = BenchBoard.from_result(result)
        self.query_one("#bench-info", Static).update(Text(
            f"results from {folder} · model {result.model or '?'} · {counted(len(result.question_order), 'question')}"
        ))
        self.show_result()
