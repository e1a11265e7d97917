"""A chat starts at once on the stored or the safe cost curve, and the curve
is measured in the background when the machine and the engine are quiet
(racer_core/engine/curve_in_background.py): scripted curves, scripted quiet,
the measurement on a fake clock."""

from __future__ import annotations

import json

import pytest
from engine_helpers import clocked_engine

from racer_core.budget.cost_curve import CPU_GRID, CostCurve, curve_cache_path, load_or_measure, safe_curve, save_curve
from racer_core.budget.tree_policy import TreePolicy
from racer_core.drafting.automaton import Automaton
from racer_core.engine.curve_in_background import PATIENCE_POLLS, CurveInBackground, Interrupted

GRID = (1, 2, 4)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path))


def test_a_busy_stored_curve_is_used_at_once_and_measured_later(cache) -> None:  # noqa: ANN001
    save_curve(("m", "cpu"), CostCurve(list(GRID), [0.26, 0.3, 0.4]), busy=True, measurements=1)
    handed = []
    timings = iter([[0.02, 0.021, 0.022]])
    for _ in range(3):  # three starts in a row on a busy machine: none waits for a measurement
        curve = load_or_measure(("m", "cpu"), GRID, lambda sizes: next(timings), later=handed.append,
                                busy=lambda: False)
        assert curve.seconds == [0.26, 0.3, 0.4] and not curve.provisional
    assert len(handed) == 3
    measured = handed[0]()  # the background's measurement: the fastest per size, kept
    assert measured.seconds == [0.02, 0.021, 0.022]
    kept = json.loads(curve_cache_path(("m", "cpu")).read_text())
    assert kept["busy"] is False and kept["seconds"] == measured.seconds
    assert handed[1]().seconds == measured.seconds  # a later one finds it measured: nothing is timed again
    assert load_or_measure(("m", "cpu"), GRID, lambda sizes: [9.0] * 3, later=handed.append).seconds == measured.seconds
    assert len(handed) == 3


def test_without_a_stored_curve_a_chat_starts_on_the_safe_one(cache) -> None:  # noqa: ANN001
    handed = []
    curve = load_or_measure(("m", "cpu"), GRID, lambda sizes: [0.01, 0.011, 0.012], later=handed.append)
    assert curve.provisional and curve == safe_curve(GRID) and len(handed) == 1


def test_the_safe_curve_verifies_the_root_alone() -> None:
    automaton = Automaton(ngram=6)
    automaton.init_logits(100, 4)
    automaton.feed([1, 2, 3, 4, 5, 6, 7, 8] * 4 + [1, 2])  # a long match: the best case for a tree
    tree = automaton.retrieve(3, 64)
    assert len(TreePolicy(CostCurve(list(CPU_GRID), [0.01 + 0.0001 * s for s in CPU_GRID])).select(tree)[0]) > 1
    chosen, fed, _ = TreePolicy(safe_curve(CPU_GRID), largest=CPU_GRID[-1]).select(tree)
    assert chosen.tolist() == [0] and fed == 1  # no tree can pay: racer decodes as ar until the curve is measured


class Script:
    """Scripted quiet and idle, and a measurement that counts its calls."""

    def __init__(self) -> None:
        self.idle = self.quiet = True
        self.measured = 0
        self.interrupt = False
        self.used: list[CostCurve] = []

    def measure(self) -> CostCurve:
        self.measured += 1
        if self.interrupt:
            raise Interrupted
        return CostCurve([1, 2], [0.01, 0.02])

    def background(self) -> CurveInBackground:
        return CurveInBackground(self.measure, self.used.append, lambda: self.idle, lambda: self.quiet,
                                 wait=lambda s: None)


def test_the_measurement_waits_for_a_quiet_machine_and_an_idle_engine() -> None:
    script = Script()
    background = script.background()
    script.quiet = False
    assert not background.attempt() and script.measured == 0
    script.quiet, script.idle = True, False  # a reply is running
    assert not background.attempt() and script.measured == 0
    script.idle = True
    assert background.attempt() and background.done.is_set()
    assert script.used == [CostCurve([1, 2], [0.01, 0.02])]


def test_a_machine_never_quiet_is_measured_after_a_while() -> None:
    script = Script()
    background = script.background()
    script.quiet = False
    for _ in range(PATIENCE_POLLS):
        assert not background.attempt()
    assert background.attempt() and script.measured == 1  # busy: marked so, and measured again at later starts


def test_an_interrupted_measurement_is_tried_again() -> None:
    script = Script()
    background = script.background()
    script.interrupt = True
    assert not background.attempt() and not script.used
    script.interrupt = False
    background.run()  # (no waiting: the script's wait returns at once)
    assert script.measured == 2 and len(script.used) == 1


@pytest.mark.measures_cost_curve
def test_an_engine_starts_on_the_safe_curve_and_a_reply_interrupts_the_measurement(monkeypatch, tmp_path,  # noqa: ANN001
                                                                                    cache) -> None:  # noqa: ANN001
    monkeypatch.setattr(CurveInBackground, "start", lambda self: None)  # the test runs its attempts itself
    engine, clock = clocked_engine(monkeypatch, "tiny-background")
    curve = engine.cost_curve(later=True)
    assert curve.provisional and clock.now == 0  # nothing measured before the chat is usable
    policy = engine._policy("racer")
    background = engine.background
    assert background is not None

    calls = 0
    forward = type(engine.runtime.masks).causal

    def a_reply_starts_on_the_third_forward(self, *args):  # noqa: ANN001, ANN002, ANN202
        nonlocal calls
        calls += 1
        if calls == 3:
            engine._replies += 1
        return forward(self, *args)

    monkeypatch.setattr(type(engine.runtime.masks), "causal", a_reply_starts_on_the_third_forward)
    monkeypatch.setattr(background, "machine_quiet", lambda: True)
    assert not background.attempt()  # interrupted: the curve in use stays the safe one
    assert engine.cost_curve().provisional and not list(tmp_path.glob("cost/*.json"))  # nothing saved
    assert not background.attempt()  # the reply is still running: not even tried
    engine._replies -= 1
    assert background.attempt()
    measured = engine.cost_curve()
    assert not measured.provisional
    assert measured.seconds == pytest.approx([1e-3 * (10 + s) for s in CPU_GRID])
    assert policy.curve is measured  # the policy in use weighs the measured curve now


def test_the_first_policy_loads_the_curve_without_waiting_on_itself() -> None:
    # the API server's first reply asks for a policy before any curve: the curve
    # is loaded under the policy lock, which the curve's loading must not take again
    from engine_helpers import SMALL_VOCAB
    from time_limit import time_limit

    from racer_core.engine.engine import RacerEngine
    from racer_core.testing import tiny_model

    engine = RacerEngine(tiny_model("llama", 0, vocab_size=SMALL_VOCAB), None, "tiny-first-policy", eos_ids=frozenset())
    with time_limit(30, "the first policy"):
        policy = engine._policy("racer")
    assert policy.curve is engine.cost_curve()
