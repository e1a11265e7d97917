"""A scripted engine for the app's tests: fixed replies, fixed timings, a gate.

Every step reports the same timings, so tokens/s in the status line is the same
on every run. `gate_after` holds a reply before that step until `release()`,
which lets a test look at (or snapshot) the app mid-generation.
"""

from __future__ import annotations

import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from racer_core.errors import ModelLoadError
from racer_core.events import (
    EngineInfo,
    GenerationConfig,
    ShouldStop,
    Source,
    StepEvent,
    TokenPiece,
)
from racer_tui.screens.chat import ChatScreen

REPLY = (
    "RACER drafts tokens from two cheap sources:\n\n"
    "- an **automaton** over the conversation, and\n"
    "- a **logits table** of recent next-token guesses.\n\n"
    "The model verifies the whole draft tree in one pass and keeps "
    "the longest agreeing path plus one bonus token.\n\n"
    "```python\nprint('accepted')\n```\n"
)
STEP_TIMES = (0.002, 0.012, 0.002)  # draft, verify, update: 16 ms a step
RACER_PATTERN = (3, 1, 4, 2, 1, 5, 2, 1)  # tokens per step for drafting methods


def tokenize(text: str) -> list[str]:
    return re.findall(r"\S+\s*|\s+", text)


class FakeClock:
    """Stands in for racer_core.bench.runner._clock: it advances only when the
    fake engine steps, so benchmark tokens/s are deterministic."""

    def __init__(self) -> None:
        self.now = 1000.0
        self._lock = threading.Lock()

    def perf_counter(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


@dataclass
class FakeConversation:
    engine: FakeEngine
    system_prompt: str | None = None
    messages: list[dict[str, str]] = field(default_factory=list)

    def send(
        self, user_text: str, config: GenerationConfig, should_stop: ShouldStop | None = None
    ) -> Iterator[StepEvent]:
        self.messages.append({"role": "user", "content": user_text})
        self.engine.prompts.append((user_text, list(self.messages)))
        self.engine.configs.append(config)
        if self.engine.fail_with is not None:
            raise self.engine.fail_with
        words = tokenize(self.engine.reply_for(user_text))[: config.max_new_tokens]
        drafting = config.method in ("racer", "retrieval", "logits")
        budget = 16 if config.max_num_draft == "auto" else int(config.max_num_draft)
        emitted: list[str] = []
        step, i = 0, 0
        while i < len(words):
            self.engine.hold_at_gate(should_stop)
            if should_stop is not None and should_stop():
                self.messages.append({"role": "assistant", "content": "".join(emitted)})
                yield StepEvent(step + 1, (), 0, budget, 0.0, 0.0, 0.0, True, "cancelled")
                return
            n = RACER_PATTERN[step % len(RACER_PATTERN)] if drafting else 1
            chunk = words[i : i + n]
            pieces = []
            for k, text in enumerate(chunk):
                if k == len(chunk) - 1:
                    source = Source.MODEL  # the bonus token
                elif config.method == "logits" or (config.method == "racer" and (step + k) % 3 == 2):
                    source = Source.LOGITS
                else:
                    source = Source.RETRIEVAL
                pieces.append(TokenPiece(1000 + i + k, text, source))
            i += len(chunk)
            step += 1
            self.engine.total_steps += 1
            emitted.extend(chunk)
            if self.engine.clock is not None:
                self.engine.clock.advance(sum(STEP_TIMES))
            last = i >= len(words)
            reason = None
            if last:
                reason = "eos" if len(words) < config.max_new_tokens else "length"
            yield StepEvent(step, tuple(pieces), budget if drafting else 1, budget, *STEP_TIMES, last, reason)
        self.messages.append({"role": "assistant", "content": "".join(emitted)})


@dataclass
class FakeEngine:
    info: EngineInfo = field(default_factory=lambda: EngineInfo("fake-model", "cpu", "float32"))
    reply: str = REPLY
    gate_after: int | None = None  # hold once this many steps were made (all replies together)
    fail_with: Exception | None = None
    clock: FakeClock | None = None
    prompts: list[tuple[str, list[dict[str, str]]]] = field(default_factory=list)
    conversations: list[FakeConversation] = field(default_factory=list)
    configs: list[GenerationConfig] = field(default_factory=list)
    paused: threading.Event = field(default_factory=threading.Event)
    _release: threading.Event = field(default_factory=threading.Event)

    vary: bool = False  # shorten the reply by a prompt-dependent amount (livelier charts)

    def reply_for(self, user_text: str) -> str:
        if not self.vary:
            return self.reply
        words = tokenize(self.reply)
        return "".join(words[: len(words) - zlib.crc32(user_text.encode()) % 20])

    total_steps: int = 0

    def release(self) -> None:
        self._release.set()

    def hold_at_gate(self, should_stop: ShouldStop | None) -> None:
        """Block at the gate until released, or until the app stops the reply
        (so a test that ends while held does not hang)."""
        if self.total_steps != self.gate_after or self._release.is_set():
            return
        self.paused.set()
        while not self._release.wait(0.02):
            if should_stop is not None and should_stop():
                return

    def new_conversation(
        self, system_prompt: str | None = None, warm_from: FakeConversation | None = None
    ) -> FakeConversation:
        conv = FakeConversation(self, system_prompt)
        if system_prompt:
            conv.messages.append({"role": "system", "content": system_prompt})
        self.conversations.append(conv)
        return conv


def factory_for(engine: FakeEngine):
    """An engine factory that reports load progress and hands back `engine`."""

    def factory(model_path, *, device="auto", dtype="auto", progress=None):
        if progress is not None:
            progress("reading the fake model", 0.5)
            progress("ready", 1.0)
        return engine

    return factory


def failing_factory(message: str):
    def factory(model_path, *, device="auto", dtype="auto", progress=None):
        if progress is not None:
            progress("looking for the model", None)
        raise ModelLoadError(message)

    return factory


# -- driving the app in tests --------------------------------------------------


def make_app(tmp_path, engine_or_factory, **kwargs):
    """The real app on a scripted engine, with its files under tmp_path and no animations."""
    from racer_tui.app import RacerApp

    factory = engine_or_factory if callable(engine_or_factory) else factory_for(engine_or_factory)
    app = RacerApp(factory, data_dir=tmp_path / "data", config_dir=tmp_path / "config", **kwargs)
    app.animation_level = "none"
    return app


async def wait_for(pilot, condition, timeout: float = 20.0) -> None:
    """Let the app run until `condition()` holds; fail (not hang) after `timeout`."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {condition}")
        await pilot.pause(0.02)


async def drain(pilot, node) -> None:
    """Wait until `node` has handled every message posted to it so far (FIFO)."""
    import asyncio

    done = asyncio.Event()
    node.call_later(done.set)
    await asyncio.wait_for(done.wait(), 20)
    await pilot.pause()


async def ready_chat(pilot) -> ChatScreen:
    """Wait until the engine is loaded and the chat screen is showing."""
    await wait_for(pilot, lambda: pilot.app.engine is not None and isinstance(pilot.app.screen, ChatScreen))
    return pilot.app.screen
