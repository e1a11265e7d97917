"""Replays a synthetic decoding trace through the automaton and times it.

    python -m racer_core.drafting.automaton.bench [--steps N] [--reference-steps N] [--seed S]

The trie is filled to max_nodes = 10000 from a prompt, the logits table has
vocabulary 49,152 and top_k 8, the budget is 64. Text is a Zipf-distributed
token stream in which phrases from a small bank recur, so retrieval finds
matches as it would in real conversations. Each step: `retrieve` the draft
for the next true token (timed, including building the numpy arrays Python
receives), accept the longest draft path that agrees with the text plus the
bonus token, then the step's updates (timed together): `update` with a top-k
row for every tree node and `feed` of the accepted tokens.

Prints the median and p99 in microseconds for the compiled class and for the
pure-Python reference.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from racer_core.drafting.automaton import Automaton, DraftTree, ReferenceAutomaton
from racer_core.drafting.automaton.variants import variant

VOCAB = 49152
TOP_K = 8
BUDGET = 64
MAX_NODES = 10000
NGRAM = 10


def make_text(rng: np.random.Generator, length: int) -> np.ndarray:
    """Zipf tokens, half of them inside phrases drawn (Zipf-ranked) from a bank."""

    def zipf_tokens(n: int) -> np.ndarray:
        return (rng.zipf(1.2, size=n) - 1) % VOCAB

    bank = [zipf_tokens(int(rng.integers(4, 24))) for _ in range(300)]
    out: list[np.ndarray] = []
    total = 0
    while total < length:
        if rng.random() < 0.5:
            piece = bank[int(min(rng.zipf(1.3), len(bank)) - 1)]
        else:
            piece = zipf_tokens(int(rng.integers(1, 12)))
        out.append(piece)
        total += len(piece)
    return np.concatenate(out)[:length].astype(np.int64)


def topk_rows(rng: np.random.Generator, text: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Plausible top-k rows: the true next token first, then Zipf tokens."""
    rows = ((rng.zipf(1.2, size=(len(positions), TOP_K)) - 1) % VOCAB).astype(np.int64)
    nxt = np.minimum(positions + 1, len(text) - 1)
    rows[:, 0] = text[nxt]
    return rows


def accept(draft: DraftTree, text: np.ndarray, pos: int) -> int:
    """Length of the longest draft path (below the root) agreeing with the text."""
    node, n = 0, 0
    children: dict[int, list[int]] = {}
    for i, p in enumerate(draft.parents.tolist()):
        children.setdefault(p, []).append(i)
    tokens = draft.tokens.tolist()
    while pos + 1 + n < len(text):
        want = int(text[pos + 1 + n])
        nxt = next((c for c in children.get(node, []) if tokens[c] == want), None)
        if nxt is None:
            break
        node, n = nxt, n + 1
    return n


def replay(factory: Callable[[], object], steps: int, seed: int) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    prompt_len = 3000
    text = make_text(rng, prompt_len + steps * 16 + 64)
    auto = factory()
    auto.init_logits(VOCAB, TOP_K)  # type: ignore[attr-defined]
    prompt = text[:prompt_len]
    prev = np.concatenate([[-1], prompt[:-1]])
    auto.update(prompt, topk_rows(rng, text, np.arange(prompt_len)), prev)  # type: ignore[attr-defined]
    auto.feed(prompt)  # type: ignore[attr-defined]
    row_pool = topk_rows(rng, text, rng.integers(0, len(text), size=4096))
    t_retrieve: list[float] = []
    t_update: list[float] = []
    sizes: list[int] = []
    accepted_total = 0
    pos = prompt_len
    for step in range(steps):
        root = int(text[pos])
        t0 = time.perf_counter_ns()
        draft = auto.retrieve(root, BUDGET, prev_token=int(text[pos - 1]))  # type: ignore[attr-defined]
        t1 = time.perf_counter_ns()
        n = min(accept(draft, text, pos), 6)
        new_tokens = text[pos : pos + n + 1]  # root + accepted draft tokens
        start = (step * BUDGET) % (len(row_pool) - BUDGET)
        rows = row_pool[start : start + draft.size]
        t2 = time.perf_counter_ns()
        # As the engine: each node's previous token is its parent's, the root's the text's.
        before = np.where(draft.parents >= 0, draft.tokens[np.maximum(draft.parents, 0)], text[pos - 1])
        auto.update(draft.tokens, rows, before)  # type: ignore[attr-defined]
        auto.feed(new_tokens)  # type: ignore[attr-defined]
        t3 = time.perf_counter_ns()
        t_retrieve.append((t1 - t0) / 1000)
        t_update.append((t3 - t2) / 1000)
        sizes.append(draft.size)
        accepted_total += n + 1
        pos += n + 1
    return {
        "retrieve": np.array(t_retrieve),
        "update": np.array(t_update),
        "size": float(np.mean(sizes)),
        "tokens_per_step": accepted_total / steps,
        "nodes": auto.node_count,  # type: ignore[attr-defined]
    }


def summary(name: str, result: dict[str, object]) -> str:
    r = result["retrieve"]
    u = result["update"]
    assert isinstance(r, np.ndarray) and isinstance(u, np.ndarray)
    return (
        f"{name:<10} retrieve median {np.median(r):8.2f} us  p99 {np.percentile(r, 99):8.2f} us | "
        f"step updates median {np.median(u):8.2f} us  p99 {np.percentile(u, 99):8.2f} us | "
        f"mean tree {result['size']:.1f} nodes, {result['tokens_per_step']:.2f} tokens/step, "
        f"trie {result['nodes']} nodes"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--reference-steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(
        f"trace: vocab {VOCAB}, top_k {TOP_K}, budget {BUDGET}, max_nodes {MAX_NODES}, ngram {NGRAM}, seed {args.seed}"
    )
    compiled = replay(lambda: Automaton(MAX_NODES, 2, NGRAM), args.steps, args.seed)
    print(summary(f"compiled ({args.steps} steps)", compiled))
    tokens_only = replay(lambda: variant(Automaton, MAX_NODES, 2, NGRAM, pair_rows=False), args.steps, args.seed)
    print(summary("compiled, token rows only", tokens_only))
    if args.reference_steps > 0:
        reference = replay(lambda: ReferenceAutomaton(MAX_NODES, 2, NGRAM), args.reference_steps, args.seed)
        print(summary(f"reference ({args.reference_steps} steps)", reference))


if __name__ == "__main__":
    main()
