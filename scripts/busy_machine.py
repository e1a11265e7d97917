"""Decoding speed on a quiet machine and beside busy processes, in one run.

    python scripts/busy_machine.py                        # ar and racer, 30 tokens, 3 replies each
    python scripts/busy_machine.py --busy 1 --repeats 5   # beside one spinning loop (the default)

Loads the embedded model once, then answers the same prompt greedily with ar
and racer, first as the machine is (it should be quiet: the other processes'
use is printed), then beside --busy processes that each spin on a core (a
Python loop in a subprocess), and prints each method's tokens per second
(the reply's wall time, prompt included, median of --repeats replies after
one untimed reply) and the ratio of busy to quiet speed.

The OpenMP settings are racer-tui's own (racer_core/common/openmp_env.py,
racer_core/budget/free_cores.py) unless the environment sets them:
GOMP_SPINCOUNT or OMP_WAIT_POLICY (kept as given), RACER_FOLLOW_FREE_CORES=0
(a fixed thread count), OMP_NUM_THREADS.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

PROMPT = "Count from one to twenty in words."
SPIN = "while True: pass"


@contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """`count` subprocesses spinning, each on a core, for the block."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(count)]
    try:
        time.sleep(1.0)  # the thread choice reads the machine over half a second
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def reply_speed(engine, method: str, tokens: int) -> float:  # noqa: ANN001 - a RacerEngine
    """Tokens per second of one greedy reply, wall time, prompt included."""
    from racer_core.common.events import GenerationConfig

    config = GenerationConfig(method=method, max_new_tokens=tokens, temperature=0.0)
    chat = engine.new_conversation()
    start = time.perf_counter()
    count = sum(len(event.pieces) for event in chat.send(PROMPT, config))
    return count / (time.perf_counter() - start)


def condition(engine, methods: list[str], tokens: int, repeats: int) -> tuple[dict[str, float], float]:  # noqa: ANN001
    """Each method's median tokens/s, and the cores the other processes used meanwhile."""
    from racer_core.budget.free_cores import others_use, read_cpu_times

    before = read_cpu_times()
    speeds: dict[str, float] = {}
    for method in methods:
        reply_speed(engine, method, tokens)  # untimed: first-call allocations, the thread choice settling
        runs = [reply_speed(engine, method, tokens) for _ in range(repeats)]
        speeds[method] = statistics.median(runs)
        print(f"  {method}: {' '.join(f'{r:.1f}' for r in runs)} tok/s", flush=True)
    after = read_cpu_times()
    others = others_use(before, after) if before is not None and after is not None else float("nan")
    return speeds, others


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default="ar,racer")
    parser.add_argument("--tokens", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--busy", type=int, default=1, help="spinning processes beside the busy run (default 1)")
    args = parser.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    given = {k: os.environ.get(k, "unset") for k in
             ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OMP_NUM_THREADS", "RACER_FOLLOW_FREE_CORES")}

    from racer_core.engine.engine import load_engine  # racer_core sets its wait policy here, unless given
    from racer_tui.engine_loader import quiet_loading_bars

    quiet_loading_bars()
    print(f"{os.cpu_count()} CPUs; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; given: "
          + " ".join(f"{k}={v}" for k, v in given.items())
          + f"; in force: GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', 'unset')}", flush=True)
    engine = load_engine()
    engine.cost_curve()
    print(f"{engine.info.model} ({engine.info.dtype}, {engine.info.forward} forward); "
          f"{args.tokens} tokens of {PROMPT!r}, greedy", flush=True)

    print("quiet:", flush=True)
    quiet, quiet_others = condition(engine, methods, args.tokens, args.repeats)
    print(f"  the other processes used {quiet_others:.2f} cores", flush=True)
    print(f"beside {args.busy} busy process(es):", flush=True)
    with busy_processes(args.busy):
        busy, busy_others = condition(engine, methods, args.tokens, args.repeats)
    print(f"  the other processes used {busy_others:.2f} cores (the busy loops included)", flush=True)
    for method in methods:
        print(f"{method}: quiet {quiet[method]:.1f} tok/s, busy {busy[method]:.1f} tok/s, "
              f"busy/quiet {busy[method] / quiet[method]:.2f}x", flush=True)


if __name__ == "__main__":
    main()
