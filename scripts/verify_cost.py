"""Cost of verifying T tokens after C cached ones, forward variants side by side.

Variants run interleaved in one process (round r: every variant, every size),
so a busy moment on a shared machine hits them alike; the fastest and the
median round are reported, and ratios against the first variant.

    python scripts/verify_cost.py --variants stock,lean --sizes 1,8,32 --rounds 7
    python scripts/verify_cost.py --variants stock,lean,lean-compiled --dtype bfloat16
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from racer_core.engine import RacerEngine
from racer_core.kv_cache import TreeCache, stock_tree_cache
from racer_core.models.lean_forward import lean_forward_for
from racer_core.models.loader import load

Forward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, TreeCache], torch.Tensor]


def variants(engine: RacerEngine, names: list[str]) -> dict[str, Forward]:
    model, rt = engine.model, engine.runtime

    def stock(ids, positions, mask, cache):
        out = model(input_ids=ids[None], position_ids=positions[None], attention_mask=mask, use_cache=True,
                    **{rt.cache_arg: cache})
        return out.logits[0]

    found: dict[str, Forward] = {}
    for name in names:
        if name == "stock":
            found[name] = stock
        elif name == "lean":
            lean = lean_forward_for(model)
            assert lean is not None, "this model has no lean forward"
            found[name] = lean
        elif name == "lean-compiled":
            lean = lean_forward_for(model)
            assert lean is not None
            start = time.perf_counter()
            found[name] = torch.compile(lean.__call__, dynamic=True)
            print(f"compile wrapper {time.perf_counter() - start:.1f}s (compiles at first call)")
        else:
            raise SystemExit(f"unknown variant {name}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--variants", default="stock,lean")
    parser.add_argument("--sizes", default="1,8,32,64")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: process CPU time, robust on a shared machine when --threads 1")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load(None, device="cpu", dtype=args.dtype, forward="stock")  # transformers' model, for both forwards
    engine = RacerEngine(loaded.model, loaded.tokenizer, loaded.name)
    rt = engine.runtime
    forwards = variants(engine, args.variants.split(","))
    sizes = [int(s) for s in args.sizes.split(",")]
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, rt.vocab_size, (args.context,), generator=gen)
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    times: dict[tuple[str, int], list[float]] = {(v, s): [] for v in forwards for s in sizes}
    caches = {}
    with torch.inference_mode():
        for v, fwd in forwards.items():
            layers = int(engine.model.config.num_hidden_layers)
            cache = stock_tree_cache(layers) if v == "stock" else TreeCache(layers)  # transformers takes its Cache kind
            start = time.perf_counter()
            fwd(prompt, torch.arange(args.context), rt.masks.causal(0, args.context), cache)
            print(f"{v}: prefill {args.context} in {time.perf_counter() - start:.2f}s")
            caches[v] = cache
        ref: dict[int, torch.Tensor] = {}
        for r in range(args.rounds + 1):
            for s in sizes:
                ids = torch.randint(0, rt.vocab_size, (s,), generator=gen)
                positions = torch.arange(args.context, args.context + s)
                mask = rt.masks.causal(args.context, s)
                for v, fwd in forwards.items():
                    start = clock()
                    logits = fwd(ids, positions, mask, caches[v])
                    elapsed = clock() - start
                    if r:
                        times[(v, s)].append(elapsed)
                    else:
                        print(f"{v} T={s}: first call {elapsed:.2f}s")
                        if v == next(iter(forwards)):
                            ref[s] = logits.float()
                        else:
                            diff = (logits.float() - ref[s]).abs().max().item()
                            same = bool((logits.argmax(-1) == ref[s].argmax(-1)).all())
                            print(f"   max |logit diff| vs {next(iter(forwards))}: {diff:.2e}; same argmax: {same}")
                    caches[v].truncate(args.context)
    first = next(iter(forwards))
    print(f"\n{args.clock} ms, fastest / median of {args.rounds} interleaved rounds; ratio = {first} fastest / variant fastest")
    print("T     " + "  ".join(f"{v:>22}" for v in forwards))
    for s in sizes:
        cells = []
        for v in forwards:
            t = times[(v, s)]
            ratio = min(times[(first, s)]) / min(t)
            cells.append(f"{1000 * min(t):6.1f} /{1000 * statistics.median(t):6.1f} x{ratio:4.2f}")
        print(f"{s:<5} " + "  ".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
