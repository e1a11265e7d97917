"""scripts/prob_replay.py: the offline study of a probability-aware tree policy."""

from __future__ import annotations

import numpy as np
import pytest

from scripts import draft_replay, prob_replay

COST = {1: 29.0, 4: 29.0, 8: 32.0, 16: 39.0, 32: 52.0, 64: 80.0}


def _trace(seed: int) -> dict:
    """A repetitive sequence with made-up top-k rows: the true next token first
    (probability 0.6) where the pattern holds, elsewhere a random row."""
    rng = np.random.default_rng(seed)
    pattern = list(rng.integers(10, 60, size=12))
    seq = [int(t) for t in pattern * 6 + list(rng.integers(10, 60, size=20)) + pattern * 4]
    ids, probs = [], []
    for i, _ in enumerate(seq):
        row = [int(t) for t in rng.choice(np.arange(100, 200), size=8, replace=False)]
        if i + 1 < len(seq) and rng.random() < 0.8:
            row[0] = seq[i + 1]
        ids.append(row)
        probs.append([0.6, *[0.05] * 7])
    return {"category": "x", "prompt": seq[:30], "output": seq[30:], "topk": ids, "topk_probs": probs}


def test_a_node_reads_its_probability_from_the_row_its_parent_expands() -> None:
    table = prob_replay.ProbTable()
    table.update([5, 6], [[6, 7], [8, 9]], [[0.7, 0.2], [0.4, 0.3]], [-1, 5])
    table.update([6], [[9, 1]], [[0.9, 0.05]], [-1])  # token row of 6; the pair (5, 6) keeps its own
    assert table.row(5, 6) == {8: 0.4, 9: 0.3} and table.row(4, 6) == {9: 0.9, 1: 0.05} and table.row(3, 2) == {}
    # root 5 (after 1): 6 and 7 from 5's row; under 6 (after 5): the pair row
    tree = prob_replay.Tree.build([5, 6, 7, 8, 1], [-1, 0, 0, 1, 1], [0, 1, 1, 2, 2], [0] * 5, [-1] * 5, table, 1)
    assert tree.prob.tolist() == [1.0, 0.7, 0.2, 0.4, 0.0]


def test_the_rank_variant_is_the_engine_policy_as_draft_replay_replays_it() -> None:
    traces = [_trace(s) for s in range(3)]
    mat, _, _ = prob_replay.run(traces, "rank", COST)
    from racer_core.budget.cost_curve import CostCurve
    from racer_core.budget.tree_policy import TreePolicy

    grid = sorted(COST)
    policy = TreePolicy(CostCurve(grid, [COST[k] / 1000 for k in grid]))
    results = [draft_replay.simulate(t, 0, "racer", policy=policy) for t in traces]
    assert mat == pytest.approx(sum(n for n, _, _ in results) / sum(s for _, s, _ in results))


@pytest.mark.parametrize("variant", ["rank", "prob", "both", "mass=0.9", "best", "oracle"])
def test_every_variant_accepts_drafts_on_repetitive_text(variant: str) -> None:
    mat, speedup, fed = prob_replay.run([_trace(s) for s in range(2)], variant, COST)
    assert mat > 1.5 and speedup > 1.0 and 1.0 <= fed <= 64
