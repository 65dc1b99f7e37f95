"""What the attach tests share: py-spy's view of a target's threads, the job's own numbers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PY_SPY = str(Path(sys.executable).with_name("py-spy"))
ATTACH_TARGET = Path(__file__).with_name("attach_target.py")
ATTACH_JOBS = Path(__file__).resolve().parents[1] / "workloads" / "attach_jobs.py"


def sofa_threads(pid: int) -> list[str] | None:
    """The thread lines of ``py-spy dump --pid`` that name sofa-top (None: dump failed)."""
    proc = subprocess.run(
        [PY_SPY, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60
    )
    if proc.returncode != 0:
        return None
    return [line for line in proc.stdout.splitlines() if "Thread" in line and "sofa-top" in line]


def detached(pid: int) -> bool:
    """py-spy reads the target and lists no sofa-top thread."""
    return sofa_threads(pid) == []


def value(output: str, key: str) -> str:
    """``KEY=value`` from a target's output."""
    m = re.search(rf"^{key}=(.*)$", output, re.MULTILINE)
    assert m, f"{key} missing from {output!r}"
    return m.group(1)
