"""The calling thread's time on a CPU and waiting for one, as the scheduler accounts it (stdlib
only): the agent reads it around each input fetch, so that the wait splits into the loop
thread's own work, its wait for a CPU, and the rest (asleep or blocked)."""

from __future__ import annotations

import contextlib
import os
import threading
import time


class _SchedFile:
    """One thread's ``schedstat``, kept open: a ``pread`` re-reads it (~1 us, no open/close)."""

    __slots__ = ("fd",)

    def __init__(self) -> None:
        self.fd = -1
        try:
            self.fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            try:  # Linux before 3.17 has no /proc/thread-self
                self.fd = os.open(
                    f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY
                )
            except (OSError, AttributeError):
                self.fd = -1

    def __del__(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)


_sched_files = threading.local()
NO_SCHED = (-1, -1)


def thread_sched() -> tuple[int, int]:
    """The calling thread's time on a CPU and runnable but waiting for one so far (ns);
    ``NO_SCHED`` where the scheduler does not account the wait (no /proc, no schedstat).

    The time on a CPU is the thread's CPU clock: schedstat's running total of a thread that is
    running is only brought up to date at a tick or a switch, so a 2 ms fetch that ran through
    neither read as 0 on a CPU (blocked). The wait for a CPU is schedstat's: it is added when
    the thread gets its CPU back, so a running thread's total is whole."""
    f = getattr(_sched_files, "file", None)
    if f is None:
        f = _sched_files.file = _SchedFile()  # closed with the thread's locals
    if f.fd < 0:
        return NO_SCHED
    try:
        queue = int(os.pread(f.fd, 96, 0).split()[1])
        return time.thread_time_ns(), queue
    except (OSError, ValueError):
        f.fd = -1
        return NO_SCHED


def wait_times(cpu: float, s0: tuple[int, int], s1: tuple[int, int]) -> tuple[float, ...]:
    """A step record's wait CPU: the process's CPU seconds during the fetch, then the loop
    thread's own seconds on a CPU and waiting for one (< 0: unknown)."""
    if s0[0] < 0 or s1[0] < 0:
        return (cpu, -1.0, -1.0)
    return (cpu, max(0, s1[0] - s0[0]) / 1e9, max(0, s1[1] - s0[1]) / 1e9)


def add_waits(a: float | tuple[float, ...], b: float | tuple[float, ...]) -> tuple[float, ...]:
    """Two fetches' ``wait_times`` (or plain CPU seconds) summed field by field (< 0 where
    either is unknown): a resumed iterator's first fetch and the one that closes its step."""
    ta = a if isinstance(a, tuple) else (a, -1.0, -1.0)
    tb = b if isinstance(b, tuple) else (b, -1.0, -1.0)
    return tuple(ta[i] + tb[i] if ta[i] >= 0 and tb[i] >= 0 else -1.0 for i in range(len(ta)))
