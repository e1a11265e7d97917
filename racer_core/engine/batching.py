"""Continuous batching of the lean forward across concurrent sequences.

Each request of the API server runs its own decoder on its own thread, as it
would alone; the decoders' forward (`ModelRuntime.lean`) is this object
instead of the LeanForward itself. A forward call hands its rows over as a
Part and waits; once every seated sequence has handed its part over (or the
oldest part has waited `wait_s`, or half the last pass's time if longer: a
sequence busy elsewhere does not hold the others up for long), the pass
thread runs LeanForward.batch over the waiting parts and hands each caller
its own logits. Linears run once over all the rows, attention per sequence
over its own cache and mask, so each sequence gets what its pass alone gives
(racer_core/models/lean_forward.py) and its acceptance, cache and sampling
stay its own.

Every pass runs on that one thread (started on the first call, gone after
`IDLE_EXIT_S` without parts), never on the callers': OpenMP keeps a pool of
workers per thread that starts parallel work, and with more of them than
CPUs its workers stop spinning between regions (openmp_threads.py; measured
on 2 cores, an 8-row step of the embedded model took 50 ms led by rotating
threads, 30 ms from one). A seated thread keeps its own OpenMP to one thread.

Parts are taken first come first served while the pass stays within
`max_rows` rows (the first always goes, however large): a part left out is
the oldest at the next pass, so none waits more than one pass for room. A
prefill chunk is one part (at most the decoder's PREFILL_CHUNK rows), so a
long prompt shares passes with the others' steps instead of stalling them
for its whole length. A call asking for captured states (eagle3) runs in a
pass of its own.

A thread joins with `seat()` (a context: it leaves when its request ends);
only seated threads that have submitted once are waited for, so a thread
still tokenizing its prompt holds nobody up. Calls from unseated threads
(a cost-curve measurement) are served too, in the next pass.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from racer_core.engine.openmp_threads import follow_free_cores, one_openmp_thread
from racer_core.models.lean_forward import LeanForward, Part

DEFAULT_MAX_ROWS = 256
"""Rows per pass: a prefill chunk (256) or many requests' trees."""
DEFAULT_WAIT_S = 0.02
"""How long a submitted part waits at least for seated sequences that have not submitted yet."""
PATIENCE = 0.5
"""...and at most this share of the last pass's seconds when that is longer: a
straggler left out waits a whole pass, and the passes then split in two groups."""
IDLE_EXIT_S = 2.0
"""The pass thread ends after this long without parts (the next call starts another)."""


@dataclass(eq=False)  # seats are told apart by identity (two may hold the same figures)
class Seat:
    """One sequence's place in the batch: what its passes were like."""

    passes: int = 0
    rows: int = 0  # rows of all the passes it was in (its own and the others')
    parts: int = 0  # sequences in those passes, itself included
    others: int = 0  # the last pass's other sequences
    other_rows: int = 0  # and their rows
    engaged: bool = False  # submitted once: the batch waits for it

    @property
    def rows_per_pass(self) -> float | None:
        return self.rows / self.passes if self.passes else None

    @property
    def parts_per_pass(self) -> float | None:
        return self.parts / self.passes if self.passes else None


@dataclass
class _Ticket:
    part: Part
    capture: tuple[int, ...]
    seat: Seat | None
    at: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None

    @property
    def rows(self) -> int:
        return int(self.part.ids.shape[0])


class BatchedForward:
    """A LeanForward's call signature, served in shared passes (see the module doc)."""

    passes_elsewhere = True  # the callers' threads do not run the passes: the decoder leaves their threads alone

    def __init__(self, lean: LeanForward, max_rows: int = DEFAULT_MAX_ROWS, wait_s: float = DEFAULT_WAIT_S) -> None:
        if max_rows < 1:
            raise ValueError("max_rows must be at least 1")
        self.lean = lean
        self.max_rows = max_rows
        self.wait_s = wait_s
        self.passes = 0
        self.rows = 0  # over all passes
        self.last_rows = 0
        self.last_parts = 0
        self.most_rows = 0  # the largest pass so far, in rows
        self.most_parts = 0  # and in sequences
        self._pending: list[_Ticket] = []
        self._seats: list[Seat] = []
        self._local = threading.local()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None  # the pass thread, while it runs
        self._last_pass_s = 0.0

    def __getattr__(self, name: str) -> Any:  # packed, half, weights: the wrapped forward's
        return getattr(self.lean, name)

    # -- the sequences' side ----------------------------------------------------------

    @contextlib.contextmanager
    def seat(self, engaged: bool = False) -> Iterator[Seat]:
        """Seat the calling thread for the block (one request's generation);
        `engaged`: waited for from the start, not from its first part (the
        tests seat several sequences first, so their passes are shared whatever
        the threads' timing)."""
        seat = Seat(engaged=engaged)
        self._local.seat = seat
        with self._cond:
            self._seats.append(seat)
        try:
            with one_openmp_thread():  # the pass thread does the parallel work (openmp_threads.py)
                yield seat
        finally:
            self._local.seat = None
            with self._cond:
                self._seats.remove(seat)
                self._cond.notify_all()  # the batch no longer waits for it

    def load(self) -> tuple[int, int]:
        """(other sequences, their rows) in the calling thread's last pass: the tree policy's load."""
        seat = getattr(self._local, "seat", None)
        return (0, 0) if seat is None else (seat.others, seat.other_rows)

    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Any,
                 logit_rows: int | None = None, capture: tuple[int, ...] = ()) -> Any:
        seat = getattr(self._local, "seat", None)
        ticket = _Ticket(Part(ids, positions, mask, cache, logit_rows), capture, seat)
        with self._cond:
            if self._stopping:
                raise RuntimeError("the batch has stopped")
            if seat is not None:
                seat.engaged = True
            self._pending.append(ticket)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="racer-pass", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        ticket.done.wait()
        if ticket.error is not None:
            raise ticket.error
        return ticket.result

    def stop(self) -> None:
        """Refuse new parts; parts still waiting get an error."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    # -- the passes ----------------------------------------------------------------------

    def _serve(self) -> None:
        """The pass thread: run passes while parts come."""
        while True:
            with self._cond:
                taken = self._next()
                if taken is None:
                    self._thread = None
                    return
            self._run(taken)

    def _next(self) -> list[_Ticket] | None:
        """(Locked.) The next pass's parts, once everyone is in or the oldest
        part has waited enough; None when the batch stops (the waiting parts
        get an error) or no part came for IDLE_EXIT_S."""
        idle_since = time.monotonic()
        while True:
            if self._stopping:
                for ticket in self._pending:
                    ticket.error = RuntimeError("the batch has stopped")
                    ticket.done.set()
                self._pending.clear()
                return None
            if not self._pending:
                left = idle_since + IDLE_EXIT_S - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
                continue
            patience = max(self.wait_s, PATIENCE * self._last_pass_s)
            left = self._pending[0].at + patience - time.monotonic()
            if left > 0 and not self._everyone_in():
                self._cond.wait(left)
                continue
            return self._take()

    def _everyone_in(self) -> bool:
        waiting = {id(t.seat) for t in self._pending if t.seat is not None}
        return all(id(seat) in waiting for seat in self._seats if seat.engaged)

    def _take(self) -> list[_Ticket]:
        """The next pass's tickets: first come first served within the rows budget."""
        taken = [self._pending[0]]
        if not taken[0].capture:
            rows = taken[0].rows
            for ticket in self._pending[1:]:
                if ticket.capture or rows + ticket.rows > self.max_rows:
                    break
                taken.append(ticket)
                rows += ticket.rows
        del self._pending[: len(taken)]
        return taken

    def _run(self, taken: list[_Ticket]) -> None:
        start = time.perf_counter()
        try:
            follow_free_cores(self.lean)
            with torch.inference_mode():
                if taken[0].capture:
                    p = taken[0].part
                    results = [self.lean(p.ids, p.positions, p.mask, p.cache, p.logit_rows, taken[0].capture)]
                else:
                    results = self.lean.batch([t.part for t in taken])
        except BaseException as exc:  # noqa: BLE001 - every caller of the pass gets the error
            for ticket in taken:
                ticket.error = exc
                ticket.done.set()
            return
        rows = sum(t.rows for t in taken)
        self._last_pass_s = time.perf_counter() - start
        self.passes += 1
        self.rows += rows
        self.last_rows, self.last_parts = rows, len(taken)
        self.most_rows, self.most_parts = max(self.most_rows, rows), max(self.most_parts, len(taken))
        for ticket, result in zip(taken, results, strict=True):
            seat = ticket.seat
            if seat is not None:
                seat.passes += 1
                seat.rows += rows
                seat.parts += len(taken)
                seat.others, seat.other_rows = len(taken) - 1, rows - ticket.rows
            ticket.result = result
            ticket.done.set()
