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
from engine_helpers import PROMPT, run

from racer_core.engine import RacerEngine, load_engine
from racer_core.kv_cache import TreeCache
from racer_core.models.lean_forward import lean_forward_for
from racer_core.models.reader import LeanModel, load_lean_model
from racer_core.testing import tiny_model, tiny_tokenizer
from racer_core.tree_attention import TreeMaskBuilder


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
    lean = load_lean_model(folder, "cpu", torch.float32,
                           lambda: AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval())
    assert isinstance(lean, LeanModel) and lean.family.model_type == "phi3"
    model = lean.transformers_model()
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    assert attn.qkv_proj.weight.data_ptr() == lean.weights.layers[0].qkv.data_ptr()
    assert mlp.gate_up_proj.weight.data_ptr() == lean.weights.layers[0].gate_up.data_ptr()
    ids = torch.tensor(PROMPT)
    masks = TreeMaskBuilder(torch.float32, "cpu", None)
    with torch.inference_mode():
        mine = lean.lean(ids, torch.arange(len(ids)), masks.causal(0, len(ids)), TreeCache(2))
        theirs = model(input_ids=ids[None]).logits[0]
    torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)


# The switch to the long factors lies past this test's positions: a tree that
# straddles it is verified with the long factors for all its nodes, where plain
# decoding uses the short ones up to the switch (docs/design.md, the families).
LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 1.0,
            "original_max_position_embeddings": 1024, "short_factor": [1.0 + 0.1 * i for i in range(8)],
            "long_factor": [1.5 + 0.25 * i for i in range(8)]}


@pytest.mark.parametrize("rope", [LONGROPE, {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}],
                         ids=["longrope", "partial rotary"])
def test_what_the_lean_forward_does_not_compute_keeps_transformers_forward(rope: dict, tmp_path: Path) -> None:
    folder = _save(tmp_path / "m", rope_parameters=rope)
    assert json.loads((folder / "config.json").read_text())["rope_parameters"]["rope_type"] == rope["rope_type"]
    assert load_lean_model(folder, "cpu", torch.float32, lambda: None) is None
    engine = load_engine(folder, device="cpu", dtype="float32")
    assert engine.info.forward == "stock" and lean_forward_for(engine.model) is None
    lossless = RacerEngine(engine.model, None, "tiny-phi3", eos_ids=frozenset())
    plain, _, _ = run(lossless, PROMPT, method="ar", max_new_tokens=48)
    tokens, accepted, _ = run(lossless, PROMPT, method="racer", max_new_tokens=48, max_num_draft="auto")
    assert tokens == plain and sum(accepted.values()) > 0
