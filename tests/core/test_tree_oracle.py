"""scripts/tree_oracle.py: the per-step oracle tree, the calibration and the overhead study (issue 44)."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import numpy as np
import pytest

from racer_core.budget.cost_curve import CostCurve
from racer_core.budget.tree_policy import EfficientSizes
from scripts import tree_oracle

# root 5; 1 (7) and 2 (8) under it; 3 (9) and 4 (10) under 1; 5 (11) under 3; 6 (12) under 5
TOKENS = [5, 7, 8, 9, 10, 11, 12]
PARENTS = [-1, 0, 0, 1, 1, 3, 5]
DEPTHS = [0, 1, 1, 2, 2, 3, 4]


def _sizes(points: dict[int, float]) -> EfficientSizes:
    grid = sorted(points)
    return EfficientSizes.from_curve(CostCurve(grid, [points[s] for s in grid]), tree_oracle.LARGEST)


def test_the_true_path_follows_the_text_from_the_root() -> None:
    assert tree_oracle.true_path(PARENTS, TOKENS, [7, 9, 11, 13]) == [0, 1, 3, 5]
    assert tree_oracle.true_path(PARENTS, TOKENS, [8, 9]) == [0, 2]
    assert tree_oracle.true_path(PARENTS, TOKENS, [4]) == [0]
    assert tree_oracle.true_path(PARENTS, TOKENS, [7, 9]) == [0, 1, 3]  # the reply ends there


def test_a_subtree_accepts_the_true_paths_prefix_it_holds() -> None:
    path = [0, 1, 3, 5]
    assert tree_oracle.accepted_in(path, [0]) == 0
    assert tree_oracle.accepted_in(path, [0, 2]) == 0
    assert tree_oracle.accepted_in(path, [0, 1, 2, 4]) == 1
    assert tree_oracle.accepted_in(path, [0, 1, 3]) == 2
    assert tree_oracle.accepted_in(path, [0, 1, 3, 5, 6]) == 3


def test_the_oracle_cuts_the_path_where_the_curve_turns_steep() -> None:
    # Flat up to 4 rows, then steep: 4 tokens for 10 ms beat 6 for 25 ms (padded to 8: 40 ms).
    sizes = _sizes({1: 0.010, 2: 0.010, 4: 0.010, 8: 0.040, 64: 0.320})
    assert tree_oracle.oracle(5, sizes) == (3, pytest.approx(0.010))
    assert tree_oracle.oracle(0, sizes) == (0, pytest.approx(0.010))
    # A second row at 1.9x a first still pays (2 tokens for 19 ms), and the drafting time is paid on top.
    sizes = _sizes({1: 0.010, 2: 0.019, 64: 0.700})
    assert tree_oracle.oracle(1, sizes) == (1, pytest.approx(0.019))
    assert tree_oracle.oracle(1, sizes, drafting_s=0.002) == (1, pytest.approx(0.021))
    sizes = _sizes({1: 0.010, 2: 0.021, 64: 0.700})
    assert tree_oracle.oracle(1, sizes)[0] == 0


def _subtrees(parents: list[int]) -> list[list[int]]:
    """Every node set that holds the root and each member's parent."""
    found = []
    for bits in itertools.product([0, 1], repeat=len(parents) - 1):
        nodes = [0] + [i + 1 for i, b in enumerate(bits) if b]
        if all(parents[n] in nodes for n in nodes[1:]):
            found.append(nodes)
    return found


@pytest.mark.parametrize("text", [[7, 9, 11, 12], [7, 9, 11], [7, 10], [8], [1]])
@pytest.mark.parametrize("points", [
    {1: 0.010, 2: 0.010, 4: 0.010, 8: 0.040, 64: 0.320},
    {1: 0.010, 2: 0.014, 3: 0.013, 4: 0.015, 64: 0.200},
    {1: 0.010, 2: 0.030, 64: 0.700},
])
def test_the_oracle_is_the_best_of_every_subtree(text: list[int], points: dict[int, float]) -> None:
    sizes = _sizes(points)
    path = tree_oracle.true_path(PARENTS, TOKENS, text)
    best = max((tree_oracle.accepted_in(path, nodes) + 1) / (tree_oracle.cost(sizes, len(nodes)) + 0.001)
               for nodes in _subtrees(PARENTS))
    k, seconds = tree_oracle.oracle(len(path) - 1, sizes, 0.001)
    assert (k + 1) / seconds == pytest.approx(best)


def test_edge_chances_come_back_from_the_path_chances() -> None:
    edge = tree_oracle.edge_estimates([-1, 0, 1, 0], [1.0, 0.5, 0.25, 0.2])
    assert edge.tolist() == pytest.approx([1.0, 0.5, 0.5, 0.2])


def test_a_node_is_tested_when_its_parent_was_accepted_within_the_known_text() -> None:
    tested = tree_oracle.tested_nodes(PARENTS, DEPTHS, [0, 1, 3, 5], known=3)
    assert tested.tolist() == [False, True, True, True, True, True, False]  # 6 is at depth 4
    tested = tree_oracle.tested_nodes(PARENTS, DEPTHS, [0, 2], known=4)
    assert tested.tolist() == [False, True, True, False, False, False, False]  # 1 was rejected: its children untested


def _doc() -> dict:
    """One question: racer's two steps on a hand-made tree, ar's three."""
    tree = {"tokens": TOKENS, "parents": PARENTS, "depths": DEPTHS, "context": [0, 3, 0, 3, 0, 3, 3],
            "rank": [-1, -1, 0, 1, -1, -1, -1]}
    probs = [1.0, 0.5, 0.4, 0.25, 0.1, 0.2, 0.1]
    phases = {"draft": 0.002, "choose": 0.001, "record": 0.0, "learn": 0.0005, "verified": 0.001}
    timing = {"draft_s": 0.003, "verify_s": 0.010, "update_s": 0.002}
    racer = [  # the gate kept the root alone (the tree held 7, 9, 11); then 9 and 11 accepted, 13 the bonus
        {"tree": tree, "probs": probs, "chosen": [0], "intended": [0, 1], "fed": 1, "gate": True,
         "emitted": [7], "phases": phases, **timing},
        {"tree": {**tree, "tokens": [7, 9, 8, 11, 10, 13, 12]}, "probs": probs, "chosen": [0, 1, 3], "intended": [0, 1, 3],
         "fed": 4, "gate": False, "emitted": [9, 11, 13], "phases": phases, **timing},
    ]
    ar = [{"draft_s": 0.0005, "verify_s": 0.010, "update_s": 0.0005, "size": 1}] * 4
    reply = [5, 7, 9, 11, 13]
    return {"model": "hand-made", "dtype": "float32", "max_new_tokens": 4, "load": [0.1, 0.2],
            "curve": {"sizes": [1, 2, 4, 8, 64], "seconds": [0.010, 0.010, 0.010, 0.040, 0.320]},
            "questions": [{"question_id": 1, "category": "x",
                           "methods": {"ar": {"tokens": reply, "steps": ar}, "racer": {"tokens": reply, "steps": racer}}}]}


def test_speeds_score_the_actual_the_intended_and_the_oracles_choice() -> None:
    doc = _doc()
    sizes = EfficientSizes.from_curve(CostCurve(**doc["curve"]), tree_oracle.LARGEST)
    rates = tree_oracle.speed_tables(doc, sizes, ["racer"], python_s=0.0, extra={"racer": 0.0})
    assert rates["ar"].rate("all") == pytest.approx(100.0)  # one token per 10 ms
    # actual: 1 token (root alone) + 3 tokens (4 rows), 20 ms
    assert rates["racer"].rate("all") == pytest.approx(4 / 0.020)
    # the policy's own first choice (root and 7) would have made 2 tokens at 2 rows
    assert rates["racer intended"].rate("all") == pytest.approx(5 / 0.020)
    # the oracle: step 1's tree held 7, 9, 11 (4 tokens, 4 rows); step 2's 9, 11, 13, but the reply ends
    # at 13: 9 and 11 and the bonus (3 tokens, 3 rows padded to 4)
    assert rates["racer ceiling"].rate("all") == pytest.approx(7 / 0.020)
    assert rates["racer roots to oracle"].rate("all") == pytest.approx(7 / 0.020)


def test_calibration_labels_the_tested_nodes_with_the_policys_edge_chance() -> None:
    nodes = tree_oracle.calibration(_doc())
    # step 1: the path 0 -> 1 -> 3 -> 5, 4 tokens known: every node's parent is on it or is the root
    assert [(n["edge"], n["path"], n["tested"], n["hit"]) for n in nodes[:6]] == pytest.approx([
        (0.5, 0.5, True, True), (0.4, 0.4, True, False), (0.5, 0.25, True, True), (0.2, 0.1, True, False),
        (0.8, 0.2, True, True), (0.5, 0.1, True, False)])
    assert len(nodes) == 6 + 5  # step 2: 3 tokens known, node 6 (depth 4) is past the reply's end


def test_the_calibration_reads_each_nodes_share_in_bands(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _doc()
    assert {n["share"] for n in tree_oracle.calibration(doc)} == {-1.0}  # recorded before shares were kept
    tree_oracle.print_calibration(tree_oracle.calibration(doc))
    assert "automaton's share" not in capsys.readouterr().out
    for step in doc["questions"][0]["methods"]["racer"]["steps"]:
        step["tree"] = {**step["tree"], "share": [-1.0, 1.0, 0.3, 0.95, 0.6, 1.0, -1.0]}
    nodes = tree_oracle.calibration(doc)
    assert [n["share"] for n in nodes[:6]] == [1.0, 0.3, 0.95, 0.6, 1.0, -1.0]
    assert tree_oracle.share_bands(np.array([-1.0, 0.0, 0.49, 0.5, 0.89, 0.9, 1.0])).tolist() == [0, 1, 1, 2, 2, 3, 3]
    tree_oracle.print_calibration(nodes)
    assert "| 0.9+, 1 | 2 | 0.500 | 1.000 |" in capsys.readouterr().out  # node 1 (share 1.0, depth 1), in both steps
    assert tree_oracle.recorded_tree(doc["questions"][0]["methods"]["racer"]["steps"][0]["tree"]).share[3] == 0.95


def test_overheads_split_a_step_into_its_phases_beyond_ar() -> None:
    per = tree_oracle.overheads(_doc(), "racer")
    assert per["retrieve"][0] == pytest.approx(0.001)  # drafting 2 ms, of which the choice 1 ms
    assert per["choose"][0] == pytest.approx(0.001)
    assert per["table"][0] == pytest.approx(0.0005)  # verified 1 ms, of which the policy's learning 0.5 ms
    assert per["drafter"][0] == pytest.approx(0.003)
    assert per["decoder"][0] == pytest.approx(0.005 - 0.003)  # the step's 5 ms outside the forward, less the drafter's
    assert tree_oracle.python_s(_doc(), "racer") == pytest.approx(0.005)
    assert tree_oracle.python_s(_doc(), "ar") == pytest.approx(0.001)


def test_record_refuses_the_held_out_questions() -> None:
    with pytest.raises(SystemExit, match="held out"):
        tree_oracle.main(["record", "--out", "/nonexistent", "--question-end", "42"])


def test_the_script_records_and_reports_on_the_tiny_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree_oracle.main(["record", "--tiny", "--out", str(tmp_path), "--question-end", "1", "--max-new-tokens", "8"])
    doc = json.loads((tmp_path / "steps.json").read_text())
    runs = doc["questions"][0]["methods"]
    assert set(runs) == {"ar", "racer", "suffix"} and doc["cpu_class"]  # the class it ran in, for the report
    for method in ("racer", "suffix"):  # the recorded choice is the tree each step verified, its tokens the reply's
        steps = runs[method]["steps"]
        assert [len(s["chosen"]) for s in steps] == [s["size"] for s in steps]
        assert [t for s in steps for t in s["emitted"]] == runs[method]["tokens"][1:]
    # racer's trees keep the automaton's shares, one per node; suffix's have none
    assert all(len(s["tree"]["share"]) == len(s["tree"]["tokens"]) for s in runs["racer"]["steps"])
    assert not any("share" in s["tree"] for s in runs["suffix"]["steps"])
    tree_oracle.main(["report", str(tmp_path / "steps.json"), "--rounds", "1"])
    out = capsys.readouterr().out
    assert f"CPU class {doc['cpu_class']}" in out
    steps = len(runs["racer"]["steps"])
    assert f"racer: the scoring gives the engine's acceptance on {steps} of {steps} steps" in out
    assert "racer ceiling" in out and "suffix ceiling" in out and "beyond ar" in out and "interleaved rounds" in out
    assert doc["clock"] == "wall" and "loop thread's CPU time" not in out


def test_record_cpu_times_the_phases_by_the_loop_threads_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    read = []

    def thread_time() -> float:  # the loop thread's CPU clock, seen being read there
        read.append(threading.current_thread().name)
        return 0.0

    monkeypatch.setattr(tree_oracle.time, "thread_time", thread_time)
    tree_oracle.main(["record", "--tiny", "--cpu", "--out", str(tmp_path), "--question-end", "1",
                      "--max-new-tokens", "4", "--methods", "ar,racer"])
    doc = json.loads((tmp_path / "steps.json").read_text())
    assert doc["clock"] == "cpu" and read and set(read) == {"racer-loop"}
    assert all(s["phases"]["draft"] == 0.0 for s in doc["questions"][0]["methods"]["racer"]["steps"])
    tree_oracle.print_overheads(doc, ["racer"], 0.01)
    assert "loop thread's CPU time" in capsys.readouterr().out


def test_the_calibration_map_reads_the_acceptance_seen_per_bin_never_decreasing() -> None:
    nodes = [{"path": p, "hit": h} for p, h in [(0.02, False), (0.03, True), (0.55, True), (0.57, True),
                                                (0.85, False), (0.87, True)]]
    xs, ys = tree_oracle.calibration_map(nodes)
    assert xs.tolist() == pytest.approx([0.025, 0.56, 0.86])
    assert ys.tolist() == pytest.approx([0.5, 1.0, 1.0])  # the last bin saw 0.5: raised to the one before


def test_the_policys_rule_on_calibrated_chances_keeps_a_node_worth_its_row() -> None:
    curve = CostCurve([1, 2, 64], [0.010, 0.015, 0.500])  # a second row costs half a first
    policy = tree_oracle.GivenChances(curve, largest=tree_oracle.LARGEST)
    step = {"probs": [1.0, 0.05, 0.01], "tree": {"context": [0, 0, 0]}}
    as_estimated = tree_oracle.calibrated_chances(step, (np.array([0.0, 1.0]), np.array([0.0, 1.0])))
    assert tree_oracle.rule_choice(policy, step, as_estimated).tolist() == [0]  # 1.05 tokens in 15 ms < 1 in 10
    raised = tree_oracle.calibrated_chances(step, (np.array([0.0, 0.05, 1.0]), np.array([0.0, 0.9, 1.0])))
    assert raised.tolist() == pytest.approx([1.0, 0.9, 0.01 / 0.05 * 0.9])  # nodes estimated at 0.05 were accepted 90%
    assert tree_oracle.rule_choice(policy, step, raised).tolist() == [0, 1]


def test_fine_chances_read_each_kind_of_nodes_acceptance_where_it_was_seen_often_enough() -> None:
    step = {"probs": [1.0, 0.5, 0.25, 0.1], "tree": {"tokens": [1, 2, 3, 4], "parents": [-1, 0, 1, 0],
                                                      "depths": [0, 1, 2, 1], "context": [0, 4, 4, 0],
                                                      "rank": [-1, -1, -1, 0]}}
    rates = {(4, -1, 1): (9, 10), (4, -1, 2): (8, 10), (0, 0, 1): (1, 5)}  # the last too rarely seen: own estimate
    assert tree_oracle.fine_chances(step, rates).tolist() == pytest.approx([1.0, 0.9, 0.72, 0.1])


@pytest.mark.parametrize("accepted", [[0, 1, 7], [5, 5, 0, 2], [12, 0, 0, 0], [3]])
def test_the_whole_run_oracle_is_the_best_of_every_choice_of_depths(accepted: list[int]) -> None:
    sizes = _sizes({1: 0.010, 2: 0.011, 4: 0.0143, 8: 0.0239, 16: 0.0485, 32: 0.0766})
    rate = lambda ks: sum(k + 1 for k in ks) / sum(tree_oracle.cost(sizes, k + 1) + 0.001 for k in ks)  # noqa: E731
    best = max(rate(ks) for ks in itertools.product(*(range(a + 1) for a in accepted)))
    assert rate(tree_oracle.run_oracle(accepted, sizes, 0.001)) == pytest.approx(best)


def test_the_whole_run_oracle_takes_rows_a_step_alone_would_not() -> None:
    # 8 rows make 8 tokens in 23.9 ms, 12 rows 12 in 36.2 ms: a hair slower for that step alone,
    # but far above a run that also has a step with nothing to accept (1 token in 10 ms).
    sizes = _sizes({1: 0.010, 8: 0.0239, 12: 0.0362, 16: 0.0485})
    assert tree_oracle.oracle(11, sizes)[0] == 7
    assert tree_oracle.run_oracle([11, 0], sizes) == [11, 0]


def test_the_replay_covers_the_reply_once_whatever_the_policy_accepts() -> None:
    # The replayed policy's acceptance, not the recorded steps', decides where
    # its next root lies: no token is counted twice, none left out.
    recorded, replayed, steps = tree_oracle.replay_policy(_doc(), CostCurve([1, 2, 4, 8, 64],
                                                                            [0.010, 0.010, 0.010, 0.040, 0.320]))
    assert recorded.tokens["all"] == replayed.tokens["all"] == 4  # the reply after its first token
    assert 1 <= steps <= 4  # one step per token at most, its plain ones included
    assert recorded.rate("all") == pytest.approx(4 / 0.020)


def test_bad_input_gets_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="not a recording"):
        tree_oracle.main(["report", str(tmp_path / "missing.json")])
    with pytest.raises(SystemExit, match="not a recording"):
        tree_oracle.main(["replay", str(tmp_path / "missing.json")])
    with pytest.raises(SystemExit, match="rows:ms pairs"):
        tree_oracle.parse_curve("1:10,2")
    with pytest.raises(SystemExit, match="from 1 row"):
        tree_oracle.parse_curve("2:10,4:12")
