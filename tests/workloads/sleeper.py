"""A process that does nothing: its main thread sleeps, and one helper thread waits on an event.

Usage: ``python sleeper.py [SECONDS]`` (or env ``SOFA_WORKLOAD_SECONDS``; default 30).
"""

from __future__ import annotations

import os
import sys
import threading
import time


def duration() -> float:
    """Run time from argv[1], then $SOFA_WORKLOAD_SECONDS, else 30 s."""
    if len(sys.argv) > 1:
        return float(sys.argv[1])
    return float(os.environ.get("SOFA_WORKLOAD_SECONDS", "30"))


def nap_here(end: float) -> None:
    while time.monotonic() < end:
        time.sleep(0.2)


def main() -> None:
    done = threading.Event()
    helper = threading.Thread(target=done.wait, name="waiter", daemon=True)
    helper.start()
    nap_here(time.monotonic() + duration())
    done.set()


if __name__ == "__main__":
    main()
