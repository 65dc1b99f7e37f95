"""What the attach tests share: py-spy's view of a target's threads, the job's own numbers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from procs import wait_for

PY_SPY = str(Path(sys.executable).with_name("py-spy"))
ATTACH_TARGET = Path(__file__).with_name("attach_target.py")
ATTACH_JOBS = Path(__file__).resolve().parents[1] / "workloads" / "attach_jobs.py"


def _dump(pid: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY_SPY, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60
    )


def _threads(dump: subprocess.CompletedProcess[str]) -> list[str] | None:
    if dump.returncode != 0:
        return None
    return [line for line in dump.stdout.splitlines() if "Thread" in line and "sofa-top" in line]


def sofa_threads(pid: int) -> list[str] | None:
    """The thread lines of ``py-spy dump --pid`` that name sofa-top (None: dump failed)."""
    return _threads(_dump(pid))


def wait_detached(pid: int, what: str, timeout: float = 90) -> None:
    """Until py-spy reads ``pid`` and lists no sofa-top thread; if it never does, fail with
    py-spy's last dump (a thread still there, or a dump that failed, and why)."""
    last: list[subprocess.CompletedProcess[str]] = []

    def gone() -> bool:
        last[:] = [_dump(pid)]
        return _threads(last[0]) == []

    try:
        wait_for(gone, timeout, what, interval=0.2)
    except AssertionError as e:
        dump = last[0]
        raise AssertionError(
            f"{e}; py-spy's last dump (exit code {dump.returncode}):\n"
            f"{dump.stdout[-3000:]}{dump.stderr[-2000:]}"
        ) from None


def value(output: str, key: str) -> str:
    """``KEY=value`` from a target's output."""
    m = re.search(rf"^{key}=(.*)$", output, re.MULTILINE)
    assert m, f"{key} missing from {output!r}"
    return m.group(1)
