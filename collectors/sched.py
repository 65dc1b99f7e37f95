"""What the tree's threads did, from the scheduler's own accounting (Linux /proc, stdlib).

``/proc/PID/task/TID/schedstat`` holds, per thread, the nanoseconds it ran on a CPU and the
nanoseconds it was runnable but waited on a run queue (``CONFIG_SCHED_INFO``, on in every
distribution kernel). Between two readings a thread was therefore on a CPU, waiting for one,
or else asleep or blocked (storage, the network, a lock, an empty queue): no model of the
machine is needed to tell a stage that computes from one that waits, or one that other
processes starve of CPU. ``/proc/PID/task/TID/stat`` adds the state at the reading (``R``
running or runnable, ``D`` uninterruptible: disk I/O, mostly).

``TreeAccount.read`` turns two readings into ``TreeSched``: per group of threads (the target's
main thread, its other threads, its input worker processes, all of them) the cores on a CPU
and the cores waiting for one.

``neighbours``: the processes outside the tree that keep the cores busy, from the CPU time of
every process on the machine between two scans (psutil).
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass

import psutil

from sofa_top.collectors.discovery import proc_text
from sofa_top.datamodel.samples import Event, Neighbour, ThreadGroup, ThreadTimes, TreeSched
from sofa_top.datamodel.units import Pid

# Who else keeps the cores busy: one /proc/PID/stat read per process on the machine (~5 ms for
# 300 processes), every few seconds; an event only when it changes (or to say it still holds)
NEIGHBOURS_EVERY_S = 3.0
NEIGHBOURS_CHANGE = 0.25  # cores: a neighbour or the total changed by this much
NEIGHBOURS_REPEAT_S = 30.0
NO_SCHEDSTAT = (
    "the kernel keeps no per-thread scheduler accounting (/proc/PID/task/TID/schedstat: "
    "CONFIG_SCHED_INFO off)"
)
TOP_NEIGHBOURS = 3


@dataclass(frozen=True, slots=True)
class ThreadStat:
    """One thread at one reading."""

    tid: int
    state: str  # one letter from /proc/.../stat: R, S, D, ...
    run_ns: int | None  # on a CPU so far (None: no schedstat)
    wait_ns: int | None  # runnable but waiting for a CPU so far


def _read(path: str, size: int) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_threads(pid: Pid) -> list[ThreadStat] | None:
    """Every thread of ``pid`` now (None: its tasks cannot be listed, e.g. it exited)."""
    task = f"/proc/{pid}/task"
    try:
        tids = os.listdir(task)
    except OSError:
        return None
    out: list[ThreadStat] = []
    for name in tids:
        stat = _read(f"{task}/{name}/stat", 1024)
        if stat is None:
            continue  # the thread exited meanwhile
        # comm may contain spaces and parentheses: the state follows the last ')'
        end = stat.rfind(b")")
        state = stat[end + 2 : end + 3].decode("ascii", "replace")
        run = wait = None
        sched = _read(f"{task}/{name}/schedstat", 128)
        if sched is not None:
            fields = sched.split()
            if len(fields) >= 2:
                run, wait = int(fields[0]), int(fields[1])
        out.append(ThreadStat(int(name), state, run, wait))
    return out


@dataclass
class _Sum:
    on_cpu_ns: int = 0
    wait_ns: int = 0
    threads: int = 0
    io_blocked: int = 0
    procs: int = 0

    def times(self, span_s: float) -> ThreadTimes:
        return ThreadTimes(
            on_cpu=self.on_cpu_ns / 1e9 / span_s,
            cpu_wait=self.wait_ns / 1e9 / span_s,
            threads=self.threads,
            io_blocked=self.io_blocked,
            procs=self.procs,
        )


class TreeAccount:
    """Keeps the last reading of every thread of the tree; each ``read`` says what the threads
    did since the previous one."""

    def __init__(self) -> None:
        self._last: dict[tuple[Pid, int], tuple[int, int]] = {}
        self._last_ts: float | None = None

    def read(
        self, target: Pid, procs: Iterable[Pid], workers: Collection[Pid], now: float
    ) -> tuple[TreeSched | None, int | None]:
        """(what the threads of ``target`` and ``procs`` did since the last call, by group;
        the threads running or runnable now). ``workers``: the input worker processes among
        ``procs``. The first call has nothing to compare with: its ``TreeSched`` is None."""
        sums: dict[ThreadGroup, _Sum] = {g: _Sum() for g in ("loop", "threads", "workers", "tree")}
        current: dict[tuple[Pid, int], tuple[int, int]] = {}
        runnable: int | None = None
        missing = False
        for pid in (target, *(p for p in procs if p != target)):
            threads = read_threads(pid)
            if threads is None:
                continue
            runnable = (runnable or 0) + sum(1 for t in threads if t.state == "R")
            groups: tuple[ThreadGroup, ...] = ("tree",)
            if pid in workers:
                groups = ("tree", "workers")
                sums["workers"].procs += 1
            for t in threads:
                mine = groups
                if pid == target:
                    mine = ("tree", "loop") if t.tid == pid else ("tree", "threads")
                if t.run_ns is None or t.wait_ns is None:
                    missing = True
                    continue
                key = (pid, t.tid)
                current[key] = (t.run_ns, t.wait_ns)
                # a thread seen for the first time started since the last reading (or this is
                # the first): all its time is this interval's
                run0, wait0 = self._last.get(key, (0, 0))
                for g in mine:
                    s = sums[g]
                    s.threads += 1
                    s.io_blocked += t.state == "D"
                    s.on_cpu_ns += max(0, t.run_ns - run0)
                    s.wait_ns += max(0, t.wait_ns - wait0)
        prev_ts, self._last_ts = self._last_ts, now
        first = not self._last
        self._last = current
        if missing and not current:
            return TreeSched(0.0, error=NO_SCHEDSTAT), runnable
        if prev_ts is None or first or now <= prev_ts:
            return None, runnable
        span = now - prev_ts
        groups_out = tuple((g, s.times(span)) for g, s in sums.items() if s.threads)
        return TreeSched(span, groups_out), runnable


class NeighbourScan:
    """The busiest processes outside a tree: CPU seconds per second between two scans of
    every process on the machine (one /proc/PID/stat read each).

    The total is the busy time of the CPUs the tree may use (``/proc/stat``) less the tree's
    and sofa-top's own: processes born and gone between two scans (a build's compilers, a
    test runner's short commands) never show in a per-process scan but held the cores all
    the same. A process born since the last scan counts its whole CPU time."""

    def __init__(self) -> None:
        self._last: dict[Pid, tuple[float, float]] = {}  # pid -> (CPU seconds, create time)
        self._last_ts: float | None = None
        self._last_wall = 0.0
        self._last_busy: dict[int, float] = {}  # CPU index -> busy seconds (/proc/stat)
        self._self = os.getpid()
        self.busy: dict[Pid, tuple[str, float]] = {}  # the last scan: pid -> (name, cores)

    def scan(self, tree: Collection[Pid], now: float) -> tuple[float, tuple[Neighbour, ...]] | None:
        """(cores busy outside ``tree`` and sofa-top, the ``TOP_NEIGHBOURS`` busiest of those
        processes) since the last scan; None on the first. Names are as psutil read them (the
        caller makes them text)."""
        current: dict[Pid, tuple[float, float]] = {}
        busy: list[tuple[float, Pid, str]] = []
        prev_ts, self._last_ts = self._last_ts, now
        prev_wall, self._last_wall = self._last_wall, time.time()
        span = None if prev_ts is None else now - prev_ts
        own = 0.0  # CPU seconds the tree and sofa-top took in the span
        cpus: set[int] = set()
        for p in psutil.process_iter(["name", "cpu_times", "create_time"]):
            info = p.info
            times = info.get("cpu_times")
            if times is None:
                continue
            cpu = float(times.user + times.system)
            ct = float(info.get("create_time") or 0.0)
            current[p.pid] = (cpu, ct)
            last = self._last.get(p.pid)
            if last is not None and last[1] == ct and cpu >= last[0]:
                took = cpu - last[0]
            else:
                took = cpu if prev_wall and ct >= prev_wall else 0.0
            if p.pid in tree or p.pid == self._self:
                own += took
                if p.pid in tree:
                    cpus.update(_affinity(p))
            elif span:
                busy.append((took / span, p.pid, str(info.get("name") or "?")))
        self._last = current
        total = _busy_cpu_seconds()
        prev_busy, self._last_busy = self._last_busy, total
        if not span or span <= 0:
            return None
        self.busy = {pid: (name, c) for c, pid, name in busy}
        busy.sort(reverse=True)
        top = tuple(Neighbour(pid, name, round(c, 3)) for c, pid, name in busy[:TOP_NEIGHBOURS])
        listed = sum(c for c, _, _ in busy)
        on = cpus or set(total)
        spent = sum(total[i] - prev_busy[i] for i in on if i in total and i in prev_busy)
        return max(listed, (spent - own) / span), top


def _affinity(p: psutil.Process) -> list[int]:
    try:
        return list(p.cpu_affinity())
    except (psutil.Error, AttributeError, OSError):  # gone, or a platform without affinity
        return []


def _busy_cpu_seconds() -> dict[int, float]:
    """Per CPU, the seconds it spent running anything (user, nice and system time)."""
    return {i: t.user + t.nice + t.system for i, t in enumerate(psutil.cpu_times(percpu=True))}


class NeighbourWatch:
    """The ``neighbours`` events of a tree: a scan every ``NEIGHBOURS_EVERY_S``, an event when
    the busiest processes or their load changed."""

    def __init__(self) -> None:
        self.scan = NeighbourScan()
        self._due = 0.0
        self._sent: tuple[float, float, tuple[Neighbour, ...]] | None = None

    def event(self, tree: Collection[Pid], now: float) -> Event | None:
        """The event to emit now, if any (a scan that fails is retried much later)."""
        if now < self._due:
            return None
        self._due = now + NEIGHBOURS_EVERY_S
        try:
            found = self.scan.scan(tree, now)
        except Exception as exc:  # psutil on a machine it cannot scan: no neighbours known
            self._due = now + NEIGHBOURS_REPEAT_S
            return Event(time.time(), "collector-failed", f"neighbour scan: {exc!r}")
        if found is None:
            return None
        others, raw = found
        top = tuple(Neighbour(n.pid, proc_text(n.name), n.cores) for n in raw)
        if self._sent is not None and now - self._sent[0] < NEIGHBOURS_REPEAT_S:
            old = {n.pid: n.cores for n in self._sent[2]}
            same = [n.pid for n in top] == list(old) and all(
                abs(n.cores - old[n.pid]) < NEIGHBOURS_CHANGE for n in top
            )
            if same and abs(others - self._sent[1]) < NEIGHBOURS_CHANGE:
                return None
        self._sent = (now, others, top)
        names = ", ".join(f"{n.name} ({n.pid}) {n.cores:.1f}" for n in top) or "none"
        return Event(
            time.time(),
            "neighbours",
            f"other processes keep {others:.1f} cores busy; busiest: {names}",
            {
                "others_cores": round(others, 3),
                "top": [{"pid": n.pid, "name": n.name, "cores": n.cores} for n in top],
            },
        )
