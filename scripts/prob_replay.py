"""Would the logits table's probabilities make the tree policy faster? An offline study.

Today's table keeps only the top-k ids of each row, and the tree policy
(racer_core/budget/tree_policy.py) learns acceptance per (retrieval context, logits
rank, depth). This replays greedy traces recorded with their top-k
probabilities (`draft_replay.py record` stores them as `topk_probs`) beside a
side table that keeps each row entry's probability, and compares policies at
the `auto` budget with one cost curve:

    rank     today's policy
    prob     buckets (context, bin of the node's probability in its parent's row, depth)
    both     buckets (context, rank, probability bin, depth)
    mass=M   `prob`, and the logits part of the tree rebuilt: a node expands its
             row in rank order while the probability before an entry is < M
    best     `prob`, and the logits part grown best-first by estimated path probability
    oracle   knows the continuation and verifies the accepted path alone: the
             bound of any selection from the automaton's 64-node tree

    python scripts/prob_replay.py traces.json --cost 1:29.1,2:29,4:29,8:32.3,16:39,32:52.1,64:80

A node's probability is that of its token in the row its parent's expansion
reads (the pair row, else the token row; the root's row for its children), 0
when the token is not in that row; retrieval nodes get one too. As in
draft_replay.py the table learns only from positions on the true path.
"""

from __future__ import annotations

import argparse
import heapq
import json
from collections import deque
from dataclasses import dataclass

import numpy as np

from racer_core.budget.cost_curve import CostCurve
from racer_core.budget.tree_policy import _CTX_EDGES, _DEPTH_EDGES, _RANK_EDGES, TreePolicy
from racer_core.drafting.automaton import Automaton

PROB_EDGES = np.array([1e-9, 0.02, 0.1, 0.25, 0.5, 0.75, 0.9])  # absent -> 0, ..., (0.9, 1] -> 7
PROB_PRIOR = np.array([0.0, 0.01, 0.06, 0.17, 0.37, 0.62, 0.82, 0.95])
CTX_PRIOR = np.array([0.0, 0.25, 0.35, 0.45, 0.55, 0.6])


class ProbTable:
    """The automaton's rows (token and pair), each entry with its probability."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[int, float]] = {}
        self.pairs: dict[tuple[int, int], dict[int, float]] = {}

    def update(self, tokens, ids, probs, prevs) -> None:
        for t, row_ids, row_probs, p in zip(tokens, ids, probs, prevs, strict=True):
            row = dict(zip(map(int, row_ids), map(float, row_probs), strict=True))
            self.rows[int(t)] = row
            if p >= 0:
                self.pairs[(int(p), int(t))] = row

    def row(self, prev: int, token: int) -> dict[int, float]:
        found = self.pairs.get((prev, token)) if prev >= 0 else None
        return found if found is not None else self.rows.get(token, {})


@dataclass
class Tree:
    """The fields of a DraftTree the policy reads, plus each node's row probability."""

    tokens: np.ndarray
    parents: np.ndarray
    position_ids: np.ndarray
    context: np.ndarray
    rank: np.ndarray
    prob: np.ndarray

    @classmethod
    def build(cls, tokens, parents, depths, context, rank, table: ProbTable, root_prev: int) -> Tree:
        prob = np.zeros(len(tokens))
        prob[0] = 1.0
        for i in range(1, len(tokens)):
            p = int(parents[i])
            prob[i] = table.row(int(tokens[parents[p]]) if p else root_prev, int(tokens[p])).get(int(tokens[i]), 0.0)
        a = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
        return cls(a(tokens), a(parents), a(depths), a(context), a(rank), prob)


class ProbPolicy(TreePolicy):
    """TreePolicy with the row probability in its buckets (`both`: beside the rank)."""

    with_rank = False

    def _prior(self) -> np.ndarray:
        if self.with_rank:
            p = np.maximum(CTX_PRIOR[:, None, None, None], PROB_PRIOR[None, None, :, None]) * np.ones((6, 5, 8, 3))
        else:
            p = np.maximum(CTX_PRIOR[:, None, None], PROB_PRIOR[None, :, None]) * np.ones((6, 8, 3))
        return np.clip(p, 0.01, 0.9)

    def _buckets(self, tree: Tree) -> tuple[np.ndarray, ...]:
        ctx = np.searchsorted(_CTX_EDGES, tree.context, side="right")
        prob = np.searchsorted(PROB_EDGES, tree.prob, side="right")
        depth = np.searchsorted(_DEPTH_EDGES, tree.position_ids, side="right")
        if not self.with_rank:
            return ctx, prob, depth
        rank = np.where(tree.rank < 0, 0, np.searchsorted(_RANK_EDGES, tree.rank, side="right"))
        return ctx, rank, prob, depth


class BothPolicy(ProbPolicy):
    with_rank = True


def retrieval_part(tree) -> tuple[list[int], list[int], list[int], list[int]]:
    """The nodes retrieval added (a subtree: they come first), as lists."""
    keep = [0] + [i for i in range(1, tree.size) if tree.sources[i] & 1]
    index = {n: j for j, n in enumerate(keep)}
    parents = [-1] + [index[int(tree.parents[n])] for n in keep[1:]]
    return ([int(tree.tokens[n]) for n in keep], parents, [int(tree.position_ids[n]) for n in keep],
            [int(tree.context[n]) for n in keep])


def mass_tree(tree, table: ProbTable, root_prev: int, largest: int, mass: float) -> Tree:
    """Retrieval's nodes, then a breadth-first logits expansion in which a
    node takes its row's entries in rank order while the mass before one is < `mass`."""
    tok, par, dep, ctx = retrieval_part(tree)
    rank = [-1] * len(tok)
    kids: list[dict[int, int]] = [{} for _ in tok]
    for i in range(1, len(tok)):
        kids[par[i]][tok[i]] = i
    fifo = deque([0])
    while fifo and len(tok) < largest:
        n = fifo.popleft()
        before = 0.0
        for r, (t, p) in enumerate(table.row(tok[par[n]] if n else root_prev, tok[n]).items()):
            if len(tok) >= largest or (r and before >= mass):
                break
            before += p
            c = kids[n].get(t)
            if c is None:
                c = len(tok)
                tok.append(t), par.append(n), dep.append(dep[n] + 1), ctx.append(0), rank.append(r), kids.append({})
                kids[n][t] = c
            elif rank[c] < 0:
                rank[c] = r
            fifo.append(c)
    return Tree.build(tok, par, dep, ctx, rank, table, root_prev)


def best_first_tree(tree, table: ProbTable, root_prev: int, policy: ProbPolicy) -> Tree:
    """Retrieval's nodes, then logits nodes one at a time, the candidate with
    the highest estimated path probability first (the policy's own estimates)."""
    tok, par, dep, ctx = retrieval_part(tree)
    base = Tree.build(tok, par, dep, ctx, [-1] * len(tok), table, root_prev)
    path = list(policy.path_probabilities(base))
    rate = policy._hits / policy._trials
    kids = [set() for _ in tok]
    for i in range(1, len(tok)):
        kids[par[i]].add(tok[i])
    heap: list[tuple[float, int, int, int]] = []

    def push(n: int) -> None:
        depth = min(2, int(np.searchsorted(_DEPTH_EDGES, dep[n] + 1, side="right")))
        for t, p in table.row(tok[par[n]] if n else root_prev, tok[n]).items():
            if t not in kids[n]:
                edge = rate[0, int(np.searchsorted(PROB_EDGES, p, side="right")), depth]
                heapq.heappush(heap, (-path[n] * edge, n, t, len(heap)))

    for n in range(len(tok)):
        push(n)
    while heap and len(tok) < policy.largest:
        neg, n, t, _ = heapq.heappop(heap)
        if t in kids[n]:
            continue
        kids[n].add(t)
        tok.append(t), par.append(n), dep.append(dep[n] + 1), ctx.append(0), path.append(-neg), kids.append(set())
        push(len(tok) - 1)
    return Tree.build(tok, par, dep, ctx, [-1] * len(tok), table, root_prev)


def accepted_path(tree, seq: list[int], pos: int, allowed=None) -> list[int]:
    """Node indices of the longest path of `tree` (only `allowed` nodes) that `seq` follows from `pos`."""
    node, path = 0, [0]
    while pos + len(path) < len(seq):
        nxt = np.nonzero((tree.parents == node) & (tree.tokens == seq[pos + len(path)]))[0]
        nxt = [int(i) for i in nxt if allowed is None or int(i) in allowed]
        if not nxt:
            break
        node = nxt[0]
        path.append(node)
    return path


def simulate(trace: dict, variant: str, policy: TreePolicy) -> tuple[int, int, list[int]]:
    """(tokens, steps, fed sizes) of one trace under `variant`."""
    seq = trace["prompt"] + trace["output"]
    ids = np.asarray(trace["topk"], dtype=np.int64)
    probs = np.asarray(trace["topk_probs"], dtype=np.float64)
    prev = np.asarray([-1, *seq[:-1]], dtype=np.int64)
    automaton = Automaton(max_nodes=10000, min_depth=2, ngram=10)
    automaton.init_logits(max(seq) + 50000, ids.shape[1])
    table = ProbTable()
    pos, steps, sizes = 0, 0, []

    def learn(end: int) -> None:
        part = slice(pos, end)
        automaton.update(np.asarray(seq[part], dtype=np.int64), ids[part], prev[part])
        table.update(seq[part], ids[part], probs[part], prev[part])
        automaton.feed(seq[part])

    learn(len(trace["prompt"]))
    pos = len(trace["prompt"])
    while pos < len(seq) - 1:
        drafted = automaton.retrieve(seq[pos], policy.largest, prev_token=int(prev[pos]))
        root_prev = int(prev[pos])
        if variant.startswith("mass="):
            tree = mass_tree(drafted, table, root_prev, policy.largest, float(variant[5:]))
        elif variant == "best":
            tree = best_first_tree(drafted, table, root_prev, policy)
        else:
            tree = Tree.build(drafted.tokens, drafted.parents, drafted.position_ids, drafted.context, drafted.rank,
                              table, root_prev)
        if variant == "oracle":
            chosen = accepted_path(tree, seq, pos)
            fed = policy.sizes.padded(len(chosen))
        else:
            chosen, fed, _ = policy.select(tree)
            chosen = accepted_path(tree, seq, pos, set(chosen.tolist()))
            policy.record(tree, pos)
        steps += 1
        sizes.append(fed)
        accepted = len(chosen) - 1
        policy.learn(seq[: pos + accepted + 2])
        learn(pos + accepted + 1)
        pos += accepted + 1
    policy.learn(seq, final=True)
    return len(seq) - 1 - len(trace["prompt"]), steps, sizes


def run(traces: list[dict], variant: str, cost: dict[int, float]) -> tuple[float, float, float]:
    """(MAT, estimated speedup over one-token steps, mean fed size); one policy
    shared across the questions, as in the engine."""
    grid = sorted(cost)
    curve = CostCurve(grid, [cost[k] / 1000 for k in grid])
    kind = {"prob": ProbPolicy, "both": BothPolicy}.get(variant, TreePolicy)
    if variant.startswith("mass=") or variant == "best":
        kind = ProbPolicy
    policy = kind(curve)
    tokens = steps = 0
    fed: list[int] = []
    for trace in traces:
        n, s, sizes = simulate(trace, variant, policy)
        tokens, steps, fed = tokens + n, steps + s, fed + sizes
    seconds = float(np.interp(fed, grid, [cost[k] for k in grid]).sum())
    return tokens / steps, tokens * cost[grid[0]] / seconds, float(np.mean(fed))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--cost", required=True, help="cost curve as T:ms pairs, from T=1, e.g. 1:29,8:32,64:80")
    parser.add_argument("--variants", default="rank,prob,both,mass=0.9,best,oracle")
    args = parser.parse_args(argv)
    cost = {int(k): float(v) for k, v in (kv.split(":") for kv in args.cost.split(","))}
    for path in args.traces:
        traces = json.load(open(path))["traces"]
        if not all("topk_probs" in t for t in traces):
            raise SystemExit(f"{path}: traces without topk_probs; record them again with draft_replay.py record")
        for variant in args.variants.split(","):
            mat, speedup, fed = run(traces, variant, cost)
            print(f"{path}  {variant:9} MAT {mat:.3f}  est. speedup {speedup:.3f}x  mean fed {fed:.1f}", flush=True)


if __name__ == "__main__":
    main()
