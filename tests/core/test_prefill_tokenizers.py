"""An assistant prefill on every kind of tokenizer the loader hands out
(checkpoint.base.load_tokenizer and transformers' path): the project's FastTokenizer,
transformers' plain backend, a class transformers rebuilds, a tokenizer
without a chat template (plain concatenation); a vision model refuses it in
one line. The prompt ends with the prefill, without the end of the turn."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from racer_core.common.errors import InputError
from racer_core.engine.engine import chat_prompt_ids
from racer_core.models.checkpoint.base import load_tokenizer
from racer_core.models.fast_tokenizer import FastTokenizer

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story."}]
PREFILL = "Once upon a time"


def _folder(root: Path, kind: str) -> Path:
    from racer_core.testing import tiny_tokenizer

    folder = root / kind
    tiny_tokenizer().save_pretrained(folder)
    config = folder / "tokenizer_config.json"
    if kind == "GPT2Tokenizer":  # a class FastTokenizer leaves to transformers
        config.write_text(json.dumps({**json.loads(config.read_text("utf-8")), "tokenizer_class": kind}), "utf-8")
    elif kind == "qwen2":  # a model type whose tokenizer transformers rebuilds in Python
        (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}), "utf-8")
    elif kind == "no template":
        (folder / "chat_template.jinja").unlink()
    return folder


def _prompt(tokenizer, prefill: str = PREFILL, vision: object = None) -> str:
    ids = chat_prompt_ids(SimpleNamespace(tokenizer=tokenizer, vision=vision), MESSAGES, {}, False, prefill)
    return tokenizer.decode(ids)


@pytest.mark.parametrize("kind, loaded", [
    ("fast", "FastTokenizer"), ("GPT2Tokenizer", "GPT2Tokenizer"), ("qwen2", "Qwen2Tokenizer"),
])
def test_a_prefill_is_continued_on_every_tokenizer_the_loader_gives(tmp_path, kind, loaded) -> None:
    from transformers import AutoTokenizer

    folder = _folder(tmp_path, kind)
    tokenizer = load_tokenizer(folder, kind, trust_remote_code=False)
    assert type(tokenizer).__name__ == loaded
    reference = AutoTokenizer.from_pretrained(folder, local_files_only=True)  # transformers' path: its own
    expected = reference.apply_chat_template([*MESSAGES, {"role": "assistant", "content": PREFILL}], tokenize=False,
                                             continue_final_message=True)
    for each in (tokenizer, reference):
        assert _prompt(each) == expected
    assert expected.endswith("<|im_start|>assistant\n" + PREFILL)  # the turn is left open
    assert _prompt(tokenizer, prefill="") == _prompt(reference, prefill="") == expected.removesuffix(PREFILL)


def test_a_prefill_on_a_tokenizer_without_a_template_is_plain_text(tmp_path) -> None:
    tokenizer = load_tokenizer(_folder(tmp_path, "no template"), "base", trust_remote_code=False)
    assert isinstance(tokenizer, FastTokenizer) and not tokenizer.chat_template
    assert _prompt(tokenizer) == "Be brief.\n\nTell me a story.\n\n" + PREFILL


def test_a_vision_model_refuses_a_prefill_in_one_line(tmp_path) -> None:
    tokenizer = load_tokenizer(_folder(tmp_path, "fast"), "vl", trust_remote_code=False)
    with pytest.raises(InputError, match="prefill is supported for text-only models only"):
        _prompt(tokenizer, vision=object())
