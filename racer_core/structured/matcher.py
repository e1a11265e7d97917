"""One reply's grammar state (llguidance's LLMatcher): which tokens may come
next, the tokens the grammar forces, accepting tokens and rolling them back.

A token the grammar forbids is never fed to it (llguidance's matcher would
stay in its error state): callers check `allowed()` first. When the grammar
is complete it allows only the end-of-turn tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class GrammarMatcher:
    def __init__(self, matcher: Any, vocab_size: int, eos_ids: frozenset[int]) -> None:
        self._matcher = matcher
        self.vocab_size = vocab_size
        self.eos_ids = eos_ids
        self._bits = np.zeros((vocab_size + 31) // 32, dtype=np.int32)  # llguidance's bitmask, one bit per id

    def allowed(self) -> np.ndarray:
        """A bool per token id: whether the grammar takes it next."""
        self._matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        self._check()
        mask = np.unpackbits(self._bits.view(np.uint8), bitorder="little")[: self.vocab_size].view(bool)
        if not mask.any():  # llguidance always leaves the end of turn open; kept so no row is all -inf
            mask[list(self.eos_ids)] = True
        return mask

    def forced(self) -> list[int]:
        """The tokens the grammar forces from here (its fast-forward tokens), possibly none."""
        return list(self._matcher.compute_ff_tokens())

    def accept(self, token: int) -> None:
        """Take one token the grammar allows."""
        self._matcher.consume_token(int(token))
        self._check()

    def advance(self, tokens: list[int]) -> None:
        """Take a reply's accepted tokens, in order."""
        for token in tokens:
            self.accept(token)

    def rollback(self, count: int) -> None:
        """Undo the last `count` accepted tokens."""
        if count:
            self._matcher.rollback(count)
            self._check()

    @property
    def finished(self) -> bool:
        """Whether the grammar takes nothing but an end of turn."""
        return bool(self._matcher.is_stopped())

    def _check(self) -> None:
        if self._matcher.is_error():  # a decoder fault: masked rows never choose a forbidden token
            raise RuntimeError(f"grammar matcher failed: {self._matcher.get_error()}")
