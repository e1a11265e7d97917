"""Linear weights stored in float16 for fbgemm, multiplied in float32
(half_weights.py, --fp16-weights): the probe, row independence, logits
close to the fp32 model's with the weights rounded, greedy drafting equal
to plain decoding with drafts accepted, the transformers anchors on the
same rounded weights, and one-line refusals."""

from __future__ import annotations

import pytest
import torch
from engine_helpers import PROMPT, SMALL_VOCAB, make_markov, prompt_logits, run

from racer_core.common.errors import ModelLoadError
from racer_core.engine.engine import RacerEngine
from racer_core.models.families import family_of
from racer_core.models.formats import half_weights
from racer_core.models.formats.half_rows import ALL_EVEN, RowCounts
from racer_core.models.formats.half_weights import HalfWeight, half_works
from racer_core.models.lean_forward import LeanForward, weights_from_model
from racer_core.models.load_options import HALF, LoadOptions, check_half
from racer_core.models.loader import LoadedModel, choose_forward
from racer_core.testing import tiny_model

pytestmark = pytest.mark.skipif(not half_works(), reason="this torch has no fbgemm fp16 linear")

TOLERANCE = 1e-4
"""Largest logit difference from F.linear on the rounded weights (the two sum in different orders)."""


def _rounded(model) -> None:
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("proj.weight") or name.endswith("lm_head.weight"):
                param.copy_(param.half().float())


def test_a_half_weight_keeps_rows_apart_and_gives_its_float16_values_back() -> None:
    w = torch.randn(40, 24)
    weight = HalfWeight(w)
    assert torch.equal(weight.plain(), w.half().float())
    x = torch.randn(1, 7, 24)
    x[0, 3] *= 100
    full = weight(x)
    assert torch.allclose(full, x @ w.half().float().t(), atol=1e-4, rtol=1e-4)
    bias = torch.randn(40)
    assert torch.allclose(weight(x, bias), full + bias)


def test_a_row_gets_the_same_bits_alone_and_beside_any_number_of_others() -> None:
    # fbgemm's AVX2 kernels for 1 and 2 rows sum in another order: calls are padded (half_rows.py)
    gen = torch.Generator().manual_seed(9)
    weight = HalfWeight(torch.randn(48, 576, generator=gen))
    x = torch.randn(1, 150, 576, generator=gen)
    alone = torch.cat([weight(x[:, i : i + 1]) for i in range(150)], dim=1)
    for rows in (*range(2, 40), 61, 62, 64, 65, 127, 150):
        assert torch.equal(weight(x[:, :rows]), alone[:, :rows]), rows


def test_padded_rows_get_cost_curves_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # a curve stored before the padding (a cheaper one-row step) must not be reused with it
    model = tiny_model("llama", seed=5)
    lean = LeanForward(weights_from_model(model, family_of(model.config)), half=True)
    monkeypatch.setattr(half_weights, "row_counts", lambda: ALL_EVEN)
    unpadded = lean.cost_identity()
    monkeypatch.setattr(half_weights, "row_counts", lambda: RowCounts((0, 3, 3, 3), 3, exact=True))
    assert lean.cost_identity() == [*unpadded, "fp16 rows padded"]


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_half_logits_match_the_fp32_forward_on_rounded_weights(family: str) -> None:
    model = tiny_model(family, seed=5)
    half = LeanForward(weights_from_model(model, family_of(model.config)), half=True)
    assert half.half and not half.packed and isinstance(half.weights.lm_head, HalfWeight)
    _rounded(model)
    plain = LeanForward(weights_from_model(model, family_of(model.config)), pack=False)
    layers = model.config.num_hidden_layers
    a, b = prompt_logits(half, layers), prompt_logits(plain, layers)
    assert (a - b).abs().max() <= TOLERANCE
    assert torch.equal(a.argmax(-1), b.argmax(-1))


def _half_engine(family: str) -> RacerEngine:
    model = make_markov(tiny_model(family, 0, vocab_size=SMALL_VOCAB))
    loaded = LoadedModel(model, None, None, f"tiny-{family}", choose_forward(model, "auto", half=True))
    return RacerEngine.from_loaded(loaded, eos_ids=frozenset())


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_greedy_drafting_with_half_weights_equals_plain(family: str) -> None:
    engine = _half_engine(family)
    assert engine.info.dtype == HALF
    plain, _, _ = run(engine, PROMPT, method="ar", max_new_tokens=48)
    for method in ("racer", "recycling"):
        tokens, accepted, _ = run(engine, PROMPT, method=method, max_new_tokens=48)
        assert tokens == plain, method
        assert sum(accepted.values()) > 0, f"{method} accepted no drafts"


def test_the_transformers_model_sees_the_rounded_weights() -> None:
    """The hf and pld anchors run transformers' modules: on a tied model its
    head must be the embedding rounded to float16 too, as the lean head is."""
    from racer_core.models.reader import share_weights

    model = tiny_model("llama", 3, vocab_size=SMALL_VOCAB)
    model.lm_head.weight = model.model.embed_tokens.weight  # tied, as SmolLM2's are
    family = family_of(model.config)
    lean = LeanForward(weights_from_model(model, family), half=True)
    share_weights(model, lean.weights, family)
    assert model.lm_head.weight is not model.model.embed_tokens.weight
    ids = torch.tensor([PROMPT])
    with torch.inference_mode():
        stock = model(input_ids=ids).logits[0]
    assert (stock - prompt_logits(lean, model.config.num_hidden_layers)).abs().max() <= TOLERANCE


@pytest.mark.parametrize(("options", "device", "says"), [
    (LoadOptions(quantize=HALF), "cuda", "is for CPUs"),
    (LoadOptions(quantize=HALF, dtype="bfloat16"), "cpu", "drop --dtype"),
    (LoadOptions(quantize=HALF, forward="stock"), "cpu", "--forward stock"),
])
def test_refused_in_one_line(options: LoadOptions, device: str, says: str) -> None:
    with pytest.raises(ModelLoadError, match=says) as error:
        check_half(options, device)
    assert "\n" not in str(error.value)
