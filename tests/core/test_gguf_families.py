"""Tests that would catch a wrong weight: a tiny GGUF of each lean family
(llama, mistral, qwen2, qwen3, phi3), written with gguf's writer under
llama.cpp's tensor names and metadata keys in a Q4_K_M-like mix (Q4_K, Q6_K,
F16 and F32 tensors), loads to the model it was written from: on its blocks
within the kernel's documented error, dequantized within float32 rounding;
greedy racer equals ar on it with drafts accepted. A damaged or cut GGUF,
or one of an architecture racer-tui does not run, is refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_helpers import PROMPT, prompt_logits, run
from gguf import GGMLQuantizationType as Q
from gguf_families import FAMILIES, HEAD_DIM, LAYERS, MIXES, write_family_gguf
from quant_helpers import repacked_types, the_kernel

from racer_core.common.errors import RacerError
from racer_core.common.events import Source
from racer_core.engine.engine import RacerEngine
from racer_core.models import loader
from racer_core.models.formats.quant_weights import activations_as, describe, repacking
from racer_core.models.reader import LeanModel

the_kernel()

pytestmark = pytest.mark.usefixtures("float32_kv_cache")
FLOAT_ACTS = 1e-4  # test_quant_weights: float32 activations on the blocks' own values, of the largest logit
Q8_ACTS = 0.15
"""8-bit activations err by about 1/254 of a block's largest value per product
(test_quant_weights); through these random layers that grows to 1-9% of the
largest logit (measured), while a wrong weight errs by about the logits' size."""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _reference_logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0].float()


def _close(got: torch.Tensor, want: torch.Tensor, tolerance: float) -> None:
    error = (got - want).abs().max().item() / want.abs().max().item()
    print(f"error {error:.2e} of the largest logit")
    assert error <= tolerance


CASES = [(family, "Q4_K_M") for family in FAMILIES] + [("llama", "Q5_K_M"), ("qwen3", "Q5_K_M"), ("phi3", "Q5_0")]


@pytest.mark.parametrize(("family", "mix"), CASES)
def test_a_family_gguf_loads_to_the_model_it_was_written_from(family, mix, tmp_path, cache) -> None:
    path = tmp_path / f"tiny-{family}.{mix}.gguf"
    reference = write_family_gguf(path, family, mix=mix)
    want = _reference_logits(reference)
    with activations_as("float"):
        blocks = loader.load(path)
    assert isinstance(blocks.model, LeanModel)
    quirks = FAMILIES[family]
    head = {quirks.embed} if quirks.tied and quirks.embed != Q.F16 else set()  # a tied head: the embedding's blocks
    assert describe(blocks.model.weights) == "gguf " + "+".join(sorted(t.name for t in {*MIXES[mix], *head}))
    assert blocks.lean.fused is not None  # every layer one C++ call: q|k|v in parts where v's type is q's and k's
    _close(prompt_logits(blocks.lean, LAYERS), want, FLOAT_ACTS)
    dequantized = loader.load(path, dtype="float32")  # the whole model dequantized, float32
    assert describe(dequantized.model.weights) is None
    _close(prompt_logits(dequantized.lean, LAYERS), want, FLOAT_ACTS)
    q8 = loader.load(path)  # the default: 8-bit activations, every block type repacked (quant/repack.py)
    assert repacked_types(q8.model.weights) == ({t.name for t in MIXES[mix]} if repacking() else set())
    _close(prompt_logits(q8.lean, LAYERS), prompt_logits(dequantized.lean, LAYERS), Q8_ACTS)
    engine = RacerEngine.from_loaded(q8, eos_ids=frozenset())
    plain, _, _ = run(engine, PROMPT, method="ar", max_new_tokens=96)
    tokens, accepted, steps = run(engine, PROMPT, method="racer", max_new_tokens=96, max_num_draft=16)
    assert tokens == plain
    assert accepted[Source.RETRIEVAL] + accepted[Source.LOGITS] > 0 and steps < 96


@pytest.mark.parametrize("family", [f for f in FAMILIES if FAMILIES[f].pre != "qwen2"])  # qwen2's goes so above
def test_the_parts_made_through_transformers_give_the_same_model(family, tmp_path, cache, monkeypatch) -> None:
    """Files whose fields gguf_fields.py declines (a sentencepiece vocabulary: Phi-3's, Llama 2's) get their
    parts folder from transformers' GGUF reading: the same blocks, the same model."""
    from racer_core.models.checkpoint import gguf_parts

    monkeypatch.setattr(gguf_parts, "write_parts_from_fields", lambda gguf, target, reader: False)
    path = tmp_path / f"tiny-{family}.gguf"
    want = _reference_logits(write_family_gguf(path, family))
    with activations_as("float"):
        loaded = loader.load(path)
    assert describe(loaded.model.weights) is not None and loaded.lean.fused is not None
    _close(prompt_logits(loaded.lean, LAYERS), want, FLOAT_ACTS)


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}  # bands inside the tiny head's wavelengths
SCALINGS = [("llama", {"rope_type": "linear", "factor": 4.0}), ("qwen2", {"rope_type": "linear", "factor": 4.0}),
            ("qwen2", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512})]


@pytest.mark.parametrize(("family", "scaling"), SCALINGS, ids=["llama-linear", "qwen2-linear", "qwen2-yarn"])
def test_rope_scaling_keys_are_honoured(family, scaling, tmp_path, cache) -> None:
    """llama.cpp's rope.scaling.* keys: the model reads them, on its blocks and
    dequantized, or it would run with positions at the wrong scale (it did: the
    logits were off by their own size)."""
    path = tmp_path / f"tiny-{family}-{scaling['rope_type']}.gguf"
    want = _reference_logits(write_family_gguf(path, family, rope_scaling=scaling))
    with activations_as("float"):
        for dtype in ("auto", "float32"):
            loaded = loader.load(path, dtype=dtype)
            _close(_logits(loaded), want, FLOAT_ACTS)


def test_llama3_rope_freqs_tensor_is_read_as_its_rope(tmp_path, cache) -> None:
    """Llama 3.x GGUFs carry their rope as a rope_freqs tensor (no keys): read as the llama3 rope it was made from."""
    path = tmp_path / "tiny-llama3.gguf"
    want = _reference_logits(write_family_gguf(path, "llama", rope_scaling=LLAMA3))
    with activations_as("float"):
        for dtype in ("auto", "float32"):
            _close(_logits(loader.load(path, dtype=dtype)), want, FLOAT_ACTS)


def test_phi3_longrope_factors_are_read(tmp_path, cache) -> None:
    """Phi-3-128k's and Phi-3.5's rope_factors_long / _short tensors (its short factors apply from the first
    token): transformers' longrope forward with them (they were dropped: the plain rope ran)."""
    rng = np.random.default_rng(0)
    longrope = {"rope_type": "longrope", "short_factor": rng.uniform(1, 4, HEAD_DIM // 2).tolist(),
                "long_factor": rng.uniform(4, 16, HEAD_DIM // 2).tolist(), "original_max_position_embeddings": 64}
    path = tmp_path / "tiny-phi3-longrope.gguf"
    want = _reference_logits(write_family_gguf(path, "phi3", rope_scaling=longrope))
    with activations_as("float"):
        _close(_logits(loader.load(path)), want, FLOAT_ACTS)


def test_a_partial_rotary_dimension_is_honoured(tmp_path, cache) -> None:
    """Phi-4-mini's rope.dimension_count below the head size: transformers' forward with that rotary part
    (transformers' own GGUF config dropped it)."""
    path = tmp_path / "tiny-phi3-partial.gguf"
    want = _reference_logits(write_family_gguf(path, "phi3", rotary=0.5))
    with activations_as("float"):
        loaded = loader.load(path)
    _close(_logits(loaded), want, FLOAT_ACTS)


def _logits(loaded: loader.LoadedModel) -> torch.Tensor:
    """The lean forward's logits of PROMPT, or transformers' where the model has no lean forward (yarn)."""
    if loaded.lean is not None:
        return prompt_logits(loaded.lean, LAYERS)
    return _reference_logits(loaded.model)


def _refused(path, **fields) -> str:
    with pytest.raises(RacerError) as error:
        loader.load(path, **fields)
    message = str(error.value)
    assert "\n" not in message and path.name in message
    return message


@pytest.mark.parametrize("cut", ["header", "fields", "tensor data"])
@pytest.mark.parametrize("dtype", ["auto", "float32"])
def test_a_cut_or_damaged_gguf_gets_one_line(cut, dtype, tmp_path, cache) -> None:
    path = tmp_path / "tiny-llama.gguf"
    write_family_gguf(path, "llama")
    data = path.read_bytes()
    damaged = {"header": data[:20], "fields": data[:2000], "tensor data": data[: len(data) - 5000]}[cut]
    path.write_bytes(damaged)
    assert "damaged or cut short" in _refused(path, dtype=dtype)


def test_a_gguf_with_a_damaged_count_gets_one_line(tmp_path, cache) -> None:
    path = tmp_path / "tiny-llama.gguf"
    write_family_gguf(path, "llama")
    data = bytearray(path.read_bytes())
    data[8:16] = (1 << 40).to_bytes(8, "little")  # the tensor count, after the magic and version
    path.write_bytes(bytes(data))
    assert "damaged or cut short" in _refused(path)


@pytest.mark.parametrize("dtype", ["auto", "float32"])
def test_an_unsupported_architecture_is_refused_before_anything_is_copied(dtype, tmp_path, cache) -> None:
    path = tmp_path / "tiny-rwkv.gguf"
    write_family_gguf(path, "llama", arch="rwkv6")
    message = _refused(path, dtype=dtype)
    assert "rwkv6" in message and "llama" in message  # what it is, and what racer-tui runs
    assert not (cache / "models").exists() or not any((cache / "models").iterdir())
