"""Model loading errors are one clear line, never a traceback."""

from __future__ import annotations

import pytest

from racer_core.common.errors import ModelLoadError
from racer_core.models import loader
from racer_core.verify.tree_attention import sliding_window_of


def test_resolve_is_the_one_model_path_check(tmp_path) -> None:
    """Every front end (picker, command lines) gets these words, before anything loads."""
    cases = {"missing": "model path does not exist", "": "no config.json"}
    for name, words in cases.items():
        with pytest.raises(ModelLoadError, match=words):
            loader.resolve(tmp_path / name)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ModelLoadError, match="neither a checkpoint folder nor a .gguf file"):
        loader.resolve(tmp_path / "notes.txt")
    (tmp_path / "m.gguf").write_bytes(b"NOPE")
    with pytest.raises(ModelLoadError, match="does not start with the GGUF header"):
        loader.resolve(tmp_path / "m.gguf")
    (tmp_path / "ok.gguf").write_bytes(b"GGUF\x03\x00")
    assert loader.resolve(f"  {tmp_path / 'ok.gguf'} ") == loader.ModelSource("ok", tmp_path, "ok.gguf")
    (tmp_path / "config.json").write_text("{}")
    assert loader.resolve(tmp_path).folder == tmp_path


def test_corrupt_gguf_body(tmp_path) -> None:
    f = tmp_path / "broken.gguf"
    f.write_bytes(b"GGUF but nothing after the header")
    with pytest.raises(ModelLoadError, match="cannot read GGUF"):
        loader.load(f)


def test_not_a_causal_lm(tmp_path) -> None:
    from transformers import ViTConfig

    ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="not a causal language model"):
        loader.load(tmp_path)


def test_bad_device_and_dtype() -> None:
    with pytest.raises(ModelLoadError, match="unknown device"):
        loader.resolve_device("tpu")
    with pytest.raises(ModelLoadError, match="unknown dtype"):
        loader.resolve_dtype("int3", "cpu")


def test_auto_dtype_is_bf16_on_cuda_and_on_cpus_with_native_bf16(tmp_path, monkeypatch) -> None:
    import torch

    from racer_core.budget.cpu_class import ISA_ENV

    for name in ISA_ENV["avx2"]:  # the flags decide, unless the libraries are limited (RACER_TEST_ISA, --isa)
        monkeypatch.delenv(name, raising=False)
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile\n")
    assert loader.cpu_has_native_bf16(info)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert not loader.cpu_has_native_bf16(info)  # limited to the AVX2 class: bf16 is not native there
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    info.write_text("flags\t: fpu sse2 avx2 avx512f avx512_vnni\n")
    assert not loader.cpu_has_native_bf16(info)
    assert not loader.cpu_has_native_bf16(tmp_path / "missing")  # not Linux: fp32
    monkeypatch.setattr(loader, "cpu_has_native_bf16", lambda: False)
    assert loader.resolve_dtype("auto", "cpu") == torch.float32
    assert loader.resolve_dtype("auto", "cuda") == torch.bfloat16
    monkeypatch.setattr(loader, "cpu_has_native_bf16", lambda: True)
    assert loader.resolve_dtype("auto", "cpu") == torch.bfloat16
    assert loader.resolve_dtype("float32", "cpu") == torch.float32  # always available


def test_hybrid_sliding_window_is_refused() -> None:
    from transformers import Qwen2Config

    config = Qwen2Config(num_hidden_layers=4, use_sliding_window=True, sliding_window=16, max_window_layers=2)
    with pytest.raises(ModelLoadError, match="mixes sliding-window and full attention"):
        sliding_window_of(config)


def test_uniform_sliding_window_is_used() -> None:
    from transformers import MistralConfig

    assert sliding_window_of(MistralConfig(sliding_window=32)) == 32
    assert sliding_window_of(MistralConfig(sliding_window=None)) is None


def test_checkpoint_folder_roundtrip(tmp_path) -> None:
    from racer_core.engine.engine import RacerEngine
    from racer_core.testing import tiny_model, tiny_tokenizer

    tiny_model("llama").save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    loaded = loader.load(tmp_path, dtype="float32", forward="stock")
    assert loaded.processor is None and loaded.lean is None
    engine = RacerEngine.from_loaded(loaded)
    assert engine.info.device == "cpu" and engine.info.dtype == "float32" and loaded.name == tmp_path.name
    assert engine.info.forward == "stock"
