"""The thread count follows the cores other processes leave free
(racer_core/budget/free_cores.py), read from scripted /proc figures and a
scripted clock; and the OpenMP wait policy is set before torch loads unless
the user set one (racer_core/common/openmp_env.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from racer_core.budget.free_cores import CpuTimes, ThreadChoice, others_use, threads_for
from racer_core.common import openmp_env

TICKS = 100  # one second of one CPU


class Machine:
    """Scripted /proc/stat and /proc/self/stat: `run` advances the clock with
    `others` cores busy in other processes and `own` in this one."""

    def __init__(self, cpus: int = 2) -> None:
        self.now = 0.0
        self.cpus = cpus
        self.times = CpuTimes(0.0, 0.0, 0.0, cpus)

    def run(self, seconds: float, others: float, own: float = 1.0) -> None:
        t = self.times
        self.times = CpuTimes(t.busy + (others + own) * seconds * TICKS, t.total + self.cpus * seconds * TICKS,
                              t.own + own * seconds * TICKS, self.cpus)
        self.now += seconds

    def choice(self, most: int = 2) -> ThreadChoice:
        return ThreadChoice(most, read=lambda: self.times, clock=lambda: self.now)


def test_others_use_leaves_this_process_out() -> None:
    machine = Machine()
    before = machine.times
    machine.run(1.0, others=0.5, own=1.5)
    assert others_use(before, machine.times) == pytest.approx(0.5)


def test_a_busy_core_takes_a_thread_and_a_quiet_machine_gives_it_back() -> None:
    machine = Machine()
    choice = machine.choice()
    assert choice.choose() == 2  # nothing read yet: all threads
    machine.run(0.6, others=1.0)
    assert choice.choose() == 1
    assert choice.others == pytest.approx(1.0)
    machine.run(0.6, others=0.0)
    assert choice.choose() == 2


def test_the_count_is_re_chosen_only_after_a_window() -> None:
    machine = Machine()
    choice = machine.choice()
    machine.run(0.6, others=1.0)
    assert choice.choose() == 1
    machine.run(0.1, others=0.0)
    assert choice.choose() == 1  # a tenth of a second of quiet does not count yet
    machine.run(0.5, others=0.0)
    assert choice.choose() == 2


def test_threads_for_the_free_cores() -> None:
    assert threads_for(2.0, 2) == 2
    assert threads_for(1.8, 2) == 2  # a little other work leaves the core free
    assert threads_for(1.5, 2) == 1
    assert threads_for(0.0, 2) == 1  # never fewer than one
    assert threads_for(8.0, 4) == 4  # never more than torch started with


def test_without_proc_the_count_stays() -> None:
    choice = ThreadChoice(2, read=lambda: None, clock=lambda: 10.0)
    assert choice.choose() == 2


def test_the_wait_policy_is_set_unless_the_user_set_one(monkeypatch) -> None:
    for name in openmp_env.USER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert openmp_env.set_wait_policy()
    assert os.environ["GOMP_SPINCOUNT"] == openmp_env.SPIN_COUNT
    for name, value in (("OMP_WAIT_POLICY", "ACTIVE"), ("GOMP_SPINCOUNT", "123")):
        for other in openmp_env.USER_VARIABLES:
            monkeypatch.delenv(other, raising=False)
        monkeypatch.setenv(name, value)
        assert not openmp_env.set_wait_policy()
        assert os.environ[name] == value
        assert "GOMP_SPINCOUNT" not in os.environ or name == "GOMP_SPINCOUNT"


def test_importing_racer_core_sets_the_policy_before_torch_loads() -> None:
    env = {k: v for k, v in os.environ.items() if k not in openmp_env.USER_VARIABLES}
    code = "import os, sys, racer_core; print(os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [openmp_env.SPIN_COUNT, "False"]
