"""FastTokenizer (tokenizer.json + jinja2, no transformers) against transformers'
own tokenizer from the same folder: rendered chats, ids, decoded text, special
tokens and vocabulary all equal; folders it cannot reproduce give None."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from racer_core.models.embedded import embedded_installed
from racer_core.models.fast_tokenizer import REBUILT_MODEL_TYPES, FastTokenizer, load_fast_tokenizer

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# A template that uses what transformers' environment offers: namespace,
# loop controls, its tojson (no HTML escaping, non-ASCII kept), dict(),
# raise_exception, strftime_now, the special-token variables, the reasoning
# aliases, enable_thinking, and trim_blocks / lstrip_blocks whitespace.
RICH_TEMPLATE = """{%- set ns = namespace(count=0, last_user=-1) -%}
{%- for m in messages -%}
  {%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}
{%- endfor -%}
{{ bos_token }}
{%- if tools %}{{ tools | tojson(indent=2) }}{% endif %}
{% for message in messages %}
    {% if message.role not in ['system', 'user', 'assistant'] %}{{ raise_exception('bad role ' + message.role) }}{% endif %}
    {% if message.content == 'skip' %}{% continue %}{% endif %}
    {% set ns.count = ns.count + 1 %}
<|im_start|>{{ message.role }}
    {% if message.reasoning_content is defined and loop.index0 > ns.last_user %}
<think>
{{ message.reasoning_content | trim }}
</think>
    {% endif %}
{{ message.content }}{{ {'n': ns.count, 'text': message.content, 'keys': message | list} | tojson }}<|im_end|>
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
    {% if enable_thinking is defined and enable_thinking is false %}
<think>

</think>

    {% endif %}
{% endif %}
{{- dict(eos=eos_token, pad=pad_token, n=messages | length) | tojson(sort_keys=True) }}{{ strftime_now('%Y') }}"""


def _embedded_folder() -> Path:
    from racer_core.models.checkpoint.gguf_dequantized import ensure_dequantized
    from racer_core.models.embedded import embedded_gguf

    return ensure_dequantized(embedded_gguf(), reason="the tokenizer tests")  # the run's cache: dequantized once for all tests


def _save(tokenizer, folder: Path) -> Path:
    tokenizer.save_pretrained(folder)
    return folder


def _tiny_folder(root: Path) -> Path:
    from racer_core.testing import tiny_tokenizer

    return _save(tiny_tokenizer(), root / "tiny")


def _bpe_folder(root: Path) -> Path:
    from racer_core.testing import bpe_tokenizer

    tokenizer = bpe_tokenizer(("<image>", "<video>"), extra_special_tokens=["<image>", "<video>"])
    tokenizer.chat_template = RICH_TEMPLATE
    return _save(tokenizer, root / "bpe")


def _auto(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def _pair(folder: Path) -> tuple[FastTokenizer, object]:
    fast = load_fast_tokenizer(folder)
    assert fast is not None
    return fast, _auto(folder)


@pytest.fixture(scope="module", params=["embedded", "tiny", "bpe"])
def pair(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("tokenizers")
    if request.param == "embedded":
        if not embedded_installed():
            pytest.skip("embedded model not installed (racer-tui install-model)")
        folder = _embedded_folder()
    else:
        folder = {"tiny": _tiny_folder, "bpe": _bpe_folder}[request.param](root)
    return _pair(folder)


@pytest.fixture(scope="module")
def rich_pair(tmp_path_factory):
    return _pair(_bpe_folder(tmp_path_factory.mktemp("rich")))


SPECIAL_STRINGS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<image>", "<video>", "<think>", "</think>"]
pieces = st.one_of(
    st.text(max_size=12),
    st.sampled_from([*SPECIAL_STRINGS, "\n", "\n\n", " ", "  ", "\t", "😀", "é", "中文", "<", "&", '"', "skip"]),
)
texts = st.lists(pieces, max_size=8).map("".join)


def _message(role: str, content: str, extra: dict) -> dict:
    return {"role": role, "content": content, **extra}


reasoning = st.one_of(
    st.just({}),
    st.builds(lambda key, text: {key: text}, st.sampled_from(["reasoning_content", "thinking", "reasoning"]), texts),
    st.just({"tool_calls": None}),
)
messages = st.lists(
    st.builds(_message, st.sampled_from(["system", "user", "assistant"]), texts, reasoning), min_size=1, max_size=5
)
switches = st.sampled_from([{}, {"enable_thinking": True}, {"enable_thinking": False}])


def test_the_embedded_tokenizer_is_reproduced_without_transformers_in_a_fresh_process() -> None:
    if not embedded_installed():
        pytest.skip("embedded model not installed (racer-tui install-model)")
    folder = _embedded_folder()
    code = (
        "import sys; from racer_core.models.fast_tokenizer import load_fast_tokenizer; "
        f"tok = load_fast_tokenizer({str(folder)!r}); "
        "text = tok.apply_chat_template([{'role': 'user', 'content': 'hi'}], tokenize=False, add_generation_prompt=True); "
        "tok(text, add_special_tokens=False); tok.decode([1, 2, 3]); "
        "assert tok is not None and 'transformers' not in sys.modules, sorted(m for m in sys.modules if 'transformers' in m)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_special_tokens_vocabulary_and_template_equal(pair) -> None:
    fast, auto = pair
    assert fast.get_vocab() == auto.get_vocab() and len(fast) == len(auto)
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        assert getattr(fast, name) == getattr(auto, name)
        assert getattr(fast, name + "_id") == getattr(auto, name + "_id")
    assert fast.special_tokens_map == auto.special_tokens_map
    assert fast.all_special_tokens == auto.all_special_tokens and fast.all_special_ids == auto.all_special_ids
    assert fast.chat_template == auto.chat_template
    assert fast.convert_tokens_to_ids("<|im_end|>") == auto.convert_tokens_to_ids("<|im_end|>")
    assert fast.convert_tokens_to_ids(SPECIAL_STRINGS) == auto.convert_tokens_to_ids(SPECIAL_STRINGS)
    ids = list(range(0, len(auto), max(1, len(auto) // 50)))
    assert fast.convert_ids_to_tokens(ids) == auto.convert_ids_to_tokens(ids)
    assert fast.convert_ids_to_tokens(ids, skip_special_tokens=True) == auto.convert_ids_to_tokens(ids, True)


@SETTINGS
@given(chat=messages, generation=st.booleans(), switch=switches)
def test_rendered_chats_and_their_ids_equal(pair, chat, generation, switch) -> None:
    fast, auto = pair
    expected = auto.apply_chat_template(chat, tokenize=False, add_generation_prompt=generation, **switch)
    assert fast.apply_chat_template(chat, tokenize=False, add_generation_prompt=generation, **switch) == expected
    assert fast(expected, add_special_tokens=False)["input_ids"] == auto(expected, add_special_tokens=False)["input_ids"]
    assert fast.apply_chat_template(chat, add_generation_prompt=generation, return_dict=False, **switch) == (
        auto.apply_chat_template(chat, add_generation_prompt=generation, return_dict=False, **switch)
    )


@SETTINGS
@given(chat=messages, generation=st.booleans(), switch=switches, tools=st.one_of(st.none(), st.just([
    {"type": "function", "function": {"name": "get_time", "description": "Time <now> & \"here\" – é"}}
])))
def test_the_rich_template_renders_as_in_transformers(rich_pair, chat, generation, switch, tools) -> None:
    fast, auto = rich_pair
    expected = auto.apply_chat_template(chat, tools=tools, tokenize=False, add_generation_prompt=generation, **switch)
    assert fast.apply_chat_template(chat, tools=tools, tokenize=False, add_generation_prompt=generation, **switch) == (
        expected
    )


def _continued(tokenizer, chat, field, **kwargs):
    try:
        return tokenizer.apply_chat_template(chat, tokenize=False, continue_final_message=field, **kwargs)
    except (ValueError, TypeError) as error:  # a template may not take content blocks: both refuse alike
        return type(error), str(error)


@SETTINGS
@given(chat=messages, switch=switches, field=st.sampled_from([True, "content", "reasoning_content", "thinking"]))
def test_a_final_message_is_continued_as_in_transformers(pair, chat, switch, field) -> None:
    # an assistant prefill: the rendering stops where the final message's text ends (no end of turn)
    fast, auto = pair
    assert _continued(fast, chat, field, **switch) == _continued(auto, chat, field, **switch)


@SETTINGS
@given(chat=messages, switch=switches, tools=st.one_of(st.none(), st.just([{"type": "function"}])))
def test_the_rich_template_continues_a_final_message_as_in_transformers(rich_pair, chat, switch, tools) -> None:
    fast, auto = rich_pair
    assert _continued(fast, chat, True, tools=tools, **switch) == _continued(auto, chat, True, tools=tools, **switch)


def test_continuing_a_final_message_cuts_off_its_end_of_turn(pair) -> None:
    fast, auto = pair
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Once upon a time"}]
    text = fast.apply_chat_template(chat, tokenize=False, continue_final_message=True)
    assert text.endswith("Once upon a time") and text == _continued(auto, chat, True)
    blocks = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [{"type": "text", "text": "Once"}]}]
    assert _continued(fast, blocks, True) == _continued(auto, blocks, True)
    with pytest.raises(ValueError, match="not compatible"):
        fast.apply_chat_template(chat, tokenize=False, continue_final_message=True, add_generation_prompt=True)
    ids = fast.apply_chat_template(chat, continue_final_message=True, return_dict=False)
    assert ids == auto.apply_chat_template(chat, continue_final_message=True, return_dict=False)


def test_template_errors_are_raised_like_transformers(rich_pair) -> None:
    import jinja2

    fast, auto = rich_pair
    chat = [{"role": "tool", "content": "x"}]
    with pytest.raises(jinja2.exceptions.TemplateError, match="bad role tool"):
        auto.apply_chat_template(chat, tokenize=False)
    with pytest.raises(jinja2.exceptions.TemplateError, match="bad role tool"):
        fast.apply_chat_template(chat, tokenize=False)
    sneaky = "{% set ns = namespace(_x=1) %}{{ ns._x }}"
    with pytest.raises(jinja2.exceptions.SecurityError):
        fast.apply_chat_template([{"role": "user", "content": "x"}], chat_template=sneaky, tokenize=False)
    with pytest.raises(ValueError):
        fast.apply_chat_template([], tokenize=False)


@SETTINGS
@given(text=texts, special=st.booleans())
def test_ids_of_any_text_equal(pair, text, special) -> None:
    fast, auto = pair
    assert fast(text, add_special_tokens=special)["input_ids"] == auto(text, add_special_tokens=special)["input_ids"]


@SETTINGS
@given(data=st.data(), skip=st.booleans(), clean=st.sampled_from([None, False, True]))
def test_decoding_any_ids_equal(pair, data, skip, clean) -> None:
    fast, auto = pair
    specials = [i for i in auto.convert_tokens_to_ids(SPECIAL_STRINGS) if i is not None]
    ids = data.draw(st.lists(st.one_of(st.integers(0, len(auto) - 1), st.sampled_from(specials)), max_size=24))
    options = {} if clean is None else {"clean_up_tokenization_spaces": clean}
    assert fast.decode(ids, skip_special_tokens=skip, **options) == auto.decode(ids, skip_special_tokens=skip, **options)
    if ids:
        assert fast.decode(ids[0]) == auto.decode(ids[0])
        assert fast.decode([ids, ids[:1]]) == auto.decode([ids, ids[:1]])


# -- loading edge cases ----------------------------------------------------------------------------


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(changes)
    path.write_text(json.dumps(data), encoding="utf-8")


@pytest.fixture
def tiny(tmp_path) -> Path:
    return _tiny_folder(tmp_path)


def test_declared_special_tokens_missing_from_the_vocabulary_are_added_as_in_transformers(tiny) -> None:
    _edit_json(tiny / "tokenizer_config.json", sep_token="<sep>", mask_token={
        "__type": "AddedToken", "content": "<mask>", "lstrip": True, "rstrip": False, "normalized": False,
        "single_word": False, "special": True,
    }, image_token="<img>", extra_special_tokens=["<extra>"])
    fast, auto = _pair(tiny)
    assert fast.get_vocab() == auto.get_vocab() and "<sep>" in fast.get_vocab()
    assert fast.special_tokens_map == auto.special_tokens_map and fast.all_special_ids == auto.all_special_ids
    for name in ("sep_token", "mask_token", "image_token", "cls_token"):
        assert (getattr(fast, name), getattr(fast, name + "_id")) == (getattr(auto, name), getattr(auto, name + "_id"))
    text = "a <sep>b  <mask> c<img><extra><|im_end|>"
    assert fast(text)["input_ids"] == auto(text)["input_ids"]
    ids = fast(text)["input_ids"]
    assert fast.decode(ids, skip_special_tokens=True) == auto.decode(ids, skip_special_tokens=True)
    chat = [{"role": "user", "content": text}]
    assert fast.apply_chat_template(chat, tokenize=False) == auto.apply_chat_template(chat, tokenize=False)


def test_an_eos_saved_as_not_special_becomes_special_as_in_transformers(tiny) -> None:
    data = json.loads((tiny / "tokenizer.json").read_text(encoding="utf-8"))
    for token in data["added_tokens"]:
        if token["content"] == "<|im_end|>":
            token["special"] = False
    (tiny / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    fast, auto = _pair(tiny)
    ids = fast("hi<|im_end|>there")["input_ids"]
    assert ids == auto("hi<|im_end|>there")["input_ids"]
    assert fast.decode(ids, skip_special_tokens=True) == auto.decode(ids, skip_special_tokens=True) == "hithere"


def test_saved_truncation_padding_and_decoding_options_act_as_in_transformers(tiny) -> None:
    data = json.loads((tiny / "tokenizer.json").read_text(encoding="utf-8"))
    data["truncation"] = {"direction": "Right", "max_length": 3, "strategy": "LongestFirst", "stride": 0}
    data["padding"] = {"strategy": {"Fixed": 40}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
                       "pad_type_id": 0, "pad_token": "<|endoftext|>"}
    (tiny / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    config = json.loads((tiny / "tokenizer_config.json").read_text(encoding="utf-8"))
    del config["pad_token"]  # then transformers takes the saved padding's token
    (tiny / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    _edit_json(tiny / "tokenizer_config.json", split_special_tokens=True, clean_up_tokenization_spaces=True,
               clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output=True)
    fast, auto = _pair(tiny)
    text = "The cat sat , on the mat . <|im_end|> n't"
    ids = fast(text)["input_ids"]
    assert ids == auto(text)["input_ids"] and len(ids) > 3
    assert fast.pad_token == auto.pad_token == "<|endoftext|>" and fast.pad_token_id == auto.pad_token_id
    for options in ({}, {"clean_up_tokenization_spaces": False}):
        assert fast.decode(ids, **options) == auto.decode(ids, **options)
    assert fast.decode(ids) != fast.decode(ids, clean_up_tokenization_spaces=False)


def test_templates_from_the_tokenizer_config_and_named_templates(tiny) -> None:
    template = (tiny / "chat_template.jinja").read_text(encoding="utf-8")
    (tiny / "chat_template.jinja").unlink()
    _edit_json(tiny / "tokenizer_config.json", chat_template=[
        {"name": "default", "template": template}, {"name": "tool_use", "template": "tools {{ tools | length }}"},
    ])
    fast, auto = _pair(tiny)
    assert isinstance(fast.chat_template, dict) and fast.chat_template == auto.chat_template
    chat = [{"role": "user", "content": "hello"}]
    for tools in (None, [{"name": "f"}]):
        assert fast.apply_chat_template(chat, tools=tools, tokenize=False) == (
            auto.apply_chat_template(chat, tools=tools, tokenize=False)
        )
    _edit_json(tiny / "tokenizer_config.json", chat_template="{{ messages[0]['content'] }}!")
    fast, auto = _pair(tiny)
    assert fast.chat_template == auto.chat_template
    assert fast.apply_chat_template(chat, tokenize=False) == auto.apply_chat_template(chat, tokenize=False) == "hello!"


def test_the_fast_alias_class_on_a_llama_config_is_the_plain_backend(tiny) -> None:
    from transformers import TokenizersBackend

    _edit_json(tiny / "tokenizer_config.json", tokenizer_class="PreTrainedTokenizerFast")
    (tiny / "config.json").write_text(json.dumps({"model_type": "llama"}), encoding="utf-8")
    fast, auto = _pair(tiny)
    assert type(auto) is TokenizersBackend
    assert fast("Once upon a time <|im_end|>")["input_ids"] == auto("Once upon a time <|im_end|>")["input_ids"]


def test_rebuilt_model_types_follow_the_installed_transformers() -> None:
    """The model types for which AutoTokenizer replaces a declared backend
    class by its own: REBUILT_MODEL_TYPES must name all of them."""
    from transformers.models.auto import tokenization_auto as auto

    plain = {"TokenizersBackend", "PreTrainedTokenizerFast", None}
    replaced = {t for t in auto.MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS if auto.TOKENIZER_MAPPING_NAMES.get(t) not in plain}
    assert replaced <= REBUILT_MODEL_TYPES


@pytest.mark.parametrize("damage", [
    "no tokenizer.json", "no tokenizer_config.json", "GPT2Tokenizer", "LlamaTokenizerFast", "Qwen2Tokenizer",
    "generation tags", "uncompilable template", "damaged tokenizer.json", "damaged config", "not an object",
    "qwen2 model type", "remote code", "legacy special tokens file", "bad special token",
])
def test_folders_it_cannot_reproduce_give_none(tiny, damage) -> None:
    config = tiny / "tokenizer_config.json"
    if damage == "no tokenizer.json":
        (tiny / "tokenizer.json").unlink()
    elif damage == "no tokenizer_config.json":
        config.unlink()
    elif damage in ("GPT2Tokenizer", "LlamaTokenizerFast", "Qwen2Tokenizer"):
        _edit_json(config, tokenizer_class=damage)
    elif damage == "generation tags":
        (tiny / "chat_template.jinja").write_text(
            "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}", encoding="utf-8"
        )
    elif damage == "uncompilable template":
        (tiny / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }", encoding="utf-8")
    elif damage == "damaged tokenizer.json":
        (tiny / "tokenizer.json").write_text('{"version": "1.0", "model": {', encoding="utf-8")
    elif damage == "damaged config":
        config.write_bytes(b"\xff\xfe{not json")
    elif damage == "not an object":
        config.write_text("[1, 2]", encoding="utf-8")
    elif damage == "qwen2 model type":
        (tiny / "config.json").write_text(json.dumps({"model_type": "qwen2"}), encoding="utf-8")
    elif damage == "remote code":
        _edit_json(config, auto_map={"AutoTokenizer": ["x.Tok", None]})
    elif damage == "legacy special tokens file":
        (tiny / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}), encoding="utf-8")
    elif damage == "bad special token":
        _edit_json(config, eos_token={"content": "<|im_end|>"})
    assert load_fast_tokenizer(tiny) is None


def test_a_missing_folder_gives_none(tmp_path) -> None:
    assert load_fast_tokenizer(tmp_path / "nowhere") is None
    shutil.rmtree(tmp_path)
    assert load_fast_tokenizer(tmp_path) is None


def test_an_engine_on_the_fast_tokenizer_replies_exactly_as_on_transformers_one(tmp_path) -> None:
    """The surface the engine uses (template, ids, end-of-turn ids,
    incremental decoding) gives the same conversation token for token."""
    from racer_core.common.events import GenerationConfig
    from racer_core.engine.engine import RacerEngine
    from racer_core.testing import tiny_model

    fast, auto = _pair(_tiny_folder(tmp_path))
    model = tiny_model("llama")
    replies = []
    for tokenizer in (fast, auto):
        engine = RacerEngine(model, tokenizer, "tiny-llama")
        chat = engine.new_conversation("Be brief. <|im_end|> 😀")
        events = list(chat.send("The cat sat on the mat, and the cat sat", GenerationConfig(method="racer", max_new_tokens=30)))
        replies.append((engine.runtime.eos_ids, chat.prompt_ids(), [(p.token_id, p.text) for e in events for p in e.pieces]))
    assert replies[0] == replies[1] and replies[0][2]
