"""The embedded model on its own Q4_1/Q8_0 blocks (the default on a CPU):
read from the GGUF, named in the engine's info, and greedy racer equal to
ar with drafts accepted; `--dtype float32` keeps the dequantized path."""

from __future__ import annotations

import pytest
from engine_helpers import racer_and_ar_replies

from racer_core.common.events import Source
from racer_core.models.embedded import embedded_installed
from racer_core.models.formats.quant_weights import QuantWeight, kernel_isa

pytestmark = [
    pytest.mark.skipif(not embedded_installed(), reason="embedded model not installed (racer-tui install-model)"),
    pytest.mark.skipif(kernel_isa() is None, reason="the 4-bit kernel does not run on this CPU"),
]

PROMPT = (
    "Repeat this list exactly, then once more: apples, pears, plums, cherries, grapes, lemons, "
    "oranges, peaches, apricots, figs."
)


@pytest.fixture(scope="module")
def engine():
    from racer_core.engine.engine import load_engine

    return load_engine(device="cpu")


def test_the_default_on_a_cpu_multiplies_the_files_blocks(engine) -> None:
    assert engine.info.dtype == "gguf Q4_1+Q8_0"
    weights = engine.lean.weights
    assert all(isinstance(w, QuantWeight) for layer in weights.layers for w in (layer.qkv, layer.o, layer.gate_up,
                                                                                 layer.down))
    assert isinstance(weights.lm_head, QuantWeight) and weights.lm_head.type_name == "Q8_0"
    assert weights.embed is weights.lm_head  # tied: one Q8_0 copy, rows dequantized as looked up


def test_racer_equals_plain_greedy_on_the_blocks(engine) -> None:
    ar_text, racer_text, events = racer_and_ar_replies(engine, PROMPT)
    assert racer_text == ar_text
    drafted = sum(1 for e in events for p in e.pieces if p.source != Source.MODEL)
    assert drafted > 10


def test_dtype_float32_keeps_the_dequantized_path() -> None:
    from racer_core.models.load_options import LoadOptions
    from racer_core.models.loader import gguf_blocks_wanted, resolve

    source = resolve(None)
    assert gguf_blocks_wanted(source, LoadOptions(), "cpu") == (True, "")
    assert gguf_blocks_wanted(source, LoadOptions(dtype="float32"), "cpu") == (False, "--dtype float32")
    assert gguf_blocks_wanted(source, LoadOptions(), "cuda") == (False, "the device cuda")
    assert gguf_blocks_wanted(source, LoadOptions(quantize="fp16-weights"), "cpu") == (False, "--fp16-weights")
