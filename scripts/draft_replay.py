"""Replay greedy decoding traces to study drafting offline.

Greedy output is fixed by the model, so how many drafts a tree would have
accepted can be computed from the output alone: `record` runs plain decoding
once per question and stores the tokens and each position's top-k; `replay`
then runs the automaton over the traces for several budgets in seconds,
without the model. (Approximation: the logits table only learns from
positions on the true path, while the engine also learns from rejected
nodes.)

    python scripts/draft_replay.py record --suite builtin --out traces.json
    python scripts/draft_replay.py replay traces.json --budgets 4,8,16,32
    python scripts/draft_replay.py replay traces.json --table token   # rows keyed by the token alone
    python scripts/draft_replay.py replay traces.json --corpus other.json --seed table   # earlier chats

`--corpus` seeds each question's automaton from a chat corpus (racer_core/drafting/corpus.py)
built from the traces of a file, as a chat is seeded from earlier chats; the
question replayed is always left out of it (the same file: every other question).
`--seed table` writes only the logits table, `both` feeds the trie as well;
the cold figures (no corpus) are printed first for comparison.

`--table pair` (the default) keys the logits table by (previous token, token)
and falls back to the token's row; `replay` also prints the table's top-1 hit
rate: how often the row looked up for a position (learned from the positions
before it) names the model's next token first.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def record(args: argparse.Namespace) -> None:
    import torch

    from racer_core.bench.suites import load_suite
    from racer_core.common.events import GenerationConfig
    from racer_core.engine.engine import load_engine

    engine = load_engine(args.model_path)
    questions = load_suite(args.suite)[args.begin : args.end]
    traces = []
    for q in questions:
        chat = engine.new_conversation()
        events = list(chat.send(q.turns[0], GenerationConfig(method="ar", max_new_tokens=args.max_new_tokens)))
        output = [t for e in events for t in e.token_ids]
        chat.messages = chat.messages[:1]
        prompt = chat.prompt_ids()
        with torch.inference_mode():
            ids = torch.tensor([prompt + output])
            logits = engine.model(input_ids=ids).logits[0].float()
            best = torch.topk(torch.softmax(logits, dim=-1), 8, dim=-1)
            top = best.indices.tolist()
            probs = [[round(p, 5) for p in row] for row in best.values.tolist()]  # softmax of the full row
        traces.append({"question_id": q.question_id, "category": q.category, "prompt": prompt, "output": output,
                       "topk": top, "topk_probs": probs})
        print(f"{q.question_id} {q.category}: {len(output)} tokens", file=sys.stderr)
    with open(args.out, "w") as f:
        json.dump({"model": engine.info.model, "traces": traces}, f)


VOCAB = 1 << 17  # above every id of the traces' models; only bounds the table


def build_corpus(path: str, exclude: dict | None = None):
    """A corpus of these traces' sequences and top-k rows, oldest first,
    without `exclude` (the question being replayed: no answer seeds itself)."""
    from racer_core.drafting.corpus import Corpus

    corpus = Corpus(Path("/nonexistent/corpus.npz"), VOCAB)
    for t in json.load(open(path))["traces"]:
        if exclude is not None and t["prompt"] == exclude["prompt"]:
            continue
        seq = t["prompt"] + t["output"]
        corpus.record(object(), seq, list(np.asarray(t["topk"], dtype=np.int32)), corpus.epoch)
    return corpus


def make_automaton(impl: str, table: str):
    from racer_core.drafting.automaton import Automaton, ReferenceAutomaton
    from racer_core.drafting.automaton.variants import variant

    cls = Automaton if impl == "compiled" else ReferenceAutomaton
    return variant(cls, max_nodes=10000, min_depth=2, ngram=10, pair_rows=table == "pair")


def simulate(
    trace: dict, budget: int, method: str, breadth: int = 8, policy=None, impl: str = "compiled", table: str = "pair",
    corpus=None, seed: str = "table",
) -> tuple[int, int, list[int]]:
    seq = trace["prompt"] + trace["output"]
    top = np.asarray(trace["topk"], dtype=np.int64)
    n_prompt = len(trace["prompt"])
    automaton = make_automaton(impl, table)
    automaton.init_logits(VOCAB, breadth)
    if corpus is not None:
        corpus.seed(automaton, trie=seed == "both")
    top = top[:, :breadth]
    prev = np.asarray([-1, *seq[:-1]], dtype=np.int64)  # prev[i]: the token before seq[i]
    if method in ("racer", "logits"):
        automaton.update(np.asarray(seq[:n_prompt], dtype=np.int64), top[:n_prompt], prev[:n_prompt])
    if method in ("racer", "retrieval"):
        automaton.feed(seq[:n_prompt])
    pos = n_prompt  # seq[pos] is the root: emitted by the previous step
    steps = 0
    sizes = []
    while pos < len(seq) - 1:
        root = seq[pos]
        if policy is not None:
            tree = automaton.retrieve(root, policy.largest, prev_token=int(prev[pos]))
            chosen, padded, _ = policy.select(tree)
        else:
            tree = automaton.retrieve(root, budget, prev_token=int(prev[pos]))
            chosen, padded = np.arange(tree.size), tree.size
        keep = set(chosen.tolist())
        children = {
            (int(p), int(t)): i
            for i, (p, t) in enumerate(zip(tree.parents, tree.tokens, strict=True))
            if i and i in keep
        }
        node, accepted = 0, 0
        while pos + accepted + 1 < len(seq) and (node, seq[pos + accepted + 1]) in children:
            node = children[(node, seq[pos + accepted + 1])]
            accepted += 1
        steps += 1
        sizes.append(padded)
        if policy is not None:
            policy.record(tree, pos)
            policy.learn(seq[: pos + accepted + 2])
        path = seq[pos : pos + accepted + 1]
        if method in ("racer", "logits"):
            automaton.update(
                np.asarray(path, dtype=np.int64), top[pos : pos + accepted + 1], prev[pos : pos + accepted + 1]
            )
        if method in ("racer", "retrieval"):
            automaton.feed(path)
        pos += accepted + 1
    if policy is not None:
        policy.learn(seq, final=True)
    return len(seq) - 1 - n_prompt, steps, sizes


def top1_hits(trace: dict, table: str) -> tuple[int, int]:
    """(hits, positions) over the output: the row for position p, learned from
    the positions before p, names seq[p + 1] first. Rows as the automaton's:
    the pair's row where one was written, else the token's."""
    seq = trace["prompt"] + trace["output"]
    n_prompt = len(trace["prompt"])
    rows: dict[int, int] = {}
    pairs: dict[tuple[int, int], int] = {}
    hits = 0
    for p in range(len(seq) - 1):
        key = (seq[p - 1], seq[p]) if p else None
        if p >= n_prompt:
            first = pairs.get(key) if table == "pair" else None
            hits += (first if first is not None else rows.get(seq[p])) == seq[p + 1]
        nxt = trace["topk"][p][0]  # the model's first choice after seq[: p + 1]
        rows[seq[p]] = nxt
        if key is not None:
            pairs[key] = nxt
    return hits, len(seq) - 1 - n_prompt


def replay(args: argparse.Namespace) -> None:
    data = json.load(open(args.traces))
    traces = data["traces"]
    budgets = [int(b) for b in args.budgets.split(",")]
    cost = {1: 60, 2: 98, 4: 77, 8: 75, 16: 88, 32: 114, 64: 174}
    if args.cost:
        cost = {int(k): float(v) for k, v in (kv.split(":") for kv in args.cost.split(","))}
    cats = sorted({t["category"] for t in traces})
    start = time.perf_counter()
    print(f"{'budget':>6} " + " ".join(f"{c[:8]:>8}" for c in cats) + "      all  est.speedup")
    from racer_core.budget.cost_curve import CostCurve
    from racer_core.budget.tree_policy import TreePolicy

    curve = CostCurve(sorted(cost), [cost[k] / 1000 for k in sorted(cost)])
    runs = [(budget, False) for budget in budgets] + [(budget, True) for budget in budgets if args.corpus]
    for budget, seeded in runs:
        row = []
        policy = TreePolicy(curve) if budget == 0 else None  # shared across questions, as in the engine
        total_tokens = total_steps = 0
        est_time = 0.0
        for c in cats:
            tokens = steps = 0
            for t in (t for t in traces if t["category"] == c):
                corpus = build_corpus(args.corpus, t) if seeded else None
                n, s, sizes = simulate(t, budget, args.method, args.breadth, policy, args.impl, args.table, corpus, args.seed)
                tokens += n
                steps += s
                est_time += sum(np.interp(sizes, sorted(cost), [cost[k] for k in sorted(cost)]))
            row.append(tokens / max(steps, 1))
            total_tokens += tokens
            total_steps += steps
        speed = (total_tokens * cost[1]) / est_time
        label = ("auto" if budget == 0 else str(budget)) + ("+c" if seeded else "")
        print(f"{label:>6} " + " ".join(f"{m:8.2f}" for m in row) + f" {total_tokens / total_steps:8.2f} {speed:8.2f}x")
    if args.corpus:
        print(f"+c: each question seeded from {args.corpus} ({args.seed})")
    hits = [top1_hits(t, args.table) for t in traces]
    print(f"top-1 hit rate ({args.table} rows): {sum(h for h, _ in hits) / max(1, sum(n for _, n in hits)):.1%}")
    print(f"({time.perf_counter() - start:.1f} s)", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--suite", default="builtin")
    rec.add_argument("--begin", type=int, default=0)
    rec.add_argument("--end", type=int, default=None)
    rec.add_argument("--max-new-tokens", type=int, default=128)
    rec.add_argument("--model", "--model-path", dest="model_path", default=None, help="default: the embedded model")
    rec.add_argument("--out", required=True)
    rep = sub.add_parser("replay")
    rep.add_argument("traces")
    rep.add_argument("--budgets", default="2,4,8,16,32,64,0", help="comma list; 0 is auto (the tree policy)")
    rep.add_argument("--method", default="racer", choices=["racer", "retrieval", "logits"])
    rep.add_argument("--breadth", type=int, default=8, help="logits tree breadth (top-k kept per row)")
    rep.add_argument("--cost", default="", help="cost curve as T:ms pairs, e.g. 1:60,8:75")
    rep.add_argument("--table", default="pair", choices=["pair", "token"], help="logits rows keyed by (previous, token) or token")
    rep.add_argument("--impl", default="compiled", choices=["compiled", "reference"], help="automaton implementation")
    rep.add_argument("--corpus", default="", help="traces to seed every question from (never the question itself)")
    rep.add_argument("--seed", default="table", choices=["table", "both"], help="seed the logits table, or the trie too")
    args = parser.parse_args(argv)
    record(args) if args.command == "record" else replay(args)


if __name__ == "__main__":
    main()
