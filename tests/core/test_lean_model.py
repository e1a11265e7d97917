"""A checkpoint read without transformers (racer_core/models/reader.py) computes what the
transformers model of the same folder computes, keeps the same cache keys,
builds the transformers model only when asked, and declines what it cannot
read exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from engine_helpers import PROMPT, reply_in_a_fresh_process, run

from racer_core.common.errors import InputError
from racer_core.common.events import GenerationConfig
from racer_core.engine.anchors import generate_with_transformers
from racer_core.engine.engine import RacerEngine
from racer_core.models.checkpoint.folder import FolderCheckpoint
from racer_core.models.families import FAMILIES as LEAN_FAMILIES
from racer_core.models.lean_forward import lean_forward_for
from racer_core.models.reader import LeanModel, load_lean_model
from racer_core.testing import tiny_model
from racer_core.verify.kv_cache import TreeCache
from racer_core.verify.tree_attention import TreeMaskBuilder

DENSE = tuple(sorted(LEAN_FAMILIES))  # every family file in racer_core/models/families


def _save(family: str, folder: Path, seed: int = 3, **changes) -> Path:
    model = tiny_model(family, seed=seed)
    if family == "qwen2":  # make the q/k/v biases matter
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.q_proj.bias.normal_(0, 0.5)
    for key, value in changes.items():
        setattr(model.config, key, value)
    model.save_pretrained(folder)
    return folder


def _from_transformers(folder: Path, dtype: torch.dtype = torch.float32):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()


def _logits(forward, ids: torch.Tensor, num_layers: int) -> torch.Tensor:
    masks = TreeMaskBuilder(torch.float32, "cpu", None)
    with torch.inference_mode():
        return forward(ids, torch.arange(len(ids)), masks.causal(0, len(ids)), TreeCache(num_layers))


@pytest.mark.parametrize("family", DENSE)
def test_read_without_transformers_gives_the_same_logits(family: str, tmp_path: Path) -> None:
    folder = _save(family, tmp_path / family)
    lean = load_lean_model(FolderCheckpoint(folder), "cpu", torch.float32, lambda: _from_transformers(folder))
    assert lean is not None
    reference = _from_transformers(folder)
    ids = torch.tensor(PROMPT)
    layers = reference.config.num_hidden_layers
    expected = _logits(lean_forward_for(reference), ids, layers)
    assert torch.equal(_logits(lean.lean, ids, layers), expected)  # the same weights, the same operations
    # The same cache keys as the transformers model: parameter count and architectures.
    assert sum(p.numel() for p in lean.parameters()) == sum(p.numel() for p in reference.parameters())
    assert lean.config.to_dict()["architectures"] == reference.config.to_dict()["architectures"]


@pytest.mark.parametrize("rope", [
    {"rope_type": "linear", "factor": 2.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 64},
])
def test_scaled_ropes_match_transformers(rope: dict, tmp_path: Path) -> None:
    folder = _save("llama", tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    config["rope_parameters"] = {**config["rope_parameters"], **rope}
    (folder / "config.json").write_text(json.dumps(config))
    lean = load_lean_model(FolderCheckpoint(folder), "cpu", torch.float32, lambda: None)
    assert lean is not None
    reference = _from_transformers(folder)
    torch.testing.assert_close(lean.weights.inv_freq, reference.model.rotary_emb.inv_freq.float())


def test_sharded_checkpoints_load(tmp_path: Path) -> None:
    model = tiny_model("llama", seed=1)
    model.save_pretrained(tmp_path, max_shard_size="100KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    lean = load_lean_model(FolderCheckpoint(tmp_path), "cpu", torch.float32, lambda: None)
    assert lean is not None
    ids = torch.tensor(PROMPT)
    assert torch.equal(_logits(lean.lean, ids, 2), _logits(lean_forward_for(_from_transformers(tmp_path)), ids, 2))


def _edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("case", [
    "remote code", "quantized", "dynamic rope", "sliding window layers", "unknown tensor", "no tie field",
    "no safetensors", "moe family", "damaged config",
])
def test_declines_what_it_cannot_read_exactly(case: str, tmp_path: Path) -> None:
    family = {"sliding window layers": "qwen2", "moe family": "mixtral"}.get(case, "llama")
    folder = _save(family, tmp_path / "m")
    if case == "remote code":
        _edit_config(folder, auto_map={"AutoModelForCausalLM": "x.Y"})
    elif case == "quantized":
        _edit_config(folder, quantization_config={"quant_method": "bitsandbytes"})
    elif case == "dynamic rope":
        _edit_config(folder, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    elif case == "sliding window layers":
        _edit_config(folder, use_sliding_window=True)
    elif case == "unknown tensor":
        from safetensors.torch import load_file, save_file

        tensors = load_file(folder / "model.safetensors")
        tensors["model.layers.0.self_attn.o_proj.bias"] = torch.zeros(64)
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    elif case == "no tie field":
        config = json.loads((folder / "config.json").read_text())
        del config["tie_word_embeddings"]
        (folder / "config.json").write_text(json.dumps(config))
    elif case == "no safetensors":
        (folder / "model.safetensors").unlink()
    elif case == "damaged config":
        (folder / "config.json").write_text("{not json")
    assert load_lean_model(FolderCheckpoint(folder), "cpu", torch.float32, lambda: None) is None


def test_transformers_model_is_built_on_demand_and_shares_the_weights(tmp_path: Path) -> None:
    folder = _save("qwen2", tmp_path / "m")
    built = []

    def build():
        built.append(1)
        return _from_transformers(folder)

    lean = load_lean_model(FolderCheckpoint(folder), "cpu", torch.float32, build)
    engine = RacerEngine(lean, None, "tiny-qwen2", eos_ids=frozenset())
    assert engine.info.forward == "lean" and not built
    plain, _, _ = run(engine, PROMPT, method="ar", max_new_tokens=32)
    assert not built  # decoding never needs the transformers model
    model = engine.model
    assert built == [1] and engine.model is model  # built once
    layer, own = model.model.layers[0], lean.weights.layers[0]
    ptr = lambda t: t.untyped_storage().data_ptr()  # noqa: E731
    assert ptr(layer.input_layernorm.weight) == ptr(own.input_norm)  # shared, not copied
    # The linears are packed for the lean forward (packed_linear.py); transformers'
    # modules get the plain layout once, q/k/v as views of one fused tensor.
    attn = layer.self_attn
    assert ptr(attn.q_proj.weight) == ptr(attn.k_proj.weight) == ptr(attn.v_proj.weight)
    ids = torch.tensor(PROMPT)
    with torch.inference_mode():
        stock = model(input_ids=ids[None]).logits[0]
    torch.testing.assert_close(_logits(lean.lean, ids, 2), stock, rtol=1e-4, atol=1e-4)
    steps = generate_with_transformers(engine, PROMPT, GenerationConfig(method="hf", max_new_tokens=32), None)
    assert [t for step in steps for t in step.tokens] == plain  # transformers' generate on the shared weights


@pytest.mark.parametrize("family", DENSE)
def test_racer_equals_plain_greedy_on_a_model_read_without_transformers(family: str, tmp_path: Path) -> None:
    folder = _save(family, tmp_path / family, seed=0)
    lean = load_lean_model(FolderCheckpoint(folder), "cpu", torch.float32, lambda: _from_transformers(folder))
    engine = RacerEngine(lean, None, f"tiny-{family}", eos_ids=frozenset())
    plain, _, _ = run(engine, PROMPT, method="ar", max_new_tokens=64)
    tokens, accepted, _ = run(engine, PROMPT, method="racer", max_new_tokens=64, max_num_draft="auto")
    assert tokens == plain
    assert sum(accepted.values()) > 0


def test_stock_forward_is_refused_for_a_lean_model(tmp_path: Path) -> None:
    folder = _save("llama", tmp_path / "m")
    lean = load_lean_model(FolderCheckpoint(folder), "cpu", torch.float32, lambda: None)
    assert isinstance(lean, LeanModel)
    with pytest.raises(InputError, match="stock"):
        RacerEngine(lean, None, "tiny", eos_ids=frozenset(), forward="stock")


def test_load_engine_reads_a_llama_folder_without_importing_transformers(tmp_path: Path) -> None:
    """A greedy reply on a checkpoint folder never imports transformers (the
    later-start path); the tokenizer here is the tiny test one, saved."""
    from racer_core.testing import tiny_tokenizer

    folder = _save("llama", tmp_path / "m", seed=0)
    tiny_tokenizer().save_pretrained(folder)
    words = reply_in_a_fresh_process(f"{str(folder)!r}, dtype='float32'")
    assert words == ["False", "LeanModel", "FastTokenizer", "True"]
