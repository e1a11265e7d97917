"""What a one-row pass costs right after something else: another one-row
pass (a plain reply's steps), a larger pass (a racer tree), an idle pause,
busy threads that touch no memory, or a stream through memory.

The cost curve times each size settled, in passes back to back
(Engine.time_forward). On a 2-core guest sharing a 300 MB L3 with other
guests (5 Dec 2026) the next one-row passes after an 8-row pass, a pause or
a stream cost 10-50% more for several passes: the small model's weights
leave the shared cache while the pass does not read them, and come back
over a few passes. Spinning threads that read no memory slowed it as much as
a pause, so not a clock that slows down when idle. This script measures that
aftermath on any machine (a laptop's own cache may hold no model at all), so
that a cost model adding it is decided from figures:

    python scripts/pass_aftermath.py                       # the embedded model, 25 rounds
    python scripts/pass_aftermath.py --isa avx2 --between 8,sleep
    python scripts/pass_aftermath.py --model FILE.gguf --context 1024

Each round runs, for every "between": 3 settling one-row passes, the
between, then 4 timed one-row passes; printed per between is the median over
the rounds of each of the 4 (wall ms), and their sum's excess over 4 settled
one-row passes ("none").
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from racer_core.budget.cpu_class import ISA_CHOICES, reexec_with_isa  # noqa: E402

PAUSE_S = 0.015
AFTER = 4  # one-row passes timed after each between


def betweens(spec: str, run: Callable[[int], float]) -> dict[str, Callable[[], object]]:
    """The named things that come between (a number: a pass of that many rows)."""
    import numpy as np

    stream = np.zeros(64 << 20, dtype=np.uint8)

    def spin(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    def spin_two() -> None:  # both cores busy, no memory touched
        other = threading.Thread(target=spin, args=(PAUSE_S,))
        other.start()
        spin(PAUSE_S)
        other.join()

    def streamed() -> None:  # 64 MB read again and again for the pause
        end = time.perf_counter() + PAUSE_S
        while time.perf_counter() < end:
            stream.sum()

    known: dict[str, Callable[[], object]] = {"none": lambda: None, "sleep": lambda: time.sleep(PAUSE_S),
                                              "spin": spin_two, "stream": streamed}
    chosen = {}
    for name in ["none", *[n for n in spec.split(",") if n and n != "none"]]:
        if name.isdigit():
            size = int(name)
            chosen[f"{size} rows"] = lambda size=size: run(size)
        elif name in known:
            chosen[name] = known[name]
        else:
            raise SystemExit(f"--between: {name!r} is not a row count nor one of {', '.join(known)}")
    return chosen


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="a GGUF file (default: the embedded model)")
    parser.add_argument("--between", default="8,32,sleep,spin,stream",
                        help="row counts and sleep, spin, stream (comma list; none is always measured)")
    parser.add_argument("--context", type=int, default=256, help="cached tokens before each pass")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--isa", choices=ISA_CHOICES, default="native",
                        help="avx2: the AVX2 class on an AVX-512 machine (the libraries limited)")
    args = parser.parse_args(argv)
    reexec_with_isa(args.isa)

    import numpy as np
    import torch

    from racer_core.budget.cpu_class import describe
    from racer_core.engine.decoder import SequenceDecoder, run_now
    from racer_core.engine.engine import RacerEngine
    from racer_core.models.loader import load

    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load(args.model, device="cpu", dtype="auto")
    engine = RacerEngine(loaded.model, loaded.tokenizer, loaded.name)
    rt = engine.runtime
    decoder = SequenceDecoder(rt)
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        run_now(decoder._feed(torch.randint(0, rt.vocab_size, (args.context,), generator=gen).tolist()))
        base = len(decoder.cached)

        def run(rows: int) -> float:
            """One pass of `rows` chained rows after the cache, timed as the cost curve times it;
            the cache is left as it was."""
            return engine._passes(decoder, rows, base, gen, 1)[0]

        chosen = betweens(args.between, run)
        print(f"CPU class {describe()}, {torch.get_num_threads()} threads; {loaded.name}, {args.context} cached; "
              f"{args.rounds} rounds")
        times = {name: [[] for _ in range(AFTER)] for name in chosen}
        for _ in range(args.rounds):
            for name, between in chosen.items():
                for _ in range(3):
                    run(1)
                between()
                for k in range(AFTER):
                    times[name][k].append(run(1))
    medians = {name: [float(np.median(t)) * 1e3 for t in rows] for name, rows in times.items()}
    settled = sum(medians["none"])
    print(f"one-row passes after each, wall ms (median of {args.rounds} rounds), and their excess over settled ones:")
    for name, row in medians.items():
        print(f"  {name:10s} " + " ".join(f"{ms:6.2f}" for ms in row) + f"   excess {sum(row) - settled:+6.2f} ms")


if __name__ == "__main__":
    main()
