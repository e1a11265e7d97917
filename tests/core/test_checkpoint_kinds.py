"""Each kind of checkpoint (racer_core/models/checkpoint/) gives the loader
and the reader the same things: its name and where it lives, its config and
tokenizer, float tensors by checkpoint name and quantized linears in their
blocks; a damaged GGUF is refused in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from racer_core.common.errors import ModelLoadError
from racer_core.models.checkpoint.folder import FolderCheckpoint
from racer_core.models.checkpoint.hub import open_hub
from racer_core.testing import tiny_model, tiny_tokenizer

gguf = pytest.importorskip("gguf")
from gguf import quants  # noqa: E402
from quant_helpers import Q, permute_for_llama_cpp, write_gguf  # noqa: E402

from racer_core.models.checkpoint.gguf_file import GGUFCheckpoint  # noqa: E402
from racer_core.models.checkpoint.gguf_reader import open_reader  # noqa: E402

Q_PROJ = "model.layers.0.self_attn.q_proj.weight"
O_PROJ = "model.layers.1.self_attn.o_proj.weight"


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Path, dict[str, torch.Tensor]]:
    """A tiny Llama checkpoint folder (config, safetensors, tokenizer) and its tensors."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    model = tiny_model("llama", seed=5)
    model.save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _config_and_tokenizer_agree(checkpoint, folder: Path) -> None:
    from transformers import AutoTokenizer

    assert checkpoint.config.model_type == "llama" and checkpoint.config.num_hidden_layers == 2
    text = "def f(x):\n    return x  # 中文 🙂"
    expected = AutoTokenizer.from_pretrained(folder).encode(text)
    assert checkpoint.tokenizer().encode(text) == expected


def test_a_folder_gives_its_config_tokenizer_and_tensors(saved) -> None:
    folder, tensors = saved
    checkpoint = FolderCheckpoint(folder)
    assert (checkpoint.name, checkpoint.path, checkpoint.folder) == (folder.name, folder, folder)
    _config_and_tokenizer_agree(checkpoint, folder)
    assert checkpoint.float_names() == set(tensors)
    assert torch.equal(checkpoint.tensor(Q_PROJ), tensors[Q_PROJ])
    assert checkpoint.blocks(Q_PROJ) is None and checkpoint.block_names() == set()
    with pytest.raises(KeyError):
        checkpoint.tensor("model.layers.9.mlp.up_proj.weight")


def test_a_hub_id_is_its_cached_folder_named_by_the_id(saved, monkeypatch) -> None:
    from racer_core.models import hub

    folder, tensors = saved
    cached = open_hub("org/tiny", folder)
    assert (cached.name, cached.path) == ("org/tiny", folder)
    fetched: list[str] = []
    monkeypatch.setattr(hub, "download", lambda hub_id, progress=None: fetched.append(hub_id) or folder)
    downloaded = open_hub("org/tiny", None)  # not in the cache: downloaded now
    assert fetched == ["org/tiny"] and downloaded.path == folder
    assert torch.equal(downloaded.tensor(O_PROJ), tensors[O_PROJ])


def _tiny_gguf(path: Path, tensors: dict[str, torch.Tensor]) -> Path:
    """q of layer 0 (in llama.cpp's row order) and o of layer 1 as Q8_0 blocks, a norm as F32."""
    q = tensors[Q_PROJ].numpy()
    write_gguf(path, {"blk.0.attn_q.weight": (permute_for_llama_cpp(q, 4), Q.Q8_0),
                      "blk.1.attn_output.weight": (tensors[O_PROJ].numpy(), Q.Q8_0),
                      "output_norm.weight": (tensors["model.norm.weight"].numpy()[None], Q.F32)})
    return path


def _as_blocks(values: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(quants.dequantize(quants.quantize(values.numpy(), Q.Q8_0), Q.Q8_0))


def test_a_gguf_gives_its_blocks_in_checkpoint_order_and_the_folder_the_rest(saved, tmp_path) -> None:
    folder, tensors = saved
    parts = tmp_path / "parts"
    parts.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (parts / name).write_bytes((folder / name).read_bytes())
    from safetensors.torch import save_file

    save_file({"model.norm.weight": tensors["model.norm.weight"]}, str(parts / "model.safetensors"))
    path = _tiny_gguf(tmp_path / "tiny.Q8_0.gguf", tensors)
    checkpoint = GGUFCheckpoint(path, parts, use_blocks=True)
    assert (checkpoint.name, checkpoint.path, checkpoint.folder) == ("tiny.Q8_0", path, parts)
    _config_and_tokenizer_agree(checkpoint, folder)
    assert checkpoint.block_names() == {Q_PROJ, O_PROJ}
    q = checkpoint.blocks(Q_PROJ)
    assert q is not None and q.qtype == Q.Q8_0 and q.shape == tuple(tensors[Q_PROJ].shape)
    assert torch.equal(q.plain(), _as_blocks(tensors[Q_PROJ]))  # the checkpoint's row order again
    assert torch.equal(checkpoint.tensor(O_PROJ), _as_blocks(tensors[O_PROJ]))  # only in blocks: dequantized
    assert torch.equal(checkpoint.tensor("model.norm.weight"), tensors["model.norm.weight"])
    assert checkpoint.blocks("model.norm.weight") is None
    assert GGUFCheckpoint(path, parts, use_blocks=False).block_names() == set()  # the dequantized path


def test_a_parts_folder_made_before_the_tensor_table_gets_one(saved, tmp_path, monkeypatch) -> None:
    """Its next loads take the blocks from the table, without parsing the file."""
    import json

    from safetensors.torch import save_file

    from racer_core.models.checkpoint import gguf_reader

    folder, tensors = saved
    parts = tmp_path / "tiny-0123-blocks"  # a parts folder's name (gguf_parts.SUFFIX)
    parts.mkdir()
    (parts / "config.json").write_bytes((folder / "config.json").read_bytes())
    save_file({"model.norm.weight": tensors["model.norm.weight"]}, str(parts / "model.safetensors"))
    (parts / "racer_source.json").write_text(json.dumps({"gguf": "tiny.gguf", "size": 1}))
    path = _tiny_gguf(tmp_path / "tiny.gguf", tensors)
    parsed = GGUFCheckpoint(path, parts, use_blocks=True).blocks(O_PROJ)
    assert "tensor_table" in json.loads((parts / "racer_source.json").read_text())
    monkeypatch.setattr(gguf_reader, "MappedReader", None)  # parsing the file now would fail
    mapped = GGUFCheckpoint(path, parts, use_blocks=True).blocks(O_PROJ)
    assert mapped is not None and mapped.qtype == parsed.qtype and torch.equal(mapped.plain(), parsed.plain())


@pytest.mark.parametrize("cut_at", [lambda n: n // 2, lambda n: n - 1, lambda n: 40],
                         ids=["half", "the last byte", "inside the header"])
def test_a_damaged_gguf_is_refused_in_one_line(saved, tmp_path, cut_at) -> None:
    from racer_core.models import loader

    _, tensors = saved
    whole = _tiny_gguf(tmp_path / "whole.gguf", tensors).read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: cut_at(len(whole))])
    with pytest.raises(ModelLoadError) as refused:
        open_reader(cut)
    message = str(refused.value)
    assert "\n" not in message and str(cut) in message and "damaged or cut short" in message
    from racer_core.models.formats.quant_weights import kernel_isa

    if kernel_isa() is not None:  # the default load parses the file first: the same line
        with pytest.raises(ModelLoadError) as loading:
            loader.load(cut, device="cpu")
        assert str(loading.value) == message


def test_the_embedded_model_is_a_gguf_checkpoint_under_its_own_name() -> None:
    from racer_core.models.embedded import EMBEDDED_NAME, embedded_gguf, embedded_installed
    from racer_core.models.formats.quant_weights import kernel_isa

    if not embedded_installed() or kernel_isa() is None:
        pytest.skip("needs the embedded model (racer-tui install-model) and the 4-bit kernel")
    from racer_core.models.checkpoint.embedded import open_embedded

    checkpoint = open_embedded(blocks=True, why_whole="")
    assert (checkpoint.name, checkpoint.path) == (EMBEDDED_NAME, embedded_gguf())
    assert checkpoint.config.model_type == "llama" and checkpoint.config.hidden_size == 576
    tokenizer = checkpoint.tokenizer()
    assert tokenizer.decode(tokenizer.encode("Hello, world!")) == "Hello, world!"
    q = checkpoint.blocks(Q_PROJ)
    assert q is not None and q.qtype == Q.Q4_1 and q.shape == (576, 576)
    assert checkpoint.tensor("model.norm.weight").shape == (576,)
    assert np.isfinite(checkpoint.tensor(O_PROJ).numpy()).all()
