"""A GGUF's config and tokenizer read from its own fields
(racer_core/models/checkpoint/gguf_fields.py) are transformers' own from the
same file: the tokenizer encodes and decodes a mixed text and renders the chat
template token for token alike, on the embedded model's GGUF and on a tiny
one written with gguf's writer; what it does not reproduce it declines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")

from gguf_families import write_tokenizer_fields  # noqa: E402

from racer_core.models.checkpoint.gguf_fields import (  # noqa: E402
    SPLIT_PRE_TOKENIZERS,
    config_from_fields,
    tokenizer_from_fields,
)
from racer_core.models.checkpoint.gguf_reader import open_reader  # noqa: E402
from racer_core.models.embedded import embedded_gguf, embedded_installed  # noqa: E402
from racer_core.models.fast_tokenizer import load_fast_tokenizer  # noqa: E402

CORPUS = [
    "def add(a, b):\n\treturn a + b  # sum\n\n\n",
    "中文分词测试，日本語のテキスト、한국어 문장.",
    "emoji 🙂👍🏽 and 🏳️‍🌈 flags",
    "    four spaces,\t\ttabs,\r\nCRLF and   runs   of  blanks   ",
    "<|im_start|>user\nhi<|im_end|> <|endoftext|>text<think>inside</think>",
    "Numbers 1234567 and 3.14159, URLs https://example.com/a?b=c&d=e",
    "",
]
MESSAGES = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Name 3 fruits 🍎."},
            {"role": "assistant", "content": "Apple, pear, fig."}, {"role": "user", "content": "中文?"}]


def _from_fields(gguf_path: Path, folder: Path):
    """The folder the parts writer would make (config, tokenizer files) and FastTokenizer over it."""
    reader = open_reader(gguf_path)
    tokenizer, config = tokenizer_from_fields(reader)
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    template = config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    if template is not None:
        (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
    (folder / "config.json").write_text(json.dumps(config_from_fields(reader)))
    fast = load_fast_tokenizer(folder)
    assert fast is not None
    return fast


def _same_as_transformers(gguf_path: Path, folder: Path) -> None:
    from transformers import AutoTokenizer

    ours = _from_fields(gguf_path, folder)
    theirs = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    for text in CORPUS:
        ids = theirs.encode(text)
        assert ours.encode(text) == ids, text
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip), text
    assert ours.convert_ids_to_tokens(list(range(len(theirs)))) == theirs.convert_ids_to_tokens(list(range(len(theirs))))
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        assert getattr(ours, name) == getattr(theirs, name), name
    if theirs.chat_template is not None:
        rendered = theirs.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
        assert ours.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True) == rendered


@pytest.mark.skipif(not embedded_installed(), reason="embedded model not installed (racer-tui install-model)")
def test_the_embedded_gguf_tokenizer_from_its_fields_is_transformers(tmp_path) -> None:
    _same_as_transformers(embedded_gguf(), tmp_path / "parts")


@pytest.mark.skipif(not embedded_installed(), reason="embedded model not installed (racer-tui install-model)")
def test_the_embedded_gguf_config_from_its_fields_is_transformers() -> None:
    from transformers import AutoConfig

    path = embedded_gguf()
    ours = config_from_fields(open_reader(path))
    theirs = AutoConfig.from_pretrained(path.parent, gguf_file=path.name).to_dict()
    assert ours is not None and ours.pop("architectures") == ["LlamaForCausalLM"] and ours.pop("dtype") == "float32"
    assert ours == {k: theirs[k] for k in ours}  # (the class and dtype are set as the parts folder's save sets them)


def _tiny_gguf(path: Path, pre: str = "smollm", model: str = "gpt2") -> Path:
    """A GGUF of no tensors whose fields describe racer_core.testing's tiny byte-level BPE,
    its ChatML specials marked control and one user-defined token added."""
    writer = gguf.GGUFWriter(str(path), "llama")
    for add, value in ((writer.add_block_count, 2), (writer.add_context_length, 256), (writer.add_embedding_length, 64),
                       (writer.add_feed_forward_length, 128), (writer.add_head_count, 4), (writer.add_head_count_kv, 2),
                       (writer.add_rope_freq_base, 10000.0), (writer.add_layer_norm_rms_eps, 1e-5)):
        add(value)
    write_tokenizer_fields(writer, pre, model)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_tiny_gguf_tokenizer_from_its_fields_is_transformers(tmp_path) -> None:
    _same_as_transformers(_tiny_gguf(tmp_path / "tiny.gguf"), tmp_path / "parts")


def test_what_it_does_not_reproduce_is_declined(tmp_path) -> None:
    split = open_reader(_tiny_gguf(tmp_path / "split.gguf", pre="llama-bpe"))
    assert tokenizer_from_fields(split) is None  # transformers splits with its own regex first
    sentencepiece = open_reader(_tiny_gguf(tmp_path / "sp.gguf", model="llama"))
    assert tokenizer_from_fields(sentencepiece) is None
    assert config_from_fields(split)["model_type"] == "llama"  # the config alone is still read


def test_the_declined_pre_tokenizers_are_transformers_list() -> None:
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS

    assert set(GGUF_PRE_TOKENIZER_SPLITS) == SPLIT_PRE_TOKENIZERS
