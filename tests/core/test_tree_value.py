"""One value for a tree at a load (racer_core/budget/tree_value.py): the
pre-check, the choice and the draft gate weigh a tree by it, and one
mechanism (the gate's) pauses drafting under load and probes to resume.
Scripted cost curves, acceptance and loads; no clock is read."""

from __future__ import annotations

import pytest
from test_batch_policy import CURVE, _policy, _tree

from racer_core.budget.draft_gate import MIN_EVIDENCE, PROBE_EVERY, ROOT_STREAK, DraftGate
from racer_core.budget.tree_value import tree_value

LOADS = ((0, 0), (1, 1), (3, 12), (7, 60), (15, 200))


def test_the_choice_keeps_the_option_of_the_highest_value() -> None:
    tree = _tree()
    for p in (0.05, 0.3, 0.9):
        for load in LOADS:
            for drafting_s in (0.0, 0.3):
                policy = _policy(p, load)
                policy.drafting_s = drafting_s
                choice = policy.choose(tree)
                values = [tree_value(CURVE(load[1] + o.fed), o.expected_tokens, load, drafting_s if o.nodes > 1 else 0.0)
                          for o in choice.options]
                assert values[choice.best] >= max(values) / 1.0001
                assert choice.best == 0 or values[choice.best] > values[0] * 1.0001


def _bound(p: float, load: tuple[int, int], drafting_s: float) -> float:
    """The drafting time at which the best tree the pre-check can imagine (every
    draft at chance p) is worth exactly what the root alone is: its threshold."""
    others, base = load
    plain = tree_value(CURVE(base + 1), 1.0, load) * 1.0001
    return max((others + 1 + (s - 1) * p) / plain - CURVE(base + s) for s in range(2, 65))


def test_the_pre_check_refuses_exactly_where_the_best_trees_value_is_below_the_roots() -> None:
    for p in (0.05, 0.3, 0.9):
        for load in LOADS[1:]:
            threshold = _bound(p, load, 0.0)
            policy = _policy(p, load)
            if threshold <= 0:
                assert not policy.worth_drafting()
                continue
            policy.drafting_s = threshold * 0.99
            assert policy.worth_drafting(), (p, load)
            policy.drafting_s = threshold * 1.01
            assert not policy.worth_drafting(), (p, load)


def test_the_gates_score_is_the_trees_value_drafting_time_included() -> None:
    for load in LOADS:
        for drafting_s in (0.0, 0.5):
            gate = DraftGate(CURVE)
            gate.observe(4, 2, *load, drafting_s)
            assert gate.rate() == pytest.approx(tree_value(CURVE(load[1] + 4), 2.0, load, drafting_s))
            assert gate.plain_rate == pytest.approx(tree_value(CURVE(load[1] + 1), 1.0, load))


def test_under_load_a_tree_that_pays_for_its_rows_but_not_its_drafting_pauses_the_gate() -> None:
    # 3 rows beside 1 sequence's 1 on the flat part of the curve: 4 tokens in
    # t(4) against plain's 2 in t(2), but not once the pass waits 1.5 s for the drafting.
    gate = DraftGate(CURVE)
    for _ in range(MIN_EVIDENCE):
        gate.observe(3, 2, 1, 1, 1.5)
    assert gate.paused
    alone = DraftGate(CURVE)
    for _ in range(MIN_EVIDENCE):
        alone.observe(3, 2, 0, 0, 1.5)  # alone the drafting time is not counted
    assert not alone.paused


def test_under_load_drafting_pauses_where_trees_do_not_pay_and_a_probe_resumes_it() -> None:
    tree = _tree()
    policy = _policy(0.3, (3, 12))  # there the pre-check passes but the choice keeps the root
    drafted = []

    def step() -> None:
        if policy.worth_drafting():
            drafted.append(len(policy.choose(tree).chosen) > 1)
        else:
            drafted.append(None)

    for _ in range(ROOT_STREAK):
        step()
    assert drafted == [False] * ROOT_STREAK  # drafted and weighed, the root kept
    drafted.clear()
    for _ in range(2 * PROBE_EVERY):
        step()
    assert drafted.count(None) == 2 * PROBE_EVERY - 2 and drafted[PROBE_EVERY - 1] is False  # probes only
    policy.load = (1, 1)  # the batch shrank: trees pay again
    drafted.clear()
    for _ in range(PROBE_EVERY):
        step()
    assert drafted[-1] is True and drafted.count(None) == PROBE_EVERY - 1  # the next probe kept a tree
    drafted.clear()
    for _ in range(PROBE_EVERY):
        step()
    assert drafted == [True] * PROBE_EVERY  # and every step drafts again


def test_under_load_a_paused_score_drafts_only_probes_until_the_probes_pay_again() -> None:
    # One mechanism: the score's pause, under load, drafts only on probes too
    # (new: it used to draft every step, unverified, while the pass waited).
    policy = _policy(0.9, (1, 1))  # trees pay here by the estimates
    for _ in range(MIN_EVIDENCE):
        policy.gate.observe(7, 1, 1, 1)  # but the trees chosen accepted nothing
    assert policy.gate.paused
    drafts = [policy.worth_drafting() for _ in range(2 * PROBE_EVERY)]
    assert drafts.count(True) == 2 and drafts[PROBE_EVERY - 1]
    for _ in range(MIN_EVIDENCE + 1):
        policy.gate.observe(7, 7, 1, 1)  # probes' trees that paid
    assert not policy.gate.paused
    assert all(policy.worth_drafting() for _ in range(PROBE_EVERY))
    policy.load = (0, 0)
    for _ in range(policy.gate.window):
        policy.gate.observe(7, 1)
    assert policy.gate.paused and all(policy.worth_drafting() for _ in range(PROBE_EVERY))  # alone: every step
