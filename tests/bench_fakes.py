"""A scripted engine with no model: for tests and for front-end work offline.

Replies are deterministic in the prompt, so every method yields the same
tokens (as greedy decoding must) unless told to diverge; methods differ only
in how many tokens each step carries. It implements the Engine and
Conversation protocols of racer_core.events and nothing more.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from racer_core.events import (
    EngineInfo,
    GenerationConfig,
    ShouldStop,
    Source,
    StepEvent,
    TokenPiece,
)

# tokens per step by method; anchors emit the whole reply in one event
_STEP_PATTERN = {"ar": (1,), "racer": (3, 1, 2), "retrieval": (2, 1), "logits": (1, 2)}
_ONE_EVENT = frozenset({"hf", "pld"})


@dataclass
class ScriptedConversation:
    engine: ScriptedEngine
    system_prompt: str | None = None
    warm_from: ScriptedConversation | None = None
    messages: list[dict[str, str]] = field(default_factory=list)

    def send(
        self, user_text: str, config: GenerationConfig, should_stop: ShouldStop | None = None
    ) -> Iterator[StepEvent]:
        self.messages.append({"role": "user", "content": user_text})
        self.engine.calls.append((config.method, user_text))
        tokens = self.engine.reply_tokens(user_text, config)
        reason = "eos" if len(tokens) < config.max_new_tokens else "length"
        tokens = tokens[: config.max_new_tokens]
        chunks = self._chunks(tokens, config.method)
        text = []
        for step, chunk in enumerate(chunks, start=1):
            if should_stop is not None and should_stop():
                self.messages.append({"role": "assistant", "content": "".join(text)})
                yield StepEvent(step, (), 0, 1, 0.0, 0.0, 0.0, True, "cancelled")
                return
            pieces = tuple(
                TokenPiece(t, f"w{t} ", Source.RETRIEVAL if i < len(chunk) - 1 else Source.MODEL)
                for i, t in enumerate(chunk)
            )
            text.extend(p.text for p in pieces)
            if self.engine.step_hook is not None:
                self.engine.step_hook(config.method)
            last = step == len(chunks)
            yield StepEvent(step, pieces, max(1, len(chunk)), 8, 0.0, 0.0, 0.0, last, reason if last else None)
        if not chunks:
            yield StepEvent(1, (), 1, 1, 0.0, 0.0, 0.0, True, reason)
        self.messages.append({"role": "assistant", "content": "".join(text)})

    @staticmethod
    def _chunks(tokens: list[int], method: str) -> list[list[int]]:
        if method in _ONE_EVENT:
            return [tokens] if tokens else []
        pattern = _STEP_PATTERN.get(method, (1,))
        chunks, i, k = [], 0, 0
        while i < len(tokens):
            n = pattern[k % len(pattern)]
            chunks.append(tokens[i : i + n])
            i, k = i + n, k + 1
        return chunks


@dataclass
class ScriptedEngine:
    """`diverge`: methods whose replies differ from the others' (to test equality checks);
    `step_hook`: run before each step (tests advance a fake clock with it)."""

    info: EngineInfo = field(default_factory=lambda: EngineInfo("scripted", "cpu", "float32"))
    reply_length: int = 12
    diverge: frozenset[str] = frozenset()
    conversations: list[ScriptedConversation] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)  # (method, user text)
    step_hook: Callable[[str], None] | None = None  # called with the method before each step

    def new_conversation(
        self, system_prompt: str | None = None, warm_from: ScriptedConversation | None = None
    ) -> ScriptedConversation:
        conv = ScriptedConversation(self, system_prompt, warm_from)
        self.conversations.append(conv)
        return conv

    def reply_tokens(self, user_text: str, config: GenerationConfig) -> list[int]:
        seed = zlib.crc32(user_text.encode("utf-8"))
        if config.method in self.diverge:
            seed ^= 0x5A5A
        # the length varies with the prompt so categories differ a little
        n = self.reply_length + seed % 5
        return [(seed >> (i % 24)) % 1000 + i for i in range(n)]
