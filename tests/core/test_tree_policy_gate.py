"""The draft gate (draft_gate.py): drafting pauses where the trees chosen
lately made fewer tokens per second of cost curve than plain decoding, and
resumes on a long automaton match or when the choices would pay again.
Scripted cost curves and scripted acceptance; no clock is read."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from engine_helpers import PROMPT, engine_for, run

from racer_core.budget.cost_curve import CostCurve
from racer_core.budget.draft_gate import MIN_EVIDENCE, DraftGate
from racer_core.budget.tree_policy import TreePolicy
from racer_core.common.events import GenerationConfig
from racer_core.drafting.automaton import Automaton
from racer_core.drafting.racer import RacerDrafter

# A CPU where a second token costs 40% more than a first, 64 tokens 60% more.
CURVE = CostCurve([1, 2, 64], [1.0, 1.4, 1.6])


def test_the_gate_pauses_only_on_enough_evidence_of_a_loss() -> None:
    gate = DraftGate(CURVE)
    for _ in range(MIN_EVIDENCE - 1):
        gate.observe(8, 1)  # a tree of 8 rows that accepted nothing
    assert not gate.paused  # too little evidence yet
    gate.observe(8, 1)
    assert gate.paused and gate.rate() < gate.plain_rate
    draft, why = gate.allows(2)
    assert not draft and "paused" in why and "tokens/s" in why


def test_a_paying_tree_keeps_drafting() -> None:
    gate = DraftGate(CURVE)
    for _ in range(2 * MIN_EVIDENCE):
        gate.observe(8, 3)  # 3 tokens for 1.4 s against plain's 1 for 1.0 s
    assert not gate.paused and gate.allows(0) == (True, "")


# Steeper: from 8 rows on every row costs a quarter of the first (a full batch).
STEEP = CostCurve([1, 2, 4, 8, 16], [1.0, 1.1, 1.3, 2.0, 4.0])


def test_a_tree_that_pays_alone_pauses_where_a_full_batch_makes_its_rows_dear() -> None:
    alone, loaded = DraftGate(STEEP), DraftGate(STEEP)
    for _ in range(2 * MIN_EVIDENCE):
        alone.observe(4, 2)  # 2 tokens for t(4) = 1.3 against plain's 1 for 1.0
        loaded.observe(4, 2, others=7, base=7)  # 9 tokens for t(11) = 2.75 against plain's 8 for t(8) = 2.0
    assert not alone.paused
    assert loaded.paused and loaded.rate() < loaded.plain_rate
    assert loaded.plain_rate == 8 / 2.0  # plain decoding at the load the trees met
    draft, why = loaded.allows(0)
    assert not draft and "paused" in why


def test_the_policy_scores_its_trees_at_the_load_they_were_chosen_for() -> None:
    policy = TreePolicy(STEEP)
    a, root = _tree_with_history()
    tree = a.retrieve(root, 64)
    selection = policy.choose(tree, (7, 7))
    assert selection.load == (7, 7)  # stamped when chosen
    seen = []
    policy.gate.observe = lambda *score: seen.append(score)  # type: ignore[method-assign]
    policy.drafting_s = 0.25  # the pass waited for the drafting: the score counts it, as the choice did
    policy.record(tree, 0, replace(selection, chosen=np.arange(3), fed=3, intended=None))
    policy.drafting_s = 0.5  # noted after the choice: not this tree's
    policy.learn([root, 4, 5, 6, 7, 8], final=True)
    assert len(seen) == 1 and seen[0][0] == 3 and seen[0][2:] == (7, 7, 0.25)


def test_a_long_match_resumes_a_paused_gate_for_that_step() -> None:
    gate = DraftGate(CURVE)
    for _ in range(MIN_EVIDENCE):
        gate.observe(8, 1)
    draft, why = gate.allows(gate.resume_context)
    assert draft and "resumed" in why
    assert gate.paused  # only that step: the score decides the rest


class _Optimist(TreePolicy):
    """Believes 90% of every kind of draft is accepted, and keeps believing it."""

    def _prior(self) -> np.ndarray:
        return np.full(super()._prior().shape, 0.9)


def _tree_with_history() -> tuple[Automaton, int]:
    a = Automaton(ngram=6)
    a.init_logits(100, 4)
    a.feed([1, 2, 3, 4, 5, 6, 7, 8] * 3 + [1, 2])
    return a, 3


def test_the_policy_verifies_the_root_alone_while_paused_and_resumes_when_drafts_pay() -> None:
    # Estimates that stay optimistic whatever happens: only the gate's score can stop the loss.
    policy = _Optimist(CURVE, prior_weight=1e9)
    policy.gate.resume_context = 100  # only the score decides here
    a, root = _tree_with_history()
    tree = a.retrieve(root, 64)
    first = policy.choose(tree)
    assert len(first.chosen) > 1 and first.gate == ""  # the estimates say a tree pays
    # Scripted acceptance: the drafted continuation (4 5 6 7 8) never comes true.
    for step in range(MIN_EVIDENCE):
        assert not policy.gate.paused, step
        selection = policy.choose(tree)
        policy.record(tree, 0, selection)
        policy.learn([root, 90, 91, 92, 93, 94], final=True)
    assert policy.gate.paused
    paused = policy.choose(tree)
    assert paused.chosen.tolist() == [0] and paused.fed == 1 and paused.intended is not None
    assert "paused" in paused.gate
    # While paused the policy keeps choosing (unverified) and the gate keeps
    # scoring: once the drafts come true again, drafting resumes.
    for _ in range(2 * MIN_EVIDENCE):
        selection = policy.choose(tree)
        policy.record(tree, 0, selection)
        policy.learn([root, 4, 5, 6, 7, 8], final=True)
        if not policy.gate.paused:
            break
    assert not policy.gate.paused
    again = policy.choose(tree)
    assert len(again.chosen) > 1 and again.intended is None


def test_a_long_automaton_match_drafts_during_a_pause() -> None:
    policy = TreePolicy(CURVE)
    for _ in range(MIN_EVIDENCE):
        policy.gate.observe(8, 1)
    a, root = _tree_with_history()
    tree = a.retrieve(root, 64)
    policy.gate.resume_context = int(tree.context.max())
    selection = policy.choose(tree)
    assert len(selection.chosen) > 1 and "resumed" in selection.gate and selection.intended is None


def test_paused_steps_are_plain_decoding_and_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = engine_for("llama")  # random weights: few drafts are accepted
    # The table learns every prompt row (as the paper's does), so the optimist has drafts from the first step.
    monkeypatch.setattr(RacerDrafter, "reads_prompt_logits", lambda self: self.use_table)
    # Scripted: a curve where a tree of 64 costs 3 tokens, and a policy whose
    # estimates stay optimistic, so only the gate's score can stop the loss.
    # (on the shared engine: put back after the test, or later tests would draft under the paused optimist)
    monkeypatch.setattr(engine, "_curve", CostCurve([1, 2, 64], [1.0, 2.0, 3.0]))
    monkeypatch.setitem(engine._policies, "racer", _Optimist(engine._curve, prior_weight=1e9))
    plain, _, _ = run(engine, PROMPT, method="ar", max_new_tokens=48)
    steps = list(engine.decoder().generate(PROMPT, GenerationConfig(method="racer", max_new_tokens=48)))
    assert [t for s in steps for t in s.tokens] == plain
    records = [s.record for s in steps[1:]]
    paused = [r for r in records if r.paused]
    assert paused, "the gate never paused drafting"
    for record in paused:
        assert record.fed == 1 and record.size == 1 and record.budget_rule == "auto"
        assert record.why.startswith("drafting paused")
    assert not records[0].paused  # the first steps draft: no evidence yet
    assert max(r.fed for r in records[:MIN_EVIDENCE]) > 1  # the optimist drafted before the gate stopped it
