"""What the loader and the lean reader ask of a model's files, whatever their
source: its name and where it lives, its config and tokenizer, its float
tensors by checkpoint name (`tensor`) and its quantized ones in their blocks
(`blocks`). The float tensors are a folder's safetensors: the checkpoint's own
folder, or for a GGUF a folder in the user cache (gguf_file.py)."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from racer_core.common.errors import ModelLoadError, first_line
from racer_core.common.events import Progress
from racer_core.models.checkpoint.files import CONFIG, GENERATION_CONFIG, CheckpointConfig, read_json, weight_files

if TYPE_CHECKING:
    import torch

    from racer_core.models.formats.quant_weights import QuantWeight


class Checkpoint:
    """A model's files. `name` is what the user is shown, `path` where the
    model lives (a folder or a GGUF file), `folder` the folder of its config,
    tokenizer and float tensors."""

    def __init__(self, name: str, path: Path, folder: Path) -> None:
        self.name, self.path, self.folder = name, path, folder

    def config_data(self) -> dict[str, Any] | None:
        """config.json as it is (None when missing or damaged: the reader then leaves the model to transformers)."""
        return read_json(self.folder / CONFIG)

    @property
    def config(self) -> CheckpointConfig:
        return CheckpointConfig(self.config_data() or {})

    @property
    def generation_config(self) -> CheckpointConfig:
        return CheckpointConfig(read_json(self.folder / GENERATION_CONFIG) or {})

    def tokenizer(self, trust_remote_code: bool = False) -> Any:
        return load_tokenizer(self.folder, self.name, trust_remote_code)

    def weight_files(self) -> list[Path] | None:
        """The safetensors files of the float tensors; None when some are missing."""
        return weight_files(self.folder)

    @cached_property
    def _where(self) -> dict[str, Any]:
        """Each float tensor's open safetensors file, opened once."""
        from safetensors import safe_open

        handles = [safe_open(str(f), framework="pt", device="cpu") for f in self.weight_files() or []]
        return {name: h for h in handles for name in h.keys()}  # noqa: SIM118 (not a dict)

    def float_names(self) -> set[str]:
        """The tensors stored as floats."""
        return set(self._where)

    def tensor(self, name: str) -> torch.Tensor:
        """A tensor as stored, or its blocks dequantized where only those hold it; KeyError for an unknown name."""
        if name in self._where:
            return self._where[name].get_tensor(name)
        blocks = self.blocks(name)
        if blocks is None:
            raise KeyError(name)
        return blocks.plain()

    def blocks(self, name: str) -> QuantWeight | None:
        """A quantized linear in its own blocks (their type in `qtype`), None where the checkpoint has none."""
        return None

    def block_names(self) -> set[str]:
        return set()

    def full_folder(self, reason: str, progress: Progress | None = None) -> Path:
        """A folder holding every tensor as transformers loads it; `reason` says
        what needs it (a GGUF makes its dequantized copy for it)."""
        return self.folder


def load_tokenizer(folder: Path, name: str, trust_remote_code: bool) -> Any:
    """The checkpoint's tokenizer: fast_tokenizer.py's when it reproduces
    transformers' exactly (no transformers import), else AutoTokenizer."""
    from racer_core.models.fast_tokenizer import load_fast_tokenizer

    tokenizer = load_fast_tokenizer(folder)
    if tokenizer is not None:
        return tokenizer
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=trust_remote_code)
    except Exception as error:
        raise ModelLoadError(f"cannot load {name}'s tokenizer: {first_line(error)}") from error
