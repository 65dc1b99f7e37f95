"""A hostile target for the fault matrix: one script, one behaviour per ``--mode``.

Each mode keeps the main thread busy in a named function (so stacks have something to show)
for ``--seconds`` and prints ``READY`` once it is in its steady state, then ``DONE <result>``
when it finishes its work (the result lets a test check that sofa-top did not change it).
SIGUSR1 ends the current spin at once (``--seconds`` is then only an upper bound): a test says
when it has seen what it waits for instead of guessing how long that takes.

Modes:
  busy         a pure-Python loop in ``fault_spin``
  threads N    N extra Python threads blocked on an Event, the main thread in ``fault_spin``
  recurse N    ``fault_recurse`` N levels deep, spinning at the bottom
  fork N       forks N short-lived children one after another (each exits 0 after ~20 ms);
               DONE reports how many exited 0
  unicode      renames itself (comm) with non-UTF-8 bytes, runs a unicode-named function in a
               thread with a unicode name
  nodump       spins until SIGUSR1, then becomes non-dumpable (PR_SET_DUMPABLE 0; it prints
               NODUMP): ptrace is then denied to anyone without CAP_SYS_PTRACE,
               /proc/<pid>/stat stays readable
  future       a real CPython 3.11+ that advertises version 3.99.0 in ``Py_Version`` (the
               constant py-spy reads the version from): a stand-in for a Python newer than
               py-spy knows, since no such interpreter is installed here
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import signal
import sys
import threading
import time

PR_SET_NAME = 15
PR_SET_DUMPABLE = 4

_told = threading.Event()  # set by SIGUSR1: end the current spin


def fault_spin(seconds: float) -> int:
    """Burn CPU for ``seconds`` or until SIGUSR1; the number of rounds done (at least one)."""
    end = time.monotonic() + seconds
    rounds = 0
    while rounds == 0 or (time.monotonic() < end and not _told.is_set()):
        total = 0
        for i in range(5_000):
            total += i * i % 7
        rounds += 1
    _told.clear()
    return rounds


def fault_recurse(depth: int, seconds: float) -> int:
    """Recurse ``depth`` levels, then spin at the bottom."""
    if depth <= 1:
        return fault_spin(seconds)
    return fault_recurse(depth - 1, seconds)


def 计算_λ_ß(seconds: float) -> int:  # a unicode name on purpose
    """The unicode mode's hot function."""
    return fault_spin(seconds)


def _prctl(option: int, arg: int | bytes) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl failed")


def _advertise_python_3_99() -> None:
    """Rewrite this interpreter's ``Py_Version`` (read-only data) to 3.99.0 final."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    version = ctypes.c_ulong.in_dll(ctypes.pythonapi, "Py_Version")
    page = ctypes.addressof(version) & ~(mmap.PAGESIZE - 1)
    if libc.mprotect(page, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_WRITE) != 0:
        raise OSError(ctypes.get_errno(), "mprotect failed")
    version.value = 0x036300F0
    libc.mprotect(page, mmap.PAGESIZE, mmap.PROT_READ)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode")
    p.add_argument("n", nargs="?", type=float, default=0)
    p.add_argument("--seconds", type=float, default=30)
    a, _hostile = p.parse_known_args()  # extra (hostile) arguments are ignored
    sys.setrecursionlimit(10_000)
    signal.signal(signal.SIGUSR1, lambda *_: _told.set())
    result: object
    if a.mode == "busy":
        print("READY", flush=True)
        result = fault_spin(a.seconds) > 0
    elif a.mode == "threads":
        gate = threading.Event()
        threads = [
            threading.Thread(target=gate.wait, name=f"idle-{i}", daemon=True)
            for i in range(int(a.n))
        ]
        for t in threads:
            t.start()
        print("READY", flush=True)
        fault_spin(a.seconds)
        gate.set()
        for t in threads:
            t.join()
        result = len(threads)
    elif a.mode == "recurse":
        print("READY", flush=True)
        result = fault_recurse(int(a.n), a.seconds) > 0
    elif a.mode == "fork":
        print("READY", flush=True)
        ok = 0
        for _ in range(int(a.n)):
            pid = os.fork()
            if pid == 0:
                fault_spin(0.02)
                os._exit(0)
            _, status = os.waitpid(pid, 0)
            ok += os.waitstatus_to_exitcode(status) == 0
        result = ok
        fault_spin(a.seconds)
    elif a.mode == "unicode":
        _prctl(PR_SET_NAME, b"\xff\xfe-\xce\xbb-bad")
        worker = threading.Thread(target=计算_λ_ß, args=(a.seconds,), name="工作-线程-ß")
        worker.start()
        print("READY", flush=True)
        worker.join()
        result = True
    elif a.mode == "future":
        _advertise_python_3_99()
        print("READY", flush=True)
        result = fault_spin(a.seconds) > 0
    elif a.mode == "nodump":
        print("READY", flush=True)
        fault_spin(float("inf"))
        _prctl(PR_SET_DUMPABLE, 0)
        print("NODUMP", flush=True)
        result = fault_spin(a.seconds) > 0
    else:
        raise SystemExit(f"unknown mode {a.mode!r}")
    print(f"DONE {result}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
