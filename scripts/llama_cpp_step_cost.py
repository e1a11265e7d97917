"""llama.cpp's cost of evaluating T tokens after C cached ones, or of a prefill, on a GGUF.

The counterpart of scripts/verify_cost.py for llama.cpp (through
llama-cpp-python, built as scripts/llama_cpp_anchor.py says), on the embedded
GGUF or `--model`'s. Steps: every row's logits are computed (logits_all), as a
tree verification needs them. `--prefill N`: an N-token prompt evaluated into
a cleared cache each round, as llama.cpp prefills (its batches of n_batch
tokens, n_ubatch at a time, both 512 by default; logits for the last token
only). Sizes (or the prefill) run interleaved for `--rounds` rounds
(racer_core/bench/timing.py); the fastest and the median are shown.
`--threads` sets both n_threads and n_threads_batch; `--clock cpu` reads the
process's CPU time instead of the wall clock (on a busy machine, with
`--threads 1`, as verify_cost.py's).

    python scripts/llama_cpp_step_cost.py --sizes 1,2,4,8,16,32 --threads 2
    python scripts/llama_cpp_step_cost.py --model /tmp/llama-0.8b-q4_1.gguf --sizes 1,2,4,8,16 --threads 2
    python scripts/llama_cpp_step_cost.py --prefill 1000 --threads 2 --rounds 5
    python scripts/llama_cpp_step_cost.py --prefill 1000 --threads 1 --clock cpu --rounds 5
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,2,4,8,16,32")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--model", type=Path, default=None, help="a GGUF file (default: the embedded model)")
    parser.add_argument("--prefill", type=int, default=0, metavar="N",
                        help="time the prefill of an N-token prompt (a cleared cache each round) instead of the steps")
    parser.add_argument("--batch", type=int, default=512, help="n_batch and n_ubatch (llama.cpp's default 512)")
    parser.add_argument("--flash-attn", action="store_true", help="llama.cpp's flash attention (off by default here)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: process CPU time, robust on a shared machine when --threads 1")
    args = parser.parse_args(argv)
    if args.prefill < 0 or args.rounds < 1 or args.context < 1 or args.batch < 1 or args.threads < 1:
        parser.error("--prefill must be 0 or more; --rounds, --context, --batch and --threads at least 1")
    try:
        from llama_cpp import Llama
    except ImportError:
        raise SystemExit("llama-cpp-python is not installed (see scripts/llama_cpp_anchor.py for a source build)") from None
    from racer_core.common.errors import ModelLoadError
    from racer_core.models.embedded import embedded_gguf

    try:
        path = args.model if args.model is not None else embedded_gguf()
    except ModelLoadError as exc:
        raise SystemExit(f"llama_cpp_step_cost: {exc}") from None
    if not path.is_file():
        raise SystemExit(f"llama_cpp_step_cost: no such GGUF file: {path}")
    # the prefill's logits: the last token's only (llama.cpp's own prefill); the steps': every row's
    llm = Llama(model_path=str(path), n_ctx=max(args.prefill, args.context + 128), n_batch=args.batch,
                n_ubatch=args.batch, n_threads=args.threads, n_threads_batch=args.threads,
                logits_all=not args.prefill, flash_attn=args.flash_attn, verbose=False)
    setting = f"{args.clock} ms, {args.threads} threads, n_batch = n_ubatch = {args.batch}, flash attention {'on' if args.flash_attn else 'off'}"
    if args.prefill:
        prefill_cost(llm, path, args, setting)
    else:
        step_costs(llm, path, args, setting)


def clock(args: argparse.Namespace) -> Callable[[], float]:
    return time.perf_counter if args.clock == "wall" else time.process_time


def step_costs(llm: Any, path: Path, args: argparse.Namespace, setting: str) -> None:
    import random

    from racer_core.bench.timing import fastest_and_median, timed_rounds

    rng = random.Random(0)
    prompt = [rng.randrange(100, 40000) for _ in range(args.context)]
    llm.eval(prompt)
    sizes = [int(s) for s in args.sizes.split(",")]
    ids = {s: [rng.randrange(100, 40000) for _ in range(s)] for s in sizes}
    spans = timed_rounds([lambda s=s: llm.eval(ids[s]) for s in sizes], args.rounds, clock=clock(args),
                         # drop the last step's rows (eval removes the cache past n_tokens)
                         before=lambda i: setattr(llm, "n_tokens", args.context))
    times = {s: fastest_and_median(t) for s, t in zip(sizes, spans, strict=True)}
    print(f"llama.cpp {path.name}, {setting}, {args.context} cached, all rows' logits")
    print("T     fastest / median ms   x one row")
    for s in sizes:
        print(f"{s:<5} {1000 * times[s][0]:7.1f} / {1000 * times[s][1]:6.1f}   x{times[s][0] / times[sizes[0]][0]:.2f}")


def prefill_cost(llm: Any, path: Path, args: argparse.Namespace, setting: str) -> None:
    import random

    from racer_core.bench.timing import fastest_and_median, timed_rounds

    rng = random.Random(0)
    prompt = [rng.randrange(100, 40000) for _ in range(args.prefill)]
    # n_tokens = 0: eval removes the whole cache before it feeds the prompt (kv_cache_seq_rm from 0)
    (spans,) = timed_rounds([lambda: llm.eval(prompt)], args.rounds, before=lambda _: llm.reset(), clock=clock(args))
    fastest, median = fastest_and_median(spans)
    print(f"llama.cpp {path.name}, {setting}; prefill of {args.prefill} tokens into a cleared cache, "
          f"the last token's logits, fastest / median of {args.rounds} rounds")
    print(f"fastest {1000 * fastest:.1f} ms / median {1000 * median:.1f} ms; {1000 * fastest / args.prefill:.2f} ms/token")


if __name__ == "__main__":
    main()
