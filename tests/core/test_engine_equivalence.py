"""Greedy RACER output equals plain greedy output token for token (fp32), on
stock transformers classes of several families, with drafts accepted."""

from __future__ import annotations

import pytest
from engine_helpers import PROMPT, engine_for, run

from racer_core.common.events import GenerationConfig, Source
from racer_core.testing import FAMILIES

NEW_TOKENS = 96


@pytest.mark.parametrize("family", FAMILIES)
def test_drafting_methods_match_plain_greedy(family: str) -> None:
    engine = engine_for(family)
    plain, _, plain_steps = run(engine, PROMPT, method="ar", max_new_tokens=NEW_TOKENS)
    assert plain_steps == NEW_TOKENS  # ar: one token per forward pass
    for method in ("racer", "logits", "retrieval"):
        for budget in (4, 16, 64):
            tokens, accepted, steps = run(engine, PROMPT, method=method, max_new_tokens=NEW_TOKENS, max_num_draft=budget)
            assert tokens == plain, (method, budget)
            if method == "racer":
                # The test proves nothing unless drafts were really accepted.
                assert accepted[Source.RETRIEVAL] + accepted[Source.LOGITS] > 0
                assert steps < NEW_TOKENS


@pytest.mark.parametrize("family", FAMILIES)
def test_retrieval_drafts_accepted_and_lossless(family: str) -> None:
    engine = engine_for(family, markov=True)
    plain, _, _ = run(engine, PROMPT, method="ar", max_new_tokens=160)
    tokens, accepted, steps = run(engine, PROMPT, method="racer", max_new_tokens=160, max_num_draft=16)
    assert tokens == plain
    assert accepted[Source.RETRIEVAL] > 0
    retrieval_only, accepted_r, _ = run(engine, PROMPT, method="retrieval", max_new_tokens=160, max_num_draft=16)
    assert retrieval_only == plain
    assert accepted_r[Source.RETRIEVAL] > 0 and accepted_r[Source.LOGITS] == 0


def test_auto_budget_is_lossless() -> None:
    engine = engine_for("llama", markov=True)
    plain, _, _ = run(engine, PROMPT, method="ar", max_new_tokens=120)
    tokens, accepted, _ = run(engine, PROMPT, method="racer", max_new_tokens=120, max_num_draft="auto")
    assert tokens == plain
    assert sum(accepted.values()) > 0


def test_chain_of_turns_reuses_cache_and_stays_lossless() -> None:
    """A second turn continues the same decoder (cache and automaton kept)."""
    engine = engine_for("qwen3")
    racer = engine.decoder()
    plain = engine.decoder()
    prompt = list(PROMPT)
    for turn in range(3):
        r = [t for s in racer.generate(prompt, GenerationConfig(method="racer", max_new_tokens=40, max_num_draft=8)) for t in s.tokens]
        p = [t for s in plain.generate(prompt, GenerationConfig(method="ar", max_new_tokens=40)) for t in s.tokens]
        assert r == p, turn
        prompt = prompt + r + [7, 8, 9, 5, 9, 3]
    automaton = racer.drafters["racer"].automaton
    assert automaton is not None and automaton.node_count > 100


def test_padded_trees_are_lossless(monkeypatch) -> None:
    """Trees fed with padding rows (as the policy does where a larger size is
    cheaper) decode exactly like plain decoding."""
    import numpy as np

    from racer_core.budget.tree_policy import Selection, TreePolicy

    def small_subtree_padded_to_eight(self, tree, load=(0, 0)):
        chosen = np.arange(min(tree.size, 3))  # breadth-first prefix: closed under parents
        return Selection(chosen, 8, 0.0, np.ones(tree.size), (), -1), None  # no cut: drafting/tree.py's cut cuts

    monkeypatch.setattr(TreePolicy, "choose_cut", small_subtree_padded_to_eight)
    engine = engine_for("llama", markov=True)
    plain, _, _ = run(engine, PROMPT, method="ar", max_new_tokens=120)
    steps = list(engine.decoder().generate(PROMPT, GenerationConfig(method="racer", max_new_tokens=120)))
    assert [t for s in steps for t in s.tokens] == plain
    assert all(s.budget == 8 and s.tree_size <= 3 for s in steps[1:])
    assert sum(len(s.tokens) > 1 for s in steps) > 5


def test_a_source_turned_off_by_zero_drafts_as_the_other_method() -> None:
    """The original's `--ngram 0` / `--max-breadth 0`: that source drafts nothing, so racer
    drafts exactly as `logits` / `retrieval` do, and stays lossless."""
    engine = engine_for("llama", markov=True)
    plain, _, _ = run(engine, PROMPT, method="ar", max_new_tokens=120)
    for off, twin, kept, dropped in (
        ({"ngram": 0}, "logits", Source.LOGITS, Source.RETRIEVAL),
        ({"max_breadth": 0}, "retrieval", Source.RETRIEVAL, Source.LOGITS),
    ):
        tokens, accepted, steps = run(engine, PROMPT, method="racer", max_new_tokens=120, max_num_draft=16, **off)
        assert tokens == plain, off
        assert accepted[kept] > 0 and accepted[dropped] == 0, (off, accepted)
        assert (tokens, accepted, steps) == run(engine, PROMPT, method=twin, max_new_tokens=120, max_num_draft=16)
