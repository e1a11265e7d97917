"""The hardware-aware budget: the cost curve and the tree policy."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import scripted_on
from engine_helpers import SMALL_VOCAB, clocked_engine

from racer_core.budget.cost_curve import (
    CPU_GRID,
    MAX_MEASUREMENTS,
    MIN_MEASUREMENTS,
    CostCurve,
    curve_cache_path,
    load_or_measure,
    save_curve,
)
from racer_core.budget.tree_policy import EfficientSizes, TreePolicy
from racer_core.drafting.automaton import Automaton
from racer_core.engine.engine import RacerEngine
from racer_core.testing import tiny_model


def test_curve_interpolates_and_extrapolates() -> None:
    curve = CostCurve([1, 2, 4], [1.0, 2.0, 2.0])
    assert curve(1) == 1.0 and curve(3) == 2.0 and curve(8) == 2.0
    assert CostCurve([1, 2], [1.0, 2.0])(4) == 4.0


def test_the_curve_read_at_many_sizes_at_once_equals_each_read_alone() -> None:
    """`CostCurve.at` (the policy reads a whole shifted curve per load) equals
    the scalar call bit for bit: below, on, between and past the grid."""
    rng = np.random.default_rng(7)
    for trial in range(200):
        sizes = np.unique(rng.integers(1, 80, size=int(rng.integers(2, 9)))).tolist()
        if len(sizes) < 2:  # a curve has two sizes at least (past the grid reads the last segment)
            continue
        curve = CostCurve(sizes, rng.uniform(1e-3, 5e-2, size=len(sizes)).tolist())
        reads = np.arange(0, 200)
        assert curve.at(reads).tolist() == [curve(int(s)) for s in reads], (trial, curve)


def test_sizes_beside_other_rows_price_the_tree_at_the_shifted_curve() -> None:
    curve = CostCurve([1, 2, 4, 8, 16], [1.0, 1.2, 1.3, 2.0, 4.0])
    based = EfficientSizes.from_curve(curve, 8, base=6)
    for size, seconds in zip(based.size_list, based.seconds_list, strict=True):
        assert seconds == min(curve(6 + s) for s in range(size, 9))
    assert TreePolicy(curve, largest=8).sizes_on(6).size_list == based.size_list


def test_curve_is_measured_at_two_starts_and_kept_as_measured(tmp_path, monkeypatch) -> None:
    # a quiet machine's first measurement is taken again at the next start (a burst the load
    # average missed), each size keeping its fastest; then the curve is settled
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path))
    calls = []
    timings = iter([{1: 1.0, 2: 3.0, 4: 2.0}, {1: 1.05, 2: 1.5, 4: 2.5}])

    def measure(sizes) -> list[float]:
        calls.extend(sizes)
        times = next(timings)
        return [times[s] for s in sizes]

    first = load_or_measure(("m", "cpu"), (1, 2, 4), measure, busy=lambda: False)
    assert first.seconds == [1.0, 3.0, 2.0]  # kept as measured: 2 dearer than 4 (the policy pads up)
    second = load_or_measure(("m", "cpu"), (1, 2, 4), measure, busy=lambda: False)
    assert second.seconds == pytest.approx([1.0, 1.5 / 1.05, 2.0])  # the same speed: each size's lower shape
    again = load_or_measure(("m", "cpu"), (1, 2, 4), measure)
    assert again.seconds == second.seconds and calls == [1, 2, 4, 1, 2, 4]
    assert json.loads(curve_cache_path(("m", "cpu")).read_text())["measurements"] == MIN_MEASUREMENTS


def test_engines_saving_one_curve_at_once_do_not_collide(tmp_path, monkeypatch) -> None:
    # API replicas on one machine measure the same model and save its curve at the same time
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path))
    curve = CostCurve([1, 2], [1.0, 2.0])
    start = threading.Barrier(8)

    def save(_: int) -> None:
        start.wait()
        for _ in range(50):
            save_curve(("m", "cpu"), curve)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(save, range(8)))  # a saver's error is raised here
    assert json.loads(curve_cache_path(("m", "cpu")).read_text())["seconds"] == [1.0, 2.0]
    assert not list(tmp_path.glob("cost/*.tmp"))


def test_a_quick_measure_times_a_few_sizes_and_interpolates_the_grid(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path))
    calls = []

    def measure(sizes) -> list[float]:
        calls.extend(sizes)
        return [float(s) for s in sizes]

    curve = load_or_measure(("m", "cpu"), (1, 2, 3, 4, 8), measure, quick=(1, 4, 8))
    assert calls == [1, 4, 8] and curve.sizes == [1, 2, 3, 4, 8] and curve.seconds == [1.0, 2.0, 3.0, 4.0, 8.0]
    kept = json.loads(curve_cache_path(("m", "cpu")).read_text())
    assert kept["sizes"] == [1, 2, 3, 4, 8] and kept["seconds"] == curve.seconds


def test_sizes_costlier_than_a_larger_one_are_padded_up() -> None:
    sizes = EfficientSizes.from_curve(CostCurve([1, 2, 3, 4, 8], [1.0, 1.7, 1.8, 1.4, 1.5]), 8)
    assert 2 not in sizes.sizes and 3 not in sizes.sizes and 4 in sizes.sizes
    assert sizes.padded(2) == 4 and sizes.padded(1) == 1 and sizes.padded(5) == 5


def _tree_with_history(repeats: int) -> tuple[Automaton, int]:
    a = Automaton(ngram=6)
    a.init_logits(100, 4)
    a.feed([1, 2, 3, 4, 5, 6, 7, 8] * repeats + [1, 2])
    return a, 3


def test_policy_verifies_the_root_alone_when_drafts_look_hopeless() -> None:
    policy = TreePolicy(CostCurve([1, 64], [1.0, 3.0]))
    a = Automaton()
    a.init_logits(100, 4)
    a.update(np.array([5]), np.array([[9, 8, 7, 6]]))
    tree = a.retrieve(5, 64)
    assert tree.size == 5  # only logits guesses of unknown worth
    policy._hits[:] = 0.0  # experience says: they never hit
    chosen, fed, expected = policy.select(tree)
    assert chosen.tolist() == [0] and fed == 1 and expected == 0.0


def test_policy_buys_a_big_tree_for_a_long_retrieval_match() -> None:
    policy = TreePolicy(CostCurve([1, 64], [1.0, 1.2]))
    a, root = _tree_with_history(4)
    tree = a.retrieve(root, 64)
    chosen, fed, expected = policy.select(tree)
    assert len(chosen) == tree.size == 5 and fed >= len(chosen) and expected > 0.5
    assert chosen[0] == 0 and np.all(np.diff(chosen) > 0)
    # The selection is closed under parents: a node comes with its path.
    assert set(tree.parents[chosen[1:]].tolist()) <= set(chosen.tolist())


def test_policy_learns_from_hindsight_labels() -> None:
    policy = TreePolicy(CostCurve([1, 64], [1.0, 2.0]))
    a, root = _tree_with_history(3)
    tree = a.retrieve(root, 64)
    before = policy.path_probabilities(tree)
    for _ in range(50):
        policy.record(tree, 0)
        policy.learn([root, 4, 5, 6, 7, 8], final=True)  # the retrieval path came true
    after = policy.path_probabilities(tree)
    on_path = [i for i in range(1, tree.size) if tree.context[i] > 0]
    assert np.all(after[on_path] >= before[on_path]) and after[on_path].max() > 0.8


def test_replies_sharing_a_policy_on_one_thread_label_their_own_trees() -> None:
    """The engine loop runs every reply on one thread: each keeps its recorded
    trees in its own list, and one reply's learning leaves the other's alone."""
    policy = TreePolicy(CostCurve([1, 64], [1.0, 2.0]))
    a, root = _tree_with_history(3)
    tree = a.retrieve(root, 64)
    mine: list = []
    theirs: list = []
    policy.record(tree, 0, pending=mine)
    policy.record(tree, 5, pending=theirs)  # a tree of the other reply, 5 tokens further in its own text
    policy.learn([root, 4, 5, 6, 7, 8], final=True, pending=mine)
    assert mine == [] and len(theirs) == 1  # not labelled with my text



def test_a_curve_measured_on_a_busy_machine_is_measured_again_and_keeps_the_fastest(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path))
    timings = iter([[4.0, 9.0, 8.0], [1.0, 12.0, 2.0], [0.5, 0.5, 0.5]])
    calls = []

    def measure(sizes) -> list[float]:
        calls.append(list(sizes))
        return next(timings)

    busy = iter([True, False])
    first = load_or_measure(("m", "cpu"), (1, 2, 4), measure, busy=lambda: next(busy))
    assert first.seconds == [4.0, 9.0, 8.0]
    second = load_or_measure(("m", "cpu"), (1, 2, 4), measure, busy=lambda: next(busy))
    assert second.seconds == [1.0, 12.0, 2.0]  # one row 4x faster: that measurement, whole
    third = load_or_measure(("m", "cpu"), (1, 2, 4), measure)  # settled by the quiet measurement
    assert third.seconds == second.seconds and len(calls) == 2
    kept = json.loads(curve_cache_path(("m", "cpu")).read_text())
    assert kept["busy"] is False and kept["measurements"] == 2


def test_a_busy_curve_stops_being_measured_after_a_few_starts(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path))
    calls = []

    def measure(sizes) -> list[float]:
        calls.append(1)
        return [1.0] * len(sizes)

    told: list[int] = []
    for _ in range(5):
        load_or_measure(("m", "cpu"), (1, 2), measure, told.append, busy=lambda: True)
    assert len(calls) == MAX_MEASUREMENTS
    assert told == list(range(1, MAX_MEASUREMENTS + 1))  # the screen is told which measurement this is


def test_the_loading_screen_says_when_and_why_the_curve_is_measured() -> None:
    from racer_core.engine.engine import measuring_message

    first = measuring_message(1)
    assert "for this model and device" in first and "again at the next start" in first
    assert f"up to {MAX_MEASUREMENTS - 1} later starts" in first and "busy" in first
    again = measuring_message(2)
    assert "again" in again and f"2 of at most {MAX_MEASUREMENTS}" in again and "merged" in again
    assert "once" not in first + again


def test_a_refresh_measures_again_and_merges_with_the_stored_curve(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path))
    timings = iter([[1.0, 2.0], [3.0, 1.5]])
    load_or_measure(("m", "cpu"), (1, 2), lambda sizes: next(timings), busy=lambda: False)
    again = load_or_measure(("m", "cpu"), (1, 2), lambda sizes: next(timings), refresh=True, busy=lambda: False)
    assert again.seconds == [1.0, 2.0]  # the second's one row 3x slower (2 rows at half its cost): the first kept
    timings = iter([[1.05, 0.5]])
    again = load_or_measure(("m", "cpu"), (1, 2), lambda sizes: next(timings), refresh=True, busy=lambda: False)
    assert again.seconds == [1.0, 1.0]  # the same speed: the lower shape, never below one row


def test_a_damaged_stored_curve_is_measured_again(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path))
    path = curve_cache_path(("m", "cpu"))
    path.parent.mkdir(parents=True)
    path.write_text('{"sizes": [1, 2], "seconds": [1.0, -2.0]}')
    curve = load_or_measure(("m", "cpu"), (1, 2), lambda sizes: [1.0, 2.0], busy=lambda: False)
    assert curve.seconds == [1.0, 2.0]


# -- no test times anything (tests/conftest.py scripts every engine's curve) ----------------------------


@pytest.mark.measures_cost_curve
def test_the_cost_curve_is_measured_on_a_fake_clock(monkeypatch) -> None:
    engine, clock = clocked_engine(monkeypatch, "tiny-fake-clock")
    curve = engine.cost_curve()
    assert clock.now > 0
    assert curve.sizes == list(CPU_GRID)
    assert curve.seconds == pytest.approx([1e-3 * (10 + s) for s in CPU_GRID])  # the quick sizes, interpolated


@pytest.mark.measures_cost_curve
def test_a_measurement_on_the_real_clock_fails_the_test() -> None:
    engine = RacerEngine(tiny_model("llama", 0, vocab_size=SMALL_VOCAB), None, "tiny-real-clock", eos_ids=frozenset())
    with pytest.raises(pytest.fail.Exception, match="real cost curve"):
        engine.cost_curve()


def test_test_engines_verify_on_the_scripted_curve() -> None:
    engine = RacerEngine(tiny_model("llama", 0, vocab_size=SMALL_VOCAB), None, "tiny-scripted", eos_ids=frozenset())
    curve = engine.cost_curve()
    assert curve.sizes == list(CPU_GRID) and curve.seconds == scripted_on(CPU_GRID).seconds


def test_measurements_at_different_speeds_are_not_mixed_size_by_size() -> None:
    from racer_core.budget.cost_curve import SAME_SPEED, merged

    # the machine 1.5x slower at the second measurement: the faster one is kept whole, where a
    # size's fastest time of the two would have priced 2 rows at 1.2x one row, not 1.15x
    fast, slow = CostCurve([1, 2, 4], [4.0, 4.6, 6.4]), CostCurve([1, 2, 4], [6.0, 4.8, 9.9])
    assert merged(slow, fast).seconds == fast.seconds and merged(fast, slow).seconds == fast.seconds
    # one row's passes alone slowed in one measurement (its 2 rows cheaper than its one): not read as a shape
    burst = CostCurve([1, 2, 4], [4.0 * SAME_SPEED * 1.01, 4.2, 5.0])
    assert merged(burst, fast).seconds == fast.seconds
    # the same speed: each size's lower cost over one row (a burst caught by one), at the faster row
    other = CostCurve([1, 2, 4], [4.2, 4.62, 7.56])
    assert merged(other, fast).seconds == pytest.approx([4.0, 4.4, 6.4])
    assert merged(fast, other).seconds == merged(other, fast).seconds
