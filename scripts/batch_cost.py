"""A batched pass of N sequences, one row each, against one sequence's N-row tree,
and what that leaves the batched API server against the sequential one.

Continuous batching (racer_core/engine/loop.py) runs each waiting sequence's
step in one pass (LeanForward.batch): the linears run once over all the rows,
as for a tree, but each sequence reads its own key/value cache. For each N of
`--sizes` this times, in interleaved rounds (racer_core/bench/timing.py), a
pass of N one-row sequences and a tree of N rows in one sequence, each after
`--context` cached tokens, and prints both with their ratio (fastest of the
rounds, and the median).

`--mixed N` instead asks what one sequence's tree adds to a pass of N: a pass of
N one-row sequences against N - 1 of them beside a tree of each size of
`--sizes` (interleaved rounds), the extra milliseconds and the pass's ratio,
beside what the cost curve's sizes would say (t(N - 1 + k) - t(N), one tree
of those rows timed alone): under load the tree policy prices a tree so.
`--ceiling N` instead measures the model's share of `scripts/api_load.py
--clients N`'s comparison on the built-in suite's first N first turns (the
chat template applied): each prompt's prefill, a one-row step of each
sequence and a pass of all N (each 64 tokens into its reply), then

    sequential = prefill + N * 128 * one row    batched = prefill + 128 * N rows

per round of 128-token replies: the batched server's best ratio with no
Python, HTTP or waiting counted. The prefill is the same work in both.

    python scripts/batch_cost.py --sizes 2,4,8,16 --threads 2
    python scripts/batch_cost.py --ceiling 4 --threads 2
    python scripts/batch_cost.py --mixed 8 --sizes 2,3,4,6,8 --threads 2
    python scripts/batch_cost.py --ceiling 8 --threads 2 --isa avx2   # the AVX2 class on a newer CPU
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from racer_core.budget.cpu_class import ISA_CHOICES, reexec_with_isa  # noqa: E402

REPLY = 128  # tokens per reply in --ceiling, as api_load.py's default --max-tokens


def _counts(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--sizes {text!r}: expected comma-separated counts") from None
    if not values or min(values) < 1:
        raise SystemExit("--sizes: every count must be at least 1")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="2,4,8,16", help="sequences per pass (and tree rows)")
    parser.add_argument("--context", type=int, default=256, help="cached tokens of each sequence")
    parser.add_argument("--ceiling", type=int, default=0, metavar="N",
                        help="the batched server's model-only ceiling for N clients instead")
    parser.add_argument("--mixed", type=int, default=0, metavar="N",
                        help="what a tree of each of --sizes rows adds to a pass of N one-row sequences instead")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default=None, help="a model or GGUF file (default: the embedded model)")
    parser.add_argument("--isa", choices=ISA_CHOICES, default="native",
                        help="avx2 or avxvnni: that class on a newer CPU (racer_core/budget/cpu_class.py)")
    args = parser.parse_args(argv)
    reexec_with_isa(args.isa)
    if args.threads < 1 or args.rounds < 1 or args.context < 1 or args.ceiling < 0 or args.mixed < 0:
        raise SystemExit("--threads, --rounds and --context must be at least 1, --ceiling and --mixed at least 0")
    if args.mixed == 1:
        raise SystemExit("--mixed N: a pass of at least 2 sequences")
    sizes = _counts(args.sizes)
    import torch

    from racer_core.common.errors import ModelLoadError
    from racer_core.engine.engine import load_engine

    torch.set_num_threads(args.threads)
    try:
        engine = load_engine(args.model)
    except ModelLoadError as exc:
        raise SystemExit(f"batch_cost: {exc}") from None
    if engine.runtime.lean is None:
        raise SystemExit(f"batch_cost: {engine.info.model} has no lean forward, so its requests are not batched")
    with torch.inference_mode():
        if args.ceiling:
            ceiling(engine, args.ceiling, args.rounds)
        elif args.mixed:
            mixed(engine, args.mixed, sizes, args.context, args.rounds)
        else:
            passes(engine, sizes, args.context, args.rounds)
    return 0


class _Sequences:
    """Sequences with their prompts prefilled; each pass's rows are truncated off again."""

    def __init__(self, engine: Any, prompts: list[list[int]], trees: Sequence[int] = ()) -> None:
        import torch

        from racer_core.engine.decoder import SequenceDecoder
        from racer_core.models.lean_forward import Part

        rt = engine.runtime
        self.lean, self.decoders, self.lengths = rt.lean, [], [len(p) for p in prompts]
        gen = torch.Generator().manual_seed(0)
        for prompt in prompts:
            decoder = SequenceDecoder(rt)
            decoder._prefill(prompt)
            self.decoders.append(decoder)
        self.rows = [Part(torch.randint(0, rt.vocab_size, (1,), generator=gen), torch.tensor([n]),
                          rt.masks.causal(n, 1), d.cache) for d, n in zip(self.decoders, self.lengths, strict=True)]
        n = self.lengths[0]  # a tree of each size in `trees`, in the first sequence
        self.trees = {size: Part(torch.randint(0, rt.vocab_size, (size,), generator=gen), torch.arange(n, n + size),
                                 rt.masks.causal(n, size), self.decoders[0].cache) for size in trees}

    def batch(self, count: int) -> None:
        self.lean.batch(self.rows[:count])

    def one(self, i: int) -> None:
        self.lean.batch([self.rows[i]])

    def tree(self, size: int) -> None:
        self.lean.batch([self.trees[size]])

    def truncate(self) -> None:
        for decoder, n in zip(self.decoders, self.lengths, strict=True):
            decoder.cache.truncate(n)


def _random_prompts(engine: Any, count: int, length: int) -> list[list[int]]:
    import torch

    gen = torch.Generator().manual_seed(1)
    return [torch.randint(0, engine.runtime.vocab_size, (length,), generator=gen).tolist() for _ in range(count)]


def passes(engine: Any, sizes: list[int], context: int, rounds: int) -> None:
    from racer_core.bench.timing import timed_rounds

    seqs = _Sequences(engine, _random_prompts(engine, max(sizes), context), [n for n in sizes if n > 1])
    calls, names = [lambda: seqs.one(0)], ["1 row"]
    for size in sizes:
        if size > 1:
            calls += [lambda s=size: seqs.tree(s), lambda s=size: seqs.batch(s)]
            names += [f"tree {size}", f"batch {size}"]
    spans = timed_rounds(calls, rounds, warmup=1, after=lambda _: seqs.truncate())
    best = {name: min(s) for name, s in zip(names, spans, strict=True)}
    middle = {name: statistics.median(s) for name, s in zip(names, spans, strict=True)}
    print(f"{engine.info.model}: a pass of N sequences (one row each) against an N-row tree, {context} cached each, "
          f"{rounds} interleaved rounds; ms fastest (median)")
    print(f"1 row: {1e3 * best['1 row']:.2f} ({1e3 * middle['1 row']:.2f})")
    print("N      tree ms           batch ms          batch/tree   batch/one row")
    for size in sizes:
        if size > 1:
            t, b = f"tree {size}", f"batch {size}"
            print(f"{size:<5}  {1e3 * best[t]:6.2f} ({1e3 * middle[t]:6.2f})   {1e3 * best[b]:6.2f} "
                  f"({1e3 * middle[b]:6.2f})   {best[b] / best[t]:6.2f}x     {best[b] / best['1 row']:6.2f}x")


def mixed(engine: Any, count: int, sizes: list[int], context: int, rounds: int) -> None:
    from racer_core.bench.timing import timed_rounds

    trees = sorted({k for k in sizes if k > 1} | {count - 1 + k for k in sizes} | {count})
    seqs = _Sequences(engine, _random_prompts(engine, count, context), trees)
    rest = seqs.rows[1:count]
    calls = [lambda: seqs.batch(count)]
    calls += [lambda k=k: seqs.lean.batch([seqs.trees[k] if k > 1 else seqs.rows[0], *rest]) for k in sizes]
    calls += [lambda k=k: seqs.tree(k) for k in trees]  # one sequence's trees: the cost curve's sizes
    spans = timed_rounds(calls, rounds, warmup=1, after=lambda _: seqs.truncate())
    middle = [1e3 * statistics.median(s) for s in spans]
    base, with_tree = middle[0], dict(zip(sizes, middle[1 : 1 + len(sizes)], strict=True))
    alone = dict(zip(trees, middle[1 + len(sizes) :], strict=True))
    print(f"{engine.info.model}: a pass of {count} one-row sequences ({context} cached each) {base:.2f} ms, against "
          f"{count - 1} of them beside one sequence's tree; median of {rounds} interleaved rounds")
    print("tree   pass ms   added ms   pass ratio   curve's added ms (t(N-1+k) - t(N), trees alone)")
    for k in sizes:
        curve = alone[count - 1 + k] - alone[count]
        print(f"{k:<5}  {with_tree[k]:7.2f}   {with_tree[k] - base:7.2f}    {with_tree[k] / base:7.3f}x    {curve:7.2f}")


def ceiling(engine: Any, clients: int, rounds: int) -> None:
    from racer_core.bench.suites import load_builtin
    from racer_core.bench.timing import timed_rounds
    from racer_core.engine.decoder import SequenceDecoder
    from racer_core.engine.engine import chat_prompt_ids

    turns = [q.turns[0] for q in load_builtin()]
    prompts = [chat_prompt_ids(engine, [{"role": "user", "content": turns[i % len(turns)]}], {})
               for i in range(clients)]
    fresh: list[Any] = [None]  # each prefill into a new sequence, made untimed before it

    def new_sequence(_: int) -> None:
        fresh[0] = SequenceDecoder(engine.runtime)

    prefills = [lambda p=p: fresh[0]._prefill(p) for p in prompts]
    prefill = sum(min(s) for s in timed_rounds(prefills, max(2, rounds // 3), before=new_sequence))
    into = _random_prompts(engine, clients, REPLY // 2)  # each sequence half way into its reply
    seqs = _Sequences(engine, [p + extra for p, extra in zip(prompts, into, strict=True)])
    calls = [lambda i=i: seqs.one(i) for i in range(clients)] + [lambda: seqs.batch(clients)]
    spans = timed_rounds(calls, rounds, warmup=1, after=lambda _: seqs.truncate())
    one = statistics.fmean(min(s) for s in spans[:clients])
    batch = min(spans[-1])
    sequential = prefill + clients * REPLY * one
    batched = prefill + REPLY * batch
    print(f"{engine.info.model}, {clients} clients: prompts of {sum(map(len, prompts))} tokens, prefill {1e3 * prefill:.0f} ms; "
          f"one row {1e3 * one:.2f} ms, a pass of {clients} {1e3 * batch:.2f} ms (fastest of {rounds} rounds)")
    print(f"a round of {REPLY}-token replies: sequential {sequential:.2f} s, batched {batched:.2f} s: "
          f"ceiling {sequential / batched:.2f}x (without the prefill {clients * one / batch:.2f}x)")


if __name__ == "__main__":
    sys.exit(main())
