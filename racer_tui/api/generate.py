"""What a job does on the engine thread: open a conversation per choice, send
the prompt, and hand each step's tokens to the request.

Only the engine's declared interface is used (racer_core.common.events.Engine
and Conversation: a new conversation, its messages and images, `send`,
`prompt_ids` for usage and the context check, `complete` for plain
completions), so the scripted engine of the tests serves too.

Items posted to the request, in order: Started, then per choice its Deltas and
a ChoiceEnd; an exception instead when the request fails (before Started it
becomes the HTTP answer). The worker adds FINISHED.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from racer_core.common.config import SEED_LIMIT, GenerationConfig
from racer_core.common.events import Conversation, Engine, StepEvent, TokenPiece
from racer_tui.api.chat_input import ChatPrompt
from racer_tui.api.protocol import Sampling, bad_request
from racer_tui.api.reply import StopText, Tally
from racer_tui.api.worker import Job

Step = Callable[[Job, StepEvent], None]  # EngineWorker.step: counts a step and tells the observers


@dataclass(frozen=True)
class Started:
    prompt_tokens: int


@dataclass(frozen=True)
class Delta:
    index: int
    pieces: list[TokenPiece]


@dataclass(frozen=True)
class ChoiceEnd:
    index: int
    finish_reason: str  # OpenAI's: "stop" or "length"
    tally: Tally


def check_room(prompt_tokens: int, sampling: Sampling, context: int | None) -> None:
    """A prompt that leaves no room, or a max_tokens beyond the context: a 400."""
    if context is None:
        return
    if prompt_tokens >= context:
        raise bad_request(f"the prompt has {prompt_tokens} tokens; this model takes at most {context - 1}", "messages")
    wanted = sampling.config.max_new_tokens
    if sampling.max_tokens_given and prompt_tokens + wanted > context:
        raise bad_request(
            f"max_tokens {wanted} plus the prompt's {prompt_tokens} tokens exceed the model's context of "
            f"{context} tokens (at most {context - prompt_tokens} here)", "max_tokens")


def choice(config: GenerationConfig, index: int) -> GenerationConfig:
    """Choice i of a seeded request samples with seed + i (the bench's --num-choices rule);
    without a seed every choice is random."""
    if index == 0 or config.seed is None:
        return config
    return replace(config, seed=(config.seed + index) % (SEED_LIMIT + 1))


def chat_work(engine: Engine, prompt: ChatPrompt, sampling: Sampling, step: Step) -> Callable[[Job], None]:
    def work(job: Job) -> None:
        for i in range(sampling.n):
            conv = engine.new_conversation()
            if i == 0:
                job.prompt_tokens = _chat_prompt_length(conv, prompt, sampling.config)
                check_room(job.prompt_tokens, sampling, engine.context_limit)
                job.post(Started(job.prompt_tokens))
            conv.messages = list(prompt.history)
            _set_images(conv, prompt.history_images)
            stops = StopText(sampling.stops)

            def should_stop(stops: StopText = stops) -> bool:
                return job.should_stop() or stops.hit

            events = conv.send(prompt.text, choice(sampling.config, i), should_stop, prompt.attached, prompt.prefill,
                               prompt.tools)
            if not _stream_choice(job, i, events, stops, step):
                return

    return work


def completion_work(engine: Engine, text: str, sampling: Sampling, step: Step) -> Callable[[Job], None]:
    def work(job: Job) -> None:
        job.prompt_tokens = len(engine.text_ids(text))
        check_room(job.prompt_tokens, sampling, engine.context_limit)
        job.post(Started(job.prompt_tokens))
        for i in range(sampling.n):
            stops = StopText(sampling.stops)

            def should_stop(stops: StopText = stops) -> bool:
                return job.should_stop() or stops.hit

            if not _stream_choice(job, i, engine.complete(text, choice(sampling.config, i), should_stop), stops, step):
                return

    return work


def _stream_choice(job: Job, index: int, events: Iterator[StepEvent], stops: StopText, step: Step) -> bool:
    """Pass one choice's steps on; False when the job was cancelled."""
    tally = Tally()
    reason = None
    for event in events:
        tally.add(event)
        step(job, event)
        out = stops.push(event.pieces)
        if out:
            job.post(Delta(index, out))
        if event.finished:
            reason = event.finish_reason
    if job.should_stop():
        return False
    rest = stops.flush()
    if rest:
        job.post(Delta(index, rest))
    if reason == "error":
        raise RuntimeError("the engine failed during the reply")
    job.post(ChoiceEnd(index, "length" if reason == "length" and not stops.hit else "stop", tally))
    return True


def _chat_prompt_length(conv: Conversation, prompt: ChatPrompt, config: GenerationConfig) -> int:
    """The prompt's tokens as `conv` renders them (a model that reads images refuses a prefill here)."""
    asked = [{"role": "user", "content": prompt.text}] if prompt.text else []  # none after tool results
    conv.messages = [*prompt.history, *asked]
    _set_images(conv, {**prompt.history_images, len(prompt.history): prompt.attached} if prompt.attached
                else prompt.history_images)
    length = len(conv.prompt_ids(config.enable_thinking, prompt.prefill, prompt.tools))
    conv.images = {}
    return length


def _set_images(conv: Conversation, images: dict[int, tuple[Any, ...]]) -> None:
    if images:
        conv.images = dict(images)
