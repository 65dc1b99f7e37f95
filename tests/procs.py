"""Small helpers for tests that spawn real processes: start a workload, always kill and reap it."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psutil

from sofa_top.recording.reader import SessionReader

T = TypeVar("T")

WORKLOADS = Path(__file__).parent / "workloads"


@contextlib.contextmanager
def spawned(
    argv: list[str], ready: bytes | None = None, **kwargs: object
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``argv`` in its own process group; kill the whole group and reap it on exit.

    With ``ready``, its stdout is a pipe and this waits for the line that starts with it."""
    proc: subprocess.Popen[bytes] = subprocess.Popen(  # type: ignore[call-overload]
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL if ready is None else subprocess.PIPE,
        start_new_session=True,
        **kwargs,
    )
    try:
        if ready is not None:
            wait_ready(proc, ready)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


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


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    The way tests synchronise with real processes: on a condition (a ready line, a row in the
    session file, a state in /proc), never on a fixed sleep. ``timeout`` is an upper bound for a
    broken run, not an expected duration: make it generous (tens of seconds), since a loaded
    2-core machine is slow. On timeout the test fails saying what it waited for.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def read_line(proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    """The next line ``proc`` writes on its stdout pipe (b"" at EOF or after ``timeout``)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    line = b""
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return line
        chunk = os.read(fd, 1)
        if not chunk:
            return line
        line += chunk
    return line


def wait_ready(
    proc: subprocess.Popen[bytes], ready: bytes = b"READY", timeout: float = 90
) -> bytes:
    """Skip ``proc``'s stdout lines until one starts with ``ready``; return that line.

    Fails if ``proc`` exits or says nothing more for ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    seen: list[bytes] = []
    while True:
        line = read_line(proc, max(0.0, deadline - time.monotonic()))
        if line.startswith(ready):
            return line
        if not line.endswith(b"\n"):
            raise AssertionError(
                f"{proc.args!r} gave no {ready!r} line within {timeout:.0f} s "
                f"(exit code {proc.poll()}); it said: {b''.join(seen[-5:])!r}"
            )
        seen.append(line)


def runs_script(proc: psutil.Process, script: str) -> bool:
    """Whether ``proc`` is a Python running ``script`` (its argv[1] names it). Matching anywhere
    in the command line is wrong: a child that sofa-top forked but has not exec'd yet (py-spy,
    say) still shows sofa-top's command line, which names the workload after ``--``."""
    try:
        argv = proc.cmdline()
    except psutil.Error:
        return False
    return len(argv) > 1 and Path(argv[1]).name == script


def child_running(parent: int, script: str, timeout: float = 60) -> psutil.Process:
    """The one child of ``parent`` that runs ``script``, waiting for it to appear."""

    def found() -> list[psutil.Process]:
        try:
            kids = psutil.Process(parent).children()
        except psutil.Error:
            return []
        return [k for k in kids if runs_script(k, script)]

    (child,) = wait_for(found, timeout, f"a child of {parent} running {script}")
    return child


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


def read_now(path: Path, read: Callable[[SessionReader], T], missing: T) -> T:
    """``read`` of what another process can read from the session file now; ``missing`` while
    the file does not exist or is not yet initialised."""
    if not path.is_file():
        return missing
    try:
        reader = SessionReader(path)
    except Exception:  # created but not yet initialised
        return missing
    try:
        return read(reader)
    finally:
        reader.close()
