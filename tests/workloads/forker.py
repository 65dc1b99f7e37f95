"""A parent that forks worker processes which burn CPU in ``child_spin`` while it waits.

Usage: ``python forker.py [SECONDS] [WORKERS]`` (or env ``SOFA_WORKLOAD_SECONDS``; default 30 s,
2 workers).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time


def duration() -> float:
    """Run time from argv[1], then $SOFA_WORKLOAD_SECONDS, else 30 s."""
    if len(sys.argv) > 1:
        return float(sys.argv[1])
    return float(os.environ.get("SOFA_WORKLOAD_SECONDS", "30"))


def child_spin(end: float) -> None:
    while time.time() < end:
        sum(i * i for i in range(5_000))


def main() -> None:
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    end = time.time() + duration()
    # fork keeps the start fast and the children visible to py-spy as plain children
    ctx = mp.get_context("fork")
    procs = [
        ctx.Process(target=child_spin, args=(end,), name=f"worker-{i}") for i in range(workers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()


if __name__ == "__main__":
    main()
