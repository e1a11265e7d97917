"""The event stream between the engine and every front end.

Pure Python on purpose: the Textual app and the headless benchmark import this
module without importing torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol

from racer_core.common import registry

# The generation parameters live in config; re-exported for the front ends.
from racer_core.common.config import METHODS, ConfigError, GenerationConfig  # noqa: F401
from racer_core.common.step_record import StepRecord

Source = IntEnum("Source", {spec.name: spec.id for spec in registry.sources()})  # type: ignore[misc]
"""Where a generated token came from: MODEL (the bonus token the model sampled,
or plain decoding's) or one of the drafting sources the methods declare in
racer_core/common/registry.py (RETRIEVAL the automaton, LOGITS the logits
table, HEAD a draft head, SUFFIX a suffix tree, RECYCLED recycled top-k, ...).
Built from the registry, so a new method's source needs no edit here."""


def source_spec(source: int) -> registry.SourceSpec:
    """The registry's description of a source: its API key, label and colour."""
    return _SPECS[int(source)]


_SPECS = {spec.id: spec for spec in registry.sources()}


@dataclass(frozen=True)
class Alternative:
    """A token the model could have chosen, with its log-probability."""

    token_id: int
    text: str  # the token's text on its own
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    """A generated token's log-probability under the model (from the verifier's
    logits row that chose it: what plain decoding computes), and the row's likeliest tokens."""

    text: str  # the token's text on its own (TokenPiece.text may hold back part of a character)
    logprob: float
    top: tuple[Alternative, ...] = ()


@dataclass(frozen=True)
class TokenPiece:
    """One generated token with its decoded text and origin."""

    token_id: int
    text: str
    source: Source
    logprob: TokenLogprob | None = None  # only when the config asks (GenerationConfig.logprobs)


@dataclass(frozen=True)
class StepEvent:
    """One decoding step: one forward pass of the target model."""

    step: int  # 1-based within the reply
    pieces: tuple[TokenPiece, ...]  # the new tokens, accepted drafts then the bonus
    tree_size: int  # draft tree nodes verified this step (1 for plain decoding)
    budget: int  # the draft budget in force this step
    draft_s: float  # building the draft tree and its mask
    verify_s: float  # the model's forward pass (the prefill, for the first event)
    update_s: float  # acceptance, cache pruning, automaton and table updates
    finished: bool = False
    finish_reason: str | None = None  # "eos", "length", "cancelled", "error"
    record: StepRecord | None = None  # the verified draft tree (none for the prefill or the anchors)
    margins: tuple[float, ...] = ()  # per token, its top-2 logit gap in ulps (greedy; racer_core.verify.near_tie)
    curve_s: float | None = None  # the cost curve's seconds for this step's rows (None: no measured curve, or the prefill)

    @property
    def token_ids(self) -> tuple[int, ...]:
        return tuple(p.token_id for p in self.pieces)

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.pieces)

    @property
    def accept_length(self) -> int:
        """Tokens emitted this step, bonus included (MAT counts these)."""
        return len(self.pieces)

    def from_source(self, source: int) -> int:
        """Tokens of this step that `source` proposed."""
        return sum(1 for p in self.pieces if p.source == source)

    @property
    def from_retrieval(self) -> int:
        return self.from_source(Source.RETRIEVAL)

    @property
    def from_logits(self) -> int:
        return self.from_source(Source.LOGITS)


@dataclass(frozen=True)
class EngineInfo:
    model: str  # a short name for display
    device: str  # "cpu", "cuda:0"
    dtype: str  # "float32", "bfloat16"
    forward: str = "stock"  # the verification forward: "lean" (lean_forward.py) or "stock" (transformers')
    draft_head: str | None = None  # the EAGLE-3 draft head's name (method eagle3), when one was loaded
    cpu: str = ""  # on a CPU, which one and the class its libraries run ("AMD EPYC (family 25, model 17), AVX512")


@dataclass(frozen=True)
class ContextUsage:
    """How much of the model's context a chat takes: its tokens as the model
    reads them (up to the reply) and the most the model takes."""

    used: int
    limit: int


ShouldStop = Callable[[], bool]
Progress = Callable[[str, float | None], None]  # (message, fraction done or None)


class Batcher(Protocol):
    """Concurrent conversations' forward passes served together (the engine loop, racer_core/engine/loop.py)."""

    passes: int  # shared passes so far
    rows: int  # their rows, all passes together
    last_rows: int  # rows in the last pass

    def seat(self, engaged: bool = False) -> AbstractContextManager[Any]:
        """Seat the calling thread for one request's generation (the block)."""
        ...


class Conversation(Protocol):
    """A chat whose automaton and logits table persist across turns."""

    messages: list[dict[str, Any]]  # role and content; a tool turn's tool_call_id, an assistant turn's tool_calls
    images: dict[int, tuple[Any, ...]]  # message index -> its attached images (a text-only model's stays empty)
    learn: bool  # add this chat to the model's chat corpus after each reply (only if opened with learn=True)
    notice: str | None  # one line for the user from opening the chat (a damaged corpus moved aside)

    def send(self, user_text: str, config: GenerationConfig, should_stop: ShouldStop | None = None,
             images: Sequence[Any] = (), prefill: str = "",
             tools: Sequence[dict[str, Any]] | None = None) -> Iterator[StepEvent]:
        """Append the user turn (with its images: racer_core.engine.chat_image.ChatImage;
        a text-only model refuses them with an InputError), stream the reply one event per step.

        `prefill` starts the reply with that text: the model continues it and the
        events carry the continuation only (a model that reads images refuses it).
        An empty `user_text` where the last message is a `tool` turn adds no user
        turn: the reply answers the tool results. `tools` (OpenAI's tool objects) go to the chat template, which describes
        them in its own words (Engine.tool_syntax says whether it has any).
        The last event has finished=True. `should_stop` is checked before every
        step; when it returns True the reply ends with finish_reason
        "cancelled" and the conversation keeps what was generated so far.
        A request the method or model cannot serve is refused before any
        step (racer_core.common.capabilities.check_for).
        """
        ...

    def prompt_ids(self, enable_thinking: bool | None = False, prefill: str = "",
                   tools: Sequence[dict[str, Any]] | None = None) -> list[int]:
        """The chat (its messages and images) as the model reads it, up to the
        reply; with `prefill`, ending in that start of the reply; `tools` as send's."""
        ...


class Engine(Protocol):
    info: EngineInfo
    context_limit: int | None  # the most tokens the model takes; None when its config does not say

    @property
    def reads_images(self) -> bool:
        """Whether the model takes images with a message (a vision-language model)."""
        ...

    @property
    def tool_syntax(self) -> str | None:
        """The tool-call syntax the chat template writes itself (racer_core.common.tool_syntax.HERMES),
        or None: the template has no tools (a caller describes them in its own form)."""
        ...

    def token_text(self, token_id: int) -> str:
        """One token's text on its own (the step inspector labels nodes with it)."""
        ...

    def text_ids(self, text: str) -> list[int]:
        """`text` as token ids, as a completion reads it."""
        ...

    def new_conversation(
        self, system_prompt: str | None = None, warm_from: Conversation | None = None, learn: bool = False
    ) -> Conversation:
        """A fresh chat; `warm_from` hands over that chat's automaton and logits
        table instead of starting them empty (the benchmark's --warm); `learn`
        seeds the drafts from earlier chats and adds this one to them
        (racer_core/drafting/corpus.py)."""
        ...

    def complete(self, text: str, config: GenerationConfig, should_stop: ShouldStop | None = None) -> Iterator[StepEvent]:
        """Continue `text` as it is (no chat template), one StepEvent per forward pass."""
        ...

    def forget_chats(self) -> None:
        """Clear what chats taught this model's drafts (its chat corpus)."""
        ...

    def context_usage(self, messages: Sequence[dict[str, str]],
                      images: Mapping[int, Sequence[Any]] | None = None) -> ContextUsage | None:
        """The tokens of the chat `messages` (with `images`: message index -> its
        images, a vision model's) of the model's maximum; None when the engine
        cannot say (its model declares no maximum)."""
        ...

    def refresh_cost_curve(self) -> object:
        """Measure the cost curve again, so a curve stored from a busy moment
        does not shape a benchmark's trees (an engine without one does nothing)."""
        ...

    def batched(self, max_rows: int = ...) -> Batcher | None:
        """Serve concurrent conversations' forward passes together from now on;
        None where the engine cannot (then requests are served one at a time)."""
        ...


EngineFactory = Callable[..., Engine]
