"""The decoding loop on token ids: draft a tree, verify it in one forward
pass, accept the longest agreeing path plus a bonus token, teach the drafter.

Every method of kind drafter or plain in racer_core/common/registry.py runs
here, through the same cache, mask and acceptance code: the decoder knows
only the Drafter protocol (racer_core/drafting/protocol.py) and the Tree it
returns (racer_core/drafting/tree.py); `ar`'s drafter never drafts. One
SequenceDecoder holds one conversation's cache and its drafters, so a chat
keeps what its drafters learned across turns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from racer_core.budget.tree_policy import TreePolicy
from racer_core.common import registry
from racer_core.common.capabilities import check_method
from racer_core.common.errors import InputError
from racer_core.common.events import GenerationConfig, Source
from racer_core.common.step_record import StepRecord
from racer_core.drafting.protocol import Drafter, DrafterSetup
from racer_core.drafting.tree import Tree
from racer_core.engine.multimodal import ImageSpan, VisionPrompt
from racer_core.engine.openmp_threads import follow_free_cores
from racer_core.models.eagle3_head import Eagle3Head
from racer_core.models.lean_forward import Part
from racer_core.structured.reply import ReplyGrammar, start_grammar
from racer_core.verify.near_tie import tie_margins
from racer_core.verify.penalties import penalties_of
from racer_core.verify.sampling import TokenSampler, accept, token_logprobs
from racer_core.verify.tree_attention import TreeMaskBuilder

PREFILL_CHUNK = 256
ALONE = (0, 0)
"""The load of a step decoded alone: no other sequences, no other rows in its pass."""


@dataclass
class Step:
    """What one forward pass produced."""

    tokens: list[int]
    sources: list[Source]
    tree_size: int
    budget: int
    draft_s: float
    verify_s: float
    update_s: float
    finish_reason: str | None = None
    record: StepRecord | None = None  # the verified tree, for the step inspector
    margins: list[float] = field(default_factory=list)  # per token, greedy and config.tie_margins only (near_tie)
    logprobs: list[tuple[float, list[tuple[int, float]]]] | None = None  # per token, when config.logprobs asks


@dataclass(frozen=True)
class ModelRuntime:
    """What every decoder of one loaded model shares."""

    model: Any
    cache_arg: str
    vocab_size: int
    eos_ids: frozenset[int]
    max_length: int
    masks: TreeMaskBuilder
    device: torch.device
    new_cache: Callable[[], Any]
    policy_for: Callable[[str], TreePolicy]
    placeholder_ids: frozenset[int] = frozenset()  # image tokens: never drafted from, never learned
    eps: float = 2.0**-23  # the model dtype's machine epsilon: the resolution of its logits
    lean: Callable[..., Any] | None = None  # the lean text forward (lean_forward.py), where the model has one
    head: Eagle3Head | None = None  # an EAGLE-3 draft head (--draft-model), for method eagle3
    rope_switch: int | None = None  # longrope's first long-factor position (tree_attention.rope_switch_of)
    tokenizer: Any = None  # compiles a reply's grammar for this vocabulary (racer_core/structured)


class SequenceDecoder:
    """One growing token sequence (a conversation) and its drafters."""

    def __init__(self, runtime: ModelRuntime) -> None:
        self.rt = runtime
        self.cache = runtime.new_cache()
        self.cached: list[int] = []  # tokens whose keys and values are in the cache
        self.images: list[ImageSpan] = []  # images whose placeholders are in the cache
        self.offset = 0  # text position = index + offset (the rope delta after images)
        # A chat corpus (racer_core/drafting/corpus.py) seeds every new automaton, and
        # learns each cached position's top-k: `rows` runs beside `cached`.
        self.seed: Callable[[Any], None] | None = None
        self.rows: list[np.ndarray | None] | None = None
        self.drafters: dict[str, Drafter] = {}  # by registry state name, made on first use
        self.captured = torch.empty(0)  # the last forward's captured states (drafters' capture_layers)

    def _setup(self) -> DrafterSetup:
        rt = self.rt
        return DrafterSetup(rt.vocab_size, rt.placeholder_ids, rt.head, rt.policy_for, self.seed)

    def take_sources_from(self, other: SequenceDecoder) -> None:
        """Start from another conversation's drafting state (racer's automaton and table, the peers' caches)."""
        setup = self._setup()
        warm = {name: d.warm_copy(setup) for name, d in other.drafters.items()}
        self.drafters = {name: d for name, d in warm.items() if d is not None}

    def _drafter(self, spec: registry.MethodSpec) -> Drafter:
        if spec.state not in self.drafters:
            self.drafters[spec.state] = spec.load().create(self._setup())
        return self.drafters[spec.state]

    # -- the cache ------------------------------------------------------------

    def _truncate(self, length: int) -> None:
        """Keep the first `length` cached positions, in the cache and every drafter."""
        if length < len(self.cached):
            self.cache.truncate(length)
            del self.cached[length:]
            if self.rows is not None:
                del self.rows[length:]
        for drafter in self.drafters.values():
            drafter.truncate(length)

    def _sync_prompt(self, prompt: list[int], images: list[ImageSpan]) -> list[int]:
        """Reuse the cached prefix of `prompt`; return the tokens still to feed.

        Placeholder tokens of different images are identical, so an image
        counts as shared only when its span and content hash match too, and
        the shared prefix never ends inside an image."""
        common = 0
        limit = min(len(prompt) - 1, len(self.cached))  # feed at least one token for fresh logits
        while common < limit and self.cached[common] == prompt[common]:
            common += 1
        for span in images:
            if span.start < common and (span.end > common or span not in self.images):
                common = span.start
                break
        self._truncate(common)
        self.images = [span for span in images if span.end <= common]
        return prompt[common:]

    def _ask(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
             capture: tuple[int, ...] = (), last_only: bool = False, prompt_left: int = 0, **extra: Any
             ) -> Generator[Forward, torch.Tensor, torch.Tensor]:
        """Ask whoever drives this sequence (`run_alone`, or the engine loop,
        racer_core/engine/loop.py) for the logits of one forward pass (of its
        last row only, with `last_only`, where the lean forward runs it);
        `prompt_left`: a prompt chunk's rows and the prompt's after it."""
        return (yield Forward(self, tokens, positions, mask, capture, extra, last_only, prompt_left))

    def _forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                 capture: tuple[int, ...] = (), last_only: bool = False, **extra: Any) -> torch.Tensor:
        """The logits of a pass of its own, run now on the calling thread; with
        `capture` (layer ids, eagle3's) the states entering those layers,
        concatenated, are left in `self.captured`."""
        if self.rt.lean is not None and not extra and positions.ndim == 1:
            if not capture:
                return self.rt.lean(tokens, positions, mask, self.cache, last_only=last_only)
            logits, self.captured = self.rt.lean(tokens, positions, mask, self.cache, capture=capture,
                                                 last_only=last_only)
            return logits
        # 1D positions are the text ones; (3, T) ones are multimodal rotary positions.
        out = self.rt.model(
            input_ids=tokens[None, :],
            position_ids=positions[None, :] if positions.ndim == 1 else positions[:, None, :],
            attention_mask=mask,
            use_cache=True,
            **{self.rt.cache_arg: self.cache},
            **({"output_hidden_states": True} if capture else {}),
            **extra,
        )
        if capture:  # layers spread over devices (device_map) hand their states to the head's device
            assert self.rt.head is not None
            self.captured = torch.cat([out.hidden_states[i][0].to(self.rt.head.fc.device) for i in capture], dim=-1)
        return out.logits[0]

    def _prefill(self, tokens: list[int], drafter: Drafter | None = None, vision: VisionPrompt | None = None
                 ) -> torch.Tensor:
        """`_feed` with its passes run now on the calling thread."""
        return run_now(self._feed(tokens, drafter, vision))

    def _feed(self, tokens: list[int], drafter: Drafter | None = None, vision: VisionPrompt | None = None
              ) -> Generator[Forward, torch.Tensor, torch.Tensor]:
        """Feed new prompt tokens in chunks, telling `drafter`; return the last position's logits.

        A chunk never splits an image: its pixels go in with the chunk that
        holds all its placeholders, the only time the vision tower runs."""
        last = None
        offset = len(self.cached)
        capture = drafter.capture_layers if drafter is not None else ()
        last_only = drafter is None or not drafter.reads_prompt_logits()
        for start, end in _chunks(len(tokens), offset, vision.spans if vision else []):
            chunk = tokens[start:end]
            base = len(self.cached)
            ids = torch.tensor(chunk, dtype=torch.long, device=self.rt.device)
            extra: dict[str, Any] = {}
            if vision is not None and vision.positions is not None:
                positions = vision.positions[:, base : base + len(chunk)].to(self.rt.device)
            else:
                positions = torch.arange(base, base + len(chunk), device=self.rt.device) + self.offset
            if vision is not None:
                extra = {k: v.to(self.rt.device) for k, v in vision.pixel_inputs(base, base + len(chunk)).items()}
            logits = yield from self._ask(ids, positions, self.rt.masks.causal(base, len(chunk)), capture=capture,
                                          last_only=last_only, prompt_left=len(tokens) - start, **extra)
            self.cached.extend(chunk)
            learned = drafter.prefilled(self.cached, base, logits, self.captured) if drafter is not None else None
            if self.rows is not None:
                self.rows.extend(learned or [None] * len(chunk))
            last = logits[-1]
        if vision is not None:
            self.images = list(vision.spans)
        assert last is not None
        return last

    # -- one reply --------------------------------------------------------------

    def generate(
        self, prompt: list[int], config: GenerationConfig, should_stop: Callable[[], bool] | None = None,
        vision: VisionPrompt | None = None,
    ) -> Iterator[Step]:
        """Continue the sequence with `prompt` and decode a reply, one Step per
        forward pass, the passes run on the calling thread (alone; the engine
        loop drives `steps` instead). `vision` carries the images of a
        multimodal prompt (`prompt` is its ids)."""
        return run_alone(self.steps(prompt, config, should_stop, vision))

    def steps(
        self, prompt: list[int], config: GenerationConfig, should_stop: Callable[[], bool] | None = None,
        vision: VisionPrompt | None = None,
    ) -> Generator[Forward | Step, Any, None]:
        """`generate` as a coroutine: it yields a Forward whenever it needs a
        pass (and is sent that pass's logits) and a Step after each (and is sent
        the next step's load: (other sequences, their rows) in the pass it will
        share; None is ALONE)."""
        self._check_prompt(prompt, config)
        # No inference_mode here: a generator suspended inside one would leave it
        # entered for whoever runs next on the thread; the drivers hold it.
        reply = self._new_reply(prompt, config)
        first = yield from self._begin(prompt, reply, vision)
        load = yield first
        if first.finish_reason:
            return
        root = first.tokens[0]
        try:
            while True:
                if should_stop is not None and should_stop():
                    yield Step([], [], 0, 0, 0.0, 0.0, 0.0, "cancelled")
                    return
                step, root = yield from self._step(root, reply, load or ALONE)
                load = yield step
                if step.finish_reason:
                    return
        finally:
            reply.drafter.finish()

    def _step(self, root: int, reply: _Reply, load: tuple[int, int] = ALONE
              ) -> Generator[Forward, torch.Tensor, tuple[Step, int]]:
        """One forward pass: draft a tree under `root`, verify it, accept the
        longest path the model agrees with plus a bonus token, update the cache
        and the drafter. Returns the Step and the next root (the bonus).

        The three phases are separate so that the engine loop runs many
        conversations' `prepare`d trees through one pass (LeanForward.batch)."""
        pending = self.prepare(root, reply, load)
        logits = yield from self._ask(pending.ids, pending.positions, pending.mask, capture=pending.capture)
        return self.complete(pending, logits)

    def prepare(self, root: int, reply: _Reply, load: tuple[int, int] = ALONE) -> Pending:
        """Draft this step's tree under `root` and lay out what the pass feeds;
        `load`: the other sequences in that pass and their rows (the tree policy weighs the tree against them)."""
        t0 = time.perf_counter()
        base = len(self.cached)
        prev = self.cached[-1] if self.cached else -1  # the token before the root
        tree = reply.drafter.draft(root, prev, reply.budget, load)
        allowed = None
        if reply.grammar is not None:  # pruned, grown by forced tokens, a mask per node
            tree, allowed = reply.grammar.constrain(tree)
        if _straddles(self.rt.rope_switch, base + self.offset, tree.depths):
            # One pass ropes all its nodes on one side of the switch; plain
            # decoding ropes each on its own: the few steps before it verify the root alone.
            tree = Tree.root_only(root)
            allowed = None if allowed is None else allowed[:1]
        tokens, depths, ancestors = tree.padded()
        mask = self.rt.masks.build(base, ancestors, depths)
        ids = torch.from_numpy(tokens).to(self.rt.device)
        positions = torch.from_numpy(depths + base + self.offset).to(self.rt.device)
        capture = reply.drafter.capture_layers
        return Pending(reply, root, prev, base, tree, ids, positions, mask, capture, t0, time.perf_counter(), allowed)

    def complete(self, pending: Pending, logits: torch.Tensor) -> tuple[Step, int]:
        """Accept along the verified tree's `logits` (one row per fed token or
        per node), commit the cache and teach the drafter."""
        reply, tree, base = pending.reply, pending.draft, pending.base
        raw = logits[: tree.size]  # padding rows are dropped
        if self.rt.device.type == "cuda":
            torch.cuda.synchronize()  # so verify_s is the forward pass alone
        t2 = time.perf_counter()
        # Under a grammar each row chooses among its node's allowed tokens, as constrained plain decoding does.
        logits = raw if pending.allowed is None else ReplyGrammar.masked(raw, pending.allowed)
        path, bonus = accept(logits, tree.tokens, tree.parents, reply.sampler, reply.generated)
        tokens, sources, reason = reply.take(tree, path, bonus, self.rt.eos_ids)
        if reply.grammar is not None:
            reply.grammar.advance(tokens)
        # node path[i] chose token i: its logits' top-2 gap is that token's tie margin
        margins = self._margins(logits, path[: len(tokens)], reply)
        self.cache.commit(base, path)
        self.cached.extend(int(tree.tokens[i]) for i in path)
        top = reply.drafter.verified(tree, raw, path, tokens, self.captured)  # it learns the model, not the grammar
        if self.rows is not None:
            self.rows.extend(top[path] if top is not None else [None] * len(path))
        record = StepRecord.of_tree(tree, path, bonus)
        t3 = time.perf_counter()
        step = Step(tokens, sources, tree.size, tree.rows, pending.t1 - pending.t0, t2 - pending.t1, t3 - t2,
                    reason, record, margins, _logprobs(reply, raw, path[: len(tokens)], tokens))
        return step, bonus

    def _margins(self, logits: torch.Tensor, rows: list[int], reply: _Reply) -> list[float]:
        """Tie margins of the `rows` of `logits` that chose tokens, when the config asks; greedy
        only (sampling needs no accounting). Unasked, not even the rows are gathered."""
        if not (rows and reply.margins and reply.sampler.greedy):
            return []
        return tie_margins(logits[rows], self.rt.eps)

    def _check_prompt(self, prompt: list[int], config: GenerationConfig) -> None:
        # The config checked its own fields; what is left depends on this model.
        spec = registry.method(config.method)
        if spec is None or spec.kind == registry.ANCHOR:
            raise InputError(f"unknown decoding method {config.method!r}")
        check_method(config.method, config, head=self.rt.head is not None)  # its library, head, penalties
        if not prompt:
            raise InputError("the prompt is empty")
        if len(prompt) >= self.rt.max_length:
            raise InputError(f"the prompt has {len(prompt)} tokens; this model takes at most {self.rt.max_length - 1}")
        bad = [t for t in prompt if not 0 <= t < self.rt.vocab_size]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the model's vocabulary of {self.rt.vocab_size}")

    def _new_reply(self, prompt: list[int], config: GenerationConfig) -> _Reply:
        spec = registry.method(config.method)
        assert spec is not None
        drafter = self._drafter(spec)
        drafter.configure(config)
        ready = drafter.truncate(len(self.cached))
        if ready < len(self.cached):  # positions the drafter lacks state for are verified again (prefilled)
            self._truncate(ready)
            self.images = [span for span in self.images if span.end <= ready]
        return _Reply(
            sampler=TokenSampler(config.temperature, config.top_p, config.seed, self.rt.device,
                                 config.sample_top_k, config.min_p, penalties_of(config), prompt),
            max_new=min(config.max_new_tokens, self.rt.max_length - len(prompt)),  # >= 1: the prompt fits
            budget=None if config.max_num_draft == "auto" else int(config.max_num_draft),
            drafter=drafter,
            logprobs=config.logprobs,
            margins=config.tie_margins,
            grammar=start_grammar(config.grammar, self.rt.tokenizer, self.rt.vocab_size, self.rt.eos_ids,
                                  drafts=spec.kind != registry.PLAIN),  # ar stays plain decoding
        )

    def _begin(self, prompt: list[int], reply: _Reply, vision: VisionPrompt | None
               ) -> Generator[Forward, torch.Tensor, Step]:
        """Prefill what the cache lacks and sample the reply's first token."""
        start = time.perf_counter()
        fresh = self._sync_prompt(prompt, vision.spans if vision else [])
        self.offset = vision.offset if vision else 0
        raw = yield from self._feed(fresh, reply.drafter, vision)
        logits = raw if reply.grammar is None else ReplyGrammar.masked(raw[None, :], reply.grammar.first())[0]
        root = reply.sampler.sample(reply.sampler.penalized(logits, ()))
        reply.generated.append(root)
        if reply.grammar is not None:
            reply.grammar.advance([root])
        reply.drafter.start([t for t in prompt if t not in self.rt.placeholder_ids], root)
        reason = "eos" if root in self.rt.eos_ids else ("length" if reply.max_new <= 1 else None)
        margins = self._margins(logits[None, :], [0], reply)
        return Step([root], [Source.MODEL], len(fresh), 1, 0.0, time.perf_counter() - start, 0.0, reason,
                    margins=margins, logprobs=_logprobs(reply, raw[None, :], [0], [root]))


@dataclass
class _Reply:
    """What one reply carries from step to step."""

    sampler: TokenSampler
    max_new: int
    budget: int | None  # None: the drafter's own size (racer: the tree policy's)
    drafter: Drafter
    logprobs: int | None = None  # top alternatives per token's log-probability (None: none asked)
    grammar: ReplyGrammar | None = None  # what the reply must match (config.grammar), followed token by token
    margins: bool = False  # each greedy token's tie margin (config.tie_margins: the benchmark's)
    generated: list[int] = field(default_factory=list)

    def take(
        self, tree: Tree, path: list[int], bonus: int, eos_ids: frozenset[int]
    ) -> tuple[list[int], list[Source], str | None]:
        """The accepted drafts plus the bonus, cut after an end-of-turn token
        or at the length limit; returns (tokens, sources, finish reason)."""
        tokens = [int(tree.tokens[i]) for i in path[1:]] + [bonus]
        sources = [Source(int(tree.sources[i])) for i in path[1:]] + [Source.MODEL]
        reason = None
        for i, token in enumerate(tokens):
            if token in eos_ids:
                tokens, sources, reason = tokens[: i + 1], sources[: i + 1], "eos"
                break
        if len(self.generated) + len(tokens) >= self.max_new:
            keep = self.max_new - len(self.generated)
            tokens, sources = tokens[:keep], sources[:keep]
            reason = reason or "length"
        self.generated.extend(tokens)
        return tokens, sources, reason


@dataclass(eq=False)
class Forward:
    """A sequence's request for one forward pass: its rows, their positions and
    mask (over its own cache). The engine loop runs the batchable ones of a
    pass together (LeanForward.batch), any other as a pass of its own."""

    decoder: SequenceDecoder
    ids: torch.Tensor
    positions: torch.Tensor
    mask: torch.Tensor
    capture: tuple[int, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)  # a vision prompt's pixel inputs
    last_only: bool = False  # only the last row's logits are needed (a prompt chunk no drafter reads)
    prompt_left: int = 0  # a prompt chunk's: its rows and the prompt's still to come (0: a step)

    @property
    def rows(self) -> int:
        return int(self.ids.shape[0])

    @property
    def batchable(self) -> bool:
        """Whether the lean forward's batch takes it: text positions, no pixels, no captured states."""
        return (self.decoder.rt.lean is not None and not self.extra and not self.capture
                and self.positions.ndim == 1)

    def part(self) -> Part:
        return Part(self.ids, self.positions, self.mask, self.decoder.cache, last_only=self.last_only)

    def run(self) -> torch.Tensor:
        """This request as a pass of its own, on the calling thread."""
        follow_free_cores(self.decoder.rt.lean)
        return self.decoder._forward(self.ids, self.positions, self.mask, self.capture, self.last_only, **self.extra)


def run_alone(steps: Generator[Forward | Step, Any, None]) -> Iterator[Step]:
    """Drive a sequence's `steps` on the calling thread: each Forward is run
    here as a pass of its own, each Step handed on (its next step alone)."""
    try:
        while True:
            with torch.inference_mode():
                try:
                    item = next(steps)
                    while isinstance(item, Forward):
                        item = steps.send(item.run())
                except StopIteration:
                    return
            yield item
    finally:
        steps.close()  # a reader that stops early still ends the reply (the drafter's finish)


def run_now(feeding: Generator[Forward, torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The return value of a Forward-asking generator (a prompt's `_feed`), its passes run here."""
    with torch.inference_mode():
        try:
            item = next(feeding)
            while True:
                item = feeding.send(item.run())
        except StopIteration as done:
            return done.value


@dataclass
class Pending:
    """A prepared step: the drafted tree and what its pass feeds (SequenceDecoder.prepare)."""

    reply: _Reply
    root: int
    prev: int  # the token before the root
    base: int  # cached length before the tree
    draft: Tree
    ids: torch.Tensor
    positions: torch.Tensor
    mask: torch.Tensor
    capture: tuple[int, ...]
    t0: float
    t1: float
    allowed: np.ndarray | None = None  # under a grammar: per node, the tokens its row may choose


def _straddles(switch: int | None, root: int, depths: np.ndarray) -> bool:
    """Whether a tree whose root sits at position `root` has nodes on both sides of the rope switch."""
    return switch is not None and root < switch <= root + int(depths.max())


def _chunks(count: int, base: int, images: list[ImageSpan]) -> Iterator[tuple[int, int]]:
    """Prefill chunk bounds over `count` new tokens (cache index `base` on);
    a chunk that would end inside an image runs on to the image's end."""
    start = 0
    while start < count:
        end = min(start + PREFILL_CHUNK, count)
        for span in images:
            if span.start - base < end < span.end - base:
                end = span.end - base
        yield start, end
        start = end


def _logprobs(reply: _Reply, logits: torch.Tensor, rows: list[int], tokens: list[int]
              ) -> list[tuple[float, list[tuple[int, float]]]] | None:
    """The tokens' log-probabilities from the `rows` of `logits` that chose them, only when the reply
    asks (unasked, the rows are not even gathered: a copy of vocabulary-wide rows every step): the
    model's own, before any processor (a grammar's mask included, so none is -inf)."""
    return None if reply.logprobs is None else token_logprobs(logits[rows], tokens, reply.logprobs)
