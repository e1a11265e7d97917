"""Linear weights packed once for oneDNN (packed_linear.py): the lean forward
uses them where the probe passes, computes the same logits as with F.linear
(within PACKED_TOLERANCE, same argmax), and falls back to F.linear with one
log line when the ops are missing or disagree."""

from __future__ import annotations

import logging

import pytest
import torch
from engine_helpers import prompt_logits

from racer_core.models.families import family_of
from racer_core.models.formats import packed_linear
from racer_core.models.formats.packed_linear import PackedWeight, packing_works
from racer_core.models.lean_forward import LeanForward, LeanWeights, weights_from_model
from racer_core.testing import tiny_model

DENSE = ("llama", "mistral", "qwen2", "qwen3")
PACKED_TOLERANCE = 1e-4
"""Largest |packed - F.linear| logit difference allowed in fp32 (the two sum in different orders)."""


@pytest.fixture(autouse=True)
def _fresh_probe():
    packing_works.cache_clear()
    yield
    packing_works.cache_clear()


def _weights(model) -> LeanWeights:
    return weights_from_model(model, family_of(model.config))


@pytest.mark.skipif(not packed_linear._ops_present(), reason="this torch has no oneDNN packed linear")
@pytest.mark.parametrize("family", DENSE)
def test_packed_logits_match_f_linear(family: str) -> None:
    model = tiny_model(family, seed=5)
    weights = _weights(model)
    packed, unpacked = LeanForward(weights), LeanForward(weights, pack=False)
    assert packed.packed and not unpacked.packed
    assert isinstance(packed.weights.layers[0].qkv, PackedWeight) and isinstance(packed.weights.lm_head, PackedWeight)
    layers = model.config.num_hidden_layers
    a, b = prompt_logits(packed, layers), prompt_logits(unpacked, layers)
    assert (a - b).abs().max() <= PACKED_TOLERANCE
    assert torch.equal(a.argmax(-1), b.argmax(-1))


@pytest.mark.skipif(not packed_linear._ops_present(), reason="this torch has no oneDNN packed linear")
def test_packed_weight_gives_the_plain_weight_back_and_bf16_where_native() -> None:
    w = torch.randn(40, 24)
    assert torch.equal(PackedWeight(w).plain(), w)
    assert packing_works(torch.float32)
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        assert not packing_works(torch.bfloat16)  # emulated bf16 stays on F.linear
    assert not packing_works(torch.float16)


def test_falls_back_to_f_linear_when_the_ops_disagree(monkeypatch, caplog) -> None:
    monkeypatch.setattr(packed_linear, "_ops_present", lambda: True)
    monkeypatch.setattr(packed_linear, "_reorder", lambda w: w.clone())
    monkeypatch.setattr(packed_linear, "_multiply", lambda x, w, b: 2 * torch.nn.functional.linear(x, w, b))
    model = tiny_model("llama", seed=5)
    weights = _weights(model)
    with caplog.at_level(logging.WARNING, logger="racer_core.models.formats.packed_linear"):
        forward = LeanForward(weights)
        LeanForward(weights)  # checked once per dtype: one line in the log
    assert not forward.packed and forward.weights is weights
    assert len([r for r in caplog.records if "failed its check" in r.getMessage()]) == 1
    layers = model.config.num_hidden_layers
    assert torch.equal(prompt_logits(forward, layers), prompt_logits(LeanForward(weights, pack=False), layers))


def test_falls_back_to_f_linear_when_the_ops_are_missing(monkeypatch, caplog) -> None:
    monkeypatch.setattr(packed_linear, "_ops_present", lambda: False)
    with caplog.at_level(logging.WARNING, logger="racer_core.models.formats.packed_linear"):
        forward = LeanForward(_weights(tiny_model("qwen2", seed=5)))
    assert not forward.packed
    assert any("no oneDNN packed linear" in r.getMessage() for r in caplog.records)


def test_packing_can_be_turned_off(monkeypatch) -> None:
    monkeypatch.setenv(packed_linear.DISABLE_ENV, "0")
    assert not LeanForward(_weights(tiny_model("llama", seed=5))).packed


def test_a_call_of_more_rows_than_one_path_takes_goes_in_parts() -> None:
    # On AMX CPUs oneDNN multiplies bf16 calls of over 32 rows on the tile unit, in
    # another order; the probe finds that count and larger calls go in parts of it.
    # Forced here (most = 3) so every CPU runs the parts: each row's bits as in a call of its own.
    gen = torch.Generator().manual_seed(3)
    weight = PackedWeight(torch.randn(24, 40, generator=gen))
    x = torch.randn(1, 11, 40, generator=gen)
    whole = weight(x)
    weight.most = 3
    parts = weight(x)
    assert torch.equal(parts, torch.cat([weight(x[:, i : i + 3]) for i in range(0, 11, 3)], dim=1))
    torch.testing.assert_close(parts, whole)
    assert parts.shape == whole.shape
    if weight.pad:  # a lone last part goes as two, as any lone row
        assert torch.equal(parts[:, 9:], weight(x[:, 9:]))
