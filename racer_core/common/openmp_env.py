"""How OpenMP's idle workers wait, set before torch loads.

A step of the lean forward runs a few hundred OpenMP parallel regions, and at
the end of each every worker waits for the slowest. GNU OpenMP's default
lets a waiting worker spin about 300,000 times (a few milliseconds) before it
sleeps; on a machine where another process wants a core, the spinning
workers keep the one they wait for off its CPU, and a step took 5-20 times
longer (docs/design.md 1.8.1). The thread count following the free cores
(budget/free_cores.py) does most of the cure; a third of the default spin
(GOMP_SPINCOUNT) kept the quiet machine's speed, where 10,000 spins cost it
about a tenth, and gives the core up sooner where the count cannot follow.

torch's libgomp and the one the project's extensions link read the variables
once, when loaded: racer_core's package init calls `set_wait_policy` before
anything imports torch. A value the user set (either variable) is kept.
"""

from __future__ import annotations

import os

SPIN_COUNT = "100000"
"""Spins before a waiting OpenMP worker sleeps (GNU OpenMP's default is 300000;
docs/performance.md has the idle and busy figures this was chosen from)."""
USER_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def set_wait_policy() -> bool:
    """Set GOMP_SPINCOUNT to SPIN_COUNT unless the user set a wait policy
    (OMP_WAIT_POLICY or GOMP_SPINCOUNT); True when it was set here. Takes
    effect only for an OpenMP runtime loaded after the call."""
    if any(name in os.environ for name in USER_VARIABLES):
        return False
    os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    return True
