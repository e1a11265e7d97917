"""Choose the model: the embedded default, a checkpoint folder or a GGUF file."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, OptionList, RadioButton, RadioSet, Select, Static
from textual.widgets.option_list import Option

from racer_core.common.errors import ModelLoadError
from racer_core.models.embedded import EMBEDDED_NAME

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class ModelChoice:
    model_path: str | None
    device: str
    dtype: str


class ModelPickerScreen(ModalScreen[ModelChoice | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel"), Binding("ctrl+s", "load", "Load")]

    def __init__(self, model_path: str | None, device: str, dtype: str, recent: Sequence[str] = ()) -> None:
        """`recent`: model paths that loaded before, the latest first, offered to pick."""
        super().__init__()
        self.model_path = model_path
        self.device = device
        self.dtype = dtype
        self.recent = list(recent)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide-dialog", id="picker-box"):
            yield Static("Model", classes="box-title")
            with RadioSet(id="model-kind"):
                yield RadioButton(EMBEDDED_NAME, value=not self.model_path, id="embedded")
                yield RadioButton("A checkpoint folder or a .gguf file", value=bool(self.model_path), id="custom")
            yield Input(
                self.model_path or "",
                placeholder="/path/to/checkpoint-folder or /path/to/model.gguf",
                id="model-path",
            )
            if self.recent:
                yield Static("Recent models (Enter picks one)", classes="row-label")
                yield OptionList(*(Option(Text(path)) for path in self.recent), id="recent-models")
            with Horizontal(classes="form-row"):
                yield Static("Device", classes="row-label")
                yield Select([(d, d) for d in DEVICES], value=self.device, allow_blank=False, id="device")
                yield Static("Dtype", classes="row-label")
                yield Select([(d, d) for d in DTYPES], value=self.dtype, allow_blank=False, id="dtype")
            yield Static("", id="picker-error")
            with Horizontal(classes="buttons"):
                yield Button("Load", id="load", variant="primary")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self._sync_path_field()

    def _custom(self) -> bool:
        return self.query_one("#custom", RadioButton).value

    def _sync_path_field(self) -> None:
        self.query_one("#model-path", Input).disabled = not self._custom()

    def on_radio_set_changed(self, _event: RadioSet.Changed) -> None:
        # The focus stays on the choice: Tab goes on to the path box, now enabled, as the form reads
        # (jumping to it made Tab skip it, to Device).
        self._sync_path_field()
        self.query_one("#picker-error", Static).update("")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """A recent model: it becomes the custom path, ready to load."""
        event.stop()
        self.query_one("#custom", RadioButton).value = True
        path = self.query_one("#model-path", Input)
        path.disabled = False
        path.value = self.recent[event.option_index]
        path.focus()

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        self.action_load()

    def action_load(self) -> None:
        path: str | None = None
        if self._custom():
            path = self.query_one("#model-path", Input).value.strip()
            # loading imports torch (through its model-family modules): only
            # now, when a model is about to load anyway, never at app start.
            from racer_core.models.loader import resolve

            try:
                if not path:  # resolve would take an empty path for the embedded model
                    raise ModelLoadError("enter a checkpoint folder or a .gguf file path")
                resolve(path)  # the engine's own checks, before anything loads
            except ModelLoadError as exc:
                self.query_one("#picker-error", Static).update(Text(str(exc)))
                return
        device = str(self.query_one("#device", Select).value)
        dtype = str(self.query_one("#dtype", Select).value)
        self.dismiss(ModelChoice(path, device, dtype))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "load":
            self.action_load()
        else:
            self.dismiss(None)
