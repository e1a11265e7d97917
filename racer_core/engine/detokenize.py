"""Incremental detokenization: each new token's text, without re-decoding
the whole reply every step, and without splitting multi-byte characters.

A reply cut mid-character (by max_tokens, the end of the context or a cancel)
holds that character's bytes back for good: the reply never ends in the
U+FFFD their decoding gives. Every consumer (the API whole and streamed, the
chat's stored reply) reads its text from here."""

from __future__ import annotations

from typing import Any


class IncrementalDecoder:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0  # start of the window that gives tokens their context
        self._read = 0  # tokens whose text has been handed out

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def push(self, token: int) -> str:
        """The text this token adds ('' while a character is still incomplete)."""
        self.ids.append(token)
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        if after.endswith("\ufffd") or len(after) <= len(before):
            return ""
        self._prefix, self._read = self._read, len(self.ids)
        return after[len(before) :]

    def flush(self) -> str:
        """The text still held back at the end of the reply, less an
        incomplete character there, so that the pieces add up to text()."""
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        self._prefix = self._read = len(self.ids)
        return _complete(after[len(before) :]) if len(after) > len(before) else ""

    def text(self) -> str:
        """The whole reply, less an incomplete character at its end."""
        return _complete(self._decode(self.ids))


def _complete(text: str) -> str:
    """`text` without the U+FFFD that bytes of a character no token completed
    decode as at its end: push holds those back while more tokens may come,
    and at the end none will (push never hands out a piece ending in one, so
    this drops only what was held; a U+FFFD the model meant as the very last
    character looks the same and is dropped too)."""
    return text.rstrip("\ufffd")
