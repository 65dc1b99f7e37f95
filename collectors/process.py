"""Process-tree and system collector (psutil).

One thread samples the target and all its descendants every ``interval`` seconds and emits a
``ProcessSample`` plus a ``SystemSample``. It is built to stay cheap at 10 Hz:

* ``psutil.Process`` objects live across ticks: ``cpu_percent`` needs the previous reading, and
  re-creating them costs a /proc read each.
* each process is read inside ``oneshot()`` so /proc/<pid>/stat and status are parsed once.
* new children are found through /proc/<pid>/task/<tid>/children (O(size of the tree)) instead
  of ``Process.children()``, which reads /proc/<pid>/stat of every process on the machine.
* swap changes slowly and ``psutil.swap_memory`` also parses /proc/vmstat, so it is refreshed
  once a second.

Missing processes and permissions are data: an exited process is reported once with
``alive=False`` / ``state="exited"`` and dropped; unreadable counters are ``None`` with ``error``.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psutil

from sofa_top.agent.rankenv import parse_environ, rank_from_env
from sofa_top.collectors.base import Emit
from sofa_top.collectors.cores import available_cores
from sofa_top.collectors.discovery import is_python_process, proc_text
from sofa_top.collectors.sched import NeighbourWatch, TreeAccount
from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.ranks import RankId
from sofa_top.datamodel.samples import (
    Event,
    ProcessSample,
    ProcInfo,
    SystemSample,
    TreeSched,
)
from sofa_top.datamodel.units import Bytes, Percent, Pid, Seconds, Timestamp

EXIT_CODE_WAIT_S = 10.0  # how long to wait for a launched target's exit code once it looks gone
# Thread states are one /proc read per thread: counted twice a second, not at every tick (a
# 150-thread TensorFlow tree would cost ~1,500 reads a second at 10 Hz).
RUNNABLE_EVERY_S: Seconds = 0.5
CORES_EVERY_S: Seconds = 5.0  # affinity and cgroup quotas change rarely
_PF_KTHREAD = 0x00200000  # task flag in /proc/<pid>/stat that marks kernel threads
# A process this young (seconds) may not have exec'd yet when first seen: forked, it shows its
# parent's name and command line, and an exec of the same interpreter keeps the name. Its
# command line is re-read each tick until then (afterwards, a new name says it exec'd).
YOUNG_S = 2.0
_SWAP_REFRESH: Seconds = 1.0
RANK_RECHECK_S: Seconds = 3.0  # a process this young may not have exec'd its rank's environment

# Roles derived from what the process is, best effort (see _role_for).
ROLE_TARGET = "target"
ROLE_CHILD = "child"
ROLE_DATALOADER = "DataLoader worker"
ROLE_MP_WORKER = "mp worker"
ROLE_MP_FORKSERVER = "mp forkserver"
ROLE_MP_TRACKER = "mp resource tracker"
ROLE_RANK = "rank"  # a rank of a distributed job: "rank 2" (its workers keep their own roles)


@dataclass(frozen=True, slots=True)
class PidInfo:
    """What the CLI needs to know about a PID before attaching to it."""

    pid: Pid
    name: str
    cmdline: tuple[str, ...]
    exe: str
    username: str
    create_time: Timestamp
    is_python: bool | None  # None: could not tell (e.g. /proc/<pid>/maps unreadable)


@dataclass(slots=True)
class _Tracked:
    proc: psutil.Process
    pid: Pid
    ppid: Pid
    create_time: Timestamp
    name: str
    cmdline: tuple[str, ...]
    role: str
    primed: bool = False  # psutil's first cpu_percent(None) is a meaningless 0.0
    last_read: Bytes | None = None
    last_write: Bytes | None = None
    last_ctx: int | None = None
    children: set[Pid] = field(default_factory=set)
    rank: RankId | None = None  # from /proc/<pid>/environ (torchrun's RANK, TF_CONFIG)
    exit_code: int | None = None  # read from the zombie's /proc stat, when seen as one


def same_start(a: float, b: float) -> bool:
    """Whether two reads of a PID's start time (psutil's ``create_time``) are one process's.
    A start time is the process's ticks since boot (10 ms) plus the boot time, which
    /proc/stat gives in whole seconds and which moves when the clock is synced: two reads of
    one process can differ by a whole second; a reused PID's differ by its later start."""
    d = a - b
    return min(abs(d - k) for k in (-1.0, 0.0, 1.0)) <= 0.005


class ProcessCollector:
    """Samples a process tree (target + all descendants) and the machine's CPU/memory.

    ``popen`` is given when sofa-top launched the target; the exit code is then known.
    ``create_time`` (from ``describe_pid``) guards against the PID having been reused between
    validation and the first sample.
    """

    name = "process"

    def __init__(
        self,
        pid: Pid,
        interval: Seconds = 0.1,
        popen: subprocess.Popen[Any] | None = None,
        *,
        create_time: Timestamp | None = None,
    ) -> None:
        self.pid = pid
        self.interval = interval
        self.popen = popen
        self._expected_create_time = create_time
        self._tracked: dict[Pid, _Tracked] = {}
        # Exited/zombie PIDs we already reported: a zombie stays listed in its parent's
        # children file until reaped and must not be re-added.
        self._gone: dict[Pid, Timestamp] = {}
        self._started = False
        self._target_alive = True
        self._exit_code: int | None = None
        self._target_error: str | None = None
        self._exit_reported = False
        self._tree_pids: frozenset[Pid] = frozenset({pid})
        self._prev_cpu: list[Any] | None = None
        self._swap: tuple[Bytes, Bytes] = (0, 0)
        self._swap_ts = 0.0
        self._has_children_file: bool | None = None
        self.self_cpu_seconds: Seconds = 0.0  # CPU time spent in run() so far (its own thread)
        self._runnable_due = 0.0
        self._cores: int | None = None
        self._cores_due = 0.0
        self._account = TreeAccount()
        self._neighbours = NeighbourWatch()

    # ----------------------------------------------------------------- public API

    def tree_pids(self) -> set[Pid]:
        """PIDs of the live tree as of the last sample (thread-safe; used by the GPU collector)."""
        return set(self._tree_pids)

    def run(self, emit: Emit, stop: threading.Event) -> None:
        """Sample every ``interval`` seconds until ``stop`` is set."""
        cpu0 = time.thread_time()
        next_tick = time.monotonic()
        while not stop.is_set():
            for sample in self.tick():
                emit(sample)
            self.self_cpu_seconds = time.thread_time() - cpu0
            next_tick += self.interval
            delay = next_tick - time.monotonic()
            if delay < 0:  # fell behind (suspended, overloaded): don't burst to catch up
                next_tick = time.monotonic()
                delay = 0.0
            stop.wait(delay)

    def tick(self) -> list[ProcessSample | SystemSample | Event]:
        """Take one reading: a ProcessSample, a SystemSample (from the second call on, as CPU
        percentages need a previous reading) and an Event when the target has just exited."""
        out: list[ProcessSample | SystemSample | Event] = []
        try:
            out.append(self._sample_tree())
        except Exception as exc:  # a bug here must not kill the thread; show it instead
            out.append(self._error_sample(f"process sampling failed: {exc!r}"))
        if not self._target_alive and not self._exit_reported:
            self._exit_reported = True
            code = "" if self._exit_code is None else f" with code {self._exit_code}"
            out.append(
                Event(
                    ts=time.time(),
                    kind="target-exit",
                    message=f"target PID {self.pid} exited{code}",
                    data={"pid": self.pid, "exit_code": self._exit_code},
                )
            )
        try:
            system = self._sample_system()
        except Exception as exc:
            system = SystemSample(
                ts=time.time(),
                cpu_per_core=(),
                cpu_total=0.0,
                iowait=None,
                mem_used=0,
                mem_total=0,
                swap_used=0,
                swap_total=0,
                error=f"system sampling failed: {exc!r}",
            )
        if system is not None:
            out.append(system)
        if self._target_alive:
            neighbours = self._neighbours.event(self._tree_pids, time.monotonic())
            if neighbours is not None:
                out.append(neighbours)
        return out

    # ----------------------------------------------------------------- process tree

    def _start(self) -> None:
        self._started = True
        try:
            proc = psutil.Process(self.pid)
            ct = float(proc.create_time())
            if self._expected_create_time is not None and not same_start(
                ct, self._expected_create_time
            ):
                self._mark_target_gone(f"PID {self.pid} now belongs to another process")
                return
            self._tracked[self.pid] = self._new_tracked(proc, ct, parent=None)
        except psutil.NoSuchProcess:
            self._mark_target_gone(f"no such process: PID {self.pid}")
        except psutil.AccessDenied:
            self._mark_target_gone(f"permission denied reading PID {self.pid}")

    def _mark_target_gone(self, error: str | None = None) -> None:
        self._target_alive = False
        if error is not None and self._target_error is None:
            self._target_error = error

    def _sample_tree(self) -> ProcessSample:
        if not self._started:
            self._start()
        ts = time.time()
        if self.popen is not None and self._exit_code is None:
            # poll() also reaps the zombie, so psutil sees NoSuchProcess next.
            rc = self.popen.poll()
            if rc is not None:
                self._exit_code = rc
                self._mark_target_gone()

        infos: list[ProcInfo] = []
        for pid in list(self._tracked):
            infos.append(self._read(self._tracked[pid]))
        infos.extend(self._discover())

        live = [i for i in infos if i.alive]
        self._tree_pids = frozenset(i.pid for i in live)
        cpus = [i.cpu_percent for i in live if i.cpu_percent is not None]
        now = time.monotonic()
        runnable: int | None = None
        sched: TreeSched | None = None
        if live and now >= self._runnable_due:
            self._runnable_due = now + RUNNABLE_EVERY_S
            workers = {i.pid for i in live if i.role in (ROLE_DATALOADER, ROLE_MP_WORKER)}
            sched, runnable = self._account.read(self.pid, [i.pid for i in live], workers, now)
        if self._target_alive and now >= self._cores_due:
            self._cores_due = now + CORES_EVERY_S
            self._cores = available_cores(self.pid)
        return ProcessSample(
            ts=ts,
            target_pid=self.pid,
            target_alive=self._target_alive,
            procs=tuple(infos),
            tree_cpu_percent=sum(cpus) if cpus else None,
            tree_rss=_sum_or_none(i.rss for i in live),
            tree_read_bytes=_sum_or_none(i.read_bytes for i in live),
            tree_write_bytes=_sum_or_none(i.write_bytes for i in live),
            tree_threads=_sum_or_none(i.num_threads for i in live),
            exit_code=self._exit_code,
            error=self._target_error,
            tree_runnable=runnable,
            cores=self._cores,
            sched=sched,
        )

    def _error_sample(self, error: str) -> ProcessSample:
        return ProcessSample(
            ts=time.time(),
            target_pid=self.pid,
            target_alive=self._target_alive,
            procs=(),
            tree_cpu_percent=None,
            tree_rss=None,
            tree_read_bytes=None,
            tree_write_bytes=None,
            tree_threads=None,
            exit_code=self._exit_code,
            error=error,
        )

    def _new_tracked(
        self, proc: psutil.Process, ct: Timestamp, parent: _Tracked | None
    ) -> _Tracked:
        try:
            name = proc_text(proc.name())
            cmdline = tuple(proc_text(a) for a in proc.cmdline())
        except psutil.AccessDenied:
            name, cmdline = "?", ()
        pid = int(proc.pid)
        t = _Tracked(
            proc=proc,
            pid=pid,
            ppid=parent.pid if parent is not None else 0,
            create_time=ct,
            name=name,
            cmdline=cmdline,
            role=ROLE_TARGET,
        )
        if parent is not None:
            t.role = _role_for(name, cmdline, parent.role)
        self._name_rank(t, parent)
        return t

    def _name_rank(self, t: _Tracked, parent: _Tracked | None) -> None:
        """Read ``t``'s rank from its environment (and make it a rank's root when its parent
        is not that rank)."""
        t.rank = rank_of(t.pid)
        if t.rank is not None and parent is not None and _is_rank_root(t.rank, parent.rank):
            t.role = f"{ROLE_RANK} {t.rank.rank}"

    def _read(self, t: _Tracked) -> ProcInfo:
        """One process, one reading. Removes it from the tree when it has exited."""
        p = t.proc
        error: str | None = None
        try:
            with p.oneshot():
                status = str(p.status())
                if status == psutil.STATUS_ZOMBIE:
                    t.exit_code = zombie_exit_code(t.pid)
                    return self._exited(t)
                name = proc_text(p.name())
                cpu: float | None = float(p.cpu_percent(None))
                if not t.primed:
                    t.primed = True
                    cpu = None
                threads = int(p.num_threads())
                rss = int(p.memory_info().rss)
                ctx = p.num_ctx_switches()
                t.last_ctx = int(ctx.voluntary + ctx.involuntary)
                try:
                    io = p.io_counters()
                    t.last_read, t.last_write = int(io.read_bytes), int(io.write_bytes)
                except psutil.AccessDenied:
                    t.last_read = t.last_write = None
                    error = "I/O counters: permission denied"
                # ppid() verifies (pid, create_time) identity: it raises NoSuchProcess when the
                # PID now belongs to another process, so a reused PID never mixes in. Reading it
                # after the counters means a passing check also vouches for them.
                t.ppid = int(p.ppid())
        except psutil.NoSuchProcess:  # includes ZombieProcess
            return self._exited(t)
        except psutil.AccessDenied:
            return self._info(t, "unknown", error="permission denied")
        if t.rank is None and time.time() - t.create_time < RANK_RECHECK_S:
            # found between fork and exec, it still had its parent's environment (torchrun
            # starts ranks as `python`, from `python`: the name need not change on exec)
            self._name_rank(t, self._tracked.get(t.ppid))
        execed = name != t.name
        cmdline: tuple[str, ...] | None = None
        if not execed and time.time() - t.create_time < YOUNG_S:
            with contextlib.suppress(psutil.Error):
                cmdline = tuple(proc_text(a) for a in p.cmdline())
                execed = cmdline != t.cmdline
        if execed:
            # exec() happened (fork+exec, or a DataLoader worker renaming itself): re-derive.
            t.name = name
            if cmdline is None:
                with contextlib.suppress(psutil.Error):
                    cmdline = tuple(proc_text(a) for a in p.cmdline())
            t.cmdline = cmdline if cmdline is not None else t.cmdline
            if t.role != ROLE_TARGET and not t.role.startswith(ROLE_RANK):
                parent = self._tracked.get(t.ppid)
                t.role = _role_for(name, t.cmdline, parent.role if parent else ROLE_CHILD)
        return self._info(t, status, cpu=cpu, threads=threads, rss=rss, error=error)

    def _info(
        self,
        t: _Tracked,
        state: str,
        *,
        cpu: Percent | None = None,
        threads: int | None = None,
        rss: Bytes | None = None,
        alive: bool = True,
        error: str | None = None,
    ) -> ProcInfo:
        return ProcInfo(
            pid=t.pid,
            ppid=t.ppid,
            name=t.name,
            cmdline=t.cmdline,
            create_time=t.create_time,
            cpu_percent=cpu,
            num_threads=threads,
            rss=rss,
            read_bytes=t.last_read,
            write_bytes=t.last_write,
            ctx_switches=t.last_ctx,
            state=state,
            alive=alive,
            role=t.role,
            error=error,
            rank=t.rank,
            exit_code=None if alive else t.exit_code,
        )

    def _exited(self, t: _Tracked) -> ProcInfo:
        """Report a process once as exited (cumulative counters keep their last values)."""
        del self._tracked[t.pid]
        self._gone[t.pid] = t.create_time
        if t.role == ROLE_TARGET:
            self._mark_target_gone()
            if self.popen is not None and self._exit_code is None:
                # The main thread can be a zombie while other threads (TensorFlow's, say) still
                # wind down; the exit code exists only once the whole process is gone.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._exit_code = self.popen.wait(timeout=EXIT_CODE_WAIT_S)
        return self._info(t, "exited", alive=False)

    def _discover(self) -> list[ProcInfo]:
        """Find children of tracked processes that are not tracked yet (breadth first, so a
        whole existing tree is picked up in the first tick)."""
        found: list[ProcInfo] = []
        listed: set[Pid] = set()
        queue = list(self._tracked.values())
        while queue:
            parent = queue.pop()
            kids = self._children_of(parent.pid)
            listed.update(kids)
            for kid in kids:
                if kid in self._tracked or kid in self._gone:
                    continue
                try:
                    proc = psutil.Process(kid)
                    ct = float(proc.create_time())
                except psutil.Error:
                    continue
                t = self._new_tracked(proc, ct, parent)
                self._tracked[kid] = t
                found.append(self._read(t))
                if kid in self._tracked:
                    queue.append(t)
        # Forget reported PIDs once their parent no longer lists them (reaped), so a later
        # process that gets the same PID is picked up.
        for pid in [p for p in self._gone if p not in listed]:
            del self._gone[pid]
        return found

    def _children_of(self, pid: Pid) -> list[Pid]:
        if self._has_children_file is None:
            self._has_children_file = os.path.exists(
                f"/proc/{os.getpid()}/task/{os.getpid()}/children"
            )
        if not self._has_children_file:
            return _children_via_psutil(pid)
        kids: list[Pid] = []
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return kids
        # Each thread has its own children file: a fork from a non-main thread (e.g. a
        # subprocess started by a worker thread) is listed only under that thread.
        for tid in tids:
            try:
                fd = os.open(f"/proc/{pid}/task/{tid}/children", os.O_RDONLY)
            except OSError:
                continue
            try:
                data = os.read(fd, 65536)
            except OSError:
                continue
            finally:
                os.close(fd)
            kids.extend(int(x) for x in data.split())
        return kids

    # ----------------------------------------------------------------- system

    def _sample_system(self) -> SystemSample | None:
        ts = time.time()
        times = list(psutil.cpu_times(percpu=True))
        prev, self._prev_cpu = self._prev_cpu, times
        if prev is None or len(prev) != len(times):
            return None
        per_core: list[Percent] = []
        total_delta = 0.0
        iowait_delta = 0.0
        for a, b in zip(prev, times, strict=True):
            ta, tb = _cpu_total(a), _cpu_total(b)
            dt = tb - ta
            idle = _field(b, "idle") - _field(a, "idle")
            iow = _field(b, "iowait") - _field(a, "iowait")
            busy = dt - idle - iow
            per_core.append(_clamp_pct(busy / dt * 100.0) if dt > 0 else 0.0)
            total_delta += dt
            iowait_delta += iow
        iowait: Percent | None = None
        if hasattr(times[0], "iowait"):
            iowait = _clamp_pct(iowait_delta / total_delta * 100.0) if total_delta > 0 else 0.0
        vm = psutil.virtual_memory()
        now = time.monotonic()
        if now - self._swap_ts >= _SWAP_REFRESH:
            sw = psutil.swap_memory()
            self._swap = (int(sw.used), int(sw.total))
            self._swap_ts = now
        return SystemSample(
            ts=ts,
            cpu_per_core=tuple(per_core),
            cpu_total=sum(per_core) / len(per_core) if per_core else 0.0,
            iowait=iowait,
            # "available" accounts for reclaimable cache; psutil's "used" does not.
            mem_used=int(vm.total - vm.available),
            mem_total=int(vm.total),
            swap_used=self._swap[0],
            swap_total=self._swap[1],
        )


# --------------------------------------------------------------------- helpers


def _role_for(name: str, cmdline: tuple[str, ...], parent_role: str) -> str:
    """Best-effort label of a descendant from its name and command line."""
    # torch names its worker processes (torch/utils/data/_utils/worker.py).
    if name == "pt_data_worker":
        return ROLE_DATALOADER
    joined = " ".join(cmdline)
    if "multiprocessing.resource_tracker" in joined:
        return ROLE_MP_TRACKER
    if "multiprocessing.forkserver" in joined:
        return ROLE_MP_FORKSERVER
    if "multiprocessing.spawn" in joined or "--multiprocessing-fork" in cmdline:
        return ROLE_MP_WORKER
    if parent_role == ROLE_MP_FORKSERVER:
        return ROLE_MP_WORKER
    return ROLE_CHILD


def rank_of(pid: Pid) -> RankId | None:
    """The rank of a process from its environment (None: not a rank, or not readable: the
    environment of another user's process is not, and the agent's hello still names it)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    found = rank_from_env(parse_environ(raw), platform.node())
    return None if found is None else RankId.from_json(found)


def _is_rank_root(rank: RankId, parent: RankId | None) -> bool:
    # a DataLoader worker inherits its rank's environment: only the top of a rank is the rank
    return parent is None or (parent.rank, parent.node) != (rank.rank, rank.node)


def zombie_exit_code(pid: Pid) -> int | None:
    """The exit status of a zombie, from the last field of ``/proc/<pid>/stat`` (Linux 3.5+),
    as ``Popen.returncode`` has it (negative: killed by that signal); None if unreadable."""
    rest = _stat_fields(pid)
    if rest is None or len(rest) < 50:  # exit_code is field 52; these start at field 3
        return None
    try:
        status = int(rest[-1])
    except ValueError:
        return None
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else None


def _children_via_psutil(pid: Pid) -> list[Pid]:
    """Fallback where /proc/<pid>/task/<tid>/children does not exist (non-Linux, old kernels)."""
    try:
        return [int(c.pid) for c in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def _field(t: Any, name: str) -> float:
    return float(getattr(t, name, 0.0))


def _cpu_total(t: Any) -> float:
    # On Linux guest time is already included in user/nice (same correction as psutil).
    return float(sum(t)) - _field(t, "guest") - _field(t, "guest_nice")


def _clamp_pct(v: float) -> Percent:
    return min(100.0, max(0.0, v))


def _sum_or_none(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _stat_fields(pid: Pid) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the name (field 3 on); None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # comm may contain spaces and parentheses: fields start after the last ')'.
    return stat[stat.rfind(b")") + 2 :].split()


def _is_kernel_thread(pid: Pid) -> bool:
    rest = _stat_fields(pid)
    if rest is None:
        return False
    try:
        flags = int(rest[6])
    except (IndexError, ValueError):
        return False
    return bool(flags & _PF_KTHREAD)


def describe_pid(pid: Pid) -> PidInfo:
    """Validate a PID given on the command line; raises UserError with one clear line when
    sofa-top cannot attach to it (no such process, zombie, kernel thread, permission denied)."""
    if pid <= 0:
        raise UserError(f"invalid PID {pid}: must be a positive number")
    if pid == os.getpid():
        raise UserError(f"PID {pid} is sofa-top itself")
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            status = str(proc.status())
            name = proc_text(proc.name())
            username = proc_text(proc.username())
            create_time = float(proc.create_time())
    except psutil.NoSuchProcess:
        raise UserError(f"no such process: PID {pid}") from None
    except psutil.AccessDenied:
        raise UserError(
            f"permission denied reading PID {pid}: run sofa-top as its owner or with sudo"
        ) from None
    if status == psutil.STATUS_ZOMBIE:
        raise UserError(
            f"PID {pid} ({name}) is a zombie: it has exited and waits for its parent to reap it"
        )
    if _is_kernel_thread(pid):
        raise UserError(f"PID {pid} ({name}) is a kernel thread, not a user process")
    try:
        # Reading the exe link needs the same access as reading its memory, so this is where
        # another user's process shows up as denied.
        exe = proc_text(proc.exe())
        cmdline = tuple(proc_text(a) for a in proc.cmdline())
    except psutil.ZombieProcess:
        raise UserError(
            f"PID {pid} ({name}) is a zombie: it has exited and waits for its parent to reap it"
        ) from None
    except psutil.NoSuchProcess:
        raise UserError(f"no such process: PID {pid} (it just exited)") from None
    except psutil.AccessDenied:
        raise UserError(
            f"permission denied for PID {pid} ({name}, owned by {username}): "
            f"run sofa-top as {username} or with sudo"
        ) from None
    return PidInfo(
        pid=pid,
        name=name,
        cmdline=cmdline,
        exe=exe,
        username=username,
        create_time=create_time,
        is_python=is_python_process(pid),
    )
