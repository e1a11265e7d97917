"""Shared helpers for the engine tests: tiny models and one-call generation."""

from __future__ import annotations

from functools import cache
from typing import Any

import torch

from racer_core.common.events import GenerationConfig, Source
from racer_core.engine.decoder import SequenceDecoder
from racer_core.engine.engine import RacerEngine
from racer_core.testing import tiny_model

SMALL_VOCAB = 64
PROMPT = [5, 9, 3, 17, 5, 9, 3, 17, 22, 40, 5, 9, 3, 17, 22, 40, 5, 9]


@cache
def engine_for(family: str, markov: bool = False, seed: int = 0) -> RacerEngine:
    """A tiny engine without end-of-turn tokens (replies run to the length).

    `markov` shrinks every attention output so each next token depends
    mostly on the current one: generation falls into cycles, which the
    retrieval automaton then predicts. Attention still contributes, so a wrong
    mask or cache still changes the output.
    """
    model = tiny_model(family, seed, vocab_size=SMALL_VOCAB)
    if markov:
        make_markov(model)
    return RacerEngine(model, None, f"tiny-{family}", eos_ids=frozenset())


def make_markov(model: Any) -> Any:
    """Shrink every attention output (see engine_for): the text falls into cycles the drafts predict."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("o_proj.weight"):
                param.mul_(0.05)
    return model


def run(engine: RacerEngine, prompt: list[int], **config: Any) -> tuple[list[int], dict[Source, int], int]:
    """Generate with a fresh decoder: (tokens, accepted drafts by source, steps).

    The counts leave out Source.MODEL (the bonus token every step adds), so a
    positive sum means drafts were really accepted."""
    steps = list(engine.decoder().generate(prompt, GenerationConfig(**config)))
    tokens = [t for s in steps for t in s.tokens]
    counts = {src: sum(s.sources.count(src) for s in steps[1:]) for src in Source if src != Source.MODEL}
    return tokens, counts, len(steps)


def prompt_logits(forward: Any, layers: int) -> torch.Tensor:
    """A lean forward's logits for PROMPT, fed in two passes (all but the
    last 4 tokens, then those 4 on the cache): prefill and a multi-token step."""
    from racer_core.verify.kv_cache import TreeCache
    from racer_core.verify.tree_attention import TreeMaskBuilder

    ids = torch.tensor(PROMPT)
    masks = TreeMaskBuilder(torch.float32, "cpu", None)
    with torch.inference_mode():
        cache = TreeCache(layers)
        first = forward(ids[:-4], torch.arange(len(ids) - 4), masks.causal(0, len(ids) - 4), cache)
        rest = forward(ids[-4:], torch.arange(len(ids) - 4, len(ids)), masks.causal(len(ids) - 4, 4), cache)
    return torch.cat([first, rest])


def reply_in_a_fresh_process(load_args: str) -> list[str]:
    """In a fresh Python, `load_engine(<load_args>)` and one greedy racer reply;
    returns [transformers imported?, the model's class, the tokenizer's class,
    text came?] as printed words (a start that must not import transformers)."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from racer_core.engine.engine import load_engine\n"
        "from racer_core.common.events import GenerationConfig\n"
        f"engine = load_engine({load_args})\n"
        "chat = engine.new_conversation('You are terse.')\n"
        "config = GenerationConfig(method='racer', max_new_tokens=12)\n"
        "text = ''.join(e.text for e in chat.send('Name three fruits.', config))\n"
        "print('transformers' in sys.modules, type(engine._model).__name__, type(engine.tokenizer).__name__, bool(text))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def racer_and_ar_replies(engine: Any, prompt: str, max_new_tokens: int = 64,
                         budget: int = 16) -> tuple[str, str, list[Any]]:
    """One chat turn each with ar and racer (a fixed budget): (ar's text, racer's text, racer's events)."""
    ar = engine.new_conversation()
    list(ar.send(prompt, GenerationConfig(method="ar", max_new_tokens=max_new_tokens)))
    racer = engine.new_conversation()
    events = list(racer.send(prompt, GenerationConfig(method="racer", max_new_tokens=max_new_tokens,
                                                      max_num_draft=budget)))
    return ar.messages[-1]["content"], racer.messages[-1]["content"], events



# A reply that max_tokens cuts inside its last character (issue 41): the 🚀's
# first bytes come, its last ones never do.
CUT_TEXT = "日本語 🙂 🚀"
CUT_REPLY = "日本語 🙂 "  # what the reply must read: no U+FFFD for the cut 🚀


class ScriptedDecoder:
    """A decoder that answers any prompt with fixed token ids, one per step
    (characters split across steps), the last step finishing with 'length'."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens

    def generate(self, prompt: list[int], config: GenerationConfig, should_stop: Any = None,
                 vision: Any = None) -> Any:
        from racer_core.engine.decoder import Step

        for i, token in enumerate(self.tokens):
            last = i == len(self.tokens) - 1
            yield Step([token], [Source.MODEL], 1, 1, 0.0, 0.0, 0.0, "length" if last else None)

    steps = generate  # the engine loop drives it as it drives a decoder's steps: these ask for no pass


def cut_reply_engine() -> RacerEngine:
    """A tiny engine (the tiny byte-level tokenizer) whose every reply is
    CUT_TEXT's tokens up to the middle of the 🚀."""
    from racer_core.testing import tiny_engine

    engine = tiny_engine("llama")
    ids = engine.tokenizer(CUT_TEXT, add_special_tokens=False)["input_ids"]
    assert engine.tokenizer.decode(ids).endswith("🚀")
    cut = max(k for k in range(len(ids)) if engine.tokenizer.decode(ids[:k]).endswith("\ufffd"))
    assert engine.tokenizer.decode(ids[:cut]) == CUT_REPLY + "\ufffd"  # the 🚀's first bytes, decoded alone
    engine.decoder = lambda: ScriptedDecoder(ids[:cut])  # type: ignore[method-assign]
    return engine


class FakeClock:
    """A perf_counter that moves only when the scripted forward says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def clocked_engine(monkeypatch: Any, name: str) -> tuple[RacerEngine, FakeClock]:
    """A tiny engine whose forward of T tokens takes 10 + T ms on a fake clock."""
    from racer_core.engine import engine as engine_module

    clock = FakeClock()
    forward = SequenceDecoder._forward

    def scripted(self, tokens, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        clock.now += 1e-3 * (10 + len(tokens))
        return forward(self, tokens, *args, **kwargs)

    monkeypatch.setattr(SequenceDecoder, "_forward", scripted)
    monkeypatch.setattr(engine_module, "time", clock)
    return RacerEngine(tiny_model("llama", 0, vocab_size=SMALL_VOCAB), None, name, eos_ids=frozenset()), clock
