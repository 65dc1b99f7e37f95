"""A pure-Python CPU loop: the main thread spends nearly all its time in ``spin_here``.

Usage: ``python busy_python.py [SECONDS]`` (or env ``SOFA_WORKLOAD_SECONDS``; default 30).
Prints ``READY`` once it is in the loop.
"""

from __future__ import annotations

import os
import sys
import time


def duration() -> float:
    """Run time from argv[1], then $SOFA_WORKLOAD_SECONDS, else 30 s."""
    if len(sys.argv) > 1:
        return float(sys.argv[1])
    return float(os.environ.get("SOFA_WORKLOAD_SECONDS", "30"))


def spin_here(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def main() -> None:
    end = time.monotonic() + duration()
    spin_here(1)
    print("READY", flush=True)
    while time.monotonic() < end:
        spin_here(20_000)


if __name__ == "__main__":
    main()
