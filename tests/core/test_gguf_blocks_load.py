"""The embedded GGUF read in its blocks (the default on a CPU): the first load
writes a small folder of the parts the blocks do not give (config, tokenizer
and norms, from the file's own fields and tensors, without transformers),
never the dequantized copy, and the model it gives is the one the
dequantized copy gives, bit for bit; what needs every float tensor gets the
full copy."""

from __future__ import annotations

import json
import os

import pytest
import torch
from engine_helpers import prompt_logits
from safetensors import safe_open

from racer_core.models import loader
from racer_core.models.checkpoint import gguf_blocks, gguf_dequantized, gguf_parts
from racer_core.models.embedded import embedded_gguf, embedded_installed
from racer_core.models.formats.quant_weights import QuantWeight, describe, kernel_isa

pytestmark = [
    pytest.mark.skipif(not embedded_installed(), reason="embedded model not installed (racer-tui install-model)"),
    pytest.mark.skipif(kernel_isa() is None, reason="the 4-bit kernel does not run on this CPU"),
]


def _logits(loaded: loader.LoadedModel) -> torch.Tensor:
    return prompt_logits(loaded.lean, loaded.model.config.num_hidden_layers)


@pytest.fixture(scope="module")
def full_copy_model() -> loader.LoadedModel:
    """The default load as it was: the blocks over the dequantized copy (the run's shared cache)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf_parts, "cached_parts", lambda gguf, progress=None: None)
        patch.setattr(gguf_parts, "ensure_blocks_checkpoint", lambda gguf, reader, progress=None: None)
        loaded = loader.load()
    assert loaded.model.folder == gguf_dequantized.cache_folder(embedded_gguf())
    return loaded


def test_the_first_load_writes_only_the_parts_and_gives_the_same_model(tmp_path, monkeypatch,
                                                                       full_copy_model) -> None:
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path / "fresh"))
    told: list[str] = []
    loaded = loader.load(progress=lambda text, _: told.append(text))
    gguf = embedded_gguf()
    folder = gguf_parts.blocks_folder(gguf)
    assert loaded.model.folder == folder and gguf_dequantized.is_whole(folder)
    assert not gguf_dequantized.cache_folder(gguf).exists()  # no dequantized copy on disk
    assert any("first load only" in line and "Dequantiz" not in line for line in told)
    assert describe(loaded.model.weights) == "gguf Q4_1+Q8_0"
    with safe_open(str(folder / "model.safetensors"), framework="pt") as parts:
        names = set(parts.keys())  # noqa: SIM118 (not a dict)
    norms = {"model.norm.weight"} | {f"model.layers.{i}.{n}.weight" for i in range(30)
                                     for n in ("input_layernorm", "post_attention_layernorm")}
    assert names == norms  # every linear is in the file's blocks
    assert json.loads((folder / "racer_source.json").read_text())["made_by"] == "gguf fields"
    assert sum(f.stat().st_size for f in folder.iterdir()) < 16 << 20  # against 517 MB dequantized
    # The full copy's load checked the blocks' row order against transformers' floats and kept them:
    # the same blocks over the parts read from the file's fields give its logits bit for bit.
    assert describe(full_copy_model.model.weights) == "gguf Q4_1+Q8_0"
    assert torch.equal(_logits(loaded), _logits(full_copy_model))
    # A later load takes the blocks where the parts folder's tensor table says they lie: no second parse.
    from racer_core.models.checkpoint import gguf_reader

    monkeypatch.setattr(gguf_reader, "MappedReader", None)  # parsing the file now would fail
    later = loader.load()
    assert later.model.folder == folder and torch.equal(_logits(later), _logits(loaded))


def test_what_needs_every_float_tensor_gets_the_dequantized_copy(full_copy_model, monkeypatch) -> None:
    loaded = loader.load()  # the run's cache: the blocks folder
    assert gguf_parts.is_blocks_folder(loaded.model.folder)
    model = loaded.model.transformers_model()  # the `hf` and `pld` methods' model: from the full copy
    assert model.config.model_type == "llama"
    embed = model.get_input_embeddings().weight
    assert torch.equal(embed, full_copy_model.model.transformers_model().get_input_embeddings().weight)
    # Blocks whose row order fails the check against transformers' floats (the full copy's) are refused: float32.
    monkeypatch.setattr(gguf_parts, "cached_parts", lambda gguf, progress=None: None)
    monkeypatch.setattr(gguf_parts, "ensure_blocks_checkpoint", lambda gguf, reader, progress=None: None)
    real = gguf_blocks.blocks_of

    def swapped_rows(tensors, arch, config, file_name):
        found = real(tensors, arch, config, file_name)
        name = "model.layers.0.self_attn.q_proj.weight"
        q = found[name]
        found[name] = QuantWeight(q.file_blocks()[::-1].copy(), q.qtype, *q.shape)
        return found

    monkeypatch.setattr(gguf_blocks, "blocks_of", swapped_rows)
    fallen = loader.load()
    assert fallen.model.folder == gguf_dequantized.cache_folder(embedded_gguf())
    assert describe(fallen.model.weights) is None  # float32 throughout: the blocks were refused
    assert os.path.isdir(fallen.model.folder)


def test_a_first_start_on_the_blocks_never_imports_transformers(tmp_path, monkeypatch) -> None:
    """The parts folder made from the GGUF's own fields: config, tokenizer and norms without transformers."""
    from engine_helpers import reply_in_a_fresh_process

    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path / "fresh"))
    assert reply_in_a_fresh_process("") == ["False", "LeanModel", "FastTokenizer", "True"]
    assert gguf_parts.blocks_folder(embedded_gguf()).exists()


def test_a_later_load_takes_the_blocks_without_importing_gguf(tmp_path, monkeypatch) -> None:
    """A later start maps the file where the parts folder's tensor table says: gguf's reader (its import
    0.05 s of CPU) is for the first load's parse only."""
    import subprocess
    import sys

    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path / "fresh"))
    loader.load()  # the first load: the parts folder and its tensor table
    script = ("import sys\n"
              "from racer_core.models import loader\n"
              "loaded = loader.load()\n"
              "print([m for m in ('gguf', 'transformers') if m in sys.modules], type(loaded.model).__name__)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["[]", "LeanModel"]
