"""A tokenizer's tokens as bytes, and llguidance's tokenizer built from them.

Both the transformers tokenizers and racer's FastTokenizer
(racer_core/models/fast_tokenizer.py) expose `get_vocab()` and their backend's
decoder, which says how a token's spelling maps to bytes: byte-level BPE
(GPT-2's printable alphabet, one character per byte) or SentencePiece's
(`▁` for a space, `<0xNN>` for a raw byte). Ids past the tokenizer (a model's
padded vocabulary) have no bytes: the grammar never allows them.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from racer_core.common.errors import InputError
from racer_core.common.grammar_engine import llguidance
from racer_core.models.byte_alphabet import bytes_to_unicode

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@lru_cache(maxsize=1)
def _byte_of_char() -> dict[str, int]:
    return {char: byte for byte, char in bytes_to_unicode().items()}


def _byte_level(tokenizer: Any) -> bool:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend is not None and "ByteLevel" in repr(backend.decoder)


def token_bytes(tokenizer: Any, vocab_size: int) -> list[bytes]:
    """Each id's bytes below `vocab_size` (b"" where the tokenizer has no token)."""
    tokens = [b""] * vocab_size
    special = set(special_ids(tokenizer))
    byte_level = _byte_level(tokenizer)
    of_char = _byte_of_char()
    for spelling, index in tokenizer.get_vocab().items():
        if not 0 <= index < vocab_size:
            continue
        if index in special:
            tokens[index] = spelling.encode("utf-8")
        elif byte_level:
            if all(char in of_char for char in spelling):
                tokens[index] = bytes(of_char[char] for char in spelling)
            else:  # an added token, stored as its text
                tokens[index] = spelling.encode("utf-8")
        else:
            raw = _BYTE_TOKEN.match(spelling)
            tokens[index] = bytes([int(raw.group(1), 16)]) if raw else spelling.replace("\u2581", " ").encode("utf-8")
    return tokens


def special_ids(tokenizer: Any) -> list[int]:
    """The tokenizer's special (control) token ids: never matched by a grammar's text."""
    return [int(i) for i in getattr(tokenizer, "all_special_ids", []) if i is not None]


class _Wrapper:
    """The tokenizer surface llguidance's LLTokenizer reads (its TokenizerWrapper protocol)."""

    is_tokenizer_wrapper = True

    def __init__(self, tokenizer: Any, tokens: list[bytes], eos_ids: list[int]) -> None:
        self._tokenizer = tokenizer
        self.tokens = tokens
        self.eos_token_id = eos_ids[0]
        bos = getattr(tokenizer, "bos_token_id", None)
        self.bos_token_id = int(bos) if bos is not None else None
        self.special_token_ids = special_ids(tokenizer)

    def __call__(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return list(self._tokenizer.encode(text, add_special_tokens=False))


@dataclass(eq=False)
class Vocabulary:
    """llguidance's tokenizer for one model's vocabulary, and the grammars compiled for it (compile.py)."""

    engine: Any  # llguidance's LLTokenizer
    vocab_size: int
    eos_ids: frozenset[int]
    compiled: OrderedDict[Any, Any] = field(default_factory=OrderedDict)


_made: weakref.WeakKeyDictionary[Any, dict[tuple[int, frozenset[int]], Vocabulary]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def vocabulary(tokenizer: Any, vocab_size: int, eos_ids: frozenset[int]) -> Vocabulary:
    """llguidance's tokenizer for `tokenizer` over `vocab_size` ids ending at
    any of `eos_ids`; made once per tokenizer and vocabulary (about a second)."""
    lib = llguidance()
    if tokenizer is None:
        raise InputError("structured output needs the model's tokenizer; this model has none")
    if not eos_ids:
        raise InputError("structured output needs an end-of-turn token; this model names none")
    key = (vocab_size, eos_ids)
    with _lock:
        made = _made.setdefault(tokenizer, {})
        if key not in made:
            eos = sorted(eos_ids)
            wrapper = _Wrapper(tokenizer, token_bytes(tokenizer, vocab_size), eos)
            made[key] = Vocabulary(lib.LLTokenizer(wrapper, n_vocab=vocab_size, eos_token=eos), vocab_size, eos_ids)
        return made[key]
