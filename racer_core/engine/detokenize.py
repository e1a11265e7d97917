"""Incremental detokenization: each new token's text, without re-decoding
the whole reply every step, and without splitting multi-byte characters."""

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
        """The text still held back (an incomplete character at the end of the
        reply decodes as U+FFFD), so that the pieces add up to text()."""
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        self._prefix = self._read = len(self.ids)
        return after[len(before) :] if len(after) > len(before) else ""

    def text(self) -> str:
        return self._decode(self.ids)
