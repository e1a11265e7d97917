"""A GGUF file dequantized once into the user cache, as a safetensors checkpoint.

The cache folder is named by the file's content (its size and a hash of
samples spread over it), not by its path: the same GGUF installed in a second
virtual environment, or moved, reuses the folder. A folder whose files are
not whole (a full disk, a killed copy, an edit) is moved aside and made again;
the start goes on.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import json
import logging
import os
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from racer_core.common.errors import ModelLoadError, first_line
from racer_core.common.events import Progress
from racer_core.common.paths import cache_dir, move_aside
from racer_core.models.checkpoint.files import CONFIG, WEIGHTS_INDEX, indexed_weight_files, read_json

log = logging.getLogger(__name__)
SOURCE = "racer_source.json"  # what a cache folder was made from (and the parts folder's tensor table)
KEY_VERSION = "2"  # bump when what the folder holds changes
HEAD = 1 << 20  # the header (architecture, tokenizer, tensor table) is hashed whole up to here
SAMPLES = 32  # then this many blocks spread over the tensor data
SAMPLE = 1 << 16


def content_key(gguf: Path) -> str:
    """The file's identity: size, first MiB and 32 blocks of 64 KiB spread over
    the rest (3 MiB read, a few ms; hashing all of a large GGUF would cost
    seconds at every start)."""
    size = gguf.stat().st_size
    digest = hashlib.sha256(f"{KEY_VERSION}|{size}|".encode())
    with gguf.open("rb") as fh:
        digest.update(fh.read(HEAD))
        if size > HEAD:
            step = max(SAMPLE, (size - HEAD) // SAMPLES)
            for offset in range(HEAD, size, step):
                fh.seek(offset)
                digest.update(fh.read(SAMPLE))
    return digest.hexdigest()[:16]


def cache_folder(gguf: Path) -> Path:
    return cache_dir() / "models" / f"{gguf.stem}-{content_key(gguf)}"


def is_whole(folder: Path) -> bool:
    """Whether the folder holds a readable config and weights files of the
    length their own headers give (a truncated or missing file is caught
    here, before transformers fails on it; flipped bits inside are not)."""
    if read_json(folder / CONFIG) is None:
        return False
    try:
        weights = sorted(folder.glob("*.safetensors"))
        if (folder / WEIGHTS_INDEX).exists():
            named = indexed_weight_files(folder)
            if named is None or not named <= {w.name for w in weights}:
                return False
        return bool(weights) and all(_safetensors_whole(w) for w in weights)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _safetensors_whole(path: Path) -> bool:
    """A safetensors file is an 8-byte header length, a JSON header, then the
    tensors' bytes up to the largest end offset the header gives."""
    size = path.stat().st_size
    if size < 8:
        return False
    with path.open("rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        if 8 + length > size:
            return False
        header = json.loads(fh.read(length))
    ends = [int(t["data_offsets"][1]) for name, t in header.items() if name != "__metadata__"]
    return size == 8 + length + max(ends, default=0)


def ensure_dequantized(gguf: Path, progress: Progress | None = None, *, reason: str, reader: Any = None) -> Path:
    """The cache folder holding `gguf` dequantized, made now if missing or
    damaged; `reason` (what needs every float tensor) goes into one log line,
    and into the progress line when it is made; `reader` is the file already parsed, if it is."""
    folder = cache_folder(gguf)
    log.info("%s: the dequantized copy, for %s", gguf.name, reason)
    set_aside_if_damaged(folder, progress, f"The cached copy of {gguf.name} was", "dequantizing it again...")
    if not folder.exists():
        dequantize(gguf, folder, progress, reason, reader)
    return folder


def set_aside_if_damaged(folder: Path, progress: Progress | None, what: str, again: str) -> None:
    """Move a cache folder whose files are not whole aside (never deleted: the
    user may want it back), telling `progress` "`what` damaged (moved aside to
    NAME); `again`"."""
    if folder.exists() and not is_whole(folder):
        moved = move_aside(folder)
        if progress:
            progress(f"{what} damaged (moved aside to {moved.name}); {again}", None)


STAGING = ".staging-"


def remove_abandoned_staging(models: Path) -> None:
    """Delete the half-written folders of dequantizes whose process is gone (a
    killed first start leaves one, as large as the model); a running one's
    (another app's first start) is left alone."""
    for folder in models.glob(f"{STAGING}*"):
        pid = folder.name.removeprefix(STAGING).partition("-")[0]
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by another user
        return True
    return True


@contextlib.contextmanager
def gguf_read_once(reader: Any = None) -> Iterator[None]:
    """transformers parses the GGUF three times (config, tokenizer, weights),
    turns its fields (the tokenizer's 49k strings among them) into Python
    values each time, and rebuilds gguf's tensor-name table once per module of
    the model (397 times for SmolLM2): measured, about 12 s of a 17 s
    dequantize. Within this block each is built once and shared: the reader
    (`reader`, the checkpoint's, where the file was parsed already) and the
    name table are read-only (the reader maps the file read-only), and
    each caller gets its own copy of the parsed fields. transformers imports
    these names from their modules when it calls them, so the patch reaches
    it; it is undone on the way out. Only the model loader thread reads GGUF
    files, one load at a time."""
    import gguf
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    from racer_core.models.checkpoint.gguf_reader import MappedReader

    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    parse = gguf_utils.load_gguf_checkpoint
    readers: dict[tuple[str, str], Any] = {}
    if reader is not None:
        readers[(os.path.realpath(reader.path), "r")] = reader
    parsed: dict[str, Any] = {}

    def shared_reader(path: str | os.PathLike[str], mode: str = "r") -> Any:
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = MappedReader(Path(path)) if mode == "r" else reader_class(path, mode)
        return readers[key]

    def parse_once(path: str | os.PathLike[str], return_tensors: bool = False, **kwargs: Any) -> Any:
        if return_tensors or kwargs:  # the weights: once anyway
            return parse(path, return_tensors, **kwargs)
        key = os.fspath(path)
        if key not in parsed:
            parsed[key] = with_dropped_fields(parse(path, return_tensors=False), shared_reader(path))
        return copy.deepcopy(parsed[key])

    gguf.GGUFReader = shared_reader
    gguf.get_tensor_name_map = functools.cache(name_map)
    gguf_utils.load_gguf_checkpoint = parse_once
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map
        gguf_utils.load_gguf_checkpoint = parse


def with_dropped_fields(parsed: dict[str, Any], reader: Any) -> dict[str, Any]:
    """transformers' parse of a GGUF with what its config mapping drops: the
    head size of a key_length field (Qwen3's, else its config class's default,
    128, whatever the file says), a partial rotary dimension (Phi-4-mini's
    rope.dimension_count) and the rope scaling (gguf_fields.py reads it; one a
    GGUF states in a way it cannot read is named in one log line)."""
    from racer_core.models.checkpoint.gguf_blocks import field_value
    from racer_core.models.checkpoint.gguf_fields import UNREAD, rope_scaling_from_fields

    config = parsed.get("config", {})
    arch = field_value(reader, "general.architecture")
    key_length = field_value(reader, f"{arch}.attention.key_length")
    if key_length is not None and "head_dim" not in config:
        config["head_dim"] = int(key_length)
    rotary = field_value(reader, f"{arch}.rope.dimension_count")
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    head_dim = config.get("head_dim") or (hidden // heads if heads and hidden else None)
    if rotary is not None and head_dim and int(rotary) < head_dim and "partial_rotary_factor" not in config:
        config["partial_rotary_factor"] = int(rotary) / head_dim
    scaling = rope_scaling_from_fields(reader)
    if scaling is UNREAD:
        log.warning("%s: its rope scaling is not one racer-tui reads (an unknown type or parts of one); "
                    "positions follow the plain rope", os.path.basename(str(getattr(reader, "path", "a GGUF"))))
    elif scaling is not None and not config.get("rope_scaling"):
        config["rope_scaling"] = scaling
        if "original_max_position_embeddings" in scaling:  # Phi-3's config keeps it beside the scaling
            config.setdefault("original_max_position_embeddings", scaling["original_max_position_embeddings"])
    return parsed


def dequantize(gguf: Path, target: Path, progress: Progress | None, reason: str, reader: Any = None) -> None:
    """Load the GGUF once in fp32, drop its quantizer and keep it as safetensors."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from racer_core.models.checkpoint.gguf_reader import open_checked

    reader = reader or open_checked(gguf)  # a damaged file or another architecture: one line, nothing copied
    if progress:
        progress(f"Dequantizing {gguf.name} for {reason} (first load only)...", None)
    try:
        with gguf_read_once(reader):
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
    except Exception as error:  # transformers raises many kinds for unreadable files
        raise ModelLoadError(f"cannot read GGUF file {gguf}: {first_line(error)}") from error
    # save_pretrained refuses a model that still carries the GGUF quantizer.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if progress:
        progress("Saving the dequantized weights to the cache...", 0.8)

    def fill(staging: Path) -> None:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)

    write_folder(gguf, target, fill)


def write_folder(gguf: Path, target: Path, fill: Callable[[Path], None], **source: Any) -> None:
    """Make the cache folder `target` for `gguf`: `fill` writes into a staging
    folder beside it, which then replaces `target` in one rename (a killed
    first load leaves no half-written model); `source` goes into its
    racer_source.json with the file's name and size."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_staging(target.parent)
    staging = Path(tempfile.mkdtemp(prefix=f"{STAGING}{os.getpid()}-", dir=target.parent))
    try:
        fill(staging)
        about = {"gguf": str(gguf), "size": gguf.stat().st_size, "key_version": KEY_VERSION, **source}
        (staging / SOURCE).write_text(json.dumps(about))
        try:
            os.replace(staging, target)
        except OSError:
            if not is_whole(target):  # else another start (a second app) made it meanwhile: use theirs
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
