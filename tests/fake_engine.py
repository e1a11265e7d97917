"""One scripted engine with no model, for the app tests and the bench tests.

It implements the Engine and Conversation protocols of racer_core.common.events
(every member: tests/core/test_engine_protocols.py checks) and nothing more. Replies are fixed text cut into word tokens, so every method
yields the same tokens (as greedy decoding must) unless told to diverge;
methods differ only in how many tokens each step carries. Every step reports
the same timings, so tokens/s is the same on every run.

Test controls:
- `gate_after`: hold before that step (all replies together) until `release()`,
  to look at (or snapshot) the app mid-generation;
- `fail_with`: raise this from `send`;
- `step_hook`: called with the method before each step (inject a failure or
  a KeyboardInterrupt, or advance a clock);
- `clock`: a FakeClock advanced by one step's time after each step;
- `curve`: a cost curve (tests/scripted_curve.py) that prices each step's
  rows in its event's curve_s, and `slowdown`: each step takes that many
  times STEP_TIMES (a machine busy with other work);
- `diverge`: methods whose token ids differ from the others' (equality checks);
- `forced`: under a config's grammar, the drafted tokens of every even step
  are the grammar's forced ones (Source.GRAMMAR), as racer_core/structured's are;
- `vary`: shorten the reply by a prompt-dependent amount (livelier charts);
- `vision`: take images with a message (else refuse them in one line, as a
  text-only model does); `images` records what each message carried;
- `info.draft_head`: a draft head loaded (eagle3 is refused without one, as
  every request the method cannot serve: racer_core/common/capabilities.py).
"""

from __future__ import annotations

import re
import threading
import zlib
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fake_records import PROMPT_END, fake_record, fake_token_text

from racer_core.common.capabilities import check_for
from racer_core.common.errors import InputError, ModelLoadError
from racer_core.common.events import (
    ContextUsage,
    EngineInfo,
    GenerationConfig,
    ShouldStop,
    Source,
    StepEvent,
    TokenPiece,
)

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
DRAFTING = frozenset({"racer", "retrieval", "logits"})
ONE_EVENT = frozenset({"hf", "pld"})  # the anchors report a whole reply in one event
DIVERGED_IDS = 1_000_000  # token id offset for methods told to diverge
TEXT_IDS = 50_000  # prompt words' ids: 50000 + a hash of the word below 50000
TEMPLATE_IDS = (1, 2, 3, 4)  # a message's chat-template tokens (the reply's start takes the first 3)


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


def _chunk_sizes(method: str, count: int) -> list[int]:
    """How many tokens each step carries, by method. As in the real decoders,
    the first event is the prefill: one token from the prompt alone."""
    if method in ONE_EVENT:
        return [count] if count else []
    if not count:
        return []
    sizes, step, left = [1], 0, count - 1
    while left > 0:
        n = min(left, RACER_PATTERN[step % len(RACER_PATTERN)] if method in DRAFTING else 1)
        sizes.append(n)
        left, step = left - n, step + 1
    return sizes


def _source(method: str, step: int, k: int, last: bool, forced: bool = False) -> Source:
    if last or (step == 0 and method not in ONE_EVENT):  # the bonus token; the prefill's token
        return Source.MODEL  # the bonus token
    if forced:
        return Source.GRAMMAR
    if method == "logits" or (method == "racer" and (step + k) % 3 == 2):
        return Source.LOGITS
    return Source.RETRIEVAL


@dataclass
class FakeConversation:
    engine: FakeEngine
    system_prompt: str | None = None
    warm_from: FakeConversation | None = None
    learn: bool = False
    notice: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    images: dict[int, tuple] = field(default_factory=dict)  # message index -> its images, as the real one

    def send(self, user_text: str, config: GenerationConfig, should_stop: ShouldStop | None = None,
             images: Sequence[Any] = (), prefill: str = "",
             tools: Sequence[dict[str, Any]] | None = None) -> Iterator[StepEvent]:
        engine = self.engine
        check_for(engine, config, images=bool(images))
        if prefill and engine.vision:
            raise InputError("an assistant prefill is supported for text-only models only")
        if user_text or not self.messages or self.messages[-1]["role"] != "tool":  # the real one's rule
            self.messages.append({"role": "user", "content": user_text})
        engine.images.append([(i.path, i.sha256) for i in images])
        if images:
            self.images[len(self.messages) - 1] = tuple(images)
        engine.prompts.append((user_text, list(self.messages)))
        engine.tools_sent.append(None if tools is None else list(tools))
        engine.configs.append(config)
        engine.learned.append(self.learn)
        if engine.fail_with is not None:
            raise engine.fail_with
        emitted = yield from engine.reply_steps(user_text, config, should_stop)
        self.messages.append({"role": "assistant", "content": prefill + emitted})

    def prompt_ids(self, enable_thinking: bool | None = False, prefill: str = "",
                   tools: Sequence[dict[str, Any]] | None = None) -> list[int]:
        """Each message's words after 4 template tokens, then 3 for the reply's start and the prefill's words."""
        return self.engine.chat_ids(self.messages, prefill)


@dataclass
class FakeEngine:
    info: EngineInfo = field(default_factory=lambda: EngineInfo("fake-model", "cpu", "float32"))
    reply: str = REPLY
    vary: bool = False
    gate_after: int | None = None  # hold once this many steps were made (all replies together)
    fail_with: Exception | None = None
    step_hook: Callable[[str], None] | None = None
    clock: FakeClock | None = None
    curve: Callable[[int], float] | None = None  # prices each step's rows (StepEvent.curve_s)
    slowdown: float = 1.0  # steps take this many times STEP_TIMES
    diverge: frozenset[str] = frozenset()
    forced: bool = False
    vision: bool = False
    images: list[list[tuple[str, str]]] = field(default_factory=list)  # (path, sha256) per message sent
    prompts: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)
    tools_sent: list[list[dict[str, Any]] | None] = field(default_factory=list)  # per send: the template's tools
    template_tools: str | None = None  # tool_syntax: the syntax its "template" writes (None: the generic form)
    conversations: list[FakeConversation] = field(default_factory=list)
    configs: list[GenerationConfig] = field(default_factory=list)
    learned: list[bool] = field(default_factory=list)  # per send: did the chat learn (racer_core/drafting/corpus.py)
    forgotten: int = 0  # forget_chats calls
    refreshes: int = 0  # refresh_cost_curve calls
    completions: list[tuple[str, GenerationConfig]] = field(default_factory=list)  # (text, config) per complete
    notice: str | None = None  # what a learning conversation reports when opened (a damaged corpus)
    context_limit: int | None = 8192  # the model's maximum tokens; None: it cannot say
    paused: threading.Event = field(default_factory=threading.Event)
    total_steps: int = 0
    _release: threading.Event = field(default_factory=threading.Event)

    @property
    def calls(self) -> list[tuple[str, str]]:
        """(method, user text) of every send, in order."""
        return [(c.method, text) for c, (text, _) in zip(self.configs, self.prompts, strict=True)]

    def reply_for(self, user_text: str) -> str:
        if not self.vary:
            return self.reply
        words = tokenize(self.reply)
        return "".join(words[: len(words) - zlib.crc32(user_text.encode()) % 20])

    def token_text(self, token_id: int) -> str:
        return fake_token_text(tokenize(self.reply), token_id)

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
        self, system_prompt: str | None = None, warm_from: FakeConversation | None = None, learn: bool = False
    ) -> FakeConversation:
        conv = FakeConversation(self, system_prompt, warm_from, learn, self.notice if learn else None)
        if system_prompt:
            conv.messages.append({"role": "system", "content": system_prompt})
        self.conversations.append(conv)
        return conv

    @property
    def reads_images(self) -> bool:
        return self.vision

    @property
    def tool_syntax(self) -> str | None:
        return self.template_tools

    def text_ids(self, text: str) -> list[int]:
        """A token id per word (as the replies are cut), from its text."""
        return [TEXT_IDS + zlib.crc32(word.encode()) % TEXT_IDS for word in tokenize(text)]

    def chat_ids(self, messages: Sequence[dict[str, str]], prefill: str = "") -> list[int]:
        """`messages` as this model reads them: 4 template tokens and the words of each, 3 for the reply's start."""
        ids = [tid for m in messages for tid in (*TEMPLATE_IDS, *self.text_ids(m["content"]))]
        return [*ids, *TEMPLATE_IDS[:3], *self.text_ids(prefill)]

    def complete(self, text: str, config: GenerationConfig, should_stop: ShouldStop | None = None) -> Iterator[StepEvent]:
        if not text:
            raise InputError("the prompt is empty")
        check_for(self, config)
        self.completions.append((text, config))
        return self.reply_steps(text, config, should_stop)

    def reply_steps(self, prompt: str, config: GenerationConfig,
                    should_stop: ShouldStop | None) -> Generator[StepEvent, None, str]:
        """The scripted reply to `prompt`, one event per step; returns its text."""
        method = config.method
        words = tokenize(self.reply_for(prompt))
        reason = "eos" if len(words) < config.max_new_tokens else "length"
        words = words[: config.max_new_tokens]
        drafting = method in DRAFTING
        budget = 16 if config.max_num_draft == "auto" else int(config.max_num_draft)
        id_base = 1000 + (DIVERGED_IDS if method in self.diverge else 0)
        emitted: list[str] = []
        i = 0
        root = PROMPT_END  # each step's tree grows below the last step's bonus token
        sizes = _chunk_sizes(method, len(words))
        for step, n in enumerate(sizes):
            self.hold_at_gate(should_stop)
            if should_stop is not None and should_stop():
                yield StepEvent(step + 1, (), 0, budget, 0.0, 0.0, 0.0, True, "cancelled")
                return "".join(emitted)
            chunk = words[i : i + n]
            grammar = self.forced and config.grammar is not None and step % 2 == 1  # event step + 1 is even
            pieces = tuple(
                TokenPiece(id_base + i + k, text, _source(method, step, k, k == len(chunk) - 1, grammar))
                for k, text in enumerate(chunk)
            )
            if self.step_hook is not None:
                self.step_hook(method)
            i += n
            self.total_steps += 1
            emitted.extend(chunk)
            times = tuple(t * self.slowdown for t in STEP_TIMES)
            if self.clock is not None:
                self.clock.advance(sum(times))
            last = step == len(sizes) - 1
            prefill = step == 0 and method not in ONE_EVENT
            record = None if prefill else fake_record(method, step + 1, pieces, root, budget)
            root = pieces[-1].token_id
            priced = self.curve is not None and record is not None
            yield StepEvent(
                step + 1, pieces, budget if drafting and not prefill else 1, budget, *times, last,
                reason if last else None, record, curve_s=self.curve(record.fed) if priced else None,
            )
        if not sizes:
            yield StepEvent(1, (), 1, budget, *STEP_TIMES, True, reason)
        return "".join(emitted)

    def forget_chats(self) -> None:
        self.forgotten += 1

    def context_usage(self, messages: Sequence[dict[str, str]],
                      images: Mapping[int, Sequence[Any]] | None = None) -> ContextUsage | None:
        """The chat's tokens as chat_ids counts them (none for no chat)."""
        if self.context_limit is None:
            return None
        return ContextUsage(len(self.chat_ids(messages)) if messages else 0, self.context_limit)

    def refresh_cost_curve(self) -> None:
        """The scripted curve is not measured: the call is only counted."""
        self.refreshes += 1

    def batched(self, max_rows: int = 256) -> None:
        """No batching: the scripted engine serves one request at a time."""
        return None


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


async def ready_chat(pilot):
    """Wait until the engine is loaded and the chat screen is showing."""
    from racer_tui.screens.chat import ChatScreen

    await wait_for(pilot, lambda: pilot.app.engine is not None and isinstance(pilot.app.screen, ChatScreen))
    return pilot.app.screen


async def failed_reply(start_app):
    """The app on an engine whose every reply fails: one message sent, and its
    failed reply over; returns (pilot, the chat screen)."""
    engine = FakeEngine(fail_with=RuntimeError("boom"))
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    await pilot.press(*"hello", "enter")
    await wait_for(pilot, lambda: not chat.generating)
    await pilot.pause()
    return pilot, chat


async def open_dashboard(pilot):
    """The benchmark dashboard (F3), once the model is loaded."""
    from racer_tui.screens.bench import BenchScreen

    await ready_chat(pilot)
    await pilot.press("f3")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, BenchScreen))
    return pilot.app.screen


async def send_a_picture_and_attach_another(pilot, chat, folder) -> None:
    """Send "What is in this picture?" with cat.png (24x16), then attach
    dog.jpg (8x8) to the next message, both made in `folder`."""
    from PIL import Image

    from racer_tui.chat.attachments import read_attachment
    from racer_tui.widgets.chat_image import AttachmentBar

    for name, size in (("cat.png", (24, 16)), ("dog.jpg", (8, 8))):
        Image.new("RGB", size, "orange").save(folder / name)
    chat.attached.append(read_attachment(str(folder / "cat.png")))
    await pilot.press(*"What is in this picture?", "enter")
    await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)
    chat.attached.append(read_attachment(str(folder / "dog.jpg")))
    chat.query_one(AttachmentBar).show(chat.attached)
    await pilot.pause()
