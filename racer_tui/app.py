"""The racer-tui Textual application and its command line.

Never imports torch or transformers: the engine is built by a factory that is
called in a worker thread, and the app only consumes its event stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.signal import Signal

from racer_core.common.errors import RacerError
from racer_core.common.events import Engine, EngineFactory, EngineInfo
from racer_tui.commands import racer_commands
from racer_tui.engine_loader import default_engine_factory, describe, quiet_loading_bars
from racer_tui.history_repair import open_history
from racer_tui.host import EngineUser
from racer_tui.messages import EngineFailed, EngineReady, LoadProgress
from racer_tui.screens.chat import ChatScreen
from racer_tui.screens.chat_actions import BANG_COMMANDS
from racer_tui.screens.help import HelpScreen, Section
from racer_tui.screens.loading import LoadingScreen
from racer_tui.screens.model_error import ModelErrorScreen
from racer_tui.screens.model_picker import ModelChoice, ModelPickerScreen
from racer_tui.screens.settings import SettingsScreen
from racer_tui.settings import Settings, SettingsStore, with_recent
from racer_tui.widgets.chat_image import detect_graphics


class RacerApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "racer-tui"
    DEFAULT_MODE = "chat"
    BINDINGS = [
        Binding("f1", "help", "Keys"),
        Binding("f2", "switch_mode('chat')", "Chat", show=False),
        Binding("f3", "switch_mode('bench')", "Benchmark"),
        Binding("f4", "settings_screen", "Settings"),
        Binding("f5", "pick_model", "Model"),
    ]

    def __init__(
        self,
        engine_factory: EngineFactory = default_engine_factory,
        *,
        data_dir: Path | None = None,
        config_dir: Path | None = None,
        model_path: str | None = None,
        device: str | None = None,
        dtype: str | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        from racer_core.common import paths

        detect_graphics()  # textual-image asks the terminal now, before Textual takes it

        self.engine_factory = engine_factory
        self.data_dir = data_dir or paths.data_dir()
        self.settings_store = SettingsStore((config_dir or paths.config_dir()) / "settings.json")
        # What the file holds, and what this run uses: command-line choices hold for
        # this run only (the picker saves its model choice, the settings screen all it shows).
        self._saved: Settings = self.settings_store.load()
        self.settings: Settings = self._saved.replace(**dict(overrides or {}))
        self.model_override = model_path
        self.device_override = device
        self.dtype_override = dtype
        self._trying: ModelChoice | None = None  # a picked model, saved once it loaded
        # A damaged history is moved aside and salvaged here; the app always starts.
        self.history, history_notice = open_history(self.data_dir / "history.sqlite3")
        self.startup_notices: list[str] = list(self.settings_store.notices)  # a damaged settings file was repaired
        if history_notice:
            self.startup_notices.append(history_notice)
        self.engine: Engine | None = None
        self.engine_user: EngineUser | None = None
        self.engine_changed: Signal[Engine] = Signal(self, "engine-changed")
        self._loading: LoadingScreen | None = None
        self._early: tuple[str | None, str] = (None, "")  # typed while loading (LoadingScreen.carry), not yet handed on
        self.add_mode("chat", ChatScreen)
        self.add_mode("bench", bench_screen)

    @property
    def export_dir(self) -> Path:
        return self.data_dir / "exports"

    def show_path(self, path: Path) -> str:
        """A real path the user can open, with the home folder written as ~."""
        try:
            return f"~/{path.relative_to(Path.home())}"
        except ValueError:
            return str(path)

    @property
    def engine_info(self) -> EngineInfo | None:
        return self.engine.info if self.engine is not None else None

    @property
    def model_choice(self) -> ModelChoice:
        """What to load: a picked model being tried, else the command line's, else the saved choice."""
        if self._trying is not None:
            return self._trying
        s = self.settings
        return ModelChoice(
            self.model_override if self.model_override is not None else s.model_path,
            self.device_override or s.device,
            self.dtype_override or s.dtype,
        )

    @property
    def model_path(self) -> str | None:
        return self.model_choice.model_path

    def update_settings(self, **changes: Any) -> None:
        """Change and save some settings; the command line's other choices stay unsaved."""
        self.settings = self.settings.replace(**changes)
        self._saved = self._saved.replace(**changes)
        self.settings_store.save(self._saved)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Every notice as plain text: they quote chat titles, paths, commands
        and errors, whose brackets are never markup (a `[/]` would raise)."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    def on_mount(self) -> None:
        for notice in self.startup_notices:
            self.notify(notice, title="Your data", severity="warning", timeout=30)
        self.load_model()

    def on_unmount(self) -> None:
        self.history.close()

    # -- the engine ------------------------------------------------------

    def load_model(self) -> None:
        """Show the loading view and build the engine in a worker thread."""
        self.engine = None
        label = describe(self.model_path)
        self._loading = LoadingScreen(label, *self._early)  # what was typed during a load that failed stays
        self._early = (None, "")
        if isinstance(self.screen, (LoadingScreen, ModelErrorScreen)):
            self.switch_screen(self._loading)
        else:
            self.push_screen(self._loading)
        choice = self.model_choice
        # Once the loading view is drawn: the loader's imports would hold the
        # interpreter while the first frame is being made.
        self.call_after_refresh(self._load_engine, choice.model_path, choice.device, choice.dtype)

    @work(thread=True, exclusive=True, group="load")
    def _load_engine(self, model_path: str | None, device: str, dtype: str) -> None:
        def progress(text: str, fraction: float | None) -> None:
            self.post_message(LoadProgress(text, fraction))

        # Loader progress goes to the loading view, not as tqdm bars under the UI.
        quiet_loading_bars()
        try:
            engine = self.engine_factory(model_path, device=device, dtype=dtype, progress=progress)
        except RacerError as exc:
            self.post_message(EngineFailed(str(exc)))
        except Exception as exc:  # not a traceback on screen: one line and a way out
            self.post_message(EngineFailed(f"{type(exc).__name__}: {exc}"))
        else:
            self.post_message(EngineReady(engine))

    def on_load_progress(self, message: LoadProgress) -> None:
        if self._loading is not None and self._loading.is_attached:
            self._loading.show_progress(message.text, message.fraction)

    def on_engine_ready(self, message: EngineReady) -> None:
        self.engine = message.engine
        if self._trying is not None:
            self._save_model_choice(self._trying)
        early = self._loading.carry() if self._loading is not None and self._loading.is_attached else (None, "")
        if self._loading is not None and self.screen is self._loading:
            self.pop_screen()
        self._loading = None
        self.engine_changed.publish(message.engine)
        queued, draft = early
        if isinstance(self.screen, ChatScreen):
            if queued or draft:
                self.screen.take_early(queued, draft)  # the message typed meanwhile goes now
        elif queued:  # loaded from another view (the dashboard): the message is not lost unsaid
            self.notify(f"Not sent, type it again in the chat: {queued}", severity="warning", timeout=20)

    def on_engine_failed(self, message: EngineFailed) -> None:
        if self._loading is not None and self._loading.is_attached:
            self._early = self._loading.carry()  # kept for the next load's view
        error = ModelErrorScreen(describe(self.model_path), message.error)
        if self._loading is not None and self.screen is self._loading:
            self.switch_screen(error)
        else:
            self.push_screen(error)
        self._loading = None

    def use_model(self, model_path: str | None, device: str | None = None, dtype: str | None = None) -> None:
        """Load another model; it becomes the saved choice only once it loaded,
        so a path that fails to load does not fail the next start too."""
        current = self.model_choice
        self._trying = ModelChoice(model_path, device or current.device, dtype or current.dtype)
        self.load_model()

    def _save_model_choice(self, choice: ModelChoice) -> None:
        self._trying = None
        self.model_override = self.device_override = self.dtype_override = None
        self.update_settings(model_path=choice.model_path, device=choice.device, dtype=choice.dtype,
                             recent_models=with_recent(self._saved.recent_models, choice.model_path))

    # -- actions ---------------------------------------------------------

    def ready_engine(self) -> Engine | None:
        if self.engine is None:
            self.notify("No model is loaded yet.", severity="warning")
        return self.engine

    def claim_engine(self, user: EngineUser) -> bool:
        if self._refuse_while_busy():
            return False
        self.engine_user = user
        return True

    def release_engine(self) -> None:
        self.engine_user = None

    def _refuse_while_busy(self) -> bool:
        if self.engine_user:
            what = "a reply is streaming" if self.engine_user == "chat" else "a benchmark is running"
            self.notify(f"Not now: {what}. Stop it first (Escape).", severity="warning")
        return self.engine_user is not None

    def action_pick_model(self) -> None:
        if self._refuse_while_busy():
            return

        def chosen(choice: ModelChoice | None) -> None:
            if choice is not None:
                self.use_model(choice.model_path, choice.device, choice.dtype)

        current = self.model_choice
        recent = with_recent(self._saved.recent_models, current.model_path)
        self.push_screen(ModelPickerScreen(current.model_path, current.device, current.dtype, recent), chosen)

    def action_settings_screen(self) -> None:
        def saved(settings: Settings | None) -> None:
            if settings is not None:
                self.settings = self._saved = settings
                self.settings_store.save(settings)
                if isinstance(self.screen, ChatScreen):
                    self.screen.show_status()
                self.notify("Settings saved.")

        self.push_screen(SettingsScreen(self.settings), saved)

    def clear_learned_drafts(self) -> None:
        from racer_core.drafting.corpus import clear_corpora

        if self.engine is not None:
            self.engine.forget_chats()  # the loaded model's corpus in memory too
        try:
            clear_corpora()
        except OSError as exc:
            self.notify(f"Could not clear the learned drafts: {exc}", severity="error")
            return
        self.notify("Cleared what earlier chats taught the drafts.")

    def action_clear_learned_drafts(self) -> None:
        self.clear_learned_drafts()

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen(help_sections(), BANG_COMMANDS))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from racer_commands(self, screen)
        yield from super().get_system_commands(screen)


def bench_screen() -> Screen:
    """The benchmark dashboard, made when F3 first opens it."""
    from racer_tui.screens.bench import BenchScreen  # its charts, tables and numpy: not a start's

    return BenchScreen()


def help_sections() -> list[Section]:
    from racer_tui.screens.bench import BenchScreen
    from racer_tui.screens.confirm import ConfirmScreen
    from racer_tui.screens.model_error import ModelErrorScreen
    from racer_tui.screens.system_prompt import SystemPromptScreen
    from racer_tui.widgets.chat_list import ChatList
    from racer_tui.widgets.prompt_input import PromptInput

    return [
        ("Everywhere", RacerApp.BINDINGS),
        ("Chat", ChatScreen.BINDINGS),
        ("Prompt", PromptInput.BINDINGS),
        ("Chat list (sidebar)", ChatList.BINDINGS),
        ("Benchmark dashboard", BenchScreen.BINDINGS),
        ("Settings, model, system prompt", SettingsScreen.BINDINGS),
        ("Model error", ModelErrorScreen.BINDINGS),
        ("Questions", ConfirmScreen.BINDINGS),
        ("System prompt", SystemPromptScreen.BINDINGS),
        ("This screen", HelpScreen.BINDINGS),
    ]
