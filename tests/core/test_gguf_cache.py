"""The dequantized-GGUF cache: found by the file's content wherever it is
installed, a damaged copy moved aside and made again, and one parse of the
GGUF per dequantize."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from racer_core.models.checkpoint import gguf_dequantized
from racer_core.models.embedded import embedded_installed

MIB = 1 << 20


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fake_gguf(path, size=5 * MIB, seed=1):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + random.Random(seed).randbytes(size - 4))
    return path


def whole_checkpoint(folder, tensors=None):
    """A minimal folder is_whole accepts: a config and one safetensors file."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    save_file(tensors or {"w": torch.arange(1000, dtype=torch.float32)}, str(folder / "model.safetensors"))
    return folder


def test_the_same_file_in_a_second_environment_uses_the_same_folder(tmp_path, cache) -> None:
    first = fake_gguf(tmp_path / "venv1" / "site-packages" / "m.Q4.gguf")
    second = tmp_path / "venv2" / "site-packages" / "m.Q4.gguf"
    second.parent.mkdir(parents=True)
    shutil.copyfile(first, second)
    assert gguf_dequantized.cache_folder(first) == gguf_dequantized.cache_folder(second)
    assert gguf_dequantized.cache_folder(first).parent == cache / "models"


def test_another_file_gets_another_folder(tmp_path, cache) -> None:
    base = fake_gguf(tmp_path / "a" / "m.gguf")
    longer = fake_gguf(tmp_path / "b" / "m.gguf", size=5 * MIB + 1)
    other_head = fake_gguf(tmp_path / "c" / "m.gguf", seed=2)
    # A change deep in the tensor data, inside one of the sampled blocks.
    deep = tmp_path / "d" / "m.gguf"
    deep.parent.mkdir()
    data = bytearray(base.read_bytes())
    data[gguf_dequantized.HEAD + 10] ^= 0xFF
    deep.write_bytes(bytes(data))
    folders = {gguf_dequantized.cache_folder(p) for p in (base, longer, other_head, deep)}
    assert len(folders) == 4


def test_is_whole_catches_a_truncated_or_missing_file(tmp_path) -> None:
    folder = whole_checkpoint(tmp_path / "ok")
    assert gguf_dequantized.is_whole(folder)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-100])  # a full disk cut the copy short
    assert not gguf_dequantized.is_whole(folder)
    weights.write_bytes(data[:5])  # not even the header length
    assert not gguf_dequantized.is_whole(folder)
    weights.write_bytes(data)
    (folder / "config.json").write_text("{not json")
    assert not gguf_dequantized.is_whole(folder)
    (folder / "config.json").unlink()
    assert not gguf_dequantized.is_whole(folder)
    assert not gguf_dequantized.is_whole(tmp_path / "missing")


def test_a_damaged_copy_is_moved_aside_and_made_again(tmp_path, cache, monkeypatch) -> None:
    gguf = fake_gguf(tmp_path / "m.gguf")
    folder = whole_checkpoint(gguf_dequantized.cache_folder(gguf))
    (folder / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")  # cut short
    made, told = [], []
    monkeypatch.setattr(gguf_dequantized, "dequantize", lambda g, target, *_: made.append(whole_checkpoint(target)))
    assert gguf_dequantized.ensure_dequantized(gguf, lambda text, _: told.append(text), reason="a test") == folder
    assert made == [folder] and gguf_dequantized.is_whole(folder)
    aside = [p for p in folder.parent.iterdir() if ".damaged-" in p.name]
    assert len(aside) == 1 and (aside[0] / "config.json").is_file()  # kept, not deleted
    assert "damaged" in told[0] and aside[0].name in told[0]
    # A whole copy is used as it is.
    assert gguf_dequantized.ensure_dequantized(gguf, reason="a test") == folder and len(made) == 1


def test_gguf_read_once_shares_one_reader_and_name_table_then_restores_them(tmp_path) -> None:
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "t.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    reader_class, name_map, parse = gguf.GGUFReader, gguf.get_tensor_name_map, gguf_utils.load_gguf_checkpoint
    with gguf_dequantized.gguf_read_once():
        from gguf import GGUFReader, get_tensor_name_map  # as transformers imports them, at call time

        assert GGUFReader(str(path)) is GGUFReader(path)
        assert get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
        assert gguf_utils.load_gguf_checkpoint is not parse
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader_class, name_map)
    assert gguf_utils.load_gguf_checkpoint is parse


@pytest.mark.skipif(not embedded_installed(), reason="embedded model not installed (racer-tui install-model)")
def test_transformers_parses_the_embedded_gguf_once_inside_the_block(monkeypatch) -> None:
    from transformers import AutoConfig
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    from racer_core.models.checkpoint import gguf_reader
    from racer_core.models.embedded import embedded_gguf

    built, parsed = [], []
    real, parse = gguf_reader.MappedReader, gguf_utils.load_gguf_checkpoint
    monkeypatch.setattr(gguf_reader, "MappedReader", lambda *a, **k: built.append(a) or real(*a, **k))
    monkeypatch.setattr(gguf_utils, "load_gguf_checkpoint", lambda *a, **k: parsed.append(a) or parse(*a, **k))
    path = embedded_gguf()
    with gguf_dequantized.gguf_read_once():
        configs = [AutoConfig.from_pretrained(path.parent, gguf_file=path.name) for _ in range(2)]
    # as the config, tokenizer and weights loads each read the file: read once, its fields parsed once
    assert len(built) == 1 and len(parsed) == 1
    assert configs[0].to_dict() == configs[1].to_dict()


def test_a_killed_dequantize_leaves_no_lasting_staging_folder(tmp_path) -> None:
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f"{gguf_dequantized.STAGING}{int(gone.stdout)}-abc"
    alive = tmp_path / f"{gguf_dequantized.STAGING}{os.getpid()}-def"
    for folder in (dead, alive):
        whole_checkpoint(folder)
    gguf_dequantized.remove_abandoned_staging(tmp_path)
    assert not dead.exists() and alive.exists()


def test_a_damaged_blocks_folder_is_moved_aside_and_made_again(tmp_path, cache, monkeypatch) -> None:
    from racer_core.models.checkpoint import gguf_parts

    gguf = fake_gguf(tmp_path / "m.gguf")
    folder = whole_checkpoint(gguf_parts.blocks_folder(gguf))
    assert folder.name == gguf_dequantized.cache_folder(gguf).name + "-blocks"
    (folder / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")  # cut short
    made, told = [], []
    monkeypatch.setattr(gguf_parts, "write_parts_from_fields", lambda g, target, reader: False)  # fields declined
    monkeypatch.setattr(gguf_parts, "write_blocks_checkpoint", lambda g, target, reader: bool(made.append(whole_checkpoint(target))) or True)
    assert gguf_parts.ensure_blocks_checkpoint(gguf, None, lambda text, _: told.append(text)) == folder
    assert made == [folder] and gguf_dequantized.is_whole(folder)
    aside = [p for p in folder.parent.iterdir() if ".damaged-" in p.name]
    assert len(aside) == 1 and "damaged" in told[0] and aside[0].name in told[0]
    assert gguf_parts.ensure_blocks_checkpoint(gguf, None) == folder and len(made) == 1  # a whole one is used as it is
    assert not gguf_dequantized.cache_folder(gguf).exists()  # no dequantized copy was made


def test_blocks_folder_refusals_fall_back_to_the_dequantized_copy(tmp_path, cache, monkeypatch, caplog) -> None:
    import logging

    from racer_core.models.checkpoint import gguf_parts

    gguf = fake_gguf(tmp_path / "m.gguf")
    monkeypatch.setattr(gguf_parts, "write_parts_from_fields", lambda g, target, reader: False)  # fields declined
    # another family's names: no folder, quietly
    monkeypatch.setattr(gguf_parts, "write_blocks_checkpoint", lambda g, target, reader: False)
    assert gguf_parts.ensure_blocks_checkpoint(gguf, None) is None
    # a file transformers' reader will not take this way: one line, then the full copy
    def refuse(g, target, reader):
        raise KeyError("general.architecture")

    monkeypatch.setattr(gguf_parts, "write_blocks_checkpoint", refuse)
    with caplog.at_level(logging.WARNING):
        assert gguf_parts.ensure_blocks_checkpoint(gguf, None) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "dequantizing it whole" in lines[0] and "general.architecture" in lines[0]
    assert not gguf_parts.blocks_folder(gguf).exists()
