"""Phi-3, added as one family file (racer_core/models/families/phi3.py): its
fused checkpoint tensors are read as they are, the transformers model built
on demand shares them, and what the lean forward does not compute (longrope,
a partial rotary factor) loads through transformers with the stock forward,
lossless. Its logits and greedy equality also run with every family in
test_lean_forward.py, test_lean_model.py and test_engine_equivalence.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from engine_helpers import PROMPT, SMALL_VOCAB, run

from racer_core.common.config import DRAFTING_METHODS
from racer_core.common.events import Source
from racer_core.engine.engine import RacerEngine, load_engine
from racer_core.models.checkpoint.folder import FolderCheckpoint
from racer_core.models.lean_forward import lean_forward_for
from racer_core.models.reader import LeanModel, load_lean_model
from racer_core.testing import tiny_model, tiny_tokenizer
from racer_core.verify.kv_cache import TreeCache
from racer_core.verify.tree_attention import TreeMaskBuilder, rope_switch_of


def _save(folder: Path, **config: object) -> Path:
    model = tiny_model("phi3", seed=0)
    for key, value in config.items():
        setattr(model.config, key, value)
    model.save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def test_fused_tensors_are_read_and_shared_with_the_transformers_model(tmp_path: Path) -> None:
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    folder = _save(tmp_path / "m")
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        assert "model.layers.0.self_attn.qkv_proj.weight" in f.keys()  # noqa: SIM118 (not a dict)
    lean = load_lean_model(FolderCheckpoint(folder), "cpu", torch.float32,
                           lambda: AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval())
    assert isinstance(lean, LeanModel) and lean.family.model_type == "phi3"
    model = lean.transformers_model()
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    # The fused linears are packed for the lean forward (packed_linear.py); transformers'
    # modules get them back in the plain layout, equal to the checkpoint's fused tensors.
    own = lean.weights.layers[0]
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        assert torch.equal(attn.qkv_proj.weight, f.get_tensor("model.layers.0.self_attn.qkv_proj.weight"))
        assert torch.equal(mlp.gate_up_proj.weight, f.get_tensor("model.layers.0.mlp.gate_up_proj.weight"))
    assert torch.equal(own.qkv.plain(), attn.qkv_proj.weight) and torch.equal(own.gate_up.plain(), mlp.gate_up_proj.weight)
    ids = torch.tensor(PROMPT)
    masks = TreeMaskBuilder(torch.float32, "cpu", None)
    with torch.inference_mode():
        mine = lean.lean(ids, torch.arange(len(ids)), masks.causal(0, len(ids)), TreeCache(2))
        theirs = model(input_ids=ids[None]).logits[0]
    torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)


LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 1.0,
            "original_max_position_embeddings": 1024, "short_factor": [1.0 + 0.1 * i for i in range(8)],
            "long_factor": [1.5 + 0.25 * i for i in range(8)]}


@pytest.mark.parametrize("rope", [LONGROPE, {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}],
                         ids=["longrope", "partial rotary"])
def test_what_the_lean_forward_does_not_compute_keeps_transformers_forward(rope: dict, tmp_path: Path) -> None:
    folder = _save(tmp_path / "m", rope_parameters=rope)
    assert json.loads((folder / "config.json").read_text())["rope_parameters"]["rope_type"] == rope["rope_type"]
    assert load_lean_model(FolderCheckpoint(folder), "cpu", torch.float32, lambda: None) is None
    engine = load_engine(folder, device="cpu", dtype="float32")
    assert engine.info.forward == "stock" and lean_forward_for(engine.model) is None
    lossless = RacerEngine(engine.model, None, "tiny-phi3", eos_ids=frozenset())
    plain, _, _ = run(lossless, PROMPT, method="ar", max_new_tokens=48)
    tokens, accepted, _ = run(lossless, PROMPT, method="racer", max_new_tokens=48, max_num_draft="auto")
    assert tokens == plain and sum(accepted.values()) > 0


def test_the_rope_switch_is_read_from_the_config() -> None:
    from types import SimpleNamespace

    assert rope_switch_of(SimpleNamespace(rope_parameters=LONGROPE)) == 1024
    older = SimpleNamespace(rope_scaling={"type": "longrope"}, original_max_position_embeddings=4096)  # Phi-3-128k's config.json
    assert rope_switch_of(older) == 4096
    assert rope_switch_of(SimpleNamespace(rope_parameters={"rope_type": "default"}, original_max_position_embeddings=4096)) is None
    assert rope_switch_of(SimpleNamespace()) is None


@pytest.mark.parametrize("switch", [64, 10], ids=["in the reply", "in the prompt"])
def test_greedy_drafting_across_the_longrope_switch_equals_plain(switch: int, tmp_path: Path) -> None:
    """transformers ropes a whole pass with the long factors once its largest
    position reaches the switch; plain decoding ropes each position on its own
    side. A tree straddling it changed the reply (at token 45 here, with every
    method) until the steps just before the switch verified the root alone."""
    from transformers import AutoModelForCausalLM

    model = tiny_model("phi3", seed=0, vocab_size=SMALL_VOCAB)
    model.config.original_max_position_embeddings = switch
    model.config.rope_parameters = {**LONGROPE, "original_max_position_embeddings": switch, "short_factor": [1.0] * 8,
                                    "long_factor": [4.0 * (i + 1) for i in range(8)]}
    model.save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()  # its rotary built for longrope
    engine = RacerEngine(model, None, "tiny-phi3-longrope", eos_ids=frozenset())
    assert engine.runtime.rope_switch == switch
    plain, _, _ = run(engine, PROMPT, method="ar", max_new_tokens=96)
    assert len(PROMPT) + len(plain) > switch
    drafts = dict.fromkeys(DRAFTING_METHODS, 0)
    for method in DRAFTING_METHODS:
        for budget in ("auto", 16):
            tokens, accepted, _ = run(engine, PROMPT, method=method, max_new_tokens=96, max_num_draft=budget)
            assert tokens == plain, (method, budget)
            drafts[method] += accepted[Source.RETRIEVAL] + accepted[Source.LOGITS]
    # Drafts were verified and accepted (retrieval finds no repeats in the second model's reply).
    assert all(drafts.values()) if switch > len(PROMPT) else drafts["racer"] > 0, drafts
