"""The scheduler's accounting of a tree's threads and the scan of the other processes, on real
processes (``collectors/sched.py``), and what the process collector makes of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import psutil
import pytest
from conftest import WORKLOADS
from procs import spawned, wait_for

from sofa_top.collectors.process import ProcessCollector
from sofa_top.collectors.sched import (
    NEIGHBOURS_EVERY_S,
    NeighbourScan,
    NeighbourWatch,
    TreeAccount,
)
from sofa_top.datamodel.samples import Neighbour, ThreadTimes, TreeSched


def _times(account: TreeAccount, pid: int, group: str, seconds: float = 1.5) -> ThreadTimes:
    """What ``group`` of ``pid``'s threads did over about ``seconds``."""
    account.read(pid, [pid], set(), time.monotonic())
    time.sleep(seconds)  # the span measured: any length will do, the fractions are per second
    sched, _runnable = account.read(pid, [pid], set(), time.monotonic())
    assert isinstance(sched, TreeSched) and sched.error is None, sched
    found = sched.group(group)  # type: ignore[arg-type]
    assert found is not None, sched
    return found


def test_a_spinning_thread_is_on_a_cpu_or_waiting_for_one(busy_python: Any) -> None:
    spin = _times(TreeAccount(), busy_python.pid, "loop")
    # runnable the whole time: on a CPU, or waiting for one on a machine others keep busy
    assert spin.on_cpu + spin.cpu_wait > 0.8, spin
    assert spin.threads == 1


def test_a_sleeping_thread_is_neither() -> None:
    with spawned([sys.executable, str(WORKLOADS / "sleeper.py"), "60"]) as p:
        # past the interpreter's start: its main() has started the helper thread
        sleeper = psutil.Process(p.pid)
        wait_for(lambda: sleeper.num_threads() == 2, 60, "the sleeper's helper thread")
        idle = _times(TreeAccount(), p.pid, "loop")
    assert idle.on_cpu + idle.cpu_wait < 0.05, idle


def test_the_first_reading_has_nothing_to_compare_and_a_gone_pid_is_skipped() -> None:
    account = TreeAccount()
    sched, runnable = account.read(os.getpid(), [], set(), time.monotonic())
    assert sched is None and runnable is not None and runnable >= 1
    # a process that exited between the listing and the reading is left out, not an error
    sched, _ = account.read(os.getpid(), [2**22 + 7], set(), time.monotonic() + 1)
    assert sched is not None and sched.group("tree") is not None


def test_the_scan_sees_a_hog_outside_the_tree(cpu_hog: subprocess.Popen[bytes]) -> None:
    scan = NeighbourScan()
    assert scan.scan({os.getpid()}, time.monotonic()) is None  # the first has no interval
    time.sleep(1.0)
    found = scan.scan({os.getpid()}, time.monotonic())
    assert found is not None
    others, top = found
    assert 0 < len(top) <= 3 and others >= top[0].cores > 0
    # the hog took CPU in that second (its share depends on what else runs here)
    assert scan.busy[cpu_hog.pid][1] > 0.05, scan.busy.get(cpu_hog.pid)
    assert os.getpid() not in scan.busy  # sofa-top itself is never a neighbour


def test_a_process_born_and_gone_between_two_scans_is_counted() -> None:
    """A short command (a compiler, a test runner's subprocess) that starts and exits between
    two scans is in no per-process listing, but held a core: the total counts it."""
    scan = NeighbourScan()
    t0 = time.monotonic()
    assert scan.scan({os.getpid()}, t0) is None
    burn = "import time\nwhile time.process_time() < 0.5: pass"  # 0.5 CPU seconds, then gone
    child = subprocess.Popen([sys.executable, "-c", burn])
    assert child.wait(timeout=120) == 0
    t1 = time.monotonic()
    found = scan.scan({os.getpid()}, t1)
    assert found is not None
    others, _ = found
    assert child.pid not in scan.busy
    assert others * (t1 - t0) >= 0.4, (others, t1 - t0)


def test_neighbour_names_are_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process can name itself anything (prctl PR_SET_NAME with bytes that are no UTF-8):
    the event the store writes carries valid text (a surrogate in it failed whole recordings)."""
    weird = Neighbour(4242, b"\xff\xfe-bad".decode("utf-8", "surrogateescape"), 1.0)
    monkeypatch.setattr(NeighbourScan, "scan", lambda self, tree, now: (1.2, (weird,)))
    watch = NeighbourWatch()
    event = watch.event({os.getpid()}, time.monotonic())
    assert event is not None and event.kind == "neighbours"
    json.dumps(event.data).encode("utf-8")
    event.message.encode("utf-8")
    assert event.data["top"] == [{"pid": 4242, "name": "\ufffd\ufffd-bad", "cores": 1.0}]
    assert event.data["others_cores"] == 1.2
    # unchanged: not said again within NEIGHBOURS_REPEAT_S; a change is said at once
    later = time.monotonic() + NEIGHBOURS_EVERY_S
    assert watch.event({os.getpid()}, later) is None
    monkeypatch.setattr(NeighbourScan, "scan", lambda self, tree, now: (0.2, ()))
    changed = watch.event({os.getpid()}, later + NEIGHBOURS_EVERY_S)
    assert changed is not None and changed.data == {"others_cores": 0.2, "top": []}


def test_the_collector_splits_the_tree_into_its_groups() -> None:
    """Over a live process tree: the target's main thread, its other threads, the whole tree."""
    with spawned([sys.executable, str(WORKLOADS / "busy_python.py"), "60"], ready=b"READY") as p:
        c = ProcessCollector(p.pid, 0.1)

        def reading() -> TreeSched | None:
            for s in c.tick():
                sched = getattr(s, "sched", None)
                if sched is not None:
                    return sched  # type: ignore[no-any-return]
            time.sleep(0.1)
            return None

        sched = wait_for(reading, 30, "a reading of the scheduler's accounting")
    loop, tree = sched.group("loop"), sched.group("tree")
    assert loop is not None and tree is not None and sched.span_s > 0
    assert tree.threads >= loop.threads == 1
    assert tree.on_cpu >= loop.on_cpu and loop.on_cpu + loop.cpu_wait > 0.5
