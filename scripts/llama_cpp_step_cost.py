"""llama.cpp's cost of evaluating T tokens after C cached ones, on the embedded GGUF.

The counterpart of scripts/verify_cost.py for llama.cpp (through
llama-cpp-python, built as scripts/llama_cpp_anchor.py says): every row's
logits are computed (logits_all), as a tree verification needs them. Sizes
run interleaved for `--rounds` rounds (racer_core/bench/timing.py); the fastest
and the median are shown.

    python scripts/llama_cpp_step_cost.py --sizes 1,2,4,8,16,32 --threads 2
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,2,4,8,16,32")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args(argv)
    try:
        from llama_cpp import Llama
    except ImportError:
        raise SystemExit("llama-cpp-python is not installed (see scripts/llama_cpp_anchor.py for a source build)") from None
    import random

    from racer_core.bench.timing import fastest_and_median, timed_rounds
    from racer_core.models.embedded import embedded_gguf

    llm = Llama(model_path=str(embedded_gguf()), n_ctx=args.context + 128, n_batch=512, n_threads=args.threads,
                n_threads_batch=args.threads, logits_all=True, verbose=False)
    rng = random.Random(0)
    prompt = [rng.randrange(100, 40000) for _ in range(args.context)]
    llm.eval(prompt)
    sizes = [int(s) for s in args.sizes.split(",")]
    ids = {s: [rng.randrange(100, 40000) for _ in range(s)] for s in sizes}
    spans = timed_rounds([lambda s=s: llm.eval(ids[s]) for s in sizes], args.rounds,
                         # drop the last step's rows (eval removes the cache past n_tokens)
                         before=lambda i: setattr(llm, "n_tokens", args.context))
    times = {s: fastest_and_median(t) for s, t in zip(sizes, spans, strict=True)}
    print(f"llama.cpp {embedded_gguf().name}, {args.threads} threads, {args.context} cached, all rows' logits")
    print("T     fastest / median ms   x one row")
    for s in sizes:
        print(f"{s:<5} {1000 * times[s][0]:7.1f} / {1000 * times[s][1]:6.1f}   x{times[s][0] / times[sizes[0]][0]:.2f}")


if __name__ == "__main__":
    main()
