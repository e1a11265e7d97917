"""The engine front ends use: load a model once, open conversations, stream
one StepEvent per forward pass.

    engine = load_engine()                     # the embedded default model
    chat = engine.new_conversation("You are terse.")
    for event in chat.send("Hello", GenerationConfig(method="racer")):
        print(event.text, end="")
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from racer_core.budget import cost_curve as curves
from racer_core.budget import cpu_class
from racer_core.budget.cost_curve import CPU_GRID, CPU_QUICK, GPU_GRID, MAX_MEASUREMENTS, QUICK_ROUNDS, CostCurve
from racer_core.budget.processor import processor, processor_name
from racer_core.budget.tree_policy import TreePolicy
from racer_core.common.capabilities import check_for
from racer_core.common.config import TRANSFORMERS_METHODS
from racer_core.common.errors import InputError
from racer_core.common.events import (
    Alternative,
    ContextUsage,
    EngineInfo,
    GenerationConfig,
    Progress,
    ShouldStop,
    StepEvent,
    TokenLogprob,
    TokenPiece,
)
from racer_core.common.step_record import StepRecord
from racer_core.common.tool_syntax import tool_syntax
from racer_core.drafting.corpus import Corpus, corpus_path
from racer_core.engine.curve_in_background import CurveInBackground, Interrupted
from racer_core.engine.decoder import ModelRuntime, SequenceDecoder
from racer_core.engine.detokenize import IncrementalDecoder
from racer_core.engine.loop import DEFAULT_MAX_ROWS, EngineLoop
from racer_core.engine.multimodal import (
    ChatImage,
    VisionAdapter,
    VisionPrompt,
    load_image,
    split_inline_images,
)
from racer_core.engine.openmp_threads import follow_free_cores, most_threads, release_openmp_workers
from racer_core.models.checkpoint.files import is_vision_config
from racer_core.models.load_options import HALF, LoadOptions
from racer_core.models.loader import LoadedModel, choose_forward, load, load_draft_head
from racer_core.models.reader import LeanModel
from racer_core.verify.kv_cache import TreeCache, stock_tree_cache
from racer_core.verify.tree_attention import TreeMaskBuilder, cache_argument_name, rope_switch_of, sliding_window_of

BURST = 3
"""Passes of one size run back to back in a round of the cost curve's measurement (Engine.time_forward)."""
SETTLE = 6
"""Untimed passes of the smallest size that start each round of that measurement."""


END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "</s>")


def end_of_turn_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """Every id that ends a reply: the generation config's, the tokenizer's
    EOS, and the chat templates' end-of-turn markers present in the vocabulary."""
    ids: set[int] = set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(i) for i in configured)
    if tokenizer is not None:
        if tokenizer.eos_token_id is not None:
            ids.add(int(tokenizer.eos_token_id))
        vocab = tokenizer.get_vocab()
        ids.update(vocab[t] for t in END_OF_TURN_TOKENS if t in vocab)
    return frozenset(ids)



def thinking_switch(enable_thinking: bool | None) -> dict[str, bool]:
    """The chat template's enable_thinking, or nothing when None: then the template decides."""
    return {} if enable_thinking is None else {"enable_thinking": enable_thinking}

class RacerEngine:
    """A loaded model plus what its decoders share (cost curve, budget stats).

    `model` is a transformers model, or a models.reader.LeanModel read straight
    from the checkpoint (the transformers model is then built only if asked
    for, through `engine.model`)."""

    def __init__(self, model: Any, tokenizer: Any, name: str, eos_ids: frozenset[int] | None = None,
                 processor: Any = None, forward: str = "auto", draft_model: str | None = None) -> None:
        head = load_draft_head(model, draft_model, processor) if draft_model else None
        self._start(LoadedModel(model, tokenizer, processor, name, choose_forward(model, forward), head), eos_ids)

    @classmethod
    def from_loaded(cls, loaded: LoadedModel, eos_ids: frozenset[int] | None = None) -> RacerEngine:
        """An engine over a load's result, its forward already chosen (racer_core.models.loader.load)."""
        engine = cls.__new__(cls)
        engine._start(loaded, eos_ids)
        return engine

    def _start(self, loaded: LoadedModel, eos_ids: frozenset[int] | None) -> None:
        model, tokenizer, processor, name = loaded.model, loaded.tokenizer, loaded.processor, loaded.name
        self._model = model
        self.tokenizer = tokenizer
        # A vision-language model with its processor takes images in its prompts.
        self.vision = VisionAdapter(model, processor) if processor is not None and is_vision_config(model.config) else None
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        device = next(model.parameters()).device
        dtype = next(model.parameters()).dtype
        window = sliding_window_of(model.config)
        vocab = int(config.vocab_size)
        self._grid = GPU_GRID if device.type == "cuda" else CPU_GRID
        self._curve: CostCurve | None = None
        self.background: CurveInBackground | None = None  # a measurement waiting for a quiet moment
        self._replies = 0  # replies running now (a background measurement waits for none)
        self._replies_lock = threading.Lock()
        self._stop_measuring: Callable[[], bool] | None = None
        self._policies: dict[str, TreePolicy] = {}
        self._policy_lock = threading.Lock()  # a background measurement swaps the curve (_use_curve)
        self.loop = EngineLoop()  # runs every reply's passes (loop.py)
        self.lean = loaded.lean
        # fp16 weights (half_weights.py) multiply in fp32: the name says which model runs.
        shown = HALF if self.lean is not None and self.lean.half else str(dtype).removeprefix("torch.")
        shown = self.lean.quant if self.lean is not None and self.lean.quant else shown  # a GGUF's own blocks
        self.info = EngineInfo(model=name, device=str(device), dtype=shown,
                               forward="stock" if self.lean is None else "lean",
                               draft_head=None if loaded.head is None else loaded.head.name,
                               cpu=f"{processor_name()}, {cpu_class.capability()}" if device.type == "cpu" else "")
        num_layers = int(config.num_hidden_layers)
        # The most tokens the model takes; None when its config does not say.
        self.context_limit: int | None = int(getattr(config, "max_position_embeddings", 0) or 0) or None
        self.runtime = ModelRuntime(
            model=model,  # called only by the stock forward, never with a LeanModel
            cache_arg="cache" if isinstance(model, LeanModel) else cache_argument_name(model),
            vocab_size=vocab,
            eos_ids=eos_ids if eos_ids is not None else end_of_turn_ids(model, tokenizer),
            max_length=self.context_limit or 1 << 30,
            masks=TreeMaskBuilder(dtype, device, window),
            device=device,
            new_cache=(lambda: TreeCache(num_layers)) if self.lean is not None else lambda: stock_tree_cache(num_layers),
            policy_for=self._policy,
            placeholder_ids=self.vision.placeholder_ids if self.vision else frozenset(),
            eps=float(torch.finfo(dtype).eps),
            lean=self.lean,
            head=loaded.head,
            rope_switch=rope_switch_of(model.config),
            tokenizer=tokenizer,
        )

    @property
    def reads_images(self) -> bool:
        """The Engine protocol's: a vision-language model loaded with its processor."""
        return self.vision is not None

    @property
    def tool_syntax(self) -> str | None:
        """The Engine protocol's: the chat template's own tool-call syntax (racer_core.common.tool_syntax;
        a vision-language model's processor renders its chats: None)."""
        if not hasattr(self, "_tool_syntax"):
            self._tool_syntax = None if self.vision is not None else tool_syntax(self.tokenizer)
        return self._tool_syntax

    @property
    def model(self) -> Any:
        """The transformers model (built now from a LeanModel's checkpoint if
        it was not yet: the `hf` and `pld` anchors and scripts ask for it)."""
        if isinstance(self._model, LeanModel):
            return self._model.transformers_model()
        return self._model

    def _identity(self) -> tuple[str, str, str]:
        """The model's part of the cache keys: name, architectures, parameter count."""
        return (self.info.model, repr(self._model.config.to_dict().get("architectures")),
                str(sum(p.numel() for p in self._model.parameters())))

    # -- the hardware-aware budget ------------------------------------------

    def refresh_cost_curve(self) -> CostCurve:
        """Measure the cost curve again (each size keeps its fastest time over
        this and the stored measurements); the tree policies start afresh on it."""
        self._curve = None
        self._policies.clear()
        return self.cost_curve(refresh=True)

    def cost_curve(self, progress: Progress | None = None, refresh: bool = False, later: bool = False) -> CostCurve:
        """The curve the tree policies weigh (measured once per model, device,
        dtype and processor, then read from the cache). `later`: if it is still to be
        measured, start on the stored or the safe curve and measure in the
        background once the machine and the engine are quiet (curve_in_background.py)."""
        if self._curve is None:
            # v3 (5 Dec 2026): the exact attention shares one row's and a few rows'
            # work among the threads; curves measured before cost 2-4 rows too much.
            # v4 (5 Dec 2026): the VNNI kernel's 2-row and 8-row tiles and the float16
            # cache read in place made 2-8 rows cheaper; a stored curve would overprice them;
            # and each size is timed in back-to-back passes (time_forward), as a reply runs them.
            # v5 (5 Dec 2026): measurements are merged by their shapes (cost_curve.merged); a curve merged
            # size by size from measurements at different speeds could price 2 rows at 1.67x one row.
            # v6 (5 Dec 2026, evening): the 4-bit kernel prefetches its next tile (quant_repack.hpp); one
            # row's linears became 1.2-1.35x cheaper, more rows' less so: a stored curve would underprice trees.
            # v7 (6 Dec 2026): 1-4 rows read the weights in tiles of one group (one stream), 1.1-1.37x
            # cheaper, 5 and more as before; and the final norm runs natively: the same, only more so.
            # v8 (6 Dec 2026): the VNNI build's 512-bit tiles take 10 rows, not 8: 9-16 rows 1.05-1.10x cheaper.
            # v9 (6 Dec 2026, afternoon): rows of at most 1,024 values keep the 256-bit tiles up to 6 rows (8 for
            # Q8_0): a small model's 5-8 rows 1.05-1.19x cheaper (quant_repack_wide.hpp's NARROW_COLS).
            key = ("v9", *self._identity(), self.info.device, self.info.dtype,
                   str(most_threads()), torch.__version__)  # what a quiet machine's steps run on
            if self.lean is not None:  # the two forwards cost differently; a stock engine keeps its curves
                key = (*key, "lean", *self.lean.cost_identity())
            key = (*key, *cpu_class.limits())  # a limited CPU class (cpu_class.py) costs differently
            # and another processor of the same class too (a home directory's cache moves between machines)
            if self.runtime.device.type == "cpu":
                key = (*key, f"processor {processor()}")
            elif self.runtime.device.type == "cuda":
                key = (*key, f"gpu {torch.cuda.get_device_name(self.runtime.device)}")
            def told(measurement: int) -> None:
                if progress:
                    progress(measuring_message(measurement, refresh), None)

            # A CPU measures a few sizes briefly (the grid between is interpolated).
            quick = CPU_QUICK if self.runtime.device.type == "cpu" else None
            measure = functools.partial(self.time_forward, rounds=QUICK_ROUNDS) if quick else self.time_forward
            # looked up on the module: the tests script it (tests/conftest.py)
            curve = curves.load_or_measure(key, self._grid, measure, told, quick, refresh,
                                           later=self._measure_later if later else None)
            if self._curve is None:  # (a background measurement may have come first; _policy holds the policy lock)
                self._curve = curve
        return self._curve

    def curve_seconds(self, record: StepRecord | None) -> float | None:
        """What the cost curve says a step with `record`'s rows costs; None
        without a record (the prefill, the anchors) or a measured curve."""
        curve = self._curve
        if record is None or curve is None or curve.provisional:
            return None
        return curve(record.fed)

    def _measure_later(self, measure: Callable[[], CostCurve]) -> None:
        """Run `measure` (load_or_measure's) in the background: see curve_in_background.py."""
        def interruptible() -> CostCurve:
            with self._measuring():
                return measure()

        self.background = CurveInBackground(interruptible, self._use_curve, lambda: self._replies == 0)
        self.background.start()

    @contextlib.contextmanager
    def _measuring(self) -> Iterator[None]:
        """While a background measurement runs, its forwards stop at a reply's start."""
        self._stop_measuring = lambda: self._replies > 0
        try:
            yield
        finally:
            self._stop_measuring = None

    def _use_curve(self, curve: CostCurve) -> None:
        """From now on the policies weigh `curve` (keeping what they learned of the acceptance)."""
        with self._policy_lock:
            self._curve = curve
            for policy in self._policies.values():
                policy.use_curve(curve)

    @contextlib.contextmanager
    def replying(self) -> Iterator[None]:
        """Count a running reply (a background measurement waits, or stops, for it)."""
        with self._replies_lock:
            self._replies += 1
        try:
            yield
        finally:
            with self._replies_lock:
                self._replies -= 1

    def time_forward(self, sizes: Sequence[int], context: int = 256, rounds: int = 5) -> list[float]:
        """Seconds to verify each of `sizes` tree tokens after `context` cached ones.

        Sizes are timed in interleaved rounds and the fastest round is kept:
        the cost without interference, so that another busy process during
        the measurement does not distort the curve that is kept.

        In a round each size runs BURST passes back to back and only those
        after the first are timed: a reply's steps follow one another within
        a fraction of a millisecond, while the first pass after the Python
        between sizes finds the OpenMP workers asleep and pays their waking.
        Timed alone, a one-row pass cost 1.3-1.5x what it costs inside a reply
        (5 Dec 2026: 6.2-7.2 ms against a reply's 4.3-4.8), which made every
        larger tree look cheaper beside it than it is.

        The engine loop's thread, idle between replies for a while, is ended
        first (it starts again at the next reply): its OpenMP workers beside
        this thread's would stop every worker's spinning and inflate the
        curve, one-row steps most (openmp_threads.py). It runs only with no
        reply in flight (a background measurement stops at a reply's start).
        """
        self.loop.close()
        decoder = SequenceDecoder(self.runtime)
        rt = self.runtime
        gen = torch.Generator().manual_seed(0)
        prompt = torch.randint(0, rt.vocab_size, (context,), generator=gen).tolist()
        best = [float("inf")] * len(sizes)
        with torch.inference_mode():
            decoder._prefill(prompt)
            for round_index in range(rounds + 1):
                # A pass right after a much larger one is slower for a while (5 Dec 2026: one row 7.3 ms
                # after a 64-row pass, 5.0 ms eight passes later, 4.4 ms after a 4-row pass), and a
                # reply's small trees follow small ones: the round's first size settles before it is timed.
                self._passes(decoder, sizes[0], context, gen, SETTLE)
                for i, size in enumerate(sizes):
                    if self._stop_measuring is not None and self._stop_measuring():
                        raise Interrupted
                    follow_free_cores(rt.lean)
                    seconds = self._passes(decoder, size, context, gen, BURST)
                    if round_index:  # round 0 pays for first-call allocations, a burst's first pass for waking
                        best[i] = min(best[i], *seconds[1:])
        return best

    def _passes(self, decoder: SequenceDecoder, size: int, context: int, gen: torch.Generator,
                count: int) -> list[float]:
        """`count` passes of the same `size` random rows after `context` cached tokens, back to back
        (time_forward's); the seconds of each."""
        rt = self.runtime
        ids = torch.randint(0, rt.vocab_size, (size,), generator=gen).to(rt.device)
        positions = torch.arange(context, context + size, device=rt.device)
        mask = rt.masks.causal(context, size)
        seconds = []
        for _ in range(count):
            start = time.perf_counter()
            decoder._forward(ids, positions, mask)
            if rt.device.type == "cuda":
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
            decoder.cache.truncate(context)
        return seconds

    def _policy(self, method: str) -> TreePolicy:
        """One policy per method, shared by conversations: what it learns about
        this model's acceptance carries over from chat to chat."""
        with self._policy_lock:
            if method not in self._policies:
                self._policies[method] = TreePolicy(self.cost_curve(), largest=self._grid[-1])
            return self._policies[method]

    def batched(self, max_rows: int = DEFAULT_MAX_ROWS) -> EngineLoop | None:
        """The engine loop (loop.py), its passes at most `max_rows` rows, for
        serving concurrent conversations (the API server's continuous
        batching); None where the model has no lean forward (the stock forward
        is not batched: such a server serves one request at a time)."""
        if self.lean is None:
            return None
        self.loop.max_rows = max_rows
        return self.loop

    # -- conversations ---------------------------------------------------------

    def new_conversation(self, system_prompt: str | None = None, warm_from: ChatConversation | None = None,
                         learn: bool = False) -> ChatConversation:
        conversation = ChatConversation(self, system_prompt, self.corpus if learn else None)
        if warm_from is not None:
            conversation.decoder.take_sources_from(warm_from.decoder)
        return conversation

    # -- what chats taught the drafts (docs/design.md 1.9) -----------------------

    @functools.cached_property
    def corpus(self) -> Corpus:
        """This model's chat corpus, read from the user cache on first use.
        Keyed by the model alone: drafts are text, whatever the device or dtype."""
        key = ("corpus-v1", *self._identity(), str(self.runtime.vocab_size))
        return Corpus(corpus_path(key), self.runtime.vocab_size)

    def forget_chats(self) -> None:
        """Clear this model's chat corpus, in memory and on disk."""
        self.corpus.clear()

    def context_usage(self, messages: Sequence[dict[str, str]],
                      images: Mapping[int, Sequence[ChatImage]] | None = None) -> ContextUsage | None:
        """The Engine protocol's: the chat's prompt as the next reply would read it
        (chat_prompt_ids), of the model's maximum."""
        if self.context_limit is None:
            return None
        if not messages:  # a chat template takes no empty chat: nothing is used yet
            return ContextUsage(0, self.context_limit)
        try:
            ids = chat_prompt_ids(self, messages, images or {})
        except Exception:  # noqa: BLE001 - e.g. a template that refuses a system-only chat: sending says why
            return None
        return ContextUsage(len(ids), self.context_limit)

    def decoder(self) -> SequenceDecoder:
        return SequenceDecoder(self.runtime)

    def complete(self, text: str, config: GenerationConfig, should_stop: ShouldStop | None = None) -> Iterator[StepEvent]:
        """Continue `text` as it is (no chat template), one StepEvent per forward pass."""
        if not text:
            raise InputError("the prompt is empty")
        if self.tokenizer is None:
            raise InputError(f"{self.info.model} has no tokenizer: it cannot read text")
        check_for(self, config)
        prompt = self.text_ids(text)
        return step_events(self, self.decoder(), prompt, config, IncrementalDecoder(self.tokenizer), should_stop)

    def text_ids(self, text: str) -> list[int]:
        """`text` as token ids, as a completion reads it (the tokenizer's special tokens included)."""
        return list(self.tokenizer(text)["input_ids"])

    def token_text(self, token_id: int) -> str:
        if self.tokenizer is None:
            return f"<{token_id}>"
        return str(self.tokenizer.decode([token_id]))


class ChatConversation:
    """Messages rendered through the tokenizer's chat template; one decoder
    (cache, automaton, logits table) for the whole conversation."""

    def __init__(self, engine: RacerEngine, system_prompt: str | None = None, corpus: Corpus | None = None) -> None:
        self.engine = engine
        self.messages: list[dict[str, Any]] = []
        self.images: dict[int, tuple[ChatImage, ...]] = {}  # message index -> its attached images
        if system_prompt:
            self.messages.append({"role": "system", "content": system_prompt})
        self.decoder = engine.decoder()
        # With a corpus: drafts start from earlier chats, and this chat is
        # added to it after every reply while `learn` holds.
        self.corpus = corpus
        self.learn = corpus is not None
        self.notice = corpus.take_notice() if corpus is not None else None
        if corpus is not None:
            self._epoch = corpus.epoch
            self.decoder.seed = self._seed
            self.decoder.rows = []

    def _seed(self, automaton: Any) -> None:
        if self.learn and self.corpus is not None:
            self.corpus.seed(automaton)

    def _teach_corpus(self) -> None:
        if self.learn and self.corpus is not None and self.decoder.rows is not None:
            self.corpus.record(self, self.decoder.cached, self.decoder.rows, self._epoch)
            try:
                self.corpus.save()
            except OSError:  # a full or read-only cache loses the corpus, never the reply
                pass

    def vision_prompt(self, enable_thinking: bool | None = False) -> VisionPrompt:
        """The chat through a VL model's processor: each message's images as image parts before its text."""
        return vision_prompt(self.engine, self.messages, self.images, enable_thinking)

    def prompt_ids(self, enable_thinking: bool | None = False, prefill: str = "",
                   tools: Sequence[dict[str, Any]] | None = None) -> list[int]:
        """The chat as the model reads it, up to the reply; `prefill`: the reply's
        given start, which the model continues (a text model's only); `tools`:
        passed to the chat template, which describes them in its own words."""
        return chat_prompt_ids(self.engine, self.messages, self.images, enable_thinking, prefill, tools)

    def send(self, user_text: str, config: GenerationConfig, should_stop: ShouldStop | None = None,
             images: Sequence[ChatImage] = (), prefill: str = "",
             tools: Sequence[dict[str, Any]] | None = None) -> Iterator[StepEvent]:
        """The Conversation protocol's send; `prefill` starts the reply with that
        text (the model continues it; the events carry the continuation only)."""
        # The original CLI's inline syntax: <image>PATH</image> anywhere in the message.
        user_text, inline = split_inline_images(user_text) if "<image>" in user_text else (user_text, [])
        images = [*images, *(load_image(path) for path in inline)]
        answers_tools = not user_text and bool(self.messages) and self.messages[-1]["role"] == "tool"
        if not user_text.strip() and not answers_tools:
            raise InputError("the message is empty")
        check_for(self.engine, config, images=bool(images))
        if prefill and self.engine.vision is not None:
            raise InputError("an assistant prefill is supported for text-only models only")
        if not answers_tools:  # after tool results (the last turns) the reply answers them: no user turn
            self.messages.append({"role": "user", "content": user_text})
        if images:
            self.images[len(self.messages) - 1] = tuple(images)
        try:
            vision = self.vision_prompt(config.enable_thinking) if self.engine.vision is not None else None
            prompt = vision.ids if vision is not None else self.prompt_ids(config.enable_thinking, prefill, tools)
        except BaseException:
            if not answers_tools:
                self._drop_last_user_message()
            raise
        detok = IncrementalDecoder(self.engine.tokenizer)
        try:
            yield from step_events(self.engine, self.decoder, prompt, config, detok, should_stop, vision)
        except BaseException:
            # Keep the conversation consistent: a failed turn leaves no half reply.
            if not answers_tools:
                self._drop_last_user_message()
            raise
        self.messages.append({"role": "assistant", "content": prefill + detok.text()})
        self._teach_corpus()

    def _drop_last_user_message(self) -> None:
        self.images.pop(len(self.messages) - 1, None)
        self.messages.pop()


def vision_prompt(engine: RacerEngine, messages: Sequence[dict[str, str]],
                  images: Mapping[int, Sequence[ChatImage]], enable_thinking: bool | None = False) -> VisionPrompt:
    """`messages` through a VL model's processor: each message's `images` (by
    message index) as image parts before its text."""
    assert engine.vision is not None
    parts = []
    attached: list[ChatImage] = []
    for index, message in enumerate(messages):
        shown = images.get(index, ())
        attached.extend(shown)
        content = [{"type": "image"} for _ in shown] + [{"type": "text", "text": message["content"]}]
        parts.append({"role": message["role"], "content": content})
    return engine.vision.render(parts, attached, enable_thinking)


def chat_prompt_ids(engine: RacerEngine, messages: Sequence[dict[str, Any]],
                    images: Mapping[int, Sequence[ChatImage]], enable_thinking: bool | None = False,
                    prefill: str = "", tools: Sequence[dict[str, Any]] | None = None) -> list[int]:
    """`messages` as the model reads them, up to the reply; `prefill`: the
    reply's given start, which the model continues (a text model's only);
    `tools`: the chat template's (it describes them; a tool turn and an
    assistant turn's tool_calls it renders itself)."""
    if engine.vision is not None:
        if prefill:
            raise InputError("an assistant prefill is supported for text-only models only")
        return vision_prompt(engine, messages, images, enable_thinking).ids
    tokenizer = engine.tokenizer
    if getattr(tokenizer, "chat_template", None):
        turns = [*messages, {"role": "assistant", "content": prefill}] if prefill else list(messages)
        text = tokenizer.apply_chat_template(
            turns, tokenize=False, add_generation_prompt=not prefill, continue_final_message=bool(prefill),
            **({"tools": list(tools)} if tools else {}), **thinking_switch(enable_thinking),
        )
    else:  # a base model: plain concatenation of the turns
        text = "\n\n".join(m["content"] for m in messages) + "\n\n" + prefill
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def step_events(engine: RacerEngine, decoder: SequenceDecoder, prompt: list[int], config: GenerationConfig,
                detok: IncrementalDecoder, should_stop: ShouldStop | None = None,
                vision: VisionPrompt | None = None) -> Iterator[StepEvent]:
    """Decode after `prompt` (token ids) with `decoder`, one StepEvent per
    forward pass, the text cut by `detok`: a chat turn's loop and a completion's."""
    with engine.replying():  # before the first pass: a background measurement stops for it
        if config.method in TRANSFORMERS_METHODS:
            from racer_core.engine.anchors import generate_with_transformers  # transformers is imported only here

            pixels = vision.generate_inputs() if vision is not None else {}
            steps = generate_with_transformers(engine, prompt, config, should_stop, pixels)
        else:  # the engine loop's thread runs the passes; this one reads their Steps
            if config.grammar is not None:  # compiled here (and kept), not on the loop every sequence waits for
                from racer_core.structured.compile import check_grammar

                check_grammar(engine, config.grammar)
            steps = engine.loop.submit(decoder.steps(prompt, config, should_stop, vision))
        yield from _events(engine, steps, detok)


def _events(engine: RacerEngine, steps: Iterator[Any], detok: IncrementalDecoder) -> Iterator[StepEvent]:
    """The decoder's steps as StepEvents, their tokens cut into text by `detok`."""
    for count, step in enumerate(steps, 1):
        texts = detok.push_all(step.tokens)  # the pass's tokens at once
        if step.finish_reason is not None and texts:
            texts[-1] += detok.flush()
        logprobs = _token_logprobs(engine, step.tokens, step.logprobs)
        pieces = tuple(TokenPiece(t, x, s, lp) for t, x, s, lp in zip(step.tokens, texts, step.sources, logprobs,
                                                                       strict=True))
        yield StepEvent(
            step=count, pieces=pieces, tree_size=step.tree_size, budget=step.budget,
            draft_s=step.draft_s, verify_s=step.verify_s, update_s=step.update_s,
            finished=step.finish_reason is not None, finish_reason=step.finish_reason,
            record=step.record, margins=tuple(step.margins), curve_s=engine.curve_seconds(step.record),
        )


def measuring_message(measurement: int, refresh: bool = False) -> str:
    """What the loading screen says while the cost curve is measured (cost_curve.load_or_measure)."""
    if refresh:
        return "Measuring the verification cost of a few tree sizes again (a benchmark measures afresh)..."
    if measurement == 1:
        return ("Measuring the verification cost of a few tree sizes for this model and device "
                f"(measured again at the next start, and at up to {MAX_MEASUREMENTS - 1} later starts "
                "while the machine is busy)...")
    return (f"Measuring the verification cost again (measurement {measurement} of at most {MAX_MEASUREMENTS}: "
            "merged with the earlier one)...")


def _token_logprobs(engine: RacerEngine, tokens: list[int],
                    raw: list[tuple[float, list[tuple[int, float]]]] | None) -> list[TokenLogprob | None]:
    """A step's log-probabilities (racer_core.verify.sampling.token_logprobs) with the tokens' texts."""
    if raw is None:
        return [None] * len(tokens)
    return [TokenLogprob(engine.token_text(t), lp, tuple(Alternative(a, engine.token_text(a), alp) for a, alp in top))
            for t, (lp, top) in zip(tokens, raw, strict=True)]


def load_engine(model_path: str | os.PathLike[str] | None = None, options: LoadOptions | None = None,
                progress: Progress | None = None, measure_later: bool = False, **fields: Any) -> RacerEngine:
    """Load a model (the embedded default when `model_path` is None) with
    `options` (racer_core.models.load_options.LoadOptions; any of its fields by
    keyword overrides it: device, dtype, quantize, trust_remote_code, forward)
    and measure its cost curve (once per model, device and dtype, measured
    again at up to two later starts when the machine was busy, then read
    from the cache); `measure_later`: a chat's, the engine is ready at once and a
    curve still to measure is measured in the background (RacerEngine.cost_curve)."""
    engine = RacerEngine.from_loaded(load(model_path, options, progress, **fields))
    engine.cost_curve(progress, later=measure_later)
    # Every pass runs on the engine loop's thread (loop.py). This thread's
    # OpenMP workers, started by the load and the curve, would keep the loop's
    # from spinning between parallel regions (openmp_threads.py): a program
    # that loaded on one thread and sent from others decoded 8 requests' rows
    # at a third of the speed (a pass of 8 one-row sequences 51-58 ms, 18-20 ms
    # without them).
    release_openmp_workers()
    if progress:
        progress("Ready", 1.0)
    return engine
