"""Measuring the cost curve while the chat is already usable.

On a busy machine a first start spent 23 s of its 42-44 measuring the curve,
and the next two starts measured again (the curve was marked busy). Now a chat
starts at once on the stored curve, or on a safe one where none is stored
(cost_curve.safe_curve: racer decodes as ar), and this thread measures once
the machine is quiet (the other processes leave the cores free,
budget/free_cores.py), or after a minute of waiting for that, and the
engine is idle (no reply running). A reply that
starts during the measurement interrupts it (the measurement checks between
its forward passes); it is tried again at the next quiet moment. The
measured curve then replaces the one in use (TreePolicy.use_curve: what the
policies learned of the acceptance stays).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from racer_core.budget.cost_curve import CostCurve
from racer_core.budget.free_cores import quiet_now

POLL_S = 2.0
"""How often the thread looks whether the machine and the engine are quiet."""
PATIENCE_POLLS = 30
"""After this many looks (a minute) without a quiet machine it measures while
the engine is idle anyway: a laptop that is never quiet would otherwise stay
on the safe curve (racer as ar) for good. Such a curve is marked busy and
measured again at later starts (cost_curve.py)."""


class Interrupted(Exception):
    """A reply started during the measurement: it is tried again later."""


class CurveInBackground:
    """One measurement (`measure`: measures, saves, returns the curve), run
    when `engine_idle()` and `machine_quiet()` both hold, its curve handed to `use`."""

    def __init__(self, measure: Callable[[], CostCurve], use: Callable[[CostCurve], None],
                 engine_idle: Callable[[], bool], machine_quiet: Callable[[], bool] | None = None,
                 wait: Callable[[float], None] = time.sleep, poll_s: float = POLL_S) -> None:
        self.measure, self.use, self.engine_idle = measure, use, engine_idle
        self.machine_quiet = machine_quiet if machine_quiet is not None else quiet_now()
        self.wait, self.poll_s = wait, poll_s
        self.looks = 0  # attempts that found the machine busy
        self.done = threading.Event()
        self.error: BaseException | None = None  # a measurement that failed otherwise: given up, the curve stays

    def attempt(self) -> bool:
        """Measure now if the machine and the engine are quiet; True once
        finished (the curve in use, or given up after an error)."""
        if not self.engine_idle():
            return False
        if not self.machine_quiet() and self.looks < PATIENCE_POLLS:
            self.looks += 1
            return False
        try:
            curve = self.measure()
        except Interrupted:
            return False
        except Exception as exc:  # noqa: BLE001 - e.g. a read-only cache: the chat keeps the curve it has
            self.error = exc
        else:
            self.use(curve)
        self.done.set()
        return True

    def run(self) -> None:
        while True:
            self.wait(self.poll_s)
            if self.attempt():
                return

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="racer-cost-curve", daemon=True)
        thread.start()
        return thread
