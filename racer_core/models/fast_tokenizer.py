"""A chat tokenizer read straight from a model folder's tokenizer.json (the Rust
`tokenizers` library) and chat template (jinja2), without importing
transformers: a later start gets its tokenizer in about a tenth of a second
instead of 1.5 s.

It is used only where transformers 5 itself is a plain wrapper over
tokenizer.json (the `TokenizersBackend` class, alias `PreTrainedTokenizerFast`),
and reproduces what that wrapper adds on top: the special tokens named in
tokenizer_config.json, the added tokens it re-registers, the chat template's
rendering environment. `load_fast_tokenizer` answers None for anything else (a
class that rebuilds the pipeline, remote code, legacy files, a template this
environment cannot compile) and the caller falls back to AutoTokenizer. The
tests check the equivalence against transformers token for token."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, processors

from racer_core.models.checkpoint.files import CONFIG, TOKENIZER_CONFIG, read_json

# tokenizer_config.json classes whose transformers-5 implementation loads
# tokenizer.json as it is (TokenizersBackend.__init__ takes the file's pipeline
# unchanged; PreTrainedTokenizerFast is a plain alias of it).
ALLOWED_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})

# config.json model types for which AutoTokenizer ignores a declared backend
# class and uses its registered class, which rebuilds the normalizer,
# pre-tokenizer and decoder in Python (transformers' list of models with an
# incorrect hub tokenizer class, those mapped to a specialised class; a test
# keeps this in step with the installed transformers).
REBUILT_MODEL_TYPES = frozenset({
    "hyperclovax_vision_v2", "qwen2", "qwen3_5", "qwen3_5_moe", "qwen3_5_moe_text", "qwen4_exp", "siglip2",
})

# Model types whose large-vocabulary tokenizers transformers may patch with a
# corrected pre-tokenizer regex (only for checkpoints saved before v5).
_MISTRAL_TYPES = frozenset({"mistral", "mistral3", "voxtral", "ministral", "pixtral"})

NAMED_SPECIALS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")

_GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class Unsupported(Exception):
    """The folder needs something transformers does beyond tokenizer.json."""


def load_fast_tokenizer(folder: Path) -> FastTokenizer | None:
    """The folder's tokenizer without transformers, or None where it could
    not be reproduced faithfully (the caller then uses AutoTokenizer)."""
    try:
        return FastTokenizer(Path(folder))
    except Exception:  # unsupported, missing, damaged: all mean "use transformers"
        return None


def _read_json(path: Path) -> dict[str, Any]:
    data = read_json(path)
    if data is None:
        raise Unsupported(f"{path.name} is missing, unreadable or not a JSON object")
    return data


def _token_of(value: Any) -> AddedToken | str | None:
    """A special-token entry of tokenizer_config.json: a string or a serialized AddedToken."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and value.get("__type") == "AddedToken":
        return AddedToken(**{k: v for k, v in value.items() if k != "__type"})
    raise Unsupported(f"special token {value!r}")


def _check_class(folder: Path, config: dict[str, Any]) -> None:
    """Refuse whatever makes AutoTokenizer build something other than a plain
    TokenizersBackend over tokenizer.json."""
    if config.get("tokenizer_class") not in ALLOWED_CLASSES:
        raise Unsupported(f"tokenizer class {config.get('tokenizer_class')!r}")
    for key in ("auto_map", "fast_tokenizer_files", "fix_mistral_regex"):
        if config.get(key):
            raise Unsupported(key)
    if "added_tokens_decoder" not in config and any(
        (folder / name).exists() for name in ("special_tokens_map.json", "added_tokens.json")
    ):
        raise Unsupported("legacy special-token files")
    if (folder / "tekken.json").exists():
        raise Unsupported("a Mistral tekken tokenizer")


class FastTokenizer:
    """The surface of a transformers tokenizer that racer_core uses, over
    `tokenizers.Tokenizer`. Build it with `load_fast_tokenizer`."""

    def __init__(self, folder: Path) -> None:
        config = _read_json(folder / TOKENIZER_CONFIG)
        _check_class(folder, config)
        model_config = _read_json(folder / CONFIG) if (folder / CONFIG).exists() else {}
        model_type = model_config.get("model_type")
        if model_type in REBUILT_MODEL_TYPES or model_config.get("model_name") in REBUILT_MODEL_TYPES:
            raise Unsupported(f"model type {model_type!r}")
        backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
        if backend.get_vocab_size() > 100000 and backend.pre_tokenizer is not None and (
            model_type is None or model_type in _MISTRAL_TYPES
        ):
            raise Unsupported("a Mistral pre-tokenizer that transformers may patch")
        if backend.padding is not None and "pad_token" not in config:  # transformers' default pad token
            config = {**config, "pad_token": backend.padding["pad_token"]}
        # transformers encodes without truncation or padding unless asked
        backend.no_truncation()
        backend.no_padding()
        if backend.post_processor is None:  # transformers installs an empty template
            backend.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1", special_tokens=[])

        self._backend = backend
        self.split_special_tokens = bool(config.get("split_special_tokens", False))
        backend.encode_special_tokens = self.split_special_tokens
        self.clean_up_tokenization_spaces = bool(config.get("clean_up_tokenization_spaces", False))
        self._clean_up_bpe = bool(config.get("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"))
        self._special: dict[str, AddedToken | str] = {}  # named special tokens, model-specific ones last
        self._extra: list[AddedToken | str] = []
        self._read_special_tokens(config)
        self._register_added_tokens(config)
        self.chat_template = _read_chat_template(folder, config)
        self._compiled: dict[str, Any] = {}
        templates = self.chat_template.values() if isinstance(self.chat_template, dict) else [self.chat_template]
        for template in templates:
            if template is not None:
                self._compile(template)

    # -- loading ---------------------------------------------------------------------------------

    def _read_special_tokens(self, config: dict[str, Any]) -> None:
        """Named special tokens in transformers' order (the standard ones, then
        model-specific *_token entries: serialized ones, plain strings, the
        extra_special_tokens dict), and the extra special tokens list."""
        for key in NAMED_SPECIALS:
            token = _token_of(config.get(key))
            if token is not None:
                self._special[key] = token
        others = {key: value for key, value in config.items() if key.endswith("_token") and key not in NAMED_SPECIALS}
        serialized = {k: _token_of(v) for k, v in others.items() if isinstance(v, dict) and v.get("__type") == "AddedToken"}
        plain = {k: v for k, v in others.items() if isinstance(v, str)}
        extra = config.get("extra_special_tokens") or config.get("additional_special_tokens")
        if isinstance(extra, dict):
            plain.update({key: _token_of(value) for key, value in extra.items()})
        elif isinstance(extra, (list, tuple)):
            self._extra = [_token_of(value) for value in extra]
        elif extra is not None:
            raise Unsupported("extra_special_tokens")
        for key, value in {**serialized, **plain}.items():
            if value is None:
                raise Unsupported(f"{key} is not a token")
            self._special[key] = value

    def _register_added_tokens(self, config: dict[str, Any]) -> None:
        """Re-register the added tokens and the special tokens as transformers
        does on load: the same tokens, in the same order, through the same call,
        so that flags it changes (a named token made special) or tokens it adds
        end up the same here."""
        declared = config.get("added_tokens_decoder")
        if declared is not None:
            added = {int(index): AddedToken(**entry) for index, entry in declared.items()}
        else:
            added = self._backend.get_added_tokens_decoder()
        named = {str(token) for token in self._special.values()}
        by_name = {str(token): token for token in added.values()}
        # a named special token given as a plain string takes its declared form
        self._special = {key: by_name.get(str(token), token) if key in NAMED_SPECIALS else token
                         for key, token in self._special.items()}
        to_add: list[AddedToken | str] = [added[index] for index in sorted(added)]
        known = {token.content for token in self._backend.get_added_tokens_decoder().values()}
        known |= {str(token) for token in to_add}
        for token in [*self._special.values(), *self._extra]:
            if str(token) not in known:
                to_add.append(token)
                known.add(str(token))
        tokens = []
        for token in to_add:
            if isinstance(token, str):
                token = AddedToken(token, special=True)
            elif not token.special and token.content in named:
                token.special = True
            tokens.append(token)
        if tokens:
            self._backend.add_tokens(tokens)

    # -- special tokens and vocabulary -------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        """bos_token, eos_token_id, image_token, ...: a named special token
        (None when unset) or its id, as transformers answers them."""
        key = name.removesuffix("_id")
        special = self.__dict__.get("_special", {})
        if key not in NAMED_SPECIALS and key not in special:
            raise AttributeError(name)
        token = special.get(key)
        if token is None:
            return None
        return str(token) if key == name else self.convert_tokens_to_ids(str(token))

    @property
    def special_tokens_map(self) -> dict[str, str]:
        """Named special tokens as strings (the chat template sees these)."""
        return {key: str(token) for key, token in self._special.items()}

    @property
    def all_special_tokens(self) -> list[str]:
        return list(dict.fromkeys([*self.special_tokens_map.values(), *(str(t) for t in self._extra)]))

    @property
    def all_special_ids(self) -> list[int | None]:
        return self.convert_tokens_to_ids(self.all_special_tokens)

    @property
    def backend_tokenizer(self) -> Tokenizer:
        return self._backend

    def get_vocab(self) -> dict[str, int]:
        return self._backend.get_vocab(with_added_tokens=True)

    def __len__(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | None | list[int | None]:
        if isinstance(tokens, str):
            index = self._backend.token_to_id(tokens)
            unk = self._special.get("unk_token")
            return index if index is not None or unk is None else self._backend.token_to_id(str(unk))
        return [self.convert_tokens_to_ids(token) for token in tokens]

    def convert_ids_to_tokens(self, ids: int | list[int], skip_special_tokens: bool = False) -> str | None | list[str]:
        if isinstance(ids, int):
            return self._backend.id_to_token(ids)
        skipped = set(self.all_special_ids) if skip_special_tokens else set()
        return [self._backend.id_to_token(int(i)) for i in ids if int(i) not in skipped]

    # -- encoding and decoding ---------------------------------------------------------------------

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        """{"input_ids": ids} of one text (the only key racer_core reads)."""
        if not isinstance(text, str):
            raise TypeError("FastTokenizer encodes one string at a time")
        return {"input_ids": self._backend.encode(text, add_special_tokens=add_special_tokens).ids}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self(text, add_special_tokens=add_special_tokens)["input_ids"]

    def decode(self, token_ids: Any, skip_special_tokens: bool = False,
               clean_up_tokenization_spaces: bool | None = None) -> str | list[str]:
        if hasattr(token_ids, "tolist"):  # a tensor or an array
            token_ids = token_ids.tolist()
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        if token_ids and isinstance(token_ids[0], (list, tuple)):
            return [self.decode(ids, skip_special_tokens, clean_up_tokenization_spaces) for ids in token_ids]
        text = self._backend.decode([int(i) for i in token_ids], skip_special_tokens=skip_special_tokens)
        clean = self.clean_up_tokenization_spaces if clean_up_tokenization_spaces is None else clean_up_tokenization_spaces
        # transformers skips this clean-up for BPE models unless told otherwise (it deletes real spaces there)
        if clean and (type(self._backend.model).__name__ != "BPE" or self._clean_up_bpe):
            text = _clean_up_spaces(text)
        return text

    # -- chat template ---------------------------------------------------------------------------

    def _compile(self, template: str) -> Any:
        if template not in self._compiled:
            if _GENERATION_TAG.search(template):
                raise Unsupported("{% generation %} blocks")
            self._compiled[template] = _environment().from_string(template)
        return self._compiled[template]

    def get_chat_template(self, chat_template: str | None = None, tools: list | None = None) -> str:
        if isinstance(self.chat_template, dict):
            if chat_template is not None and chat_template in self.chat_template:
                return self.chat_template[chat_template]
            if chat_template is None:
                if tools is not None and "tool_use" in self.chat_template:
                    return self.chat_template["tool_use"]
                if "default" in self.chat_template:
                    return self.chat_template["default"]
                raise ValueError("this model has several chat templates and none is the default")
            return chat_template
        if chat_template is not None:
            return chat_template
        if self.chat_template is None:
            raise ValueError("this tokenizer has no chat template")
        return self.chat_template

    def apply_chat_template(self, conversation: Any, tools: list[dict] | None = None,
                            documents: list[dict] | None = None, chat_template: str | None = None,
                            add_generation_prompt: bool = False, continue_final_message: bool | str = False,
                            tokenize: bool = True, return_dict: bool = True, **kwargs: Any) -> Any:
        """The conversation rendered as transformers renders it; the text, or
        with tokenize its ids ({"input_ids": ...} with return_dict)."""
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message and add_generation_prompt are not compatible. Use "
                             "continue_final_message when you want the model to continue the final message, and "
                             "add_generation_prompt when you want to add a header that will prompt it to start a "
                             "new assistant message instead.")
        source = self.get_chat_template(chat_template, tools)
        template = self._compile(source)
        messages = _chat_messages(conversation)
        final = _tag_final_message(messages, source, continue_final_message) if continue_final_message else None
        if tools is not None and not all(isinstance(tool, dict) for tool in tools):
            raise TypeError("tools must be JSON schemas (dicts) here")
        if documents is not None and not all(isinstance(document, dict) for document in documents):
            raise TypeError("Documents should be a list of dicts with 'title' and 'text' keys!")
        variables = _plain({**self.special_tokens_map, **kwargs})
        text = template.render(
            messages=messages, tools=_plain(tools), documents=_plain(documents),
            add_generation_prompt=add_generation_prompt, **variables,
        )
        if final is not None:
            text = _cut_at_tag(text, final)
        if not tokenize:
            return text
        ids = self(text, add_special_tokens=False)
        return ids if return_dict else ids["input_ids"]


def _read_chat_template(folder: Path, config: dict[str, Any]) -> str | dict[str, str] | None:
    """chat_template.jinja (plus named templates in chat_templates/) over the
    template in tokenizer_config.json; several templates make a dict by name."""
    templates: dict[str, str] = {}
    default = folder / "chat_template.jinja"
    if default.is_file():
        with default.open(encoding="utf-8") as handle:  # text mode: newlines read as transformers reads them
            templates["default"] = handle.read()
    named = folder / "chat_templates"
    if named.is_dir():
        for path in named.glob("*.jinja"):
            with path.open(encoding="utf-8") as handle:
                templates[path.name.removesuffix(".jinja")] = handle.read()
    if templates:
        return templates["default"] if list(templates) == ["default"] else templates
    declared = config.get("chat_template")
    if declared is None or isinstance(declared, str):
        return declared
    if isinstance(declared, (list, tuple)):
        return {entry["name"]: entry["template"] for entry in declared}
    raise Unsupported("chat_template")


def _clean_up_spaces(text: str) -> str:
    for before, after in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                          (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(before, after)
    return text


# -- the template environment ---------------------------------------------------------------------
# The same sandbox, options, filters and globals that transformers gives chat
# templates, so that a template renders here exactly as it renders there.

_ENVIRONMENT: Any = None


def _environment() -> Any:
    global _ENVIRONMENT
    if _ENVIRONMENT is None:
        import jinja2
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        release = tuple(int(part) for part in re.findall(r"\d+", jinja2.__version__)[:3])
        if release < (3, 1, 6):  # older sandboxes have known escapes; transformers refuses them too
            raise Unsupported(f"jinja2 {jinja2.__version__}")

        class SafeNamespace(jinja2.utils.Namespace):
            """namespace() without underscore-prefixed names (no way into interpreter internals)."""

            def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - Namespace's own signature trick
                self, args = args[0], args[1:]
                attrs = dict(*args, **kwargs)
                for name in attrs:
                    SafeNamespace.check(name)
                jinja2.utils.Namespace.__init__(self, attrs)

            def __setitem__(self, name: str, value: Any) -> None:
                SafeNamespace.check(name)
                jinja2.utils.Namespace.__setitem__(self, name, value)

            @staticmethod
            def check(name: Any) -> None:
                if isinstance(name, str) and name.startswith("_"):
                    raise jinja2.exceptions.SecurityError(f"a namespace cannot hold {name!r}")

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        environment.filters["tojson"] = _tojson
        environment.globals["raise_exception"] = raise_exception
        environment.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
        environment.globals["dict"] = _DictMaker()
        environment.globals["namespace"] = SafeNamespace
        _ENVIRONMENT = environment
    return _ENVIRONMENT


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # unlike jinja's own filter: no HTML escaping, non-ASCII kept as is
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class _DictMaker:
    """`dict(...)` and `dict.fromkeys(...)` for templates, without the dict type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


def _plain(value: Any) -> Any:
    """Plain JSON-like data for the sandbox: exact str/int/float, dicts, lists,
    tuples; dataclasses and pydantic models as dicts; anything else a
    placeholder naming its type."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic):
        return _plain(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump())
    return f"<{type(value).__name__}>"


def _chat_messages(conversation: Any) -> list[dict]:
    """Messages as the template sees them: plain dicts without None values,
    the reasoning also under its other names."""
    messages = getattr(conversation, "messages", conversation)
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
    result = []
    for message in _plain(list(messages)):
        if not isinstance(message, dict):
            raise TypeError(f"Chat messages should be dicts, but got {message!r}.")
        message = {key: value for key, value in message.items() if value is not None}
        reasoning = next((message[key] for key in _REASONING_FIELDS if message.get(key) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        result.append(message)
    return result


# continue_final_message as transformers does it: the final message's text is
# tagged before rendering and the rendering is cut where the tag lands, so the
# template's closing of that message (an end-of-turn token) is left off.
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


def _tag_final_message(messages: list[dict], template: str, field: bool | str) -> str:
    """Tags the field to continue of the last message in place; its text."""
    name = field if isinstance(field, str) else "content"
    last = messages[-1]
    if (final := last.get(name)) is None:
        raise ValueError(f'continue_final_message is set but the final message has no "{name}" to continue!')
    fields = [name]
    if name in _REASONING_FIELDS:  # reasoning is copied under several names: tag each copy the template may read
        fields = [other for other in _REASONING_FIELDS if last.get(other) == final]
    if not any(other in template for other in fields):
        raise ValueError(f'continue_final_message is set to "{name}" but this is not an accepted field in the '
                         "chat_template")
    if isinstance(final, (list, tuple)):
        for block in reversed(final):
            if "text" in block:  # the last text block
                final = block["text"]
                block["text"] = block["text"] + _CONTINUE_TAG
                return final
        raise ValueError("continue_final_message is set but we could not find any text to continue in the final "
                         "message!")
    for other in fields:
        last[other] = last[other] + _CONTINUE_TAG
    return final


def _cut_at_tag(text: str, final: str) -> str:
    """The rendering up to the tagged message's end (its trailing space kept
    only where the template kept the tag's)."""
    if final.strip() not in text or _CONTINUE_TAG.strip() not in text:
        raise ValueError("continue_final_message is set but the final message does not appear in the chat after "
                         "applying the chat template! This can happen if the chat template deletes portions of the "
                         "final message. Please verify the chat template and final message in your chat to ensure "
                         f"they are compatible.Final message to continue: {final.strip()}\nRendered chat:\n{text}")
    at = text.rindex(_CONTINUE_TAG.strip())
    if text[at:at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
        return text[:at]
    return text[:at].rstrip()
