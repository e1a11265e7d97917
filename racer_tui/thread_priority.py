"""The app's own thread at a lower CPU priority while a reply streams (Linux).

On a 2-core CPU the model's step runs two OpenMP threads; whenever the app's
thread (redraws, key presses) takes a core, one of them waits and the whole
step waits for it at the barrier. Niced while a reply streams, the app's
thread runs mostly in the gaps the model leaves (docs/design.md, "A
streaming reply's redraws"); it still gets a share of a core, so keys are
still handled.

Raising a thread's nice value is always allowed, but lowering it back needs
CAP_SYS_NICE or an RLIMIT_NICE that reaches the old value, which most users
lack: the thread would stay niced for good, and the app idle beside a busy
machine would be slow to answer. So the thread is niced only where the old
value can be restored.
"""

from __future__ import annotations

import os
import sys
import threading

STREAMING_NICE = 10
"""How much nicer the app's thread runs while a reply streams."""
CAP_SYS_NICE = 23  # the capability's bit in /proc/self/status CapEff


def _has_cap_sys_nice() -> bool:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_SYS_NICE & 1)
    except (OSError, ValueError):
        pass
    return False


def can_restore(nice: int) -> bool:
    """Whether this process may lower a thread's nice value back to `nice`:
    with CAP_SYS_NICE, or down to 20 - RLIMIT_NICE (its soft limit) without."""
    import resource  # Unix only; this runs only on Linux

    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    return soft == resource.RLIM_INFINITY or 20 - soft <= nice or _has_cap_sys_nice()


class ThreadPriority:
    """Lowers the calling thread's priority and restores it (the app's
    thread: call both from it)."""

    def __init__(self, step: int = STREAMING_NICE) -> None:
        self.step = step
        self._was: int | None = None  # the thread's nice value while lowered

    @property
    def lowered(self) -> bool:
        return self._was is not None

    def lower(self) -> bool:
        """Nice the thread by `step`, where that can be undone (Linux only);
        True when it was."""
        if self._was is not None or self.step <= 0 or not sys.platform.startswith("linux"):
            return False
        thread = threading.get_native_id()
        try:
            was = os.getpriority(os.PRIO_PROCESS, thread)
            if was >= 19 or not can_restore(was):
                return False
            os.setpriority(os.PRIO_PROCESS, thread, min(19, was + self.step))
        except OSError:
            return False
        self._was = was
        return True

    def restore(self) -> None:
        """Back to the nice value before `lower` (nothing if it did nothing)."""
        if self._was is None:
            return
        was, self._was = self._was, None
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), was)
        except OSError:
            pass  # can_restore said it could; if not, the thread stays niced (still works)
