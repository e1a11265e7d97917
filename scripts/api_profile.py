"""Where a loaded API server's CPU goes: the server runs in this process (the
embedded model unless --model), `scripts/api_load.py --url` loads it from a
process of its own, and each of this process's threads' CPU time is read from
/proc/self/task/*/stat before and after.

Reported: each kind of thread's CPU seconds and share of the cores over the
run (the engine loop; the forward's other OpenMP workers; the request
threads, which turn Steps into events and hand them to the request; uvicorn's
thread, which encodes and sends the server-sent events; the rest), and, with
--cprofile, the loop thread's and the request threads' CPU by function
(cProfile with a per-thread CPU clock: it slows the Python it measures, so
read its split as shares, not as times).

    python scripts/api_profile.py --clients 4 --requests 2 --max-tokens 128
    python scripts/api_profile.py --clients 4 --cprofile        # and the split by function

Linux only (/proc). CPU shares, unlike wall figures, hold on a machine that
others share.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")
WORKERS = "OpenMP workers (the forward's other cores)"  # the threads Python did not start


def thread_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each of this process's threads, by native id."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / TICK
    return out


def kind_of(name: str) -> str:
    for prefix, kind in (("racer-loop", "engine loop"), ("racer-request", "request threads"),
                         ("racer-api", "uvicorn (HTTP, SSE)"), ("MainThread", "main")):
        if name.startswith(prefix):
            return kind
    return "other Python threads"


def patch(stack: contextlib.ExitStack, owner: Any, name: str, value: Any) -> None:
    """Set owner.name to value until `stack` closes (in-process runs, the smoke test's, keep the classes as they were)."""
    old = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, value)
    stack.callback(setattr, owner, name, old)


class LoopClock:
    """The engine loop's wall time by part: passes, sequences' Python
    (completing and preparing their steps), waiting for the readers, idle."""

    PARTS = {"_pass": "passes (the forward)", "_resume": "sequences' Python (complete, prepare)",
             "_read_ones": "waiting for the readers", "_admit": "admitting, idle"}

    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.passes: list[tuple[int, float, float]] = []  # each pass's rows, wall and CPU seconds

    def install(self, loop_class: Any, stack: contextlib.ExitStack) -> None:
        for name in self.PARTS:
            patch(stack, loop_class, name, self._timed(name, getattr(loop_class, name)))

    def _timed(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
                self.wall[name] += wall
                self.cpu[name] += cpu
                if name == "_pass":
                    self.passes.append((args[0].last_rows, wall, cpu))

        return timed

    def report(self, passes: int) -> None:
        if not passes:
            return
        print(f"engine loop per pass ({passes} passes), wall (CPU of the loop's thread) in ms:")
        for name, label in self.PARTS.items():
            print(f"  {label:45} {1000 * self.wall[name] / passes:6.2f} ({1000 * self.cpu[name] / passes:6.2f})")
        print("passes by rows: count, median wall (CPU of the loop's thread) in ms")
        for low, high in ((1, 1), (2, 4), (5, 8), (9, 32), (33, 10**9)):
            some = [(w, c) for rows, w, c in self.passes if low <= rows <= high]
            if some:
                walls, cpus = sorted(w for w, _ in some), sorted(c for _, c in some)
                label = f"{low}-{high} rows" if high < 10**9 else f"{low}+ rows"
                print(f"  {label:12} {len(some):5}  {1000 * walls[len(walls) // 2]:6.2f} ({1000 * cpus[len(cpus) // 2]:6.2f})")


class Profiles:
    """One cProfile per thread, on that thread's CPU clock, merged per kind of thread."""

    def __init__(self) -> None:
        self.by_kind: dict[str, list[cProfile.Profile]] = defaultdict(list)
        self.lock = threading.Lock()
        self.order = "cumulative"

    def wrap(self, kind: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def profiled(*args: Any, **kwargs: Any) -> Any:
            profile = cProfile.Profile(time.thread_time)
            with self.lock:
                self.by_kind[kind].append(profile)
            profile.enable()
            try:
                return function(*args, **kwargs)
            finally:
                profile.disable()

        return profiled

    def report(self, kind: str, top: int) -> None:
        profiles = self.by_kind.get(kind)
        if not profiles:
            return
        stats = pstats.Stats(profiles[0])
        for p in profiles[1:]:
            stats.add(p)
        print(f"\n--- {kind}: CPU by function ({self.order}, cProfile on the thread's CPU clock) ---")
        stats.sort_stats(self.order).print_stats(top)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--requests", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--methods", default="racer")
    p.add_argument("--max-batch", type=int, default=None, help="default: --clients (1: the sequential server)")
    p.add_argument("--cprofile", action="store_true", help="also the loop's and request threads' CPU by function")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--order", default="cumulative", help="the functions' order: cumulative or tottime")
    args = p.parse_args(argv)

    from racer_core.engine.loop import EngineLoop
    from racer_tui.api.server import ServerSettings
    from racer_tui.api.service import ApiService
    from racer_tui.api.worker import EngineWorker
    from racer_tui.engine_loader import default_engine_factory, quiet_loading_bars

    quiet_loading_bars()
    profiles = Profiles()
    profiles.order = args.order
    clock = LoopClock()
    engine = default_engine_factory(args.model)
    with contextlib.ExitStack() as stack:
        clock.install(EngineLoop, stack)
        if args.cprofile:
            patch(stack, EngineLoop, "_serve", profiles.wrap("engine loop", EngineLoop._serve))
            patch(stack, EngineWorker, "_serve", profiles.wrap("request threads", EngineWorker._serve))
        service = ApiService(engine, ServerSettings(), port=0, queue=max(16, args.clients),
                             max_batch=args.max_batch or args.clients)
        if args.cprofile:
            patch(stack, service.server, "run", profiles.wrap("uvicorn (HTTP, SSE)", service.server.run))
        service.start()
        load = [sys.executable, str(Path(__file__).with_name("api_load.py")), "--url", service.url,
                "--clients", str(args.clients), "--requests", str(args.requests), "--max-tokens",
                str(args.max_tokens), "--methods", args.methods]
        before, start = thread_cpu(), time.monotonic()
        done = subprocess.run(load, check=False)
        after, wall = thread_cpu(), time.monotonic() - start
        names = {t.native_id: t.name for t in threading.enumerate()}
        service.stop()
        engine.loop.close()
    if done.returncode:
        print(f"api_load.py failed (exit status {done.returncode})", file=sys.stderr)
        return 1
    cores = len(os.sched_getaffinity(0))
    spent: dict[str, float] = defaultdict(float)
    for tid, seconds in after.items():
        name = names.get(tid)
        kind = kind_of(name) if name is not None else WORKERS
        spent[kind] += seconds - before.get(tid, 0.0)
    total = sum(spent.values())
    print(f"\nthis process's CPU over {wall:.1f} s on {cores} cores: {total:.1f} s "
          f"({100 * total / (wall * cores):.0f}% of the cores)")
    for kind, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:45} {seconds:7.2f} s  {100 * seconds / (wall * cores):5.1f}% of the cores  "
              f"{100 * seconds / total:5.1f}% of the process")
    engine_side = spent["engine loop"] + spent[WORKERS]
    print(f"the server's own (all but the engine loop and its OpenMP workers): "
          f"{100 * (total - engine_side) / (wall * cores):.1f}% of the cores")
    passes = engine.loop.passes
    if passes:
        print(f"passes {passes}, rows per pass {engine.loop.rows / passes:.1f}")
        clock.report(passes)
    for kind in ("engine loop", "request threads", "uvicorn (HTTP, SSE)"):
        profiles.report(kind, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
