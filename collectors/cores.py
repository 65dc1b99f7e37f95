"""Cores a process may use and its threads that want one (stdlib, Linux /proc and cgroups).

Busy cores are only ever shown "X of N cores" with X <= N, N from ``available_cores``: the
CPU affinity capped by a cgroup CPU quota (a container limited to 1.5 CPUs on a 16-core host
has 2 cores, not 16). ``workload_cores`` is the one rule for the cores a workload may use, live
(the hub's verdicts, its ranks') and in replay (``recorded_cores``, the count the hub stored).
``runnable_threads`` counts the threads in state ``R`` (running, or
waiting on a run queue): more of them than the cores the tree gets means thread pools wait
for cores, which spin-waiting OpenMP/BLAS pools pay for at every barrier.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Mapping

from sofa_top.collectors.sched import read_threads
from sofa_top.datamodel.units import Pid


def runnable_threads(pid: Pid) -> int | None:
    """Threads of ``pid`` running or waiting for a core right now (state ``R``); None when
    its tasks cannot be listed. A spinning OpenMP/BLAS worker is ``R`` even while it waits."""
    threads = read_threads(pid)
    return None if threads is None else sum(1 for t in threads if t.state == "R")


def workload_cores(pid: Pid) -> int:
    """The cores a workload may use, the one count every verdict is judged against:
    ``available_cores(pid)``, the machine's cores when no process is known (``pid`` <= 0)."""
    return available_cores(pid) if pid > 0 else os.cpu_count() or 1


def recorded_cores(meta: Mapping[str, object]) -> int:
    """The workload's cores as a session stored them (meta ``cpu_count``, written from
    ``workload_cores``); 1 when the session does not say."""
    value = meta.get("cpu_count")
    return max(1, int(value)) if isinstance(value, int | float) else 1


def available_cores(pid: Pid, root: str = "/sys/fs/cgroup") -> int:
    """The cores ``pid`` may use: its CPU affinity, capped by its cgroup's CPU quota
    (``cpu.max`` in cgroup v2, ``cpu.cfs_quota_us`` in v1, under ``root``), rounded up; at
    least 1."""
    try:
        cores = len(os.sched_getaffinity(pid))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota(pid, root)
    if quota is not None:
        cores = min(cores, math.ceil(quota - 1e-9))
    return max(1, cores)


def cgroup_cpu_quota(pid: Pid, root: str = "/sys/fs/cgroup") -> float | None:
    """The CPU quota of ``pid``'s cgroup (and its parents) in cores; None when unlimited or
    unreadable."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    limits: list[float] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _id, controllers, path = parts
        if controllers == "":  # cgroup v2: one unified hierarchy
            limits += _v2_limits(root, path)
        elif "cpu" in controllers.split(","):
            limits += _v1_limits(root, controllers, path)
    return min(limits) if limits else None


def _ancestors(base: str, path: str) -> list[str]:
    """``base/path`` and each parent up to ``base`` (in a container the path is often ``/``
    while the mount is the container's own cgroup: ``base`` itself is then read)."""
    parts = [p for p in path.split("/") if p and p != ".."]
    return [os.path.join(base, *parts[:i]) for i in range(len(parts), -1, -1)]


def _v2_limits(root: str, path: str) -> list[float]:
    out: list[float] = []
    for folder in _ancestors(root, path):
        try:
            with open(os.path.join(folder, "cpu.max"), encoding="ascii") as f:
                quota, period = [*f.read().split(), "", ""][:2]
        except (OSError, UnicodeDecodeError):
            continue
        with contextlib.suppress(ValueError, ZeroDivisionError):
            if quota != "max":
                out.append(int(quota) / int(period))
    return out


def _v1_limits(root: str, controllers: str, path: str) -> list[float]:
    out: list[float] = []
    for mount in (controllers, "cpu", "cpu,cpuacct"):
        for folder in _ancestors(os.path.join(root, mount), path):
            try:
                with open(os.path.join(folder, "cpu.cfs_quota_us"), encoding="ascii") as f:
                    quota = int(f.read().strip())
                with open(os.path.join(folder, "cpu.cfs_period_us"), encoding="ascii") as f:
                    period = int(f.read().strip())
            except (OSError, ValueError, UnicodeDecodeError):
                continue
            if quota > 0 and period > 0:
                out.append(quota / period)
        if out:
            break
    return out
