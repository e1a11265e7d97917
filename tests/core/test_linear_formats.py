"""The Linear protocol (formats/linear.py): every weight format offers it and
multiplies as F.linear on its own values; the format is chosen once
(formats/choose.py); the lean forward calls whatever Linear it holds."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from engine_helpers import prompt_logits

from racer_core.models.families import family_of
from racer_core.models.formats import packed_linear
from racer_core.models.formats.choose import format_for, with_format
from racer_core.models.formats.half_weights import HalfWeight, half_works
from racer_core.models.formats.linear import PlainLinear
from racer_core.models.formats.packed_linear import PackedWeight, packing_works
from racer_core.models.formats.quant_weights import kernel_isa
from racer_core.models.lean_forward import LeanForward, weights_from_model
from racer_core.testing import tiny_model


def _formats() -> list[tuple[str, object]]:
    """One weight of each format this machine runs, all of (64, 64) values."""
    w = torch.randn(64, 64, generator=torch.Generator().manual_seed(3))
    found: list[tuple[str, object]] = [("plain", PlainLinear(w))]
    if packed_linear._ops_present() and packing_works(torch.float32):
        found.append(("packed", PackedWeight(w)))
    if half_works():
        found.append(("fp16", HalfWeight(w)))
    if kernel_isa() is not None:
        pytest.importorskip("gguf")
        from gguf import GGMLQuantizationType as Q
        from quant_helpers import quant_weight

        from racer_core.models.formats.quant_weights import QuantParts

        # float activations: the blocks' own values times x (q8 rounds x to 8 bits first)
        found.append(("Q4_1", quant_weight(w, Q.Q4_1, "float")))
        found.append(("Q4_1+Q8_0", QuantParts([quant_weight(w[:32], Q.Q4_1, "float"),
                                               quant_weight(w[32:], Q.Q8_0, "float")])))
    return found


def test_every_format_offers_the_protocol_and_multiplies_its_own_values() -> None:
    x = torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(4))
    bias = torch.randn(64, generator=torch.Generator().manual_seed(5))
    for kind, w in _formats():
        assert w.kind == kind
        assert w.block_types == (frozenset(kind.split("+")) if kind[0] == "Q" else frozenset())
        assert (w.acts is None) == (kind[0] != "Q")
        assert tuple(w.shape) == (64, 64) and w.numel() == 64 * 64
        assert w.dtype == torch.float32 and w.device.type == "cpu"
        values = w.plain()
        assert values.shape == (64, 64)
        torch.testing.assert_close(w(x, bias), F.linear(x, values, bias), rtol=1e-4, atol=1e-4, msg=kind)
    plain = _formats()[0][1]
    assert plain.plain() is plain.weight  # the tensor itself, shared
    ids = torch.tensor([[3, 0], [63, 3]])
    assert torch.equal(plain.rows(ids), plain.weight[ids])


def _tied_model():
    from transformers import AutoModelForCausalLM

    from racer_core.testing import tiny_config

    torch.manual_seed(5)
    config = tiny_config("llama")
    config.tie_word_embeddings = True
    return AutoModelForCausalLM.from_config(config).eval()


def test_the_format_is_chosen_once_and_a_prepared_one_stays() -> None:
    model = _tied_model()
    weights = weights_from_model(model, family_of(model.config))
    assert model.config.tie_word_embeddings and weights.lm_head is weights.embed  # tied: one linear, counted once
    assert sum(t.numel() for t in weights.tensors()) == sum(p.numel() for p in model.parameters())
    assert with_format(weights, format_for(False, False, "cpu")) is weights  # nothing changes
    assert format_for(True, True, "cpu") is HalfWeight
    assert format_for(False, True, "meta") is PlainLinear  # packing is for the CPU only
    if not (packed_linear._ops_present() and packing_works(torch.float32)):
        pytest.skip("this torch has no oneDNN packed linear")
    packed = with_format(weights, format_for(False, True, "cpu"))
    assert all(w.kind == "packed" for w in packed.linears())
    assert packed.embed is weights.embed and packed.embed.kind == "plain"  # the tied head packed beside the embedding
    assert with_format(packed, HalfWeight) is packed  # prepared already: kept as it is


class _Counted:
    """A format the forward has never seen: F.linear on a plain tensor, counting its calls."""

    kind, block_types, acts = "counted", frozenset(), None

    def __init__(self, inner: PlainLinear, calls: list[str], name: str) -> None:
        self.inner, self.calls, self.name = inner, calls, name
        self.shape, self.dtype, self.device = inner.shape, inner.dtype, inner.device

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        self.calls.append(self.name)
        return self.inner(x, bias)

    def numel(self) -> int:
        return self.inner.numel()

    def plain(self) -> torch.Tensor:
        return self.inner.plain()


def test_the_forward_calls_any_linear_it_holds() -> None:
    model = tiny_model("qwen2", seed=5)
    weights = weights_from_model(model, family_of(model.config))
    calls: list[str] = []
    names = ("qkv", "o", "gate_up", "down")
    counted = replace(weights, lm_head=_Counted(weights.lm_head, calls, "head"), layers=[
        replace(layer, **{n: _Counted(getattr(layer, n), calls, n) for n in names}) for layer in weights.layers])
    lean, plain = LeanForward(counted), LeanForward(weights, pack=False)
    assert lean.weights is counted  # not a plain linear: no format chosen over it
    layers = model.config.num_hidden_layers
    assert torch.equal(prompt_logits(lean, layers), prompt_logits(plain, layers))
    assert calls == [*names * layers, "head"] * 2  # two passes


def test_a_model_all_in_blocks_never_probes_packing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The packing probe starts oneDNN (memory, load time): only a plain weight asks for it."""
    pytest.importorskip("gguf")
    if kernel_isa() is None:
        pytest.skip("the 4-bit kernel does not run on this CPU")
    from gguf import GGMLQuantizationType as Q
    from quant_helpers import quantized_lean

    from racer_core.models.formats import choose

    def refuse(dtype: torch.dtype) -> bool:
        raise AssertionError("packing probed for a model with no plain linear")

    monkeypatch.setattr(choose, "packing_works", refuse)
    lean, _ = quantized_lean(tiny_model("llama", seed=5), Q.Q8_0)
    assert not lean.packed and lean.quant == "gguf Q8_0"
