"""The sized random GGUF (racer_core/bench/sized_gguf.py, scripts/sized_gguf.py): random
blocks of every kernel type at the spread asked for, llama.cpp's choice of types in each
mix, and a written file that the loader reads in its blocks, at its shape, with the
tokenizer its fields were copied from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf import quants  # noqa: E402
from gguf_families import write_tokenizer_fields  # noqa: E402

from racer_core.bench.sized_gguf import (  # noqa: E402
    BLOCKS,
    PRESETS,
    Shape,
    random_blocks,
    random_k_blocks,
    tensor_types,
    use_more_bits,
    write_sized_gguf,
)

TINY = Shape(hidden=256, layers=8, ffn=512, heads=4, kv_heads=2)


@pytest.mark.parametrize("qtype", sorted(BLOCKS))
def test_random_blocks_spread_as_asked_around_zero(qtype: int) -> None:
    values = quants.dequantize(random_blocks(qtype, 64, 512, np.random.default_rng(qtype), std=0.02), Q(qtype))
    assert values.shape == (64, 512) and np.isfinite(values).all()
    assert 0.015 < values.std() < 0.027
    assert abs(values.mean()) < 0.005


def test_random_k_blocks_are_the_kernel_tests_any_bytes_blocks() -> None:
    blocks = random_k_blocks(14, 3, 512, np.random.default_rng(0))
    d = blocks.reshape(-1, 210)[:, 208:210].copy().view(np.float16).astype(np.float32)
    assert blocks.shape == (3, 2 * 210) and ((d >= 1e-3) & (d <= 0.05)).all()
    with pytest.raises(ValueError, match="no K type"):
        random_k_blocks(3, 1, 256, np.random.default_rng(0))
    with pytest.raises(ValueError, match="no whole number"):
        random_blocks(12, 1, 300, np.random.default_rng(0))


@pytest.mark.parametrize(("mix", "main"), [("q4_k_m", Q.Q4_K), ("q5_k_m", Q.Q5_K)])
def test_k_m_mixes_give_half_the_layers_q6_k_for_attn_v_and_ffn_down(mix: str, main: Q) -> None:
    """llama.cpp's Q4_K_M and Q5_K_M share the rule (llama-quant.cpp); only the main type differs."""
    shape = PRESETS["0.8b"]
    types = tensor_types(shape, mix)
    more = [layer for layer in range(shape.layers) if types[f"blk.{layer}.attn_v.weight"] == Q.Q6_K]
    assert more == [0, 1, 4, 7, 10, 13, 14, 15] == [i for i in range(16) if use_more_bits(i, 16)]
    assert all(types[f"blk.{i}.ffn_down.weight"] == (Q.Q6_K if i in more else main) for i in range(16))
    assert {types[f"blk.{i}.{n}.weight"] for i in range(16) for n in ("attn_q", "attn_k", "ffn_up")} == {main}
    assert types["token_embd.weight"] == Q.Q6_K


def test_q4_1_head_is_q8_0_where_its_width_is_no_whole_k_block() -> None:
    embedded_width = Shape(hidden=576, layers=1, ffn=1536, heads=9, kv_heads=3)
    assert tensor_types(embedded_width, "q4_1")["token_embd.weight"] == Q.Q8_0
    assert tensor_types(PRESETS["0.8b"], "q4_1")["token_embd.weight"] == Q.Q6_K
    assert set(tensor_types(PRESETS["0.8b"], "q4_1").values()) == {Q.Q4_1, Q.Q6_K}
    for mix in ("q4_k_m", "q5_k_m"):
        with pytest.raises(ValueError, match="multiples of 256"):
            tensor_types(embedded_width, mix)


def test_q8_0_is_q8_0_throughout_the_head_too() -> None:
    assert set(tensor_types(PRESETS["0.8b"], "q8_0").values()) == {Q.Q8_0}


@pytest.mark.parametrize(("shape", "words"), [
    (Shape(256, 2, 512, 3, 1), "must split into --heads"),
    (Shape(256, 2, 512, 4, 3), "must split into --heads"),
    (Shape(0, 2, 512, 4, 2), "at least 1"),
    (Shape(96, 2, 500, 4, 2), "multiples of 32"),
])
def test_a_shape_no_llama_has_is_refused_in_one_line(shape: Shape, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        shape.check()


@pytest.fixture(scope="module")
def tokenizer_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GGUF holding only the tiny tokenizer's fields (the embedded model's stand-in: a small vocabulary)."""
    return fields_only_gguf(tmp_path_factory.mktemp("tokenizer") / "tokenizer.gguf", write_tokenizer_fields)


def fields_only_gguf(path: Path, fill=lambda writer: None) -> Path:
    """A GGUF with no tensors, its fields as `fill` adds them."""
    writer = gguf.GGUFWriter(str(path), "llama")
    fill(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_tokenizer_source_without_tokens_is_refused(tmp_path: Path) -> None:
    empty = fields_only_gguf(tmp_path / "empty.gguf")
    with pytest.raises(ValueError, match="has no tokenizer.ggml.tokens"):
        write_sized_gguf(tmp_path / "out.gguf", TINY, "q4_1", empty)
    assert not (tmp_path / "out.gguf").exists()


@pytest.mark.parametrize(("mix", "quant"), [("q4_1", "gguf Q4_1+Q6_K"), ("q4_k_m", "gguf Q4_K+Q6_K"),
                                           ("q5_k_m", "gguf Q5_K+Q6_K"), ("q8_0", "gguf Q8_0")])
def test_a_written_file_loads_in_its_blocks_at_its_shape(mix: str, quant: str, tokenizer_gguf: Path,
                                                         tmp_path: Path) -> None:
    from quant_helpers import the_kernel

    from racer_core.models.loader import load
    from racer_core.testing import tiny_tokenizer
    from racer_core.verify.kv_cache import TreeCache

    the_kernel()
    written = write_sized_gguf(tmp_path / f"sized-{mix}.gguf", TINY, mix, tokenizer_gguf)
    vocab = len(tiny_tokenizer()) + 1  # the fields add "<think>"
    linears = sum(rows * cols for layer in range(TINY.layers) for rows, cols in TINY.linears(layer).values())
    assert written.params == linears + vocab * TINY.hidden + (2 * TINY.layers + 1) * TINY.hidden
    assert written.types["F32"] == 2 * TINY.layers + 1 and written.bytes == written.path.stat().st_size
    loaded = load(written.path, device="cpu")
    lean = loaded.lean
    assert lean is not None and lean.quant == quant and lean.fused is not None
    config = loaded.model.config
    assert (config.hidden_size, config.num_hidden_layers, config.intermediate_size) == (256, 8, 512)
    assert (config.num_attention_heads, config.num_key_value_heads, config.vocab_size) == (4, 2, vocab)
    text = "hello world"
    assert loaded.tokenizer.encode(text) == tiny_tokenizer().encode(text)
    with torch.inference_mode():
        logits = lean(torch.arange(5), torch.arange(5), torch.full((5, 5), float("-inf")).triu(1)[None, None],
                      TreeCache(TINY.layers))
    assert logits.shape == (5, vocab) and bool(torch.isfinite(logits).all())
    assert 0.3 < float(logits.std()) < 3  # noise at a trained model's scale: neither vanishing nor blown up
