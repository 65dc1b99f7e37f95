"""What this machine offers an optimizer run: usable cores, RAM, a process tree's memory."""

from __future__ import annotations

import contextlib
import os


def affinity() -> list[int]:
    """The CPU numbers this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def usable_cores() -> int:
    """The cores this process may run on (its affinity), which the workload inherits."""
    return len(affinity())


def ram_total() -> int | None:
    """The machine's RAM in bytes (None when psutil cannot say)."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:
        return None


def tree_memory(pid: int) -> int | None:
    """Proportional set size (PSS) of ``pid`` and its descendants, in bytes.

    PSS, not RSS: forked DataLoader workers share most of their pages with the parent, and a
    sum of RSS counts those once per worker (16 workers: ~13x the baseline's RSS for ~1.3x the
    memory actually used). Falls back to RSS where PSS cannot be read."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0
    for p in procs:
        try:
            info = p.memory_full_info()
            total += int(getattr(info, "pss", 0) or info.rss)
        except psutil.AccessDenied:
            with contextlib.suppress(psutil.Error):
                total += int(p.memory_info().rss)
        except psutil.Error:
            pass  # exited meanwhile
    return total or None
