"""The decoding loop on token ids: draft a tree, verify it in one forward
pass, accept the longest agreeing path plus a bonus token, update the sources.

`ar`, `racer`, `retrieval`, `logits`, `eagle3` (a draft head's tree,
racer_core/drafting/eagle3.py) and the peers (`suffix`, `recycling`: racer_core/drafting/peers)
all run here, through the same cache, mask and acceptance code; `ar` simply
never drafts. One SequenceDecoder holds one
conversation's cache, automaton and logits table, so a chat keeps its
retrieval corpus across turns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from racer_core.budget.tree_policy import Selection, TreePolicy
from racer_core.common.config import DRAFTING_METHODS, HEAD_METHODS, PEER_METHODS
from racer_core.common.errors import InputError
from racer_core.common.events import GenerationConfig, Source
from racer_core.common.step_record import StepRecord
from racer_core.drafting.automaton import Automaton, DraftTree
from racer_core.drafting.eagle3 import HeadDrafter
from racer_core.drafting.peers import PeerDrafter, new_drafter
from racer_core.engine.multimodal import ImageSpan, VisionPrompt
from racer_core.models.eagle3_head import Eagle3Head
from racer_core.verify.near_tie import tie_margins
from racer_core.verify.penalties import penalties_of
from racer_core.verify.sampling import TokenSampler, greedy_choices, token_logprobs
from racer_core.verify.tree_attention import TreeMaskBuilder

PREFILL_CHUNK = 256


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
    margins: list[float] = field(default_factory=list)  # per token, greedy only (racer_core.verify.near_tie)
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


def _automaton_key(config: GenerationConfig) -> tuple[int, int, int, int]:
    return (config.ngram, config.max_nodes, config.min_depth, config.max_breadth)


class SequenceDecoder:
    """One growing token sequence (a conversation) and its drafting state."""

    def __init__(self, runtime: ModelRuntime) -> None:
        self.rt = runtime
        self.cache = runtime.new_cache()
        self.cached: list[int] = []  # tokens whose keys and values are in the cache
        self.seen: list[int] = []  # the token stream the automaton was fed (image placeholders left out)
        self.images: list[ImageSpan] = []  # images whose placeholders are in the cache
        self.offset = 0  # text position = index + offset (the rope delta after images)
        self.automaton: Automaton | None = None
        self._automaton_key: tuple[int, int, int, int] | None = None
        # A chat corpus (racer_core/drafting/corpus.py) seeds every new automaton, and
        # learns each cached position's top-k: `rows` runs beside `cached`.
        self.seed: Callable[[Automaton], None] | None = None
        self.rows: list[np.ndarray | None] | None = None
        # eagle3: the target's auxiliary states per cached position and the head's cache, from the first eagle3 reply
        self.drafter: HeadDrafter | None = None
        self.captured = torch.empty(0)  # the last forward's captured states (eagle3)
        self.peers: dict[str, PeerDrafter] = {}  # the peer methods' drafters, made on first use

    # -- the drafting sources -------------------------------------------------

    def _ensure_automaton(self, config: GenerationConfig) -> Automaton:
        key = _automaton_key(config)
        if self.automaton is None or key != self._automaton_key:
            top_k = min(config.max_breadth, self.rt.vocab_size)
            automaton = Automaton(max_nodes=config.max_nodes, min_depth=config.min_depth, ngram=config.ngram)
            automaton.init_logits(self.rt.vocab_size, max(1, top_k))
            if self.seed is not None and config.max_breadth > 0:  # 0: the table stays empty, unseeded too
                self.seed(automaton)
            if self.seen:
                # New settings: rebuild the retrieval corpus from the history.
                automaton.feed(self.seen)
            self.automaton, self._automaton_key = automaton, key
        return self.automaton

    def take_sources_from(self, other: SequenceDecoder) -> None:
        """Start from another conversation's automaton and logits table."""
        self.automaton, self._automaton_key = other.automaton, other._automaton_key
        self.seen = list(other.seen)
        self.peers = dict(other.peers)  # and the peers' caches and matrices

    # -- the cache ------------------------------------------------------------

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
        if common < len(self.cached):
            self.cache.truncate(common)
            del self.cached[common:]
            if self.rows is not None:
                del self.rows[common:]
        self.images = [span for span in images if span.end <= common]
        if self.drafter is not None:
            self.drafter.truncate(common)
        return prompt[common:]

    def _forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                 capture: tuple[int, ...] = (), **extra: Any) -> torch.Tensor:
        """The logits; with `capture` (eagle3's layer ids) the states entering
        those layers, concatenated, are left in `self.captured`."""
        if self.rt.lean is not None and not extra and positions.ndim == 1:
            if not capture:
                return self.rt.lean(tokens, positions, mask, self.cache)
            logits, self.captured = self.rt.lean(tokens, positions, mask, self.cache, capture=capture)
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

    def _prefill(self, tokens: list[int], update_table: bool, vision: VisionPrompt | None = None,
                 drafter: HeadDrafter | None = None) -> torch.Tensor:
        """Feed new prompt tokens in chunks; return the last position's logits.

        A chunk never splits an image: its pixels go in with the chunk that
        holds all its placeholders, the only time the vision tower runs."""
        last = None
        offset = len(self.cached)
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
            capture = drafter.head.aux_layers if drafter is not None else ()
            logits = self._forward(ids, positions, self.rt.masks.causal(base, len(chunk)), capture=capture, **extra)
            self.cached.extend(chunk)
            if drafter is not None:
                drafter.aux.append(self.captured)
            learned: list[np.ndarray | None] = [None] * len(chunk)
            if update_table and self.automaton is not None:
                rows = [i for i, t in enumerate(chunk) if t not in self.rt.placeholder_ids]
                if rows:
                    top = torch.topk(logits[rows], self.automaton.top_k, dim=-1).indices.cpu().numpy()
                    prev = [self.cached[base + i - 1] if base + i else -1 for i in rows]
                    self.automaton.update(np.asarray([chunk[i] for i in rows], dtype=np.int64), top, prev)
                    for i, row in zip(rows, top, strict=True):
                        learned[i] = row
            if self.rows is not None:
                self.rows.extend(learned)
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
        """Continue the sequence with `prompt` and decode a reply, one Step per forward pass.

        `vision` carries the images of a multimodal prompt (`prompt` is its ids)."""
        self._check_prompt(prompt, config)
        reply = self._new_reply(prompt, config)
        with torch.inference_mode():
            first = self._begin(prompt, reply, vision)
            yield first
            if first.finish_reason:
                return
            root = first.tokens[0]
            try:
                while True:
                    if should_stop is not None and should_stop():
                        yield Step([], [], 0, 0, 0.0, 0.0, 0.0, "cancelled")
                        return
                    step, root = self._step(root, reply)
                    yield step
                    if step.finish_reason:
                        return
            finally:
                if reply.policy is not None:
                    reply.policy.learn(reply.generated, final=True)
                if reply.peer is not None:
                    reply.peer.finish()

    def _step(self, root: int, reply: _Reply) -> tuple[Step, int]:
        """One forward pass: draft a tree under `root`, verify it, accept the
        longest path the model agrees with plus a bonus token, update the cache
        and the sources. Returns the Step and the next root (the bonus).

        The three phases are separate so that a batched server can run many
        conversations' `prepare`d trees through one pass (LeanForward.batch)."""
        pending = self.prepare(root, reply)
        logits = self._forward(pending.ids, pending.positions, pending.mask, capture=pending.capture)
        return self.complete(pending, logits)

    def prepare(self, root: int, reply: _Reply) -> Pending:
        """Draft this step's tree under `root` and lay out what the pass feeds."""
        t0 = time.perf_counter()
        base = len(self.cached)
        prev = self.cached[-1] if self.cached else -1  # the token before the root
        if reply.drafter is not None:
            draft = _head_draft(reply.drafter, self.cached, root, reply.config)
        elif reply.peer is not None:
            draft = _peer_draft(root, reply.peer, reply.budget)
        else:
            draft = _draft(root, reply.automaton, reply.policy, reply.budget, prev)
        if _straddles(self.rt.rope_switch, base + self.offset, draft.depths):
            # One pass ropes all its nodes on one side of the switch; plain
            # decoding ropes each on its own: the few steps before it verify the root alone.
            draft = _draft(root, None, None, None)
        if reply.policy is not None and draft.full is not None:
            reply.policy.record(draft.full, len(reply.generated) - 1, draft.selection)
        mask = self.rt.masks.build(base, draft.ancestors, draft.depths)
        ids = torch.from_numpy(draft.fed_tokens).to(self.rt.device)
        positions = torch.from_numpy(draft.depths + base + self.offset).to(self.rt.device)
        capture = reply.drafter.head.aux_layers if reply.drafter is not None else ()
        return Pending(reply, root, prev, base, draft, ids, positions, mask, capture, t0, time.perf_counter())

    def complete(self, pending: Pending, logits: torch.Tensor) -> tuple[Step, int]:
        """Accept along the verified tree's `logits` (one row per fed token or
        per node), commit the cache and teach the sources."""
        reply, draft, base, prev, root = pending.reply, pending.draft, pending.base, pending.prev, pending.root
        logits = logits[: draft.size]  # padding rows are dropped
        if self.rt.device.type == "cuda":
            torch.cuda.synchronize()  # so verify_s is the forward pass alone
        t2 = time.perf_counter()
        path, bonus = _accept(logits, draft.tokens, draft.parents, reply.sampler, reply.generated)
        tokens, sources, reason = reply.take(draft, path, bonus, self.rt.eos_ids)
        # node path[i] chose token i: its logits' top-2 gap is that token's tie margin
        margins = self._margins(logits[path[: len(tokens)]], reply) if tokens else []
        self.cache.commit(base, path)
        self.cached.extend(int(draft.tokens[i]) for i in path)
        if reply.drafter is not None:
            reply.drafter.aux.append(self.captured[path])
        top = self._learn(reply, draft, logits, [root, *tokens[:-1]], prev)
        if reply.peer is not None:  # a peer learns its own way: the tree's logits, the emitted text
            reply.peer.verified(draft.tokens, logits)
            reply.peer.emitted(tokens)
        if self.rows is not None:
            self.rows.extend(top[path] if top is not None else [None] * len(path))
        record = _record(draft, path, bonus, reply.policy is not None)
        t3 = time.perf_counter()
        step = Step(tokens, sources, draft.size, draft.fed, pending.t1 - pending.t0, t2 - pending.t1, t3 - t2,
                    reason, record, margins, _logprobs(reply, logits[path[: len(tokens)]], tokens))
        return step, bonus

    def _margins(self, rows: torch.Tensor, reply: _Reply) -> list[float]:
        """Tie margins of the rows that chose tokens; greedy only (sampling needs no accounting)."""
        return tie_margins(rows, self.rt.eps) if reply.sampler.greedy else []

    def _check_prompt(self, prompt: list[int], config: GenerationConfig) -> None:
        # The config checked its own fields; what is left depends on this model.
        if config.method not in ("ar", *DRAFTING_METHODS, *HEAD_METHODS, *PEER_METHODS):
            raise InputError(f"unknown decoding method {config.method!r}")
        if config.method in HEAD_METHODS and self.rt.head is None:
            raise InputError(f"{config.method} needs a draft head: give one with --draft-model PATH "
                             "(a folder or hub id of an EAGLE-3 head for this model)")
        if not prompt:
            raise InputError("the prompt is empty")
        if len(prompt) >= self.rt.max_length:
            raise InputError(f"the prompt has {len(prompt)} tokens; this model takes at most {self.rt.max_length - 1}")
        bad = [t for t in prompt if not 0 <= t < self.rt.vocab_size]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the model's vocabulary of {self.rt.vocab_size}")

    def _new_reply(self, prompt: list[int], config: GenerationConfig) -> _Reply:
        drafting = config.method in DRAFTING_METHODS
        budget = None if config.max_num_draft == "auto" else int(config.max_num_draft)
        return _Reply(
            sampler=TokenSampler(config.temperature, config.top_p, config.seed, self.rt.device,
                                 config.sample_top_k, config.min_p, penalties_of(config), prompt),
            max_new=min(config.max_new_tokens, self.rt.max_length - len(prompt)),  # >= 1: the prompt fits
            automaton=self._ensure_automaton(config) if drafting else None,
            policy=self.rt.policy_for(config.method) if drafting and budget is None else None,
            budget=budget,
            # ngram 0 or max_breadth 0 turns that source off, as the original's flags do
            use_trie=config.method in ("racer", "retrieval") and config.ngram > 0,
            use_table=config.method in ("racer", "logits") and config.max_breadth > 0,
            drafter=self._drafter() if config.method in HEAD_METHODS else None,
            config=config,
            peer=self._peer(config.method) if config.method in PEER_METHODS else None,
        )

    def _drafter(self) -> HeadDrafter:
        """The conversation's head state; positions cached while another method
        ran have no auxiliary states, so they are verified again (prefilled)."""
        assert self.rt.head is not None
        if self.drafter is None:
            self.drafter = HeadDrafter(self.rt.head)
        missing_from = self.drafter.aux.length
        if missing_from < len(self.cached):
            self.cache.truncate(missing_from)
            del self.cached[missing_from:]
            if self.rows is not None:
                del self.rows[missing_from:]
            self.images = [span for span in self.images if span.end <= missing_from]
            self.drafter.truncate(missing_from)
        return self.drafter

    def _peer(self, method: str) -> PeerDrafter:
        if method not in self.peers:
            self.peers[method] = new_drafter(method, self.rt.vocab_size)
        return self.peers[method]

    def _begin(self, prompt: list[int], reply: _Reply, vision: VisionPrompt | None) -> Step:
        """Prefill what the cache lacks and sample the reply's first token."""
        start = time.perf_counter()
        fresh = self._sync_prompt(prompt, vision.spans if vision else [])
        self.offset = vision.offset if vision else 0
        logits = self._prefill(fresh, update_table=reply.use_table, vision=vision, drafter=reply.drafter)
        if reply.automaton is not None and reply.use_trie:
            text = [t for t in prompt if t not in self.rt.placeholder_ids]
            reply.automaton.feed(text[_common_prefix(self.seen, text) :])
            self.seen = text
        if reply.peer is not None:
            reply.peer.start([t for t in prompt if t not in self.rt.placeholder_ids])
        root = reply.sampler.sample(reply.sampler.penalized(logits, ()))
        reply.generated.append(root)
        if reply.peer is not None:
            reply.peer.emitted([root])
        reason = "eos" if root in self.rt.eos_ids else ("length" if reply.max_new <= 1 else None)
        # The root is fed with the step that verifies it: retrieval for a
        # root reads the text up to, not including, that root.
        margins = self._margins(logits[None, :], reply)
        return Step([root], [Source.MODEL], len(fresh), 1, 0.0, time.perf_counter() - start, 0.0, reason,
                    margins=margins, logprobs=_logprobs(reply, logits[None, :], [root]))

    def _learn(
        self, reply: _Reply, draft: _Draft, logits: torch.Tensor, emitted: list[int], prev: int
    ) -> np.ndarray | None:
        """Teach the sources what this step saw: the logits table every tree
        node's top choices (keyed by the node's token and by (its parent's
        token, its token); `prev` is the root's previous token), the automaton
        the emitted text, the policy the acceptance. Returns the nodes' top-k
        (None when the table is not used)."""
        automaton = reply.automaton
        top = None
        if automaton is not None:
            if reply.use_table:
                top = torch.topk(logits, automaton.top_k, dim=-1).indices.cpu().numpy()
                before = np.where(draft.parents >= 0, draft.tokens[np.maximum(draft.parents, 0)], prev)
                automaton.update(draft.tokens, top, before)
            if reply.use_trie:
                fed = [t for t in emitted if t not in self.rt.placeholder_ids]
                automaton.feed(fed)
                self.seen.extend(fed)
        if reply.policy is not None:
            reply.policy.learn(reply.generated)
        return top


@dataclass
class _Reply:
    """What one reply carries from step to step."""

    sampler: TokenSampler
    max_new: int
    automaton: Automaton | None  # None: plain decoding, no drafts
    policy: TreePolicy | None  # None: a fixed budget (or no drafts)
    budget: int | None
    use_trie: bool
    use_table: bool
    drafter: HeadDrafter | None = None  # eagle3: the draft head's state
    config: GenerationConfig | None = None
    peer: PeerDrafter | None = None  # a peer method's drafter (then automaton and policy are None)
    generated: list[int] = field(default_factory=list)

    def take(
        self, draft: _Draft, path: list[int], bonus: int, eos_ids: frozenset[int]
    ) -> tuple[list[int], list[Source], str | None]:
        """The accepted drafts plus the bonus, cut after an end-of-turn token
        or at the length limit; returns (tokens, sources, finish reason)."""
        tokens = [int(draft.tokens[i]) for i in path[1:]] + [bonus]
        sources = [_source(int(draft.sources[i])) for i in path[1:]] + [Source.MODEL]
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


@dataclass
class _Draft:
    """The tree to verify this step; `fed_tokens` may carry padding past `size`."""

    tokens: np.ndarray
    parents: np.ndarray
    depths: np.ndarray
    ancestors: np.ndarray
    sources: np.ndarray
    fed_tokens: np.ndarray
    full: DraftTree | None  # the whole drafted tree the policy chose from
    context: np.ndarray | None = None  # per node, as DraftTree's (None for plain decoding)
    rank: np.ndarray | None = None
    drafted: int = 1  # nodes in the tree the budget was cut from
    selection: Selection | None = None  # the policy's choice and what led to it
    rule: str | None = None  # the step record's budget rule, where not racer's

    @property
    def size(self) -> int:
        return len(self.tokens)

    @property
    def fed(self) -> int:
        return len(self.fed_tokens)


@dataclass
class Pending:
    """A prepared step: the drafted tree and what its pass feeds (SequenceDecoder.prepare)."""

    reply: _Reply
    root: int
    prev: int  # the token before the root
    base: int  # cached length before the tree
    draft: _Draft
    ids: torch.Tensor
    positions: torch.Tensor
    mask: torch.Tensor
    capture: tuple[int, ...]
    t0: float
    t1: float


def _draft(
    root: int, automaton: Automaton | None, policy: TreePolicy | None, budget: int | None, prev: int = -1
) -> _Draft:
    if automaton is None:  # plain decoding: the root alone
        one = np.array([root], dtype=np.int64)
        return _Draft(one, np.array([-1]), np.zeros(1, dtype=np.int64), np.ones((1, 1), dtype=bool),
                      np.zeros(1, dtype=np.uint8), one, None)
    if policy is None:
        tree = automaton.retrieve(root, budget or 1, prev_token=prev)
        return _Draft(tree.tokens, tree.parents, tree.position_ids, tree.attn_mask, tree.sources, tree.tokens, None,
                      tree.context, tree.rank, tree.size)
    tree = automaton.retrieve(root, policy.largest, prev_token=prev)
    selection = policy.choose(tree)
    chosen, fed = selection.chosen, selection.fed
    remap = np.full(tree.size, -1, dtype=np.int64)
    remap[chosen] = np.arange(len(chosen))
    parents = remap[tree.parents[chosen]]
    parents[0] = -1
    depths = tree.position_ids[chosen]
    ancestors = tree.attn_mask[np.ix_(chosen, chosen)]
    tokens = tree.tokens[chosen]
    pad = fed - len(chosen)
    if pad > 0:
        # Cheaper sizes exist above this one: fill up with rows that see only
        # the cache and themselves; their outputs and cache rows are dropped.
        fed_tokens = np.concatenate([tokens, np.full(pad, root, dtype=np.int64)])
        depths = np.concatenate([depths, np.zeros(pad, dtype=np.int64)])
        padded = np.eye(fed, dtype=bool)
        padded[: len(chosen), : len(chosen)] = ancestors
        ancestors = padded
    else:
        fed_tokens = tokens
    return _Draft(tokens, parents, depths, ancestors, tree.sources[chosen], fed_tokens, tree,
                  tree.context[chosen], tree.rank[chosen], tree.size, selection)


def _straddles(switch: int | None, root: int, depths: np.ndarray) -> bool:
    """Whether a tree whose root sits at position `root` has nodes on both sides of the rope switch."""
    return switch is not None and root < switch <= root + int(depths.max())


def _head_draft(drafter: HeadDrafter, cached: list[int], root: int, config: GenerationConfig | None) -> _Draft:
    """EAGLE-3's dynamic tree under `root` (racer_core/drafting/eagle3.py)."""
    assert config is not None
    tree = drafter.draft(cached, root, config.total_token, config.depth, config.top_k)
    sources = np.full(len(tree.tokens), HEAD_BIT, dtype=np.uint8)
    return _Draft(tree.tokens, tree.parents, tree.depths, tree.ancestors, sources, tree.tokens, None, rule="head")


def _peer_draft(root: int, peer: PeerDrafter, budget: int | None) -> _Draft:
    """A peer's own tree (its own size, or at most a fixed budget), in the form the verifier takes."""
    tree = peer.draft(root, budget)
    size = len(tree.tokens)
    sources = np.full(size, peer.source_bits, dtype=np.uint8)
    sources[0] = 0
    return _Draft(tree.tokens, tree.parents, tree.depths, tree.ancestors, sources, tree.tokens, None,
                  np.zeros(size, dtype=np.int64), np.full(size, -1, dtype=np.int64), size, rule="own")


def _record(draft: _Draft, path: list[int], bonus: int, auto: bool) -> StepRecord:
    """The step inspector's copy of what was verified: small lists, no tensors."""
    size = draft.size
    zeros = [0] * size
    selection = draft.selection
    return StepRecord.build(
        draft.tokens, draft.parents, draft.depths[:size], draft.sources,
        draft.context if draft.context is not None else zeros,
        draft.rank if draft.rank is not None else [-1] * size,
        path, bonus, draft.fed, draft.drafted,
        draft.rule or ("plain" if draft.context is None else ("auto" if auto else "fixed")),
        None if selection is None else selection.probabilities[selection.chosen],
        () if selection is None else selection.options,
        -1 if selection is None else selection.best,
        "" if selection is None else selection.gate,
        selection is not None and selection.intended is not None,
    )


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


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


HEAD_BIT = 4  # a node drafted by an EAGLE-3 head (the automaton's bits are 1 and 2)


def _logprobs(reply: _Reply, rows: torch.Tensor, tokens: list[int]) -> list[tuple[float, list[tuple[int, float]]]] | None:
    """The tokens' log-probabilities from the rows that chose them, only when the reply asks."""
    wanted = reply.config.logprobs if reply.config is not None else None
    return None if wanted is None else token_logprobs(rows, tokens, wanted)


def _source(bits: int) -> Source:
    if bits & HEAD_BIT:
        return Source.HEAD
    return Source.RETRIEVAL if bits & 1 else Source.LOGITS


def _accept(logits: torch.Tensor, tokens: np.ndarray, parents: np.ndarray, sampler: TokenSampler,
            generated: Sequence[int] = ()) -> tuple[list[int], int]:
    """Walk the tree from the root along the model's choices (docs/design.md 1.5).

    Greedy: the argmax at each node. Sampling: one sample per visited node,
    shared by every path through it, which keeps the target distribution.
    With penalties each visited node's row is penalized for `generated` (the
    reply so far, the root included) plus the path's tokens down to it.
    Returns the accepted node indices (root first) and the bonus token.
    """
    children: dict[tuple[int, int], int] = {}
    for index in range(1, len(tokens)):
        children[(int(parents[index]), int(tokens[index]))] = index
    path = [0]
    if sampler.greedy and sampler.penalizer is None:
        choice = greedy_choices(logits)
        node = 0
        while (node, choice[node]) in children:
            node = children[(node, choice[node])]
            path.append(node)
        return path, choice[node]
    node = 0
    before = list(generated) if sampler.penalizer is not None else []
    while True:
        token = sampler.sample(sampler.penalized(logits[node], before))
        nxt = children.get((node, token))
        if nxt is None:
            return path, token
        node = nxt
        path.append(node)
        before.append(token)
