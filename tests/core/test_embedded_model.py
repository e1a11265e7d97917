"""The embedded default model, end to end: load from the installed package,
cache the dequantized weights, decode losslessly with accepted drafts."""

from __future__ import annotations

import pytest
from engine_helpers import racer_and_ar_replies

from racer_core.common.events import Source
from racer_core.models.embedded import embedded_installed

pytestmark = pytest.mark.skipif(
    not embedded_installed(), reason="embedded model not installed (racer-tui install-model)"
)

PROMPT = (
    "Repeat this list exactly, then once more: apples, pears, plums, cherries, grapes, lemons, "
    "oranges, peaches, apricots, figs."
)


@pytest.fixture(scope="module")
def engine():
    from racer_core.engine.engine import load_engine

    return load_engine(dtype="float32")  # fp32: racer equals ar token for token


def test_embedded_model_loads_with_chat_template(engine) -> None:
    assert engine.info.model.startswith("SmolLM2-135M-Instruct")
    assert engine.info.device == "cpu" and engine.info.dtype == "float32"
    assert engine.tokenizer.convert_tokens_to_ids("<|im_end|>") in engine.runtime.eos_ids


def test_second_load_uses_the_safetensors_cache(engine, monkeypatch) -> None:
    from racer_core.models import loader
    from racer_core.models.checkpoint import gguf_dequantized
    from racer_core.models.embedded import embedded_gguf

    def no_second_dequantization(*args, **kwargs):
        raise AssertionError("the dequantized model should come from the cache")

    monkeypatch.setattr(gguf_dequantized, "dequantize", no_second_dequantization)
    model = loader.load().model
    folder = gguf_dequantized.cache_folder(embedded_gguf())
    assert gguf_dequantized.is_whole(folder)
    assert model.config.model_type == "llama"


def test_racer_equals_plain_greedy_on_the_embedded_model(engine) -> None:
    ar_text, racer_text, events = racer_and_ar_replies(engine, PROMPT)
    assert racer_text == ar_text
    drafted = sum(1 for e in events for p in e.pieces if p.source != Source.MODEL)
    assert drafted > 10 and len(events) < 50
    assert any(p.source == Source.RETRIEVAL for e in events for p in e.pieces)


def test_racer_equals_plain_greedy_with_fp16_weights() -> None:
    """--fp16-weights on the real model: the reply as plain decoding's, drafts accepted."""
    from racer_core.engine.engine import load_engine
    from racer_core.models.formats.half_weights import half_works
    from racer_core.models.load_options import HALF

    if not half_works():
        pytest.skip("this torch has no fbgemm fp16 linear")
    engine = load_engine(quantize=HALF)
    assert engine.info.dtype == HALF and engine.lean.half
    test_racer_equals_plain_greedy_on_the_embedded_model(engine)


def test_a_greedy_reply_on_the_embedded_model_never_imports_transformers() -> None:
    """The later-start path (docs/design.md 1.4): the dequantized checkpoint and
    its tokenizer are read without transformers, and a greedy racer reply
    needs nothing from it."""
    from engine_helpers import reply_in_a_fresh_process

    assert reply_in_a_fresh_process("") == ["False", "LeanModel", "FastTokenizer", "True"]
