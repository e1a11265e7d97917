"""The app's thread niced while a reply streams, only where it can be restored
(racer_tui/thread_priority.py). The OS calls are faked: no test renices itself."""

from __future__ import annotations

import asyncio
import resource

import pytest
from app_pilot import StartApp
from fake_engine import FakeEngine, failed_reply, ready_chat, wait_for

from racer_tui import thread_priority
from racer_tui.thread_priority import STREAMING_NICE, ThreadPriority, can_restore


class _Nice:
    """os.getpriority / os.setpriority for one thread, as the kernel answers
    a process without CAP_SYS_NICE whose RLIMIT_NICE reaches `floor`."""

    def __init__(self, nice: int = 0, floor: int = 0) -> None:
        self.nice, self.floor, self.calls = nice, floor, 0

    def getpriority(self, _which: int, _who: int) -> int:
        return self.nice

    def setpriority(self, _which: int, _who: int, value: int) -> None:
        self.calls += 1
        if value < self.nice and value < self.floor:  # lowering below what RLIMIT_NICE allows
            raise PermissionError(13, "Permission denied")
        self.nice = value


@pytest.fixture
def nice(monkeypatch) -> _Nice:
    fake = _Nice()
    monkeypatch.setattr(thread_priority.sys, "platform", "linux")
    monkeypatch.setattr(thread_priority.os, "getpriority", fake.getpriority)
    monkeypatch.setattr(thread_priority.os, "setpriority", fake.setpriority)
    monkeypatch.setattr(thread_priority, "can_restore", lambda was: was >= fake.floor)
    return fake


def test_lowered_and_restored_where_it_can_be(nice: _Nice) -> None:
    priority = ThreadPriority()
    assert priority.lower() and nice.nice == STREAMING_NICE and priority.lowered
    assert not priority.lower() and nice.nice == STREAMING_NICE  # once
    priority.restore()
    assert nice.nice == 0 and not priority.lowered
    priority.restore()  # nothing to restore: no call
    assert nice.calls == 2


def test_left_alone_where_it_could_not_be_restored(nice: _Nice) -> None:
    nice.floor = 20  # RLIMIT_NICE 0, no CAP_SYS_NICE: a user's usual lot
    priority = ThreadPriority()
    assert not priority.lower() and nice.nice == 0 and nice.calls == 0
    nice.floor, nice.nice = 5, 5  # started niced already, and allowed back to 5
    assert priority.lower() and nice.nice == 5 + STREAMING_NICE
    priority.restore()
    assert nice.nice == 5


def test_can_restore_reads_rlimit_nice_and_the_capability(monkeypatch) -> None:
    monkeypatch.setattr(thread_priority, "_has_cap_sys_nice", lambda: False)
    monkeypatch.setattr(resource, "getrlimit", lambda _r: (0, 0))
    assert not can_restore(0) and not can_restore(19)  # 20 - 0 = 20: not even 19
    monkeypatch.setattr(resource, "getrlimit", lambda _r: (20, 20))  # down to 0
    assert can_restore(0) and not can_restore(-1)
    monkeypatch.setattr(resource, "getrlimit", lambda _r: (resource.RLIM_INFINITY,) * 2)
    assert can_restore(-20)
    monkeypatch.setattr(resource, "getrlimit", lambda _r: (0, 0))
    monkeypatch.setattr(thread_priority, "_has_cap_sys_nice", lambda: True)
    assert can_restore(-20)


async def test_the_chat_nices_its_thread_while_a_reply_streams(start_app: StartApp, nice: _Nice) -> None:
    engine = FakeEngine(gate_after=3)
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    await pilot.press(*"hello", "enter")
    await wait_for(pilot, engine.paused.is_set)
    assert nice.nice == STREAMING_NICE  # while it streams
    engine.release()
    await wait_for(pilot, lambda: not chat.generating)
    assert nice.nice == 0  # and back once it ends


async def test_a_failed_reply_restores_it(start_app: StartApp, nice: _Nice) -> None:
    await failed_reply(start_app)
    assert nice.nice == 0 and nice.calls == 2


async def test_closing_the_app_mid_reply_restores_it(start_app: StartApp, nice: _Nice) -> None:
    engine = FakeEngine(gate_after=3)
    pilot = await start_app(engine)
    await ready_chat(pilot)
    await pilot.press(*"hello", "enter")
    await wait_for(pilot, engine.paused.is_set)
    assert nice.nice == STREAMING_NICE
    pilot.app.exit()
    for _ in range(500):
        if nice.nice == 0:
            break
        await asyncio.sleep(0.01)
    assert nice.nice == 0
