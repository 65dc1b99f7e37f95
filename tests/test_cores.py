"""Cores a workload may use (affinity, cgroup quota) and its runnable threads, on real processes
(the cgroup files are written to a folder of the test's own: this machine sets no CPU quota)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import WORKLOADS

from sofa_top.collectors.cores import (
    available_cores,
    cgroup_cpu_quota,
    recorded_cores,
    runnable_threads,
    workload_cores,
)


def _until(check: object, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_cores_follow_the_affinity_of_the_process() -> None:
    assert available_cores(os.getpid()) == len(os.sched_getaffinity(0))
    one = subprocess.Popen(
        ["taskset", "-c", "0", sys.executable, str(WORKLOADS / "sleeper.py"), "30"]
    )
    try:
        assert _until(lambda: len(os.sched_getaffinity(one.pid)) == 1)
        assert _until(lambda: available_cores(one.pid) == 1)
        # the one rule live (the hub) and in replay (what the hub stored) both read
        assert workload_cores(one.pid) == 1
        assert recorded_cores({"cpu_count": workload_cores(one.pid)}) == 1
    finally:
        one.kill()
        one.wait()


def test_cores_without_a_process_or_a_stored_count() -> None:
    assert workload_cores(0) == (os.cpu_count() or 1)
    assert recorded_cores({}) == 1
    assert recorded_cores({"cpu_count": None}) == 1
    assert recorded_cores({"cpu_count": 6}) == 6


def test_a_cgroup_cpu_quota_caps_the_cores(tmp_path: Path) -> None:
    # the same 1.5-CPU quota in both layouts: cgroup v2's cpu.max, v1's cfs files
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    for v1 in ("cpu", "cpu,cpuacct"):
        (tmp_path / v1).mkdir()
        (tmp_path / v1 / "cpu.cfs_quota_us").write_text("150000\n")
        (tmp_path / v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(os.getpid(), str(tmp_path)) == 1.5
    cores = len(os.sched_getaffinity(0))
    assert available_cores(os.getpid(), str(tmp_path)) == min(cores, 2)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    for v1 in ("cpu", "cpu,cpuacct"):
        (tmp_path / v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_quota(os.getpid(), str(tmp_path)) is None  # unlimited
    assert available_cores(os.getpid(), str(tmp_path)) == cores


def test_runnable_threads_of_a_busy_and_a_sleeping_process(busy_python: object) -> None:
    pid = busy_python.pid  # type: ignore[attr-defined]
    assert _until(lambda: (runnable_threads(pid) or 0) >= 1)
    sleeper = subprocess.Popen([sys.executable, str(WORKLOADS / "sleeper.py"), "30"])
    try:
        # a sleeping process has no thread that wants a core (read a few times: it may be
        # between two sleeps at one reading)
        assert _until(lambda: runnable_threads(sleeper.pid) == 0)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert runnable_threads(sleeper.pid) is None  # gone: nothing to count
