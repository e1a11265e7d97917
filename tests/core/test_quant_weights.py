"""A GGUF's block weights in the lean forward (formats/quant_weights.py,
models/checkpoint/gguf_blocks.py): logits close to the float32 forward on the same
dequantized values, rows the same alone and beside others, greedy drafting
equal to plain decoding with drafts accepted for every block type, tiny GGUF
files read into the right checkpoint names and row order, and one log line
for the tensors of types the kernel lacks."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from engine_helpers import PROMPT, SMALL_VOCAB, make_markov, prompt_logits, run

from racer_core.bench.sized_gguf import random_k_blocks
from racer_core.engine.engine import RacerEngine
from racer_core.models.families import family_of
from racer_core.models.formats.quant_weights import QuantWeight, describe, kernel_isa, repacking
from racer_core.models.lean_forward import weights_from_model
from racer_core.models.loader import LoadedModel
from racer_core.testing import tiny_model

gguf = pytest.importorskip("gguf")
from gguf import quants  # noqa: E402
from quant_helpers import (  # noqa: E402
    permute_for_llama_cpp,
    quant_weight,
    quantized_lean,
    repacked_types,
    wide_tiny_model,
    write_gguf,
)

pytestmark = [pytest.mark.skipif(kernel_isa() is None, reason="the 4-bit kernel does not run on this CPU"),
              pytest.mark.usefixtures("float32_kv_cache")]
Q = gguf.GGMLQuantizationType
TYPES = {"Q4_0": Q.Q4_0, "Q4_1": Q.Q4_1, "Q5_0": Q.Q5_0, "Q5_1": Q.Q5_1, "Q8_0": Q.Q8_0, "Q4_K": Q.Q4_K,
         "Q5_K": Q.Q5_K, "Q6_K": Q.Q6_K}


_quant = quant_weight


def _quantized_model(family: str, qtype: Q, markov: bool = False, acts: str | None = None):
    """A tiny model whose linears are replaced by their `qtype` values, a lean
    forward multiplying with the blocks themselves (activations as `acts`), and
    a plain one on the same values."""
    k_type = qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K)  # 256-value blocks: rows of 256 and 512
    model = wide_tiny_model(family, 0, SMALL_VOCAB) if k_type else tiny_model(family, 0, vocab_size=SMALL_VOCAB)
    if markov:
        make_markov(model)
    return (model, *quantized_lean(model, qtype, acts))


@pytest.mark.parametrize("name", sorted(TYPES))
def test_block_logits_match_the_float32_forward_on_the_same_values(name: str) -> None:
    model, blocks, plain = _quantized_model("llama", TYPES[name], acts="float")
    assert blocks.quant == f"gguf {name}" and not blocks.packed
    layers = model.config.num_hidden_layers
    a, b = prompt_logits(blocks, layers), prompt_logits(plain, layers)
    assert (a - b).abs().max() <= 1e-4
    assert torch.equal(a.argmax(-1), b.argmax(-1))


@pytest.mark.parametrize("name", sorted(TYPES))
def test_with_8_bit_activations_the_logits_stay_near_the_float32_forward(name: str) -> None:
    """The default multiplies activations quantized per 32-block (llama.cpp's
    arithmetic): close to the float32 forward, not equal to it."""
    model, blocks, plain = _quantized_model("llama", TYPES[name], acts="q8")
    layers = model.config.num_hidden_layers
    a, b = prompt_logits(blocks, layers), prompt_logits(plain, layers)
    gap = (a - b).abs().max() / b.abs().max()
    assert 0 < gap <= 0.1  # random tiny models: a few per cent of the largest logit


def test_the_activation_mode_defaults_to_q8_and_is_checked(monkeypatch) -> None:
    from racer_core.models.formats.quant_weights import ACTS_ENV

    plain = torch.randn(8, 64)
    assert _quant(plain, Q.Q4_1).acts == "q8"
    monkeypatch.setenv(ACTS_ENV, "float")
    assert _quant(plain, Q.Q4_1).acts == "float"
    assert QuantWeight.stack([_quant(plain, Q.Q4_1), _quant(plain, Q.Q4_1)]).acts == "float"
    monkeypatch.setenv(ACTS_ENV, "int4")
    with pytest.raises(ValueError, match="expected one of q8, float"):
        _quant(plain, Q.Q4_1)
    from racer_core.models.formats.quant_weights import activations_as

    monkeypatch.setenv(ACTS_ENV, "float")
    with activations_as("q8"):  # a model loaded inside takes q8; the setting before comes back
        assert _quant(plain, Q.Q4_1).acts == "q8"
    assert _quant(plain, Q.Q4_1).acts == "float"


@pytest.mark.parametrize("acts", ["q8", "float"])
def test_a_quant_weight_keeps_rows_apart_and_takes_a_bias(acts: str) -> None:
    w = _quant(torch.randn(40, 64), Q.Q4_1, acts)
    x = torch.randn(1, 7, 64)
    x[0, 3] *= 1000
    full = w(x)
    alone = torch.cat([w(x[:, i : i + 1]) for i in range(7)], dim=1)
    assert torch.equal(alone, full)
    want = x @ w.plain().t()
    tolerance = 1e-4 if acts == "float" else 2e-2  # 8-bit activations: about 1/254 of a block's largest value
    assert torch.allclose(full, want, atol=tolerance * want.abs().max().item(), rtol=0)
    bias = torch.randn(40)
    assert torch.equal(w(x, bias), full + bias)
    assert w.shape == (40, 64) and w.numel() == 40 * 64
    ids = torch.tensor([[3, 0, 39, 3]])
    assert torch.equal(w.rows(ids), w.plain()[ids])  # an embedding looked up in its blocks


@pytest.mark.parametrize(("family", "name", "acts"), [("llama", "Q4_1", "q8"), ("llama", "Q4_0", "q8"),
                                                      ("qwen2", "Q8_0", "q8"), ("qwen3", "Q4_1", "q8"),
                                                      ("llama", "Q4_K", "q8"), ("qwen2", "Q6_K", "q8"),
                                                      ("llama", "Q4_1", "float"), ("qwen2", "Q8_0", "float"),
                                                      ("llama", "Q4_K", "float")])
def test_greedy_drafting_on_block_weights_equals_plain(family: str, name: str, acts: str) -> None:
    model, lean, _ = _quantized_model(family, TYPES[name], markov=True, acts=acts)
    engine = RacerEngine.from_loaded(LoadedModel(model, None, None, f"tiny-{family}", lean), eos_ids=frozenset())
    assert engine.info.dtype == f"gguf {name}"
    repackable = acts == "q8" and repacking()  # every block type the kernel reads is repacked
    assert repacked_types(lean.weights) == ({name} if repackable else set())  # the default kernel (RACER_QUANT_REPACK=0: none)
    plain, _, _ = run(engine, PROMPT, method="ar", max_new_tokens=48)
    for method in ("racer", "recycling"):
        tokens, accepted, _ = run(engine, PROMPT, method=method, max_new_tokens=48)
        assert tokens == plain, method
        assert sum(accepted.values()) > 0, f"{method} accepted no drafts"


def test_a_gguf_is_read_into_checkpoint_names_and_row_order(tmp_path: Path, caplog) -> None:
    from racer_core.models.checkpoint.gguf_blocks import log_left_out, read_blocks
    from racer_core.models.checkpoint.gguf_reader import open_reader

    rng = np.random.default_rng(0)
    heads, kv_heads, d, hidden = 4, 2, 16, 64
    q = rng.standard_normal((heads * d, hidden)).astype(np.float32)
    k = rng.standard_normal((kv_heads * d, hidden)).astype(np.float32)
    v = rng.standard_normal((kv_heads * d, hidden)).astype(np.float32)
    down = rng.standard_normal((hidden, 256)).astype(np.float32)
    down_k, head_k = random_k_blocks(14, hidden, 256, rng), random_k_blocks(12, 96, 256, rng)
    path = tmp_path / "tiny.gguf"
    write_gguf(path, {
        "blk.0.attn_q.weight": (permute_for_llama_cpp(q, heads), Q.Q4_1), "blk.0.attn_k.weight": (permute_for_llama_cpp(k, kv_heads), Q.Q4_0),
        "blk.0.attn_v.weight": (v, Q.Q8_0), "blk.0.attn_norm.weight": (np.ones((1, hidden)), Q.F32),
        "blk.0.ffn_down.weight": (down_k, Q.Q6_K), "output.weight": (head_k, Q.Q4_K),
        "blk.0.ffn_gate.weight": (down, Q.Q3_K), "blk.0.ffn_up.weight": (down, Q.IQ4_XS),
    })
    family = family_of(type("C", (), {"model_type": "llama"})())
    found = read_blocks(open_reader(path).tensors, "llama", family, 1, heads, kv_heads)
    names = {"model.layers.0.self_attn.q_proj.weight": (q, Q.Q4_1),
             "model.layers.0.self_attn.k_proj.weight": (k, Q.Q4_0),
             "model.layers.0.self_attn.v_proj.weight": (v, Q.Q8_0),
             "model.layers.0.mlp.down_proj.weight": (down_k, Q.Q6_K), "lm_head.weight": (head_k, Q.Q4_K)}
    assert set(found.weights) == set(names)
    for name, (values, qtype) in names.items():  # the checkpoint's row order, the file's values
        blocks = values if values.dtype == np.uint8 else quants.quantize(values, qtype)
        want = quants.dequantize(blocks, qtype)
        assert torch.equal(found.weights[name].plain(), torch.from_numpy(want)), name
    assert found.weights["lm_head.weight"].shape == (96, 256)
    assert found.left_out == ["blk.0.ffn_gate.weight (Q3_K)", "blk.0.ffn_up.weight (IQ4_XS)"]
    with caplog.at_level(logging.WARNING):
        log_left_out(found)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "2 tensors dequantized to float32" in lines[0] and "Q3_K" in lines[0]


def test_weights_without_blocks_describe_as_none() -> None:
    model = tiny_model("llama", 0, vocab_size=SMALL_VOCAB)
    assert describe(weights_from_model(model, family_of(model.config))) is None
