"""Loading a model, as a short sequence: resolve the user's model argument
(a checkpoint folder, a GGUF file, a hub id, or the embedded default), choose
the formats (device, dtype, float16 weights, a GGUF's own blocks), open its
checkpoint (racer_core/models/checkpoint/), then read it with the lean reader
(reader.py) or, where that does not read it, load it through transformers
(transformers_load.py). Each fallback is a named function below.

Nothing is downloaded unless a hub id is named.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from racer_core.budget.processor import CPUINFO
from racer_core.common.errors import InputError, ModelLoadError
from racer_core.common.events import Progress
from racer_core.models import hub
from racer_core.models.checkpoint.base import Checkpoint
from racer_core.models.checkpoint.folder import FolderCheckpoint
from racer_core.models.embedded import EMBEDDED_NAME, embedded_gguf
from racer_core.models.load_options import FORWARDS, HALF, LoadOptions, placement
from racer_core.models.transformers_load import load_transformers

if TYPE_CHECKING:
    from racer_core.models.eagle3_head import Eagle3Head
    from racer_core.models.lean_forward import LeanForward

# Every load reads local files only; a hub id is the one thing fetched, and
# only when the user asked for it by name (racer_core.models.hub).
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


@dataclass(frozen=True)
class ModelSource:
    """A resolved model: a folder to load, a GGUF file to dequantize, or a hub
    id still to download (folder None)."""

    name: str
    folder: Path | None
    gguf_file: str | None = None
    hub_id: str | None = None


GGUF_MAGIC = b"GGUF"


def resolve(model_path: str | os.PathLike[str] | None) -> ModelSource:
    """Turn a user's model argument into a ModelSource, or a one-line error.

    The only model-path check: the picker and the command lines call it too,
    so a bad path is refused in the same words before anything loads.
    """
    text = "" if model_path is None else str(model_path).strip()
    if text in ("", "default", "embedded"):
        gguf = embedded_gguf()
        return ModelSource(EMBEDDED_NAME, gguf.parent, gguf.name)
    path = Path(text).expanduser()
    if not path.exists() and hub.looks_like_hub_id(text):
        return ModelSource(text, hub.check_available(text), hub_id=text)
    if not path.exists():
        raise ModelLoadError(f"model path does not exist: {path}")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"not a transformers checkpoint: {path} has no config.json")
        return ModelSource(path.name, path)
    if path.suffix.lower() != ".gguf":
        raise ModelLoadError(f"not a model: {path} is neither a checkpoint folder nor a .gguf file")
    try:
        with path.open("rb") as fh:
            magic = fh.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path}: {exc.strerror or exc}") from None
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"not a GGUF file: {path} does not start with the GGUF header")
    return ModelSource(path.stem, path.parent, path.name)


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} asked for, but CUDA is not available")
    if device != "cpu" and not device.startswith("cuda"):
        raise ModelLoadError(f"unknown device {device!r}: use auto, cpu or cuda[:N]")
    return device


NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_native_bf16(cpuinfo: Path = CPUINFO) -> bool:
    """Whether this CPU multiplies bf16 matrices natively (x86 AVX-512 BF16 or AMX,
    read from Linux's /proc/cpuinfo); elsewhere bf16 is emulated and slower than fp32."""
    from racer_core.budget.cpu_class import limits

    if limits():
        return False  # the libraries are limited to an older class (cpu_class.py): bf16 is not native there
    try:
        words = set(cpuinfo.read_text(errors="replace").split())
    except OSError:
        return False
    return any(flag in words for flag in NATIVE_BF16_FLAGS)


def resolve_dtype(dtype: str, device: str) -> Any:
    """`auto` is bf16 on CUDA and on CPUs with native bf16 (about 1.9x fp32's
    verification speed at 8+ tokens on AVX-512 BF16), fp32 elsewhere."""
    import torch

    names = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") or cpu_has_native_bf16() else torch.float32
    if dtype not in names:
        raise ModelLoadError(f"unknown dtype {dtype!r}: use auto, float32, bfloat16 or float16")
    return names[dtype]


@dataclass(frozen=True)
class LoadedModel:
    """What a load gives the engine: the model (transformers', or a
    reader.LeanModel read without transformers), its tokenizer, its processor
    (None except for a vision-language model), its display name, and the
    verification forward chosen for it (None: transformers' own)."""

    model: Any
    tokenizer: Any
    processor: Any
    name: str
    lean: LeanForward | None
    head: Eagle3Head | None = None  # an EAGLE-3 draft head, when one was named


def load(model_path: str | os.PathLike[str] | None = None, options: LoadOptions | None = None,
         progress: Progress | None = None, **fields: Any) -> LoadedModel:
    """Load a model (the embedded default when `model_path` is None) in eval
    mode with `options`, any LoadOptions field given by keyword overriding it.

    Unless the stock forward is asked for, a checkpoint of a family in
    racer_core/models/families on one device is read without transformers
    (reader.py, a faster start) when the reader can read it exactly; anything
    else loads through transformers."""
    options = replace(options or LoadOptions(), **fields)
    check_forward(options.forward)
    source = resolve(model_path)
    formats = choose_formats(source, options)
    checkpoint = open_checkpoint(source, formats, progress)
    if progress:
        where = "the visible GPUs" if formats.place.get("device_map") == "auto" else formats.device
        progress(f"Loading {checkpoint.name} on {where} ({str(formats.dtype).removeprefix('torch.')})...", 0.9)
    model, tokenizer, processor = read_lean(checkpoint, options, formats, progress) \
        or load_with_transformers(checkpoint, options, formats, progress)
    head = load_draft_head(model, options.draft_model, processor) if options.draft_model else None
    if progress:
        progress("Model loaded", 1.0)
    return LoadedModel(model, tokenizer, processor, checkpoint.name, choose_forward(model, options.forward, formats.half),
                       head)


@dataclass(frozen=True)
class Formats:
    """How the weights are held and computed: the device, the torch dtype of
    the arithmetic, from_pretrained's placement, float16 weights (`half`), a
    GGUF's own blocks (`blocks`, else `why_whole` says why it is dequantized)."""

    device: str
    dtype: Any
    place: dict[str, Any]
    half: bool
    blocks: bool
    why_whole: str

    def lean_wanted(self, options: LoadOptions) -> bool:
        """Whether the lean reader is tried: not for the stock forward, bitsandbytes or a device map."""
        return options.forward != "stock" and options.quantize in (None, HALF) and "device_map" not in self.place


def choose_formats(source: ModelSource, options: LoadOptions) -> Formats:
    device = resolve_device(options.device)
    half = options.quantize == HALF
    blocks, why_whole = gguf_blocks_wanted(source, options, device)
    # fp16 weights and a GGUF's own blocks: fp32 arithmetic
    dtype = resolve_dtype("float32" if half or blocks else options.dtype, device)
    return Formats(device, dtype, placement(options, device, dtype), half, blocks, why_whole)


def open_checkpoint(source: ModelSource, formats: Formats, progress: Progress | None) -> Checkpoint:
    """The source's checkpoint: a folder, a hub id (downloaded now if need be), a GGUF file, the embedded model."""
    if source.hub_id is not None:
        from racer_core.models.checkpoint.hub import open_hub

        return open_hub(source.hub_id, source.folder, progress)
    folder = source.folder
    assert folder is not None  # only a hub id's may be missing
    if source.gguf_file is None:
        return FolderCheckpoint(folder, source.name)
    from racer_core.models.checkpoint.embedded import open_embedded
    from racer_core.models.checkpoint.gguf_file import open_gguf

    if source.name == EMBEDDED_NAME:
        return open_embedded(formats.blocks, formats.why_whole, progress)
    return open_gguf(folder / source.gguf_file, formats.blocks, formats.why_whole, progress, source.name)


def read_lean(checkpoint: Checkpoint, options: LoadOptions, formats: Formats,
              progress: Progress | None) -> tuple[Any, Any, None] | None:
    """(model, tokenizer, None) read without transformers, or None where the reader does not read this model."""
    if not formats.lean_wanted(options):
        return None
    model = lean_model(checkpoint, options, formats) or lean_model_from_full_copy(checkpoint, options, formats,
                                                                                   progress)
    return None if model is None else (model, model.checkpoint.tokenizer(options.trust_remote_code), None)


def lean_model(checkpoint: Checkpoint, options: LoadOptions, formats: Formats) -> Any:
    """The reader's LeanModel, or None; a damaged weights file is None too, so
    that transformers' load says what is wrong in its own words."""
    from racer_core.models.reader import load_lean_model

    try:
        return load_lean_model(checkpoint, formats.device, formats.dtype,
                               partial(transformers_model, checkpoint, options, formats), half=formats.half)
    except Exception:
        return None


def lean_model_from_full_copy(checkpoint: Checkpoint, options: LoadOptions, formats: Formats,
                              progress: Progress | None) -> Any:
    """A GGUF whose parts folder did not serve the reader (blocks that failed
    the row-order check) is read again over its dequantized copy."""
    from racer_core.models.checkpoint.gguf_file import GGUFCheckpoint

    if not isinstance(checkpoint, GGUFCheckpoint) or not checkpoint.holds_parts_only():
        return None
    return lean_model(checkpoint.on_full_copy("blocks the reader refused", progress), options, formats)


def load_with_transformers(checkpoint: Checkpoint, options: LoadOptions, formats: Formats,
                           progress: Progress | None, why: str | None = None) -> tuple[Any, Any, Any]:
    """(model, tokenizer, processor) through transformers, over the checkpoint's
    full copy (made now if missing; `why` says what needs it): what the lean reader does not read."""
    if why is None:
        why = "a model the lean reader does not read" if formats.lean_wanted(options) else "the stock forward"
    folder = checkpoint.full_folder(why, progress)
    return load_transformers(folder, checkpoint.name, options, formats.device, formats.place)


def transformers_model(checkpoint: Checkpoint, options: LoadOptions, formats: Formats) -> Any:
    """transformers' model of a checkpoint read by the lean reader, built when
    asked for (the `hf` and `pld` methods, a script's stock forward)."""
    return load_with_transformers(checkpoint, options, formats, None, "transformers' model (the hf and pld methods)")[0]


def gguf_blocks_wanted(source: ModelSource, options: LoadOptions, device: str) -> tuple[bool, str]:
    """Whether a GGUF's quantized weights stay in their blocks (formats/quant_weights.py):
    the default for a GGUF on a CPU whose kernel runs; `--dtype float32` (or
    any dtype named), fp16 weights or the stock forward keep the dequantized
    path; with why not, in words, where they do not."""
    from racer_core.models.formats.quant_weights import kernel_isa

    if source.gguf_file is None:
        return False, "a checkpoint folder"
    reasons = [(device != "cpu", f"the device {device}"), (options.dtype != "auto", f"--dtype {options.dtype}"),
               (options.quantize is not None, f"--{options.quantize}"),
               (options.forward == "stock", "the stock forward")]
    why = next((reason for refused, reason in reasons if refused), "")
    if not why and kernel_isa() is None:
        why = "a CPU the 4-bit kernel does not run on"
    return not why, why


def load_draft_head(model: Any, path: str, processor: Any = None) -> Eagle3Head:
    """An EAGLE-3 head for `model` (models/eagle3_head.py), refused in one line if it is for another target."""
    from racer_core.models.eagle3_head import load_head
    from racer_core.models.reader import LeanModel

    if processor is not None:
        raise ModelLoadError("an EAGLE-3 draft head drafts for text models only; this model reads images")
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    embed = model.lean.weights.embed.plain() if isinstance(model, LeanModel) else model.get_input_embeddings().weight
    return load_head(path, config, embed.detach())


def check_forward(forward: str) -> None:
    """Refuse an unknown forward name (before any model loads)."""
    if forward not in FORWARDS:
        raise InputError(f"unknown forward {forward!r}; choose one of {', '.join(FORWARDS)}")


def choose_forward(model: Any, forward: str, half: bool = False) -> LeanForward | None:
    """The lean forward where the model has one ('auto', 'lean'), or None for
    transformers' own ('stock'); with `half` its linears in float16 (refused
    where the model has no lean forward)."""
    from racer_core.models.lean_forward import lean_forward_for
    from racer_core.models.reader import LeanModel

    check_forward(forward)
    if isinstance(model, LeanModel):
        if forward == "stock":
            raise InputError("this model was read without transformers and has only the lean forward; "
                             "for transformers' forward load it with forward 'stock'")
        return model.lean
    if forward == "stock":
        return None
    lean = lean_forward_for(model, half)
    if lean is None and half:
        raise ModelLoadError(f"--fp16-weights runs through the lean forward, which {model.config.model_type} models "
                             "do not have (Llama-shaped families only: docs/models.md)")
    if lean is None and forward == "lean":
        raise InputError(f"{model.config.model_type} models have no lean forward; use forward 'auto' or 'stock'")
    return lean
