"""One OpenMP thread for the calling thread's own parallel work.

GNU OpenMP keeps a pool of worker threads for every thread that starts
parallel work, and once it manages more threads than the machine has CPUs it
stops letting idle workers spin (100 spins, against about 3 ms otherwise):
every parallel region then wakes its workers from sleep. The batched API
server runs each request on a thread of its own; torch's small ops there
(a top-k over a step's logits) each made a pool, and the pass thread's
layers (racer_core/engine/batching.py) then spent about a quarter of their
time in the kernel's wake-ups. A request thread inside `one_openmp_thread`
makes no pool: its regions run on itself alone, and the pass thread keeps
the workers. The thread that loaded the model (the server's main thread)
made a pool too; `release_openmp_workers` ends it once the passes move to
the pass thread. Measured on 2 cores, an 8-row step of the embedded model:
31 ms on the thread that loaded it, 42-48 ms on another thread beside that
pool, 33-37 ms once it was released.

The count is OpenMP's per-thread setting (omp_set_num_threads in the calling
thread), not torch.set_num_threads, which would also change the count every
later thread starts with.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from collections.abc import Iterator
from typing import Any

import torch

OMP_PAUSE_SOFT = 1  # omp_pause_resource_t: soft (hard would also drop thread-private data)


@functools.cache
def _libgomp() -> Any:
    """The GNU OpenMP runtime torch loaded (the same soname finds it), or None."""
    try:
        lib = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)  # loaded already, or not used at all
    except (OSError, AttributeError):  # not loaded; no RTLD_NOLOAD on this platform
        return None
    lib.omp_set_num_threads.argtypes = [ctypes.c_int]
    return lib


@contextlib.contextmanager
def one_openmp_thread() -> Iterator[bool]:
    """Within the block, the calling thread's OpenMP regions run on itself
    alone (the count before comes back after); yields False where torch does
    not use GNU OpenMP (then nothing changes)."""
    lib = _libgomp()
    if lib is None:
        yield False
        return
    before = torch.get_num_threads()  # torch's first-use setup of this thread's count comes first, else it undoes ours
    lib.omp_set_num_threads(1)
    try:
        yield True
    finally:
        lib.omp_set_num_threads(before)


def release_openmp_workers() -> bool:
    """End the calling thread's idle OpenMP workers (OpenMP 5's
    omp_pause_resource_all; its next parallel work would start them again);
    False where torch does not use GNU OpenMP."""
    lib = _libgomp()
    if lib is None or not hasattr(lib, "omp_pause_resource_all"):
        return False
    return lib.omp_pause_resource_all(OMP_PAUSE_SOFT) == 0
