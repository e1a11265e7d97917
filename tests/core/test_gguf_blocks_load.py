"""The embedded GGUF read in its blocks (the default on a CPU): the first load
writes a small folder of the parts the blocks do not give (config, tokenizer,
norms and the first layer's q, k and v for the row-order check), never the
dequantized copy, and the model it gives is the one the dequantized copy
gives, bit for bit; what needs every float tensor gets the full copy."""

from __future__ import annotations

import os

import pytest
import torch
from engine_helpers import prompt_logits
from safetensors import safe_open

from racer_core.models import gguf_blocks_cache, gguf_cache, loader
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
        patch.setattr(loader, "ensure_blocks_checkpoint", lambda gguf, progress=None: None)
        loaded = loader.load()
    assert loaded.model.folder == gguf_cache.cache_folder(embedded_gguf())
    return loaded


def test_the_first_load_writes_only_the_parts_and_gives_the_same_model(tmp_path, monkeypatch,
                                                                       full_copy_model) -> None:
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path / "fresh"))
    told: list[str] = []
    loaded = loader.load(progress=lambda text, _: told.append(text))
    gguf = embedded_gguf()
    folder = gguf_blocks_cache.blocks_folder(gguf)
    assert loaded.model.folder == folder and gguf_cache.is_whole(folder)
    assert not gguf_cache.cache_folder(gguf).exists()  # no dequantized copy on disk
    assert any("first load only" in line and "Dequantiz" not in line for line in told)
    assert describe(loaded.model.weights) == "gguf Q4_1+Q8_0"
    with safe_open(str(folder / "model.safetensors"), framework="pt") as parts:
        names = set(parts.keys())  # noqa: SIM118 (not a dict)
    qkv = {f"model.layers.0.self_attn.{p}_proj.weight" for p in "qkv"}
    assert qkv <= names and "model.norm.weight" in names and "model.layers.29.input_layernorm.weight" in names
    assert not any("mlp" in n or "o_proj" in n or "embed" in n for n in names)
    assert not any(n.startswith("model.layers.1.self_attn.") and n.endswith("_proj.weight") for n in names)
    assert sum(f.stat().st_size for f in folder.iterdir()) < 16 << 20  # against 517 MB dequantized
    assert torch.equal(_logits(loaded), _logits(full_copy_model))


def test_what_needs_every_float_tensor_gets_the_dequantized_copy(full_copy_model, monkeypatch) -> None:
    loaded = loader.load()  # the run's cache: the blocks folder
    assert gguf_blocks_cache.is_blocks_folder(loaded.model.folder)
    model = loaded.model.transformers_model()  # the `hf` and `pld` methods' model: from the full copy
    assert model.config.model_type == "llama"
    embed = model.get_input_embeddings().weight
    assert torch.equal(embed, full_copy_model.model.transformers_model().get_input_embeddings().weight)
    # Blocks whose row order fails the check cannot stand in for the folder's missing floats: the full copy.
    real = loader.read_gguf_blocks

    def swapped_rows(source, folder):
        found = real(source, folder)
        name = "model.layers.0.self_attn.q_proj.weight"
        q = found[name]
        found[name] = QuantWeight(q.file_blocks()[::-1].copy(), q.qtype, *q.shape)
        return found

    monkeypatch.setattr(loader, "read_gguf_blocks", swapped_rows)
    fallen = loader.load()
    assert fallen.model.folder == gguf_cache.cache_folder(embedded_gguf())
    assert describe(fallen.model.weights) is None  # float32 throughout: the blocks were refused
    assert os.path.isdir(fallen.model.folder)
