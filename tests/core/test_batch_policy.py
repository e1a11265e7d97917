"""Tree sizes under load (racer_core/budget/tree_policy.py, the load passed in by the engine loop):
a request's tree is weighed by what its rows add to the whole shared pass, so
trees shrink toward the root as the batch grows, and alone nothing changes.
Scripted cost curves and acceptance only; no clock is read."""

from __future__ import annotations

import numpy as np
import torch

from racer_core.budget.cost_curve import CostCurve
from racer_core.budget.tree_policy import TreePolicy
from racer_core.drafting.automaton import Automaton

# Flat up to 8 rows (a small step costs what one row costs), then rows cost in earnest.
CURVE = CostCurve([1, 8, 64, 512], [1.0, 1.1, 8.0, 64.0])


def _tree():
    a = Automaton(ngram=6)
    a.init_logits(100, 4)
    a.feed([1, 2, 3, 4, 5, 6, 7, 8] * 4 + [1, 2])
    a.update(np.array([3, 4, 5]), np.array([[4, 9, 8, 7], [5, 9, 8, 7], [6, 9, 8, 7]]))
    return a.retrieve(3, 64)


class _At:
    """A policy asked at one load (the engine loop passes each step's); `load` may be changed."""

    def __init__(self, policy: TreePolicy, load: tuple[int, int]) -> None:
        object.__setattr__(self, "policy", policy)
        object.__setattr__(self, "load", load)

    def choose(self, tree):  # noqa: ANN001, ANN201
        return self.policy.choose(tree, self.load)

    def worth_drafting(self) -> bool:
        return self.policy.worth_drafting(self.load)

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.policy, name)

    def __setattr__(self, name: str, value) -> None:  # noqa: ANN001
        if name == "load":
            object.__setattr__(self, name, value)
        else:
            setattr(self.policy, name, value)


def _policy(p: float, load: tuple[int, int] | None) -> _At:
    """A policy whose every kind of node is accepted with chance p, asked at
    `load` (None: the argument left out, as a chat alone leaves it)."""
    policy = TreePolicy(CURVE)
    policy._hits[:] = p * policy._trials
    if load is None:
        return policy  # type: ignore[return-value]
    return _At(policy, load)


def test_alone_the_choice_is_todays() -> None:
    tree = _tree()
    for p in (0.05, 0.3, 0.9):
        today = _policy(p, None).choose(tree)
        alone = _policy(p, (0, 0)).choose(tree)
        assert np.array_equal(today.chosen, alone.chosen) and today.fed == alone.fed
        assert today.options == alone.options


def test_under_load_a_weak_tree_shrinks_to_the_root() -> None:
    tree = _tree()
    assert len(_policy(0.05, (0, 0)).choose(tree).chosen) > 1  # alone, cheap rows: drafting pays
    for load in ((3, 3), (7, 60), (15, 200)):
        chosen = _policy(0.05, load).choose(tree)
        assert chosen.chosen.tolist() == [0] and chosen.fed == 1  # plain batched decoding


def test_trees_shrink_as_the_pass_grows_and_a_strong_tree_still_pays() -> None:
    tree = _tree()
    sizes = [len(_policy(0.2, load).choose(tree).chosen) for load in ((0, 0), (1, 1), (3, 3))]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1] > 1
    assert len(_policy(0.9, (15, 200)).choose(tree).chosen) > 1


def test_a_chosen_tree_never_expects_fewer_tokens_per_second_than_plain_batched_decoding() -> None:
    tree = _tree()
    for p in (0.02, 0.1, 0.3, 0.7):
        for others, rows in ((1, 1), (3, 12), (7, 60), (15, 200)):
            choice = _policy(p, (others, rows)).choose(tree)
            plain = (1 + others) / CURVE(rows + 1)
            drafted = (1 + others + choice.expected) / CURVE(rows + choice.fed)
            assert drafted >= plain * 0.9999


def test_alone_a_tree_is_always_worth_drafting() -> None:
    for p in (0.0, 0.05, 0.9):
        assert _policy(p, None).worth_drafting() and _policy(p, (0, 0)).worth_drafting()


def test_under_load_drafting_is_skipped_exactly_where_no_tree_could_pay() -> None:
    tree = _tree()
    skipped = 0
    for p in (0.01, 0.05, 0.1, 0.3, 0.7):
        for load in ((1, 1), (3, 12), (7, 60), (15, 200)):
            policy = _policy(p, load)
            if not policy.worth_drafting():
                skipped += 1
                # what choose() would have kept of any drafted tree: the root alone
                assert policy.choose(tree).chosen.tolist() == [0]
    assert skipped > 0  # the check does skip somewhere in this grid
    assert not _policy(0.05, (15, 200)).worth_drafting()
    assert _policy(0.9, (15, 200)).worth_drafting()  # a strong tree still pays in a full pass


def test_the_drafting_itself_counts_under_load_and_not_alone() -> None:
    policy = _policy(0.3, (3, 12))
    assert policy.worth_drafting()
    policy.drafting_s = 2.0  # the pass would wait longer for the drafting than the rows cost
    assert not policy.worth_drafting()
    policy.load = (0, 0)
    assert policy.worth_drafting()  # alone the tree is drafted and weighed as before


def test_under_load_a_tree_must_pay_for_the_passs_wait_on_its_drafting_too() -> None:
    tree = _tree()
    policy = _policy(0.9, (1, 1))
    assert len(policy.choose(tree).chosen) > 1
    policy.drafting_s = 2.0
    assert policy.choose(tree).chosen.tolist() == [0]
    policy.load = (0, 0)
    assert len(policy.choose(tree).chosen) > 1  # alone the choice is today's


def test_under_load_a_run_of_kept_roots_leaves_only_probe_steps_drafting() -> None:
    from racer_core.budget.draft_gate import PROBE_EVERY, ROOT_STREAK

    tree = _tree()
    policy = _policy(0.9, (1, 1))
    policy.drafting_s = 2.0  # every choice keeps the root
    for _ in range(ROOT_STREAK):
        assert policy.worth_drafting()
        assert policy.choose(tree).chosen.tolist() == [0]
    drafts = [policy.worth_drafting() for _ in range(4 * PROBE_EVERY)]
    assert drafts.count(True) == 4 and drafts[PROBE_EVERY - 1]  # one probe in every PROBE_EVERY steps
    policy.drafting_s = 0.0
    assert len(policy.choose(tree).chosen) > 1  # a probe that keeps a tree ends the run
    assert all(policy.worth_drafting() for _ in range(2 * PROBE_EVERY))
    policy.load = (0, 0)
    policy.drafting_s = 2.0
    for _ in range(2 * ROOT_STREAK):
        policy.choose(tree)
    assert all(policy.worth_drafting() for _ in range(2 * PROBE_EVERY))  # alone: never skipped


def test_the_drafting_seconds_are_a_moving_mean_of_what_the_drafter_notes() -> None:
    policy = _policy(0.3, None)
    policy.note_drafting(0.002)
    assert policy.drafting_s == 0.002  # the first note is taken as it is
    for _ in range(200):
        policy.note_drafting(0.001)
    assert abs(policy.drafting_s - 0.001) < 1e-6


def test_racer_under_a_hopeless_load_verifies_the_root_without_retrieving() -> None:
    from racer_core.common.events import GenerationConfig
    from racer_core.drafting.protocol import DrafterSetup
    from racer_core.drafting.racer import RacerDrafter

    policy = _policy(0.05, None)
    racer = RacerDrafter(DrafterSetup(100, policy_for=lambda method: policy))
    racer.configure(GenerationConfig(method="racer"))
    racer.start([1, 2, 3, 4, 5, 6, 7, 8] * 4 + [1, 2], 3)
    assert racer.draft(3, 2, None).size > 1  # alone: drafted and weighed as before
    racer._full = None
    retrieved = []
    racer.automaton = _Spy(racer.automaton, retrieved)
    plain = racer.draft(3, 2, None, (15, 200))
    assert plain.size == 1 and retrieved == []
    racer.verified(plain, torch.zeros(1, 100), [0], [4], None)  # learns as after any root-only step
    assert racer.generated[-1] == 4


class _Spy:
    """An automaton that notes every retrieve."""

    def __init__(self, inner: Automaton, calls: list) -> None:
        self._inner, self._calls = inner, calls

    def retrieve(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        self._calls.append(args)
        return self._inner.retrieve(*args, **kwargs)

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._inner, name)



def test_under_load_the_pre_check_follows_what_the_policy_learns() -> None:
    """worth_drafting keeps the likeliest node's chance between steps: after
    learning changes the counts it must read them again, or a server under
    load would keep deciding on acceptance it has since learned otherwise."""
    policy = _policy(0.05, (15, 200))
    tree = _tree()
    assert not policy.worth_drafting()  # weak trees cannot pay in a full pass
    for _ in range(300):  # the retrieval path comes true, step after step
        policy.record(tree, 0)
        policy.learn([3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8], final=True)
    policy.gate.paused, policy.gate._kept_root = False, 0  # the gate's own pause aside: the counts decide
    assert policy.worth_drafting()
