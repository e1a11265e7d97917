"""Checkpoint folders of every family load through the one loader: OpenPangu
without its remote code, VL models with their processor, trusted remote code
only when it works with tree verification; bad placement requests give one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from racer_core.common.errors import ModelLoadError
from racer_core.common.events import GenerationConfig
from racer_core.engine.engine import load_engine
from racer_core.engine.multimodal import image_from_pixels
from racer_core.testing import tiny_model, tiny_tokenizer
from racer_core.testing.tiny_vl import tiny_image, tiny_processor, tiny_vl_model


def _reply(engine, text: str, images=(), **config) -> list[int]:
    conversation = engine.new_conversation()
    events = conversation.send(text, GenerationConfig(max_new_tokens=24, **config), images=list(images))
    return [p.token_id for e in events for p in e.pieces]


def test_openpangu_checkpoint_loads_without_remote_code(tmp_path: Path) -> None:
    model = tiny_model("PanguEmbedded")
    model.save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    # The published config.json: flat rope_theta, one `bias` switch, remote-code pointers.
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop("rope_parameters", None)
    config.pop("attention_bias", None)
    config.update(rope_theta=16000000.0, bias=True, auto_map={
        "AutoConfig": "configuration_openpangu_dense.PanguEmbeddedConfig",
        "AutoModelForCausalLM": "modeling_openpangu_dense.PanguEmbeddedForCausalLM",
    })
    (tmp_path / "config.json").write_text(json.dumps(config))
    engine = load_engine(tmp_path, device="cpu", dtype="float32")
    assert type(engine.model).__name__ == "PanguEmbeddedForCausalLM"
    assert engine.model.model.layers[0].self_attn.o_proj.bias is not None
    keys = set(engine.model.state_dict())
    assert {"model.layers.0.self_attn.q_proj.bias", "model.norm.weight", "lm_head.weight"} <= keys
    assert torch.equal(engine.model.model.layers[1].self_attn.k_proj.bias, model.model.layers[1].self_attn.k_proj.bias)
    plain = _reply(engine, "The quick brown fox", method="ar")
    assert _reply(engine, "The quick brown fox", method="racer", max_num_draft=8) == plain


@pytest.mark.parametrize("family", ["qwen2_5_vl", "llava"])
def test_vl_checkpoint_loads_with_its_processor(tmp_path: Path, family: str) -> None:
    tiny_vl_model(family).save_pretrained(tmp_path)
    tiny_processor(family).save_pretrained(tmp_path)
    engine = load_engine(tmp_path, device="cpu", dtype="float32")
    assert engine.vision is not None
    image = image_from_pixels(tiny_image())
    plain = _reply(engine, "The cat", [image], method="ar")
    assert _reply(engine, "The cat", [image], method="racer", max_num_draft=8) == plain
    assert _reply(engine, "The cat", method="ar") != plain


def test_quantization_on_a_cpu_is_one_clear_line(tmp_path: Path) -> None:
    tiny_model("llama").save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    for bits in ("8bit", "4bit"):
        with pytest.raises(ModelLoadError, match=f"--load-in-{bits} needs a CUDA GPU") as caught:
            load_engine(tmp_path, device="cpu", quantize=bits)
        assert "\n" not in str(caught.value)


_REMOTE_CONFIG = """
from transformers import LlamaConfig


class ToyConfig(LlamaConfig):
    model_type = "toy_remote"
"""

_REMOTE_MODEL = """
from transformers import LlamaForCausalLM

from .configuration_toy import ToyConfig


class ToyForCausalLM(LlamaForCausalLM):
    config_class = ToyConfig
{body}
"""

_DROPS_THE_CACHE = """
    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        return super().forward(input_ids=input_ids)
"""


def _remote_checkpoint(folder: Path, body: str) -> Path:
    tiny_model("llama").save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    (folder / "configuration_toy.py").write_text(_REMOTE_CONFIG)
    (folder / "modeling_toy.py").write_text(_REMOTE_MODEL.format(body=body))
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="toy_remote", architectures=["ToyForCausalLM"], auto_map={
        "AutoConfig": "configuration_toy.ToyConfig", "AutoModelForCausalLM": "modeling_toy.ToyForCausalLM"})
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_remote_code_needs_the_flag_and_must_work_with_trees(tmp_path: Path) -> None:
    good = _remote_checkpoint(tmp_path / "good", "")
    with pytest.raises(ModelLoadError, match="--trust-remote-code"):
        load_engine(good, device="cpu")
    engine = load_engine(good, device="cpu", dtype="float32", trust_remote_code=True)
    assert _reply(engine, "The dog", method="racer", max_num_draft=8) == _reply(engine, "The dog", method="ar")
    bad = _remote_checkpoint(tmp_path / "bad", _DROPS_THE_CACHE)
    with pytest.raises(ModelLoadError, match="does not work with tree verification"):
        load_engine(bad, device="cpu", trust_remote_code=True)


def test_command_lines_pass_the_load_options(tmp_path: Path, capsys) -> None:
    from racer_tui import cli
    from racer_tui.cli import build_parser
    from racer_tui.cli.chat import app_args

    tiny_model("llama").save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    capsys.readouterr()  # the save's progress bars
    args = ["--bench", "builtin", "--model-path", str(tmp_path), "--device", "cpu", "--methods", "ar"]
    assert cli.main([*args, "--load-in-4bit"]) != 0
    err = capsys.readouterr().err.strip()
    assert err == "racer-tui: error: --load-in-4bit needs a CUDA GPU (bitsandbytes); this machine has none"
    seen = {}

    def loader(**kwargs):
        seen.update(kwargs)
        raise ModelLoadError("stop here")

    cli.main([*args, "--trust-remote-code", "--load-in-8bit"], engine_loader=loader)
    assert seen["trust_remote_code"] is True and seen["quantize"] == "8bit"
    served = app_args(build_parser().parse_args(["--model", "org/name", "--trust-remote-code", "--load-in-4bit"]))
    assert served == ["--model", "org/name", "--trust-remote-code", "--load-in-4bit"]
