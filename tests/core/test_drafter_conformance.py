"""Every drafting method in the registry (racer_core/common/registry.py)
passes the same checks, with no test code of its own:

- greedy equals plain greedy (ar) token for token in fp32, with drafts
  accepted, each shown as one of the method's own declared sources;
- several turns on one conversation stay exact, and so does switching
  methods in the middle of a conversation;
- sampling keeps the target's joint distribution over the first tokens
  (test_sampling_joint.py's chi-square test, whose power it shows);
- a conversation warmed by another drafts more, where the method keeps state;
- a missing optional extra is refused in one line.

A broken drafter (its drafts shifted by one position) fails the suite.
The models are tiny near-Markov ones (engine_helpers.make_markov): text falls
into cycles, so drafting pays. eagle3 runs with a head trained for a few
seconds on the target's own continuation (test_eagle3.trained_head).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from engine_helpers import PROMPT, engine_for, run
from test_sampling_joint import ALPHA, _ar_joint, _chi2_sf, _draw, _pooled, _statistic, tiny_engine, verified_case

from racer_core.common import registry
from racer_core.common.errors import InputError
from racer_core.common.events import GenerationConfig, Source
from racer_core.drafting.protocol import Drafter, DrafterSetup
from racer_core.drafting.tree import Tree
from racer_core.engine.engine import RacerEngine
from racer_core.verify.sampling import TokenSampler, accept

DRAFTING = [spec.name for spec in registry.METHOD_SPECS if spec.drafts]
NEW_TOKENS = 64
# repeats its n-grams (prompt lookup needs 5 in a row), as a chat's earlier turns do
LOOKUP_PROMPT = PROMPT + [22, 40, 5, 9, 3, 17, 22, 40, 5, 9, 3]


def _runnable(name: str) -> object:
    missing = registry.missing_extra(name)
    return pytest.param(name, marks=pytest.mark.skipif(missing is not None, reason=missing or ""))


METHODS = [_runnable(name) for name in DRAFTING]


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from test_eagle3 import trained_head

    return trained_head(tmp_path_factory.mktemp("conformance-head"))


def engine_of(method: str, request: pytest.FixtureRequest) -> RacerEngine:
    """A tiny engine where drafting pays; with a trained draft head where the method needs one."""
    if registry.REGISTRY[method].needs_head:
        from test_eagle3 import engine as head_engine

        return head_engine(request.getfixturevalue("head"), "lean")
    return engine_for("llama", markov=True)


def prompt_of(method: str) -> list[int]:
    """The head was trained on PROMPT's continuation; the others read one that repeats itself."""
    return list(PROMPT if registry.REGISTRY[method].needs_head else LOOKUP_PROMPT)


def own_sources(method: str) -> set[Source]:
    return {Source(s.id) for s in registry.REGISTRY[method].sources}


def check_greedy(engine: RacerEngine, method: str, prompt: list[int] = LOOKUP_PROMPT) -> None:
    """Greedy equals ar token for token, with drafts accepted (the equality
    proves nothing otherwise), shown as the method's own sources, in the
    chat's steps and in the step records the inspector shows."""
    plain, _, plain_steps = run(engine, prompt, method="ar", max_new_tokens=NEW_TOKENS)
    for budget in ("auto", 8):
        config = GenerationConfig(method=method, max_new_tokens=NEW_TOKENS, max_num_draft=budget)
        steps = list(engine.decoder().generate(prompt, config))
        assert [t for s in steps for t in s.tokens] == plain, (method, budget)
        accepted = [src for s in steps[1:] for src in s.sources if src != Source.MODEL]
        assert accepted and len(steps) < plain_steps, (method, budget, "no draft was accepted")
        assert set(accepted) <= own_sources(method), (method, set(accepted))
        drafted = {node.source_id for s in steps[1:] for node in s.record.nodes[1:]}
        assert drafted <= {int(s) for s in own_sources(method)}, (method, drafted)


@pytest.mark.parametrize("method", METHODS)
def test_greedy_equals_ar_with_drafts_accepted(method: str, request: pytest.FixtureRequest) -> None:
    check_greedy(engine_of(method, request), method, prompt_of(method))


@pytest.mark.parametrize("method", METHODS)
def test_several_turns_and_switching_methods_stay_exact(method: str, request: pytest.FixtureRequest) -> None:
    """One conversation: this method's turns, one of the next method in the
    registry's between, and a plain turn; each equals ar's on the same text."""
    engine = engine_of(method, request)
    others = [m for m in DRAFTING if m != method and registry.missing_extra(m) is None
              and not registry.REGISTRY[m].needs_head]
    other = others[(DRAFTING.index(method)) % len(others)]
    conversation, prompt = engine.decoder(), prompt_of(method)
    drafted = 0
    for turn, name in enumerate([method, method, other, method, "ar", method]):
        config = GenerationConfig(method=name, max_new_tokens=32, max_num_draft="auto" if turn % 2 else 8)
        steps = list(conversation.generate(prompt, config))
        reply = [t for s in steps for t in s.tokens]
        plain, _, _ = run(engine, prompt, method="ar", max_new_tokens=32)
        assert reply == plain, (method, turn, name)
        if name == method:
            drafted += sum(src != Source.MODEL for s in steps[1:] for src in s.sources)
        prompt = prompt + reply + [7, 8, 9, 5, 9, 3]
    assert drafted > 0, method


def _primed_tree(method: str) -> tuple[RacerEngine, list[int], int, Tree]:
    """A tree the method drafts through the protocol alone, on the 5-token
    model of test_sampling_joint.py: decoding greedily after a prompt that
    repeats itself, the first tree with drafts two deep (the steps before it
    teach the drafters that learn from the model's logits)."""
    engine = tiny_engine()
    prompt, root = [0, 1, 2, 3, 4, 2] * 4 + [0, 1], 2
    setup = DrafterSetup(engine.runtime.vocab_size, policy_for=engine._policy)
    drafter: Drafter = registry.REGISTRY[method].load().create(setup)
    drafter.configure(GenerationConfig(method=method, max_num_draft=32))
    dec = engine.decoder()
    with torch.inference_mode():
        dec._prefill(prompt, drafter)
        drafter.start(prompt, root)
        for _ in range(8):
            tree = drafter.draft(root, prompt[-1], 32)
            if tree.depths.max() >= 2:
                return engine, prompt, root, tree
            base = len(dec.cached)
            logits = dec._forward(torch.from_numpy(tree.tokens), torch.from_numpy(tree.depths + base),
                                  engine.runtime.masks.build(base, tree.ancestors, tree.depths))
            path, bonus = accept(logits, tree.tokens, tree.parents, TokenSampler(0.0, 1.0, None, "cpu"))
            dec.cache.commit(base, path)
            dec.cached.extend(int(tree.tokens[i]) for i in path)
            drafter.verified(tree, logits, path, [*(int(tree.tokens[i]) for i in path[1:]), bonus], None)
            prompt, root = prompt + [int(tree.tokens[i]) for i in path], bonus
    raise AssertionError(f"{method} drafted nothing two deep in 8 steps: the sampling test would prove nothing")


@pytest.mark.parametrize("method", [m for m in METHODS if not registry.REGISTRY[m.values[0]].needs_head])
def test_sampling_keeps_the_distribution(method: str) -> None:
    """The first K tokens drawn through the method's own tree follow plain
    sampling's joint (chi-square; the test's power is shown in
    test_sampling_joint.py against two biased rules on a tree like these)."""
    engine, prompt, root, tree = _primed_tree(method)
    case = verified_case(engine, prompt, root, tree.tokens, tree.parents, tree.depths, tree.ancestors)
    exact = _ar_joint(case)
    pool = _pooled(exact)
    p = pool(exact)
    for seed in (1, 2):
        stat = _statistic(pool(_draw(case, accept, seed)), p)
        assert _chi2_sf(stat, len(p) - 1) > ALPHA, (method, seed, stat)


@pytest.mark.parametrize("method", METHODS)
def test_warm_state_drafts_more(method: str, request: pytest.FixtureRequest) -> None:
    """A conversation warmed by another (the benchmark's --warm) starts from
    its drafting state and needs fewer steps for the same greedy text."""
    engine = engine_of(method, request)
    config = GenerationConfig(method=method, max_new_tokens=NEW_TOKENS, max_num_draft=8)
    first = engine.new_conversation()
    list(first.decoder.generate(prompt_of(method), config))
    state = first.decoder.drafters[registry.REGISTRY[method].state]
    if state.warm_copy(first.decoder._setup()) is None:
        pytest.skip(f"{method} keeps no state between conversations")
    cold, warm = engine.new_conversation(), engine.new_conversation(warm_from=first)
    cold_steps = list(cold.decoder.generate(PROMPT, config))
    warm_steps = list(warm.decoder.generate(PROMPT, config))
    assert [t for s in warm_steps for t in s.tokens] == [t for s in cold_steps for t in s.tokens]
    assert len(warm_steps) < len(cold_steps), method


@pytest.mark.parametrize("method", DRAFTING)
def test_a_missing_extra_is_refused_in_one_line(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = registry.REGISTRY[method]
    if spec.library is None:
        assert spec.missing() is None
        return
    monkeypatch.setitem(sys.modules, spec.library[0], None)  # as if not installed
    engine = engine_for("llama", markov=True)
    with pytest.raises(InputError) as error:
        list(engine.decoder().generate(PROMPT, GenerationConfig(method=method)))
    message = str(error.value)
    assert "\n" not in message and f"[{spec.extra}]" in message and method in message


def _shifted(cls: type[Drafter]) -> type[Drafter]:
    """The method's drafter with every draft moved one position down its path
    (each node proposes its parent's token): a drafter off by one."""

    class Shifted(cls):  # type: ignore[valid-type, misc]
        def draft(self, root: int, prev: int, limit: int | None, load: tuple[int, int] = (0, 0)):  # noqa: ANN202
            tree = super().draft(root, prev, limit)
            tokens = tree.tokens.copy()
            tokens[1:] = tree.tokens[np.maximum(tree.parents[1:], 0)]
            return dataclasses.replace(tree, tokens=tokens)

    return Shifted


@pytest.mark.parametrize("method", [m for m in METHODS if not registry.REGISTRY[m.values[0]].needs_head])
def test_a_drafter_shifted_by_one_fails_the_suite(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    load = registry.MethodSpec.load
    monkeypatch.setattr(registry.MethodSpec, "load",
                        lambda spec: _shifted(load(spec)) if spec.name == method else load(spec))
    with pytest.raises(AssertionError, match="no draft was accepted"):
        check_greedy(engine_for("llama", markov=True), method)
