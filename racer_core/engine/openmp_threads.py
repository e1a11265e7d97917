"""The OpenMP threads the engine loop's passes run on (racer_core/engine/loop.py):
as many as the free cores allow (`follow_free_cores`).

All model code runs on the loop's one thread, so OpenMP keeps one pool of
workers. GNU OpenMP keeps a pool for every thread that starts parallel work,
and once it manages more threads than the machine has CPUs it stops letting
idle workers spin (100 spins, against about 3 ms otherwise): every parallel
region then wakes its workers from sleep. The thread that loaded the model
(the server's main thread) made a pool too; `release_openmp_workers` ends it
once the passes move to the loop, and every thread that hands the loop a
sequence ends its own first (EngineLoop.submit: the benchmark's main thread
loads the model and measures the cost curve, then submits). Measured on 2 cores, an 8-row step of the
embedded model: 31 ms on the thread that loaded it, 42-48 ms on another
thread beside that pool, 33-37 ms once it was released.

The passes' thread count follows the free cores through torch.set_num_threads:
torch's own pools (MKL's, its thread pool) shrink with it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from typing import Any

import torch

from racer_core.budget.free_cores import ThreadChoice

OMP_PAUSE_SOFT = 1  # omp_pause_resource_t: soft (hard would also drop thread-private data)


@functools.cache
def _libgomp() -> Any:
    """The GNU OpenMP runtime torch loaded (the same soname finds it), or None."""
    try:
        lib = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)  # loaded already, or not used at all
    except (OSError, AttributeError):  # not loaded; no RTLD_NOLOAD on this platform
        return None
    return lib


def release_openmp_workers() -> bool:
    """End the calling thread's idle OpenMP workers (OpenMP 5's
    omp_pause_resource_all; its next parallel work would start them again);
    False where torch does not use GNU OpenMP."""
    lib = _libgomp()
    if lib is None or not hasattr(lib, "omp_pause_resource_all"):
        return False
    return lib.omp_pause_resource_all(OMP_PAUSE_SOFT) == 0


FOLLOW_ENV = "RACER_FOLLOW_FREE_CORES"
"""0 keeps the thread count torch started with (for comparisons)."""
_choice: ThreadChoice | None = None
_choice_lock = threading.Lock()


def thread_invariant(forward: Any) -> bool:
    """Whether `forward` gives the same bits on any thread count: a lean
    forward does (every kernel sums a row in one fixed order), except with
    fp16 weights, where fbgemm's linear splits its sums by thread; a stock
    (transformers) forward is not checked (tests/core/test_bit_exact.py)."""
    return forward is not None and not getattr(forward, "half", True)


def follow_free_cores(forward: Any) -> int:
    """Run the calling thread's next step of `forward` on as many OpenMP
    threads as the other processes leave cores free
    (racer_core/budget/free_cores.py), at most the count torch started with;
    returns that count. Call between steps, on the thread that runs the
    forward pass. A forward whose bits depend on the count keeps it."""
    global _choice
    if os.environ.get(FOLLOW_ENV, "1") == "0" or not thread_invariant(forward):
        return torch.get_num_threads()
    with _choice_lock:
        if _choice is None:
            _choice = ThreadChoice(torch.get_num_threads())
        threads = _choice.choose()
    if threads != torch.get_num_threads():  # per thread in OpenMP; torch's set also resizes its other pools
        torch.set_num_threads(threads)
    return threads


def most_threads() -> int:
    """The thread count torch started with: what a step runs on when the machine is quiet."""
    with _choice_lock:
        return _choice.most if _choice is not None else torch.get_num_threads()
