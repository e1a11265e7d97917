"""Incremental detokenization: each new token's text, without re-decoding
the whole reply every step, and without splitting multi-byte characters.

A pass's tokens go in together (`push_all`): one decode per token, of a
window that starts where an earlier piece ended (so a tokenizer that drops
a leading space at the start of a decode gives the right text); the window's
own start is decoded again only when the window is moved on, at most once a
pass (it was twice a token).

A reply cut mid-character (by max_tokens, the end of the context or a cancel)
holds that character's bytes back for good: the reply never ends in the
U+FFFD their decoding gives. Every consumer (the API whole and streamed, the
chat's stored reply) reads its text from here."""

from __future__ import annotations

from typing import Any

WINDOW = 16
"""Tokens a window may hold behind its newest piece before it moves on (a longer one costs more per decode)."""


class IncrementalDecoder:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0  # start of the window that gives tokens their context (where a piece ended)
        self._read = 0  # tokens whose text has been handed out
        self._last = 0  # where the piece before the newest one ended: the window's next start
        self._before = ""  # the window up to _read, decoded
        self._text = ""  # the pieces handed out so far

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def push(self, token: int) -> str:
        """The text this token adds ('' while a character is still incomplete)."""
        return self.push_all([token])[0]

    def push_all(self, tokens: list[int]) -> list[str]:
        """Each token's text, in order ('' for one whose character is still
        incomplete: its text comes with the token that completes it)."""
        texts = []
        for token in tokens:
            self.ids.append(token)
            after = self._decode(self.ids[self._prefix :])
            if after.endswith("\ufffd") or len(after) <= len(self._before):
                texts.append("")
                continue
            texts.append(after[len(self._before) :])
            self._text += texts[-1]
            self._last, self._read, self._before = self._read, len(self.ids), after
        if self._read - self._prefix > WINDOW and self._last > self._prefix:
            self._prefix = self._last  # one piece of context kept
            self._before = self._decode(self.ids[self._prefix : self._read])
        return texts

    def _held(self) -> str:
        """The text of the tokens after the last piece, less an incomplete character at its end."""
        after = self._decode(self.ids[self._prefix :])
        return _complete(after[len(self._before) :]) if len(after) > len(self._before) else ""

    def flush(self) -> str:
        """The text still held back at the end of the reply, less an
        incomplete character there, so that the pieces add up to text()."""
        held = self._held()
        self._text += held
        self._prefix = self._read = self._last = len(self.ids)
        self._before = ""
        return held

    def text(self) -> str:
        """The whole reply, less an incomplete character at its end: the pieces
        handed out and what is held back. (Decoding it whole would lose more
        with a byte-fallback tokenizer, which turns every byte of a run of
        byte tokens into U+FFFD when the run ends mid-character.)"""
        return self._text + self._held()


def _complete(text: str) -> str:
    """`text` without the U+FFFD that bytes of a character no token completed
    decode as at its end: push holds those back while more tokens may come,
    and at the end none will (push never hands out a piece ending in one, so
    this drops only what was held; a U+FFFD the model meant as the very last
    character looks the same and is dropped too)."""
    return text.rstrip("\ufffd")
