"""The lean verification forward computes what the stock transformers forward
computes, on every dense family it claims, and declines the others."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_helpers import PROMPT, make_markov, run

from racer_core.common.errors import InputError
from racer_core.engine.engine import RacerEngine
from racer_core.models.families import FAMILIES as LEAN_FAMILIES
from racer_core.models.formats import packed_linear
from racer_core.models.lean_forward import lean_forward_for
from racer_core.testing import FAMILIES, tiny_model
from racer_core.verify.kv_cache import TreeCache, stock_tree_cache
from racer_core.verify.tree_attention import TreeMaskBuilder, cache_argument_name

DENSE = tuple(sorted(LEAN_FAMILIES))  # every family file in racer_core/models/families


@pytest.mark.parametrize("family", FAMILIES)
def test_lean_forward_only_for_dense_families(family: str) -> None:
    lean = lean_forward_for(tiny_model(family))
    assert (lean is not None) == (family in DENSE)


def test_lean_forward_declines_models_spread_over_devices() -> None:
    model = tiny_model("llama")
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().to("meta"))
    assert lean_forward_for(model) is None


@pytest.mark.parametrize("family", DENSE)
def test_lean_logits_match_stock_on_a_tree_after_a_prefix(family: str) -> None:
    model = tiny_model(family, seed=3)
    if family == "qwen2":  # make the q/k/v biases matter
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.q_proj.bias.normal_(0, 0.5)
                layer.self_attn.k_proj.bias.normal_(0, 0.5)
    lean = lean_forward_for(model)
    assert lean is not None
    masks = TreeMaskBuilder(torch.float32, "cpu", None)
    prefix = torch.tensor(PROMPT)
    # A tree: root, two children of the root, one grandchild under the second.
    tree = torch.tensor([7, 11, 13, 17])
    parents = [-1, 0, 0, 2]
    ancestors = np.eye(4, dtype=bool)
    for node, parent in enumerate(parents):
        while parent >= 0:
            ancestors[node, parent] = True
            parent = parents[parent]
    depths = np.array([0, 1, 1, 2])
    def stock(ids, pos, mask, cache):
        return model(input_ids=ids[None], position_ids=pos[None], attention_mask=mask, use_cache=True,
                     **{cache_argument_name(model): cache}).logits[0]

    outputs = []
    for step in (stock, lean):
        layers = model.config.num_hidden_layers
        cache = stock_tree_cache(layers) if step is stock else TreeCache(layers)  # transformers takes its own kind
        n = len(prefix)
        with torch.inference_mode():
            first = step(prefix, torch.arange(n), masks.causal(0, n), cache)
            second = step(tree, torch.from_numpy(depths) + n, masks.build(n, ancestors, depths), cache)
        outputs.append((first, second))
    for stock, lean_out in zip(*outputs, strict=True):
        torch.testing.assert_close(lean_out, stock, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", DENSE)
def test_racer_equals_plain_greedy_on_the_lean_forward(family: str) -> None:
    model = make_markov(tiny_model(family))  # the text cycles, so drafts land at every budget
    engine = RacerEngine(model, None, f"tiny-{family}-lean", eos_ids=frozenset(), forward="lean")
    assert engine.info.forward == "lean"
    assert engine.lean.packed or not packed_linear._ops_present()  # exact on the packed weights
    plain, _, _ = run(engine, PROMPT, method="ar", max_new_tokens=64)
    for budget in (4, 16, "auto"):
        tokens, accepted, _ = run(engine, PROMPT, method="racer", max_new_tokens=64, max_num_draft=budget)
        assert tokens == plain, budget
        assert sum(accepted.values()) > 0, budget  # drafts were really verified and accepted


def test_unknown_or_missing_lean_forward_is_refused() -> None:
    with pytest.raises(InputError, match="no lean forward"):
        RacerEngine(tiny_model("mixtral"), None, "tiny-mixtral", eos_ids=frozenset(), forward="lean")
    with pytest.raises(InputError, match="unknown forward"):
        RacerEngine(tiny_model("llama"), None, "x", eos_ids=frozenset(), forward="fast")


def test_auto_picks_the_lean_forward_where_the_model_has_one() -> None:
    assert RacerEngine(tiny_model("llama"), None, "tiny-llama", eos_ids=frozenset()).info.forward == "lean"
    assert RacerEngine(tiny_model("mixtral"), None, "tiny-mixtral", eos_ids=frozenset()).info.forward == "stock"


@pytest.mark.parametrize("family", ("llama", "qwen2"))
def test_racer_equals_plain_greedy_on_the_stock_forward(family: str) -> None:
    engine = RacerEngine(tiny_model(family), None, f"tiny-{family}-stock", eos_ids=frozenset(), forward="stock")
    assert engine.info.forward == "stock"
    plain, _, _ = run(engine, PROMPT, method="ar", max_new_tokens=64)
    tokens, accepted, _ = run(engine, PROMPT, method="racer", max_new_tokens=64, max_num_draft=16)
    assert tokens == plain
    assert sum(accepted.values()) > 0

