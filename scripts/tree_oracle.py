"""Where racer's speed is, step by step: the oracle tree, the policy's calibration, the overhead (issue 44).

    python scripts/tree_oracle.py record --out /tmp/oracle        # the model: answers and every step's tree
    python scripts/tree_oracle.py report /tmp/oracle/steps.json   # no model: the tables, in seconds
    python scripts/tree_oracle.py record --out /tmp/quiet --curve 1:10.4,2:11,4:14.3,8:23.9   # the policies weigh this curve
    python scripts/tree_oracle.py record --out /tmp/cpu --cpu   # the drafter's phases by the loop thread's CPU time
    python scripts/tree_oracle.py record --out /tmp/avx2 --cpu --isa avx2   # the AVX2 class on an AVX-512 machine
    python scripts/tree_oracle.py report /tmp/oracle/steps.json --rounds 5   # and the choice timed alone
    python scripts/tree_oracle.py replay /tmp/oracle/steps.json   # this code's policy on the recorded trees: x ar, MAT, of the ceiling

docs/performance.md ("where racer's speed is, step by step") has the tables and what they say.

`record` answers built-in questions 1-14 (first turns, greedy, 128 new
tokens, the defaults; 15-42 are held out, and refused) with ar, racer and
suffix in turn per question, one policy per method across the questions and
the benchmark's warm-up first, as `racer-tui bench` runs them. Per step it
keeps the drafter's whole tree (racer's before the tree policy cut it, with
the policy's estimates, its choice and the draft gate's), the tokens emitted,
and timers around the phases a drafted step spends beyond a plain one.
`report` replays the recorded steps; greedy output does not depend on the
drafts, so every subset of a drafted tree can be scored against the text:

1. The oracle: per step, the subtree (containing the root) that maximises
   tokens per second, (accepted + 1) / (t(rows) + the step's drafting time),
   t the measured cost curve padded to the cheaper sizes as the engine pads.
   It is the accepted path cut at its best depth: any other node only costs.
   Beside the per-step best, the whole run's: the depths that maximise the
   run's tokens over its seconds (the ceiling of a run's rate), and the
   policy's own rule on better chances learned from the run (in-sample bounds).
2. Calibration: the policy's edge chance per node against the acceptance seen.
3. Overhead: each drafted step's time beyond an ar step, by phase, against a
   one-row step's t(1).

`--tiny` records on the tiny random-weight model (the smoke test).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from racer_core.budget.cost_curve import CostCurve
from racer_core.budget.cpu_class import ISA_CHOICES
from racer_core.budget.tree_policy import _CTX_EDGES, _DEPTH_EDGES, _RANK_EDGES, EfficientSizes, TreePolicy, text_path

HELD_OUT = 14
"""Built-in questions past this index are the ones results are checked on."""
LARGEST = 64  # the policy's largest tree (TreePolicy.largest, the engine's grid)
clock = time.perf_counter


# -- the oracle and the scoring of a choice (pure: tests/core/test_tree_oracle.py) ---------------------


def true_path(parents: Sequence[int], tokens: Sequence[int], continuation: Sequence[int]) -> list[int]:
    """Node indices of the longest path from the root whose tokens `continuation`
    follows (the text after the root), root first: the policy's own labelling
    (tree_policy.text_path), on a recorded tree's lists."""
    return text_path([int(t) for t in tokens], [int(p) for p in parents], [int(t) for t in continuation])


def accepted_in(path: list[int], chosen: Sequence[int]) -> int:
    """Drafts verification accepts when only `chosen` nodes are fed: the
    true path's prefix inside the subtree."""
    kept = set(int(c) for c in chosen)
    n = 0
    while n + 1 < len(path) and path[n + 1] in kept:
        n += 1
    return n


def oracle(accepted: int, sizes: EfficientSizes, drafting_s: float = 0.0) -> tuple[int, float]:
    """(drafts to verify, seconds) of the best subtree of a tree whose true path
    has `accepted` drafts: the path's first k nodes, k maximising
    (k + 1) / (t(k + 1 padded) + drafting_s)."""
    best_k, best_rate, best_s = 0, -1.0, 0.0
    for k in range(min(accepted, LARGEST - 1) + 1):
        seconds = cost(sizes, k + 1) + drafting_s
        if (k + 1) / seconds > best_rate * 1.0000001:
            best_k, best_rate, best_s = k, (k + 1) / seconds, seconds
    return best_k, best_s


def run_oracle(accepted: Sequence[int], sizes: EfficientSizes, drafting_s: float = 0.0) -> list[int]:
    """Drafts to verify per step, the true path's first k_i, maximising the whole
    run's sum(k_i + 1) / sum(t(k_i + 1 padded) + drafting_s): the ceiling of a
    run's tokens per second, which the per-step best (`oracle`) is not (a step
    may take a few rows below its own best rate when that rate is still above
    the run's). Dinkelbach's iteration: each step maximises (k + 1) - rate * seconds
    at the run's rate so far; the rate rises until no step changes."""
    costs = [np.array([cost(sizes, k + 1) + drafting_s for k in range(min(a, LARGEST - 1) + 1)]) for a in accepted]
    rate, ks = 0.0, [0] * len(costs)
    for _ in range(100):
        ks = [int(np.argmax(np.arange(1, len(c) + 1) - rate * c)) for c in costs]
        tokens = sum(k + 1 for k in ks)
        seconds = sum(float(c[k]) for c, k in zip(costs, ks, strict=True))
        if seconds == 0 or tokens / seconds <= rate * (1 + 1e-12):
            break
        rate = tokens / seconds
    return ks


def cost(sizes: EfficientSizes, nodes: int) -> float:
    """The curve's seconds for `nodes` rows, padded up to the cheapest size that holds them."""
    i = int(np.searchsorted(sizes.sizes, nodes))
    if i < len(sizes.sizes):
        return float(sizes.seconds[i])
    return float(sizes.seconds[-1]) * nodes / float(sizes.sizes[-1])


def edge_estimates(parents: Sequence[int], path_probs: Sequence[float]) -> np.ndarray:
    """Each node's chance given its parent, from the policy's P(path accepted)
    (the product of the edges: TreePolicy.path_probabilities)."""
    probs = np.asarray(path_probs, dtype=np.float64)
    parent = np.maximum(np.asarray(parents, dtype=np.int64), 0)
    edge = probs / np.maximum(probs[parent], 1e-12)
    edge[0] = 1.0
    return edge


def tested_nodes(parents: Sequence[int], depths: Sequence[int], path: list[int], known: int) -> np.ndarray:
    """Nodes whose parent is on the true path (their own chance was put to the
    test), within the `known` tokens after the root; the policy learns from these."""
    on = np.zeros(len(parents), dtype=bool)
    on[path] = True
    tested = on[np.maximum(np.asarray(parents), 0)] & (np.asarray(depths) <= known)
    tested[0] = False
    return tested


# -- recording (the model) ---------------------------------------------------------------------------


@dataclass
class Tap:
    """Wraps the drafters' and the policy's methods for one run and keeps what each step did."""

    steps: list[dict]
    pending: dict | None = None

    def phase(self, name: str, seconds: float) -> None:
        if self.pending is not None:
            self.pending["phases"][name] = self.pending["phases"].get(name, 0.0) + seconds


@contextlib.contextmanager
def tapped(now: Callable[[], float] = time.perf_counter) -> Iterator[Tap]:
    """Patches RacerDrafter, SuffixDrafter and TreePolicy (restored after) to record every step, timing the phases by `now`."""
    from racer_core.drafting import racer as racer_module
    from racer_core.drafting.suffix import SuffixDrafter

    tap = Tap([])
    saved = {(racer_module.RacerDrafter, "draft"), (racer_module.RacerDrafter, "verified"),
             (SuffixDrafter, "draft"), (SuffixDrafter, "verified"), (TreePolicy, "record"), (TreePolicy, "learn")}
    originals = {(cls, name): getattr(cls, name) for cls, name in saved}
    cut = racer_module.cut

    def timed(cls, name, phase):
        inner = originals[(cls, name)]

        def wrapper(*args, **kwargs):
            start = now()
            try:
                return inner(*args, **kwargs)
            finally:
                tap.phase(phase, now() - start)
        return wrapper

    def drafting(cls):
        inner = originals[(cls, "draft")]

        def draft(self, root, prev, limit, load=(0, 0)):
            tap.pending = {"phases": {}}
            start = now()
            tree = inner(self, root, prev, limit, load)
            tap.pending["phases"]["draft"] = now() - start
            full = getattr(self, "_full", None) or tree  # racer's whole tree, before the policy's cut
            tap.pending["tree"] = {k: getattr(full, k).tolist() for k in ("tokens", "parents", "depths", "context",
                                                                          "rank")}
            if getattr(full, "share", None) is not None:  # racer's: the automaton's retrieval shares
                tap.pending["tree"]["share"] = full.share.tolist()
            selection = tree.selection
            if selection is None:  # a drafter that sizes its own tree: all of it is verified
                tap.pending.update(chosen=list(range(tree.size)), fed=tree.rows)
                return tree
            tap.pending.update(
                probs=[float(p) for p in selection.probabilities],
                chosen=selection.chosen.tolist(),
                intended=(selection.intended[0] if selection.intended is not None else selection.chosen).tolist(),
                fed=int(selection.fed), gate=selection.intended is not None,
            )
            return tree
        return draft

    def verifying(cls):
        inner = originals[(cls, "verified")]

        def verified(self, tree, logits, path, emitted, captured):
            start = now()
            try:
                return inner(self, tree, logits, path, emitted, captured)
            finally:
                if tap.pending is not None:
                    tap.pending["phases"]["verified"] = now() - start
                    tap.pending["emitted"] = [int(t) for t in emitted]
                    tap.steps.append(tap.pending)
                    tap.pending = None
        return verified

    def timed_cut(tree, policy, load=(0, 0)):
        start = now()
        try:
            return cut(tree, policy, load)
        finally:
            tap.phase("choose", now() - start)

    try:
        for cls in (racer_module.RacerDrafter, SuffixDrafter):
            cls.draft, cls.verified = drafting(cls), verifying(cls)
        TreePolicy.record = timed(TreePolicy, "record", "record")
        TreePolicy.learn = timed(TreePolicy, "learn", "learn")
        racer_module.cut = timed_cut
        yield tap
    finally:
        for (cls, name), fn in originals.items():
            setattr(cls, name, fn)
        racer_module.cut = cut


def record(args: argparse.Namespace) -> None:
    from racer_core.budget.cpu_class import describe, reexec_with_isa

    reexec_with_isa(args.isa)  # before torch loads: the AVX2 class's limits are read once
    from racer_core.bench.runner import _warm_up
    from racer_core.bench.suites import load_suite
    from racer_core.common.events import GenerationConfig

    if args.suite == "builtin" and args.question_end > HELD_OUT:
        raise SystemExit(f"built-in questions past {HELD_OUT} are held out: give --question-end {HELD_OUT} or less")
    if args.tiny:
        from racer_core.testing import tiny_engine

        engine = tiny_engine()
    else:
        from racer_core.engine.engine import load_engine

        engine = load_engine()
    methods = args.methods.split(",")
    if not set(methods) <= {"ar", "racer", "suffix"}:
        raise SystemExit(f"--methods {args.methods!r}: give some of ar, racer, suffix")
    base = GenerationConfig(method="ar", max_new_tokens=args.max_new_tokens)
    load = [os.getloadavg()[0]]
    _warm_up(engine, methods, base, None)  # as the benchmark: the curve measured again, one short reply per method
    curve = engine.cost_curve()
    if args.curve:  # the policies weigh a given curve instead (keeping what the warm-up taught them)
        curve = parse_curve(args.curve).on_grid(curve.sizes)
        engine._use_curve(curve)
    questions = []
    # the taps run on the engine loop's thread: --cpu times that thread's CPU, not the wall
    with tapped(time.thread_time if args.cpu else time.perf_counter) as tap:
        for q in load_suite(args.suite)[args.question_begin : args.question_end]:
            entry = {"question_id": q.question_id, "category": q.category, "methods": {}}
            for method in methods:
                tap.steps = []
                events = list(engine.new_conversation().send(q.turns[0], GenerationConfig(
                    method=method, max_new_tokens=args.max_new_tokens)))
                steps = [e for e in events[1:] if e.record is not None]
                if method != "ar" and len(tap.steps) != len(steps):
                    raise SystemExit(f"{method}: {len(tap.steps)} drafted steps recorded for {len(steps)} steps")
                kept = tap.steps if method != "ar" else [{} for _ in steps]
                for s, e in zip(kept, steps, strict=True):
                    s.update(draft_s=e.draft_s, verify_s=e.verify_s, update_s=e.update_s, size=e.tree_size)
                entry["methods"][method] = {"tokens": [t for e in events for t in e.token_ids], "steps": kept}
            questions.append(entry)
            load.append(os.getloadavg()[0])
            print(f"{q.question_id} {q.category}: " + ", ".join(
                f"{m} {len(entry['methods'][m]['steps'])} steps" for m in methods), file=sys.stderr)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"model": engine.info.model, "dtype": engine.info.dtype, "curve": curve.to_json(), "load": load,
           "curve_given": bool(args.curve), "max_new_tokens": args.max_new_tokens, "questions": questions,
           "clock": "cpu" if args.cpu else "wall", "cpu_class": describe()}
    (out / "steps.json").write_text(json.dumps(doc))
    print(f"{engine.info.model}: {len(questions)} questions recorded to {out / 'steps.json'}; "
          f"1-minute load {min(load):.2f}-{max(load):.2f}")


# -- the replay (no model) ---------------------------------------------------------------------------


@dataclass
class Scored:
    """One drafted step, scored against the text."""

    category: str
    tree: dict
    path: list[int]  # the whole tree's true path (node indices, root first)
    known: int  # tokens of the reply after the root
    emitted: int  # tokens the step emitted (accepted drafts + the bonus)
    rows: int  # rows the step fed
    step: dict


def scored_steps(doc: dict, method: str) -> list[Scored]:
    """Every recorded step of `method`, with its tree's true path."""
    found = []
    for q in doc["questions"]:
        run = q["methods"].get(method)
        if run is None:
            continue
        reply, at = run["tokens"], 0
        for step in run["steps"]:
            tree = step["tree"]
            if tree["tokens"][0] != reply[at]:
                raise SystemExit(f"question {q['question_id']} {method}: a step's root is not the reply's token")
            path = true_path(tree["parents"], tree["tokens"], reply[at + 1 :])
            found.append(Scored(q["category"], tree, path, len(reply) - 1 - at, len(step["emitted"]),
                                int(step.get("fed") or len(step["chosen"])), step))
            at += len(step["emitted"])
    return found


class Rates:
    """Tokens and seconds per category (and "all"), for tokens-per-second figures."""

    def __init__(self) -> None:
        self.tokens: dict[str, float] = defaultdict(float)
        self.seconds: dict[str, float] = defaultdict(float)

    def add(self, category: str, tokens: float, seconds: float) -> None:
        for key in (category, "all"):
            self.tokens[key] += tokens
            self.seconds[key] += seconds

    def rate(self, key: str) -> float:
        return self.tokens[key] / self.seconds[key] if self.seconds[key] else 0.0


class GivenChances(TreePolicy):
    """The tree policy's choice rule on chances given per step (`chances`), not its own estimates."""

    chances: np.ndarray = np.ones(1)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.native = False  # the choice by the Python reference, which reads path_probabilities

    def path_probabilities(self, tree: object) -> np.ndarray:
        return self.chances


def calibration_map(nodes: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(the policy's mean path chance, the acceptance seen) per bin of path chance,
    the acceptance made non-decreasing: read with np.interp, a calibration of the policy's chances."""
    path = np.array([n["path"] for n in nodes])
    hit = np.array([n["hit"] for n in nodes], dtype=float)
    bins = np.searchsorted(PRED_BINS, path, side="right")
    xs, ys = [], []
    for b in sorted(set(bins.tolist())):
        xs.append(path[bins == b].mean())
        ys.append(hit[bins == b].mean())
    return np.array(xs), np.maximum.accumulate(np.array(ys))


def calibrated_chances(step: dict, mapping: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The step's path chances as the policy estimated them, read through `mapping`."""
    chances = np.interp(np.asarray(step["probs"]), *mapping)
    chances[0] = 1.0
    return chances


def fine_key(ctx: int, rank: int, depth: int) -> tuple[int, int, int]:
    """A finer kind of node than the policy's buckets: the exact context, rank and depth (capped)."""
    return min(int(ctx), 12), min(int(rank), 8) if rank >= 0 else -1, min(int(depth), 12)


def fine_rates(nodes: list[dict]) -> dict[tuple[int, int, int], tuple[int, int]]:
    """(accepted, tested) per fine kind of node, over the tested nodes of the run."""
    rates: dict[tuple[int, int, int], list[int]] = defaultdict(lambda: [0, 0])
    for n in nodes:
        if n["tested"]:
            r = rates[fine_key(n["ctx"], n["rank"], n["depth"])]
            r[0] += n["hit"]
            r[1] += 1
    return {k: (a, b) for k, (a, b) in rates.items()}


def fine_chances(step: dict, rates: dict[tuple[int, int, int], tuple[int, int]], least: int = 10) -> np.ndarray:
    """Path chances from the edge chance seen per fine kind (the policy's own
    estimate for a kind seen fewer than `least` times)."""
    t = step["tree"]
    own = edge_estimates(t["parents"], step["probs"])
    path = np.ones(len(t["tokens"]))
    for i in range(1, len(path)):
        hits, tested = rates.get(fine_key(t["context"][i], t["rank"][i], t["depths"][i]), (0, 0))
        path[i] = path[t["parents"][i]] * (hits / tested if tested >= least else own[i])
    return path


def rule_choice(policy: GivenChances, step: dict, chances: np.ndarray) -> np.ndarray:
    """The nodes the policy's rule keeps on these path chances."""
    policy.chances = chances
    return policy.choose(SimpleNamespace(context=np.asarray(step["tree"]["context"]))).chosen


def run_ceiling(steps: list[Scored], sizes: EfficientSizes, over: float = 0.0) -> Rates:
    """The whole-run oracle's tokens and seconds (`run_oracle`), each step also paying `over` seconds."""
    whole = Rates()
    for s, k in zip(steps, run_oracle([min(len(s.path), s.known) - 1 for s in steps], sizes, over), strict=True):
        whole.add(s.category, k + 1, cost(sizes, k + 1) + over)
    return whole


def speed_tables(doc: dict, sizes: EfficientSizes, methods: list[str], python_s: float,
                 extra: dict[str, float], curve: CostCurve | None = None) -> dict[str, Rates]:
    """Per method its actual choices, the policy's own before the gate ("intended"),
    and the oracle's, each step at t(rows) + `python_s` (ar's own Python) + the
    method's `extra` drafting seconds; ar alone at t(1) + `python_s` per token.
    With `curve`, racer's also the policy's rule on its path chances calibrated
    on this very run ("calibrated"), and on the edge chances seen per fine kind
    of node ("fine"), both in-sample: bounds, not policies."""
    out: dict[str, Rates] = {"ar": Rates()}
    calibrated, fine = Rates(), Rates()
    if curve is not None and "racer" in methods:
        policy = GivenChances(curve, largest=LARGEST)
        nodes = calibration(doc)
        mapping, rates = calibration_map(nodes), fine_rates(nodes)
    for method in methods:
        actual, intended, ceiling, roots = Rates(), Rates(), Rates(), Rates()
        steps = scored_steps(doc, method)
        whole = run_ceiling(steps, sizes, python_s + extra[method])
        for s in steps:
            over = python_s + extra[method]
            if method == methods[0]:
                out["ar"].add(s.category, s.emitted, s.emitted * (cost(sizes, 1) + python_s))
            actual.add(s.category, s.emitted, cost(sizes, s.rows) + over)
            if curve is not None and method == "racer":
                for rates_of, chances in ((calibrated, calibrated_chances), (fine, fine_chances)):
                    mine = rule_choice(policy, s.step, chances(s.step, mapping if rates_of is calibrated else rates)) \
                        if "probs" in s.step else [0]
                    rates_of.add(s.category, min(accepted_in(s.path, mine) + 1, s.known),
                                 cost(sizes, sizes.padded(len(mine))) + over)
            mine = s.step.get("intended", s.step["chosen"])
            got = min(accepted_in(s.path, mine) + 1, s.known)
            intended.add(s.category, got, cost(sizes, sizes.padded(len(mine))) + over)
            k, seconds = oracle(min(len(s.path), s.known) - 1, sizes, over)  # the reply's last token is a bonus
            ceiling.add(s.category, k + 1, seconds)
            if len(s.step["chosen"]) == 1:  # only the root-alone steps changed to the oracle's choice
                roots.add(s.category, k + 1, seconds)
            else:
                roots.add(s.category, s.emitted, cost(sizes, s.rows) + over)
        out.update({method: actual, f"{method} intended": intended, f"{method} step ceiling": ceiling,
                    f"{method} ceiling": whole,
                    f"{method} roots to oracle": roots})
    if curve is not None and "racer" in methods:
        out["racer calibrated"], out["racer fine"] = calibrated, fine
    return out


def print_speed(title: str, rates: dict[str, Rates], methods: list[str], categories: list[str]) -> None:
    print(f"\n{title}\n")
    cols = ["ar"] + [c for m in methods for c in (m, f"{m} ceiling")]
    print("| category | " + " | ".join(cols) + " | " + " | ".join(f"{m} / its ceiling" for m in methods)
          + (f" | {methods[0]} ceiling / {methods[1]} ceiling" if len(methods) > 1 else "") + " |")
    print("|---" * (1 + len(cols) + len(methods) + (len(methods) > 1)) + "|")
    for c in [*categories, "all"]:
        ar = rates["ar"].rate(c)
        cells = [f"{ar:.1f}"] + [f"{rates[k].rate(c):.1f} ({rates[k].rate(c) / ar:.2f}x)" for k in cols[1:]]
        cells += [f"{rates[m].rate(c) / rates[f'{m} ceiling'].rate(c):.2f}" for m in methods]
        if len(methods) > 1:
            cells.append(f"{rates[f'{methods[0]} ceiling'].rate(c) / rates[f'{methods[1]} ceiling'].rate(c):.2f}")
        print(f"| {'**all**' if c == 'all' else c} | " + " | ".join(cells) + " |")


def print_whatifs(rates: dict[str, Rates], methods: list[str]) -> None:
    """Whole-run tok/s of each choice rule (x ar)."""
    ar = rates["ar"].rate("all")
    print("\n| method | actual | the policy's own choice (no gate) | its rule, path chances calibrated | "
          "its rule, edge chances per exact context, rank, depth | root-alone steps given the per-step oracle's "
          "choice | per-step ceiling | ceiling (whole run) |")
    print("|---|---|---|---|---|---|---|---|")
    for m in methods:
        keys = (m, f"{m} intended", f"{m} calibrated", f"{m} fine", f"{m} roots to oracle", f"{m} step ceiling",
                f"{m} ceiling")
        print(f"| {m} | " + " | ".join(f"{rates[k].rate('all'):.1f} ({rates[k].rate('all') / ar:.2f}x)"
                                       if k in rates else "-" for k in keys) + " |")


DEPTH_BINS = ((0, 0), (1, 1), (2, 2), (3, 4), (5, 8), (9, 12), (13, LARGEST))


def print_steps(doc: dict, methods: list[str]) -> None:
    """Root-alone steps, and how many drafts the whole tree's true path held against how many were accepted."""
    print("\n| method | steps | root alone | of which the tree held >= 1 accepted draft | gate-paused | MAT | "
          "true path ended at a leaf |\n|---|---|---|---|---|---|---|")
    depths = {}
    for m in methods:
        steps = scored_steps(doc, m)
        depth = np.array([min(len(s.path), s.known) - 1 for s in steps])
        took = np.array([s.emitted - 1 for s in steps])
        depths[m] = (depth, took)
        alone = np.array([len(s.step["chosen"]) == 1 for s in steps])
        gated = sum(bool(s.step.get("gate")) for s in steps)
        leaf = sum(1 for s in steps if len(s.path) > 1 and s.path[-1] not in s.tree["parents"])
        print(f"| {m} | {len(steps)} | {alone.sum()} ({alone.mean():.0%}) | {(alone & (depth > 0)).sum()} | {gated} | "
              f"{(took + 1).mean():.2f} | {leaf} |")
    print("\nSteps by drafts: on the whole tree's true path (what the oracle could take) / accepted\n")
    print("| method | " + " | ".join(f"{lo}" if lo == hi else (f"{lo}+" if hi == LARGEST else f"{lo}-{hi}")
                                    for lo, hi in DEPTH_BINS) + " | longest |\n" + "|---" * (len(DEPTH_BINS) + 2) + "|")
    for m, (depth, took) in depths.items():
        print(f"| {m} | " + " | ".join(f"{((depth >= lo) & (depth <= hi)).sum()} / {((took >= lo) & (took <= hi)).sum()}"
                                       for lo, hi in DEPTH_BINS) + f" | {depth.max()} / {took.max()} |")
    print("\n(racer's tree is the whole drafted tree, up to 64 nodes, before the policy's cut)")


def print_by_depth(doc: dict, methods: list[str], sizes: EfficientSizes) -> None:
    """Per bin of drafts on the true path: what each method fed and accepted, against the whole-run oracle."""
    print("\nBy drafts on the whole tree's true path: steps; mean rows fed / drafts accepted, each method "
          "against the oracle on the curve alone\n")
    print("| true path | " + " | ".join(f"{m} steps | {m} fed / accepted | oracle fed / accepted" for m in methods)
          + " |\n" + "|---" * (1 + 3 * len(methods)) + "|")
    scored = {m: scored_steps(doc, m) for m in methods}
    ks = {id(s): k for m in methods
          for s, k in zip(scored[m], run_oracle([min(len(s.path), s.known) - 1 for s in scored[m]], sizes), strict=True)}
    for lo, hi in DEPTH_BINS:
        cells = []
        for m in methods:
            steps = [s for s in scored[m] if lo <= min(len(s.path), s.known) - 1 <= hi]
            if not steps:
                cells += ["0", "-", "-"]
                continue
            best = [ks[id(s)] for s in steps]
            cells += [str(len(steps)), f"{np.mean([s.rows for s in steps]):.1f} / {np.mean([s.emitted - 1 for s in steps]):.2f}",
                      f"{np.mean([sizes.padded(k + 1) for k in best]):.1f} / {np.mean(best):.2f}"]
        label = f"{lo}" if lo == hi else (f"{lo}+" if hi == LARGEST else f"{lo}-{hi}")
        print(f"| {label} | " + " | ".join(cells) + " |")


SHARE_EDGES = np.array([0.5, 0.9])  # a retrieved node's share (the automaton's DraftTree.share) in bands
SHARE_LABELS = ["none (logits only)", "below 0.5", "0.5-0.9", "0.9+"]  # share_bands' 0 .. 3
PRED_BINS = np.array([0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])


def calibration(doc: dict, method: str = "racer") -> list[dict]:
    """Every node of the policy's trees within the known text: its features, the
    policy's edge and path chance, whether its parent was accepted (`tested`,
    what the edge chance is about), whether it was."""
    nodes = []
    for s in scored_steps(doc, method):
        if "probs" not in s.step:
            continue
        t = s.tree
        edge = edge_estimates(t["parents"], s.step["probs"])
        tested = tested_nodes(t["parents"], t["depths"], s.path, s.known)
        on = set(s.path)
        for i in range(1, len(t["tokens"])):
            if t["depths"][i] <= s.known:
                nodes.append({"ctx": t["context"][i], "rank": t["rank"][i], "depth": t["depths"][i], "edge": edge[i],
                              "share": t["share"][i] if "share" in t else -1.0,
                              "path": s.step["probs"][i], "tested": bool(tested[i]), "hit": i in on})
    return nodes


def share_bands(share: np.ndarray) -> np.ndarray:
    """0 where the automaton gave no share (the logits alone drafted the node), else 1 + its band of SHARE_EDGES."""
    return np.where(share < 0, 0, 1 + np.searchsorted(SHARE_EDGES, share, side="right"))


def print_calibration(nodes: list[dict]) -> None:
    labelled = nodes
    nodes = [n for n in nodes if n["tested"]]
    if not nodes:
        print("\n(no tested nodes with the policy's estimates)")
        return
    edge = np.array([n["edge"] for n in nodes])
    hit = np.array([n["hit"] for n in nodes], dtype=float)

    def table(title: str, keys: np.ndarray, labels: dict) -> None:
        print(f"\n{title}\n\n| {labels['name']} | tested nodes | predicted | accepted |\n|---|---|---|---|")
        for k in sorted(set(keys.tolist())):
            m = keys == k
            if m.sum() >= labels.get("min", 1):
                print(f"| {labels['fmt'](k)} | {m.sum()} | {edge[m].mean():.3f} | {hit[m].mean():.3f} |")

    bins = np.searchsorted(PRED_BINS, edge, side="right")
    edges = [0.0, *PRED_BINS.tolist(), 1.0]
    table("Edge chance (a node's, given its parent accepted): the policy's estimate against what happened",
          bins, {"name": "predicted", "fmt": lambda b: f"{edges[b]:.2f}-{edges[b + 1]:.2f}"})
    ctx = np.array([n["ctx"] for n in nodes])
    rank = np.array([n["rank"] for n in nodes])
    depth = np.array([n["depth"] for n in nodes])
    kind = np.where(ctx > 0, np.where(rank >= 0, 2, 0), 1)
    names = ["retrieval", "logits", "both"]
    cb, rb = np.searchsorted(_CTX_EDGES, ctx, side="right"), np.where(rank < 0, 0, np.searchsorted(_RANK_EDGES, rank, side="right"))
    db = np.searchsorted(_DEPTH_EDGES, depth, side="right")
    ctx_l, rank_l, dep_l = ["0-1", "2", "3", "4-5", "6-8", "9+"], ["-", "0", "1", "2-3", "4+"], ["1", "2", "3+"]
    bucket = cb * 100 + rb * 10 + db
    table("By the policy's own bucket (retrieval context, logits rank, depth), buckets of 30 or more nodes",
          bucket, {"name": "context / rank / depth", "min": 30,
                   "fmt": lambda b: f"{ctx_l[b // 100]} / {rank_l[b // 10 % 10]} / {dep_l[b % 10]}"})
    table("Inside the buckets: the exact retrieval context (match length), retrieval nodes", np.where(ctx > 0, ctx, -1),
          {"name": "context", "fmt": lambda c: "none (logits only)" if c < 0 else str(c)})
    table("The exact logits rank, logits nodes", np.where(rank >= 0, rank, -1),
          {"name": "rank", "fmt": lambda r: "none (retrieval only)" if r < 0 else str(r)})
    share = share_bands(np.array([n["share"] for n in nodes]))
    if share.any():  # a recording made before the shares were kept has none
        table("The automaton's share (a retrieved node's count over its siblings' in its context), by depth 1, 2, 3+",
              share * 10 + db, {"name": "share, depth", "fmt": lambda k: f"{SHARE_LABELS[k // 10]}, {dep_l[k % 10]}"})
    table("The exact depth, by source", kind * 100 + np.minimum(depth, 12),
          {"name": "source, depth", "fmt": lambda k: f"{names[k // 100]}, {k % 100}{'+' if k % 100 == 12 else ''}"})
    path = np.array([n["path"] for n in labelled])
    hit = np.array([n["hit"] for n in labelled], dtype=float)
    pb = np.searchsorted(PRED_BINS, path, side="right")
    print("\nPath chance (P(node accepted), what the choice sums), every node within the known text\n\n"
          "| predicted | nodes | predicted mean | accepted |\n|---|---|---|---|")
    for b in sorted(set(pb.tolist())):
        m = pb == b
        print(f"| {edges[b]:.2f}-{edges[b + 1]:.2f} | {m.sum()} | {path[m].mean():.3f} | {hit[m].mean():.3f} |")


PHASES = ("retrieve", "choose", "record", "learn", "table")


def overheads(doc: dict, method: str) -> dict[str, list[float]]:
    """Per step, seconds: retrieve (drafting but the choice), choose (the
    policy's choice and cut), record and learn (the policy's), table (the
    table's and the automaton's learning), drafter (their sum), decoder (the
    decoder's own Python around them: mask, acceptance, commit, step record),
    python (all of the step outside the forward pass)."""
    per: dict[str, list[float]] = defaultdict(list)
    for q in doc["questions"]:
        for s in q["methods"].get(method, {"steps": []})["steps"]:
            p = s.get("phases", {"draft": 0.0, "verified": 0.0})
            parts = {"retrieve": p["draft"] - p.get("choose", 0.0), "choose": p.get("choose", 0.0),
                     "record": p.get("record", 0.0), "learn": p.get("learn", 0.0),
                     "table": p["verified"] - p.get("record", 0.0) - p.get("learn", 0.0)}
            for k, v in parts.items():
                per[k].append(v)
            per["drafter"].append(sum(parts.values()))
            per["decoder"].append(s["draft_s"] + s["update_s"] - p["draft"] - p["verified"])
            per["python"].append(s["draft_s"] + s["update_s"])
    return per


def python_s(doc: dict, method: str, stat=np.median) -> float:
    """A step's seconds outside the forward pass (drafting, acceptance, updates): `stat` over the steps."""
    values = overheads(doc, method)["python"]
    return float(stat(values)) if values else 0.0


def print_overheads(doc: dict, methods: list[str], t1: float) -> None:
    ar_verify = [s["verify_s"] for q in doc["questions"] for s in q["methods"].get("ar", {"steps": []})["steps"]]
    print(f"\nPython per step (ms): t(1) {1e3 * t1:.2f} ms by the curve; ar's forward measured "
          f"{1e3 * float(np.mean(ar_verify or [0])):.2f} ms mean, {1e3 * float(np.median(ar_verify or [0])):.2f} median\n")
    forward = float(np.median(ar_verify or [t1]))
    print("| method | " + " | ".join(PHASES) + " | drafter | decoder | ar's step | beyond ar | x t(1) | x ar's forward |\n"
          + "|---" * (len(PHASES) + 7) + "|")
    for m in methods:
        per = overheads(doc, m)
        for name, stat in (("mean", np.mean), ("median", np.median)):
            value = {k: float(stat(v)) for k, v in per.items()}
            beyond = value["python"] - python_s(doc, "ar", stat)
            print(f"| {m} ({name}) | " + " | ".join(f"{1e3 * value[k]:.3f}" for k in (*PHASES, "drafter", "decoder"))
                  + f" | {1e3 * python_s(doc, 'ar', stat):.3f} | {1e3 * beyond:.3f} | {beyond / t1:.3f} | "
                  f"{beyond / forward:.3f} |")
    if doc.get("clock") == "cpu":
        print("\n(the phases, so the drafter, by the loop thread's CPU time (record --cpu); decoder, ar's step and "
              "beyond ar subtract them from the steps' wall-clock times: read the drafter's columns)")
    print("\n(each step's phases timed in-process during the recorded replies; drafter: the five before it, "
          "each step's sum; decoder: the rest of the step outside the forward; beyond ar: the whole step's "
          "Python against ar's, mean against mean and median against median; x ar's forward: against the "
          "median one-row forward of the same run, under the same load)")


def load_recording(path: str) -> dict:
    """A steps.json written by record, or a one-line exit."""
    try:
        doc = json.loads(Path(path).read_text())
        doc["curve"], doc["questions"]  # noqa: B018 (what every table reads)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SystemExit(f"{path}: not a recording of tree_oracle.py record ({error})") from None
    return doc


def report(args: argparse.Namespace) -> None:
    doc = load_recording(args.steps)
    curve = parse_curve(args.curve) if args.curve else CostCurve(doc["curve"]["sizes"], doc["curve"]["seconds"])
    sizes = EfficientSizes.from_curve(curve, LARGEST)
    methods = [m for m in ("racer", "suffix") if any(m in q["methods"] for q in doc["questions"])]
    categories = list(dict.fromkeys(q["category"] for q in doc["questions"]))
    ar_python = python_s(doc, "ar")  # medians: a step's Python without the preemptions a busy machine adds
    extra = {m: max(0.0, python_s(doc, m) - ar_python) for m in methods}
    print(f"{doc['model']} ({doc['dtype']}), {len(doc['questions'])} questions, {doc['max_new_tokens']} new tokens; "
          f"1-minute load {min(doc['load']):.2f}-{max(doc['load']):.2f} while recording; "
          f"CPU class {doc.get('cpu_class', 'not recorded')}")
    given = "given to record" if doc.get("curve_given") else "measured by the engine"
    print(f"cost curve (ms; {'given to report' if args.curve else given}): " + ", ".join(f"{s}:{1e3 * t:.2f}" for s, t in zip(curve.sizes, curve.seconds, strict=True)))
    differ = [q["question_id"] for q in doc["questions"] if len({tuple(r["tokens"]) for r in q["methods"].values()}) > 1]
    if differ:
        print(f"answers that differ between methods (their steps still score against their own text): {differ}")
    if not methods:
        raise SystemExit(f"{args.steps}: no racer or suffix steps recorded")
    for m in methods:  # the scoring checked against the engine: each step's own choice accepts what it emitted
        steps = scored_steps(doc, m)
        same = sum(min(accepted_in(s.path, s.step["chosen"]) + 1, s.known) == s.emitted for s in steps)
        print(f"{m}: the scoring gives the engine's acceptance on {same} of {len(steps)} steps")
    with_python = speed_tables(doc, sizes, methods, ar_python, extra, curve)
    print_speed("tok/s by the cost curve, each step also paying ar's own Python and the method's drafting "
                "beyond ar (medians: ar's own "
                f"{1e3 * ar_python:.2f} ms, beyond it " + ", ".join(f"{m} {1e3 * extra[m]:.2f} ms" for m in methods) + ")",
                with_python, methods, categories)
    print_whatifs(with_python, methods)
    curve_only = speed_tables(doc, sizes, methods, 0.0, {m: 0.0 for m in methods}, curve)
    print_speed("tok/s by the cost curve alone (no Python counted)", curve_only, methods, categories)
    print_whatifs(curve_only, methods)
    print_steps(doc, methods)
    print_by_depth(doc, methods, sizes)
    if "racer" in methods:
        print_calibration(calibration(doc))
    print_overheads(doc, methods, cost(sizes, 1))
    if args.rounds and "racer" in methods:
        choice = choice_without_interference(doc, curve, args.rounds)
        print(f"\nThe policy's choice and cut alone, replayed on the recorded trees, fastest of {args.rounds} "
              f"interleaved rounds per tree: {1e3 * choice:.3f} ms a step (load now {os.getloadavg()[0]:.2f})")


def choice_without_interference(doc: dict, curve: CostCurve, rounds: int) -> float:
    """Mean seconds of TreePolicy.choose and cut per racer step, each recorded whole
    tree timed in `rounds` interleaved rounds and its fastest kept (bench/timing.py)."""
    from racer_core.bench.timing import fastest_of_rounds
    from racer_core.drafting.tree import cut

    policy = TreePolicy(curve, largest=LARGEST)
    trees = [recorded_tree(s.tree) for s in scored_steps(doc, "racer")]
    times = fastest_of_rounds([lambda tree=tree: cut(tree, policy) for tree in trees], rounds, clock=clock)
    return float(np.mean(times))


def recorded_tree(t: dict) -> object:
    """A recorded racer tree as the engine's Tree, with racer's features (a
    recording made before shares were kept has none)."""
    from racer_core.drafting.tree import Tree

    share = np.asarray(t["share"], dtype=np.float64) if "share" in t else None
    return replace(Tree.of(t["tokens"], t["parents"], 1), context=np.asarray(t["context"], dtype=np.int64),
                   rank=np.asarray(t["rank"], dtype=np.int64), share=share)


def replay_policy(doc: dict, curve: CostCurve) -> tuple[Rates, Rates, int]:
    """(the recorded choices, this code's TreePolicy) on a recording's racer
    trees, by the curve alone: one policy across the questions, each step's
    tree chosen from, then labelled as the engine labels it (record, learn).
    Where this policy accepts more than the recorded step did, its next root
    lies past the next recorded one: the recorded steps it passed are skipped
    and, when it lands between two recorded roots, it decodes plainly (one
    token per t(1)) up to the next one, for want of a tree there -- so the
    replay errs against a policy that accepts more. The trees are the
    recorded ones: in a live run the logits table learns from the rows a step
    fed, so the trees themselves differ. The third value counts the replayed
    steps, its plain ones included (for its MAT)."""
    sizes = EfficientSizes.from_curve(curve, LARGEST)
    policy = TreePolicy(curve, largest=LARGEST)
    recorded, replayed, steps = Rates(), Rates(), 0
    for q in doc["questions"]:
        run = q["methods"].get("racer")
        if run is None:
            continue
        reply, at, now = run["tokens"], 0, 0  # the recorded step's root, this policy's next root
        for step in run["steps"]:
            recorded.add(q["category"], len(step["emitted"]), cost(sizes, int(step.get("fed") or len(step["chosen"]))))
            root, at = at, at + len(step["emitted"])
            if root < now:
                continue
            replayed.add(q["category"], root - now, (root - now) * cost(sizes, 1))  # plain steps up to this root
            steps += root - now
            t = step["tree"]
            tree = recorded_tree(t)
            path, known = true_path(t["parents"], t["tokens"], reply[root + 1 :]), len(reply) - 1 - root
            selection = policy.choose(tree)
            made = min(accepted_in(path, selection.chosen) + 1, known)
            replayed.add(q["category"], made, cost(sizes, selection.fed))
            steps += 1
            policy.record(tree, root, selection)
            now = root + made
            policy.learn(reply[: now + 1])
        replayed.add(q["category"], max(0, at - now), max(0, at - now) * cost(sizes, 1))
        steps += max(0, at - now)
        policy.learn(reply, final=True)
    return recorded, replayed, steps


def replay(args: argparse.Namespace) -> None:
    doc = load_recording(args.steps)
    curve = parse_curve(args.curve) if args.curve else CostCurve(doc["curve"]["sizes"], doc["curve"]["seconds"])
    recorded, replayed, steps = replay_policy(doc, curve)
    sizes = EfficientSizes.from_curve(curve, LARGEST)
    ar = 1.0 / cost(sizes, 1)
    ceiling = run_ceiling(scored_steps(doc, "racer"), sizes)  # report's "ceiling (whole run)", the curve alone
    print("category | recorded racer (x ar) | this policy replayed (x ar) | recorded trees' ceiling (x ar)")
    for key in [*dict.fromkeys(q["category"] for q in doc["questions"]), "all"]:
        print(f"{key} | {recorded.rate(key) / ar:.3f} | {replayed.rate(key) / ar:.3f} | {ceiling.rate(key) / ar:.3f}")
    print(f"replayed: MAT {replayed.tokens['all'] / steps:.3f} ({steps} steps, plain ones included), "
          f"{replayed.rate('all') / ceiling.rate('all'):.3f} of the ceiling")


def parse_curve(text: str) -> CostCurve:
    """A cost curve from "rows:ms" pairs, e.g. 1:10.4,2:11,4:14.3."""
    try:
        points = sorted((int(k), float(v) / 1000) for k, v in (kv.split(":") for kv in text.split(",")))
    except ValueError:
        raise SystemExit(f"--curve {text!r}: give rows:ms pairs, e.g. 1:10.4,2:11,4:14.3") from None
    if len(points) < 2 or points[0][0] != 1 or any(t <= 0 for _, t in points):
        raise SystemExit(f"--curve {text!r}: give at least two sizes, from 1 row, each a positive time")
    return CostCurve([k for k, _ in points], [t for _, t in points])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="answer the questions and keep every step (the model)")
    rec.add_argument("--out", required=True, help="folder for steps.json")
    rec.add_argument("--suite", default="builtin")
    rec.add_argument("--question-begin", type=int, default=0)
    rec.add_argument("--question-end", type=int, default=HELD_OUT)
    rec.add_argument("--max-new-tokens", type=int, default=128)
    rec.add_argument("--methods", default="ar,racer,suffix", help="ar first: the others are compared with it")
    rec.add_argument("--tiny", action="store_true", help="the tiny random-weight model (a smoke test)")
    rec.add_argument("--curve", default="", help="rows:ms pairs the policies weigh instead of the measured curve")
    rec.add_argument("--cpu", action="store_true", help="time the drafter's phases by the engine loop thread's CPU "
                     "time (less moved by a busy machine); the steps' own timings stay wall-clock")
    rec.add_argument("--isa", choices=ISA_CHOICES, default="native",
                     help="avx2: the AVX2 class on an AVX-512 machine (the process starts again with the libraries "
                     "limited, racer_core/budget/cpu_class.py)")
    rep = sub.add_parser("report", help="the tables from a recording (no model)")
    rep.add_argument("steps", help="a steps.json written by record")
    rep.add_argument("--rounds", type=int, default=0, help="also time the policy's choice alone on the recorded "
                     "trees, fastest of this many interleaved rounds (0: not)")
    rep.add_argument("--curve", default="", help="rows:ms pairs to score on instead of the recorded curve "
                     "(the choices stay the ones made on the recorded curve)")
    rpl = sub.add_parser("replay", help="this code's tree policy on a recording's racer trees (no model)")
    rpl.add_argument("steps", help="a steps.json written by record")
    rpl.add_argument("--curve", default="", help="rows:ms pairs to weigh and score on instead of the recorded curve")
    args = parser.parse_args(argv)
    {"record": record, "report": report, "replay": replay}[args.command](args)


if __name__ == "__main__":
    main()
