"""Small helpers for tests that spawn real processes: start a workload, always kill and reap it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

WORKLOADS = Path(__file__).parent / "workloads"


@contextlib.contextmanager
def spawned(argv: list[str], **kwargs: object) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``argv`` in its own process group; kill the whole group and reap it on exit."""
    proc: subprocess.Popen[bytes] = subprocess.Popen(  # type: ignore[call-overload]
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
        **kwargs,
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.kill()
        proc.wait(timeout=10)


def workload(name: str, seconds: float = 60, *extra: str) -> list[str]:
    """The argv that runs ``tests/workloads/<name>.py`` for ``seconds``."""
    return [sys.executable, str(WORKLOADS / f"{name}.py"), str(seconds), *extra]


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def children_named(parent: int, fragment: str) -> list[int]:
    """Pids of live processes whose parent is ``parent`` and whose command line has ``fragment``."""
    out: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if fields[0] != "Z" and int(fields[1]) == parent and fragment in cmdline:
            out.append(int(entry))
    return out
