"""Python stacks of the target (and its children) sampled by py-spy, one window at a time.

py-spy cannot stream, so the collector runs ``py-spy record --format raw`` for consecutive short
windows and emits one :class:`~sofa_top.datamodel.samples.StackWindow` per window. It always passes
``--nonblocking`` (blocking mode stops every thread at each sample, which stalls a torch process
with 150 threads) and ``--idle`` (see :mod:`sofa_top.analysis.classify` for why, and how idle
is then detected from per-thread runnable time). Beside a window where a thread was in
``python``, a second, cheap ``py-spy record --gil`` run tells which thread held the GIL, so
native code that user code called counts as compute (``sofa_top.collectors.gil``).

CPU budget. py-spy's cost per window is a fixed start-up (attach, symbol lookup: about 15 ms,
more with many Python threads whose names it reads) plus a cost per sample that grows with the
number of threads, because py-spy reads every OS thread's /proc state at each sample (measured:
0.2 ms for one thread, 3-5 ms for 150-300 native threads, 10-15 ms for 150 Python threads). At
100 Hz that is 4 % of a core on a pure-Python loop but 70-80 % on a torch process with 150
threads. So the collector measures py-spy's CPU time for every window (rusage of the reaped
child), fits ``cpu = startup + per_sample * samples`` over recent windows, and plans the next
window's rate and length (whole seconds, from ``window_s`` up to
``stack_rate.MAX_WINDOW_S``: start-up is paid per window, so a costly target gets longer
windows) so that py-spy stays within ``cpu_budget`` of one core.

The default budget, 2 % of one core, is what the slowdown goals allow: a torch loop whose
intra-op threads fill every core loses about ``budget / cores`` to the sampler (1 % on two
cores), and a single-threaded loop with a spare core loses nothing measurable. At that budget a
pure-Python loop is sampled at ~75 Hz in 2 s windows, a torch CPU loop at ~45 Hz, and a torch
process with 150 threads at 1-6 Hz in 5 s windows. The collector's own thread adds 0.3-0.7 % of
a core (reading /proc, parsing). ``--subprocesses`` is passed only while the target has children:
its child scan (every 100 ms, over all of /proc) costs about 1.5 % of a core whatever the rate, so
it is estimated and kept out of the budget (the budget buys samples; the scan comes on top).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from sofa_top.analysis.classify import (
    classify_stack,
    in_model_call,
    reconcile_activity,
    reconcile_gil,
)
from sofa_top.analysis.sources import ABSOLUTE_ONLY, Lines, SourceReader, workload_dirs
from sofa_top.collectors import children
from sofa_top.collectors.base import Emit
from sofa_top.collectors.gil import GilPlanner, GilRun, GilShares, suspects
from sofa_top.collectors.pyspy_raw import RawStack, parse_raw
from sofa_top.collectors.stack_rate import MIN_RATE_HZ, RateController
from sofa_top.datamodel.samples import StackCount, StackWindow
from sofa_top.datamodel.units import Pid

DEFAULT_CPU_BUDGET = 0.02  # py-spy's share of one core (see the module docstring)
GIL_BUDGET_SHARE = 0.5  # the GIL sampler's budget, a share of py-spy's, spent on top of it
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 10.0)  # retry delays after an error that will not fix itself
POLL_S = 0.1  # how often a running window checks ``stop`` (py-spy's exit wakes it at once)
SCAN_S_PER_PROCESS = 0.00015  # py-spy --subprocesses: CPU s per second per process in /proc
TREE_REFRESH_S = 5.0  # a full /proc scan for children costs ~3 ms: not every window
HUNG_GRACE_S = 20.0  # py-spy past its duration by this much is killed

PTRACE_SCOPE = Path("/proc/sys/kernel/yama/ptrace_scope")


def find_pyspy() -> str | None:
    """The py-spy executable: next to ``sys.executable`` (the venv's bin) first, then ``PATH``."""
    exe_dir = Path(sys.executable).parent
    for name in ("py-spy", "py-spy.exe"):
        candidate = exe_dir / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("py-spy")


# ---------------------------------------------------------------------------------------------
# Errors


@dataclass(frozen=True, slots=True)
class PySpyProblem:
    """Why a py-spy run produced no stacks."""

    kind: str  # "permission" | "not-python" | "unsupported" | "exited" | "missing" | "other"
    error: str
    hint: str | None = None

    @property
    def persistent(self) -> bool:
        """True when retrying soon will not help (back off instead of respawning every window)."""
        return self.kind in ("permission", "not-python", "unsupported", "missing")


_PERMISSION_RE = re.compile(
    r"permission denied|operation not permitted|os error 1\)|os error 13\)|EPERM|EACCES", re.I
)
_NOT_PYTHON_RE = re.compile(
    r"no python processes found|failed to find python version|python interpreter|"
    r"failed to get python version|couldn't find python",
    re.I,
)
_UNSUPPORTED_RE = re.compile(
    r"unsupported (?:version of python|python version)\W*(?P<version>[0-9][\w.+-]*)?", re.I
)
_EXITED_RE = re.compile(
    r"check if it is running|check that the process is running|no such process|os error 3\)", re.I
)


def ptrace_hint() -> str:
    """How to let py-spy read another process's memory."""
    scope = ""
    with contextlib.suppress(OSError):
        scope = f" (now {PTRACE_SCOPE.read_text().strip()})"
    return (
        "run sofa-top as root (sudo), or allow ptrace for your user: "
        f"sudo sysctl kernel.yama.ptrace_scope=0{scope}, see {PTRACE_SCOPE}; "
        "in a container, start it with --cap-add SYS_PTRACE"
    )


def _error_lines(log: str) -> str:
    """py-spy's own error text, without progress lines and backtraces."""
    keep: list[str] = []
    for raw in log.splitlines():
        line = raw.strip()
        if not line or line.startswith(("py-spy>", "Stack backtrace", "Sampling process")):
            continue
        if re.match(r"\d+: ", line) or line.startswith("at "):
            continue
        keep.append(line)
    return " ".join(keep)[:300]


def diagnose(log: str, pid: Pid) -> PySpyProblem:
    """Map py-spy's output on failure to an error (and a hint when there is a fix)."""
    text = _error_lines(log)
    if _PERMISSION_RE.search(log):
        return PySpyProblem(
            "permission",
            f"ptrace denied: py-spy may not read the memory of pid {pid} ({text})",
            ptrace_hint(),
        )
    m = _UNSUPPORTED_RE.search(log)
    if m:
        version = m.group("version")
        return PySpyProblem(
            "unsupported",
            f"py-spy does not support Python {version}"
            if version
            else "py-spy does not support this version of Python",
            "upgrade py-spy (pip install -U py-spy) to one that knows this Python",
        )
    if _NOT_PYTHON_RE.search(log):
        return PySpyProblem("not-python", f"not a Python process: pid {pid} ({text})")
    if _EXITED_RE.search(log):
        return PySpyProblem("exited", "target exited")
    return PySpyProblem("other", f"py-spy failed: {text or 'no output'}")


# ---------------------------------------------------------------------------------------------
# Processes


def _tree(pid: Pid, children: bool) -> list[Pid]:
    """``pid`` and, when asked, its live descendants."""
    pids = [pid]
    if children:
        with contextlib.suppress(psutil.Error):
            pids.extend(
                c.pid
                for c in psutil.Process(pid).children(recursive=True)
                if c.status() != psutil.STATUS_ZOMBIE
            )
    return pids


def _schedstat_seconds(pid: Pid) -> dict[tuple[Pid, int], float] | None:
    task_dir = f"/proc/{pid}/task"
    try:
        tids = [int(name) for name in os.listdir(task_dir)]
    except (OSError, ValueError):
        return None
    out: dict[tuple[Pid, int], float] = {}
    for tid in tids:
        try:
            fd = os.open(f"{task_dir}/{tid}/schedstat", os.O_RDONLY)
        except OSError:
            continue  # the thread ended between listdir and open
        try:
            fields = os.read(fd, 128).split()
        except OSError:
            continue
        finally:
            os.close(fd)
        if len(fields) < 2:
            return None
        out[(pid, tid)] = (int(fields[0]) + int(fields[1])) / 1e9
    return out


def read_thread_activity(pids: Iterable[Pid]) -> dict[tuple[Pid, int], float]:
    """Seconds each thread of ``pids`` has been runnable so far (on a CPU or waiting for one).

    From ``/proc/PID/task/TID/schedstat`` (run time + run-queue wait): unlike CPU time, a busy
    thread starved of CPU by other processes still counts as active, as py-spy's own idle flag
    would. Falls back to CPU time (psutil) where schedstat is missing.
    """
    out: dict[tuple[Pid, int], float] = {}
    for pid in pids:
        sched = _schedstat_seconds(pid)
        if sched is not None:
            out.update(sched)
            continue
        try:
            for t in psutil.Process(pid).threads():
                out[(pid, t.id)] = t.user_time + t.system_time
        except psutil.Error:
            continue
    return out


class _Target:
    """The target process, robust to pid reuse."""

    def __init__(self, pid: Pid) -> None:
        self.pid = pid
        self.create_time: float | None = None
        with contextlib.suppress(psutil.Error):
            self.create_time = psutil.Process(pid).create_time()

    def alive(self) -> bool:
        try:
            p = psutil.Process(self.pid)
            if self.create_time is not None and p.create_time() != self.create_time:
                return False
            return p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False


# ---------------------------------------------------------------------------------------------
# Windows


def build_stacks(
    raw: Sequence[RawStack],
    default_pid: Pid,
    active_before: dict[tuple[Pid, int], float] | None = None,
    active_after: dict[tuple[Pid, int], float] | None = None,
    wall_s: float = 0.0,
    gil: GilShares | None = None,
    model_threads: set[tuple[Pid, int]] | None = None,
    sources: Lines = ABSOLUTE_ONLY,
) -> tuple[tuple[StackCount, ...], int]:
    """Classify parsed py-spy stacks into counts; return them and the window's sampling instants.

    A thread that calls a model (some stacks inside a model call, in this window or an earlier
    one: ``model_threads``, which this adds to) is classified in its model-call context
    (:func:`sofa_top.analysis.classify.classify_stack`). With per-thread activity readings
    (:func:`read_thread_activity`) around the window, each thread's ``python`` samples beyond
    its active share become ``idle`` (:func:`sofa_top.analysis.classify.reconcile_activity`);
    with the window's GIL readings, those beyond its GIL-holding share become ``compute``
    (``reconcile_gil``), or ``input`` outside the model's call in its context, unless the
    workload's line (``sources``) samples from the model's output or copies it out.
    """
    per_thread: dict[tuple[Pid, int], list[RawStack]] = {}
    for r in raw:
        if r.count <= 0:
            continue
        pid = r.pid if r.pid is not None else default_pid
        tid = r.tid if r.tid is not None else 0
        per_thread.setdefault((pid, tid), []).append(r)
    known = model_threads if model_threads is not None else set()
    stacks: list[StackCount] = []
    instants = 0
    for key, rows in per_thread.items():
        context = key in known or any(in_model_call(r.frames) for r in rows)
        if context:
            known.add(key)
        counts = [
            StackCount(
                pid=key[0],
                tid=key[1],
                thread_name=r.thread_name,
                frames=r.frames,
                count=r.count,
                klass=classify_stack(r.frames, context),
            )
            for r in rows
        ]
        instants = max(instants, sum(c.count for c in counts))
        fraction: float | None = None
        before = active_before.get(key) if active_before else None
        after = active_after.get(key) if active_after else None
        if before is not None and after is not None and wall_s > 0:
            fraction = (after - before) / wall_s
        held = gil.fraction(key) if gil is not None else None
        reconciled = reconcile_activity(counts, fraction)
        stacks.extend(reconcile_gil(reconciled, held, context, sources))
    return tuple(stacks), instants


class StackCollector:
    """Samples the target's Python stacks with py-spy in consecutive windows (see module doc)."""

    name = "stacks"

    def __init__(
        self,
        pid: int,
        rate_hz: float = 100.0,
        window_s: float = 1.0,
        cpu_budget: float = DEFAULT_CPU_BUDGET,
        subprocesses: bool = True,
        pyspy: str | None = None,
        gil: bool = True,
    ) -> None:
        self.pid = pid
        self.gil = gil  # run the GIL sampler alongside (sofa_top.collectors.gil)
        self._gil_plan = GilPlanner(cpu_budget * GIL_BUDGET_SHARE)
        self.rate_hz = rate_hz
        self.window_s = window_s
        self.cpu_budget = cpu_budget
        self.subprocesses = subprocesses
        self.pyspy = pyspy
        self.controller = RateController(
            budget=cpu_budget,
            max_rate=max(MIN_RATE_HZ, math.floor(rate_hz)),
            base_window=max(1, round(window_s)),
        )
        self._names: dict[tuple[Pid, int | None], str] = {}
        self._model_threads: set[tuple[Pid, int]] = set()  # threads seen calling a model
        # the workload's own source lines (this session's: its folders, each line read once)
        self._sources = SourceReader(workload_dirs(pid))
        self._tree: list[Pid] = [pid]
        self._tree_at: float | None = None

    # -- the loop ---------------------------------------------------------------------------

    def run(self, emit: Emit, stop: threading.Event) -> None:
        """Emit one StackWindow per window until ``stop`` is set or the target exits."""
        target = _Target(self.pid)
        workdir = Path(tempfile.mkdtemp(prefix="sofa-top-pyspy-"))
        failures = 0
        try:
            while not stop.is_set():
                if not target.alive():
                    now = time.time()
                    emit(self._error_window(now, now, PySpyProblem("exited", "target exited")))
                    return
                try:
                    window, problem = self._one_window(target, workdir, stop)
                except Exception as exc:  # a bug here must not take the session down
                    now = time.time()
                    window = None
                    problem = PySpyProblem("other", f"stack collector failed: {exc!r}")
                    emit(self._error_window(now, now, problem))
                exited = problem is not None and problem.kind == "exited"
                if window is not None and not exited:  # the exit is reported once, above
                    emit(window)
                if stop.is_set():
                    return
                if problem is None:
                    failures = 0
                    continue
                if not target.alive():
                    continue  # the top of the loop reports the exit, once
                delay = BACKOFF_S[min(failures, len(BACKOFF_S) - 1)]
                if problem.persistent or problem.kind == "other":
                    failures += 1
                if stop.wait(delay):
                    return
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _error_window(
        self, t0: float, t1: float, problem: PySpyProblem, cpu: float | None = None
    ) -> StackWindow:
        return StackWindow(
            ts_start=t0,
            ts_end=t1,
            rate_hz=0.0,
            samples=0,
            sampler_cpu=cpu,
            error=problem.error,
            hint=problem.hint,
        )

    def _one_window(
        self, target: _Target, workdir: Path, stop: threading.Event
    ) -> tuple[StackWindow | None, PySpyProblem | None]:
        """Run py-spy for one window; the window to emit (None when stopped) and any problem."""
        pyspy = self.pyspy or find_pyspy()
        if pyspy is None or not os.path.exists(pyspy):
            now = time.time()
            problem = PySpyProblem(
                "missing",
                "py-spy not found" + (f" at {pyspy}" if pyspy else ""),
                "pip install py-spy (into the environment sofa-top runs from)",
            )
            return self._error_window(now, now, problem), problem

        tree = self._current_tree()
        use_sub = self.subprocesses and len(tree) > 1
        window, rate = self.controller.plan()
        out = workdir / "window.txt"
        log = workdir / "pyspy.log"
        out.unlink(missing_ok=True)
        cmd = [
            pyspy,
            "record",
            "--pid",
            str(self.pid),
            "--duration",
            str(window),
            "--rate",
            str(rate),
            "--format",
            "raw",
            "--threads",
            "--nonblocking",
            "--idle",
            "-o",
            str(out),
        ]
        if use_sub:
            cmd.append("--subprocesses")

        active_before = read_thread_activity(tree)
        t0 = time.time()
        run_gil = self.gil and self._gil_plan.wanted(window)
        gil_run = GilRun(pyspy, self.pid, window, rate, use_sub, workdir) if run_gil else None
        result = self._run_pyspy(cmd, log, stop, timeout=window + HUNG_GRACE_S)
        if result is None:
            if gil_run is not None:
                gil_run.abandon()
            return None, None
        rc, cpu_s = result
        t1 = time.time()
        active_after = read_thread_activity(tree)
        gil: GilShares | None = None
        gil_cpu = 0.0
        if gil_run is not None:
            gil = gil_run.finish(self.pid)
            gil_cpu = gil.cpu_s if gil is not None else 0.0
            self._gil_plan.ran(gil, t1)
        elif self.gil:
            gil = self._gil_plan.shares(t1)
        wall = max(1e-3, t1 - t0)
        sampler_cpu = 100.0 * (cpu_s + gil_cpu) / wall
        log_text = _read(log)

        raw: list[RawStack] = []
        if out.exists():
            raw = parse_raw(_read(out))
        if rc != 0 and not raw:
            problem = diagnose(log_text, self.pid)
            if problem.kind == "not-python" and use_sub:
                # In --subprocesses mode py-spy hides the cause ("No python processes found"
                # even when ptrace was denied): ask once more about the target alone.
                problem = self._diagnose_alone(pyspy, workdir, stop) or problem
                if problem.kind == "not-python":
                    problem = PySpyProblem(
                        "not-python",
                        f"not a Python process: no Python interpreter found in pid {self.pid} "
                        f"or its {len(tree) - 1} child process(es)",
                    )
            if problem.kind == "exited" and target.alive():
                problem = PySpyProblem("other", f"py-spy failed: {_error_lines(log_text)}")
            return self._error_window(t0, t1, problem, sampler_cpu), problem

        # Only complete runs teach the cost model: a failed attach costs little and says nothing.
        # py-spy's child scan (--subprocesses) costs per second whatever the rate, so it is left
        # out of the model: the budget is for sampling, the scan comes on top while there are
        # children (about 1.5 % of a core with 100 processes on the machine).
        scan_s = _scan_cost_per_s() * wall if use_sub else 0.0
        self.controller.observe(window, rate, max(0.0, cpu_s - scan_s))
        raw = self._fill_thread_names(raw)
        stacks, instants = build_stacks(
            raw, self.pid, active_before, active_after, wall, gil, self._model_threads,
            self._sources,
        )  # fmt: skip
        # frames-only classes of this window: is a thread in python worth asking the GIL about?
        self._gil_plan.suspect = suspects(
            build_stacks(raw, self.pid, active_before, active_after, wall)[0]
        )
        return (
            StackWindow(
                ts_start=t0,
                ts_end=t1,
                rate_hz=float(rate),
                samples=instants,
                stacks=stacks,
                sampler_cpu=sampler_cpu,
            ),
            None,
        )

    def _current_tree(self) -> list[Pid]:
        """The target and its children, rescanned at most every TREE_REFRESH_S."""
        now = time.monotonic()
        if self._tree_at is None or now - self._tree_at >= TREE_REFRESH_S:
            self._tree = _tree(self.pid, self.subprocesses)
            self._tree_at = now
        return self._tree

    def _fill_thread_names(self, raw: list[RawStack]) -> list[RawStack]:
        """Name threads py-spy left unnamed this window with the name it gave them before.

        py-spy reads names from ``threading._active`` without pausing the target, and on a busy
        target that read fails now and then, leaving ``thread (TID)`` without a name.
        """
        out: list[RawStack] = []
        for r in raw:
            key = (r.pid if r.pid is not None else self.pid, r.tid)
            if r.thread_name:
                self._names[key] = r.thread_name
            elif key in self._names:
                r = replace(r, thread_name=self._names[key])
            out.append(r)
        return out

    def _diagnose_alone(
        self, pyspy: str, workdir: Path, stop: threading.Event
    ) -> PySpyProblem | None:
        log = workdir / "dump.log"
        cmd = [pyspy, "dump", "--pid", str(self.pid), "--nonblocking"]
        result = self._run_pyspy(cmd, log, stop, timeout=HUNG_GRACE_S)
        if result is None or result[0] == 0:
            return None
        return diagnose(_read(log), self.pid)

    @staticmethod
    def _run_pyspy(
        cmd: list[str], log: Path, stop: threading.Event, timeout: float
    ) -> tuple[int, float] | None:
        """Run py-spy to completion; (exit code, its CPU seconds), or None if ``stop`` was set.

        The child gets its own session so it can be killed with anything it started, and is
        always reaped: no py-spy outlives a stop (nor sofa-top: ``children.guard``).
        """
        env = {**os.environ, "RUST_BACKTRACE": "0"}
        env.pop("RUST_LOG", None)
        try:
            with open(log, "wb") as log_file:
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
        except OSError as exc:
            log.write_text(f"Error: cannot run {cmd[0]}: {exc}\n")
            return 127, 0.0
        children.guard(proc.pid)  # killed with sofa-top, even by SIGKILL
        deadline = time.monotonic() + timeout
        pidfd = _pidfd(proc.pid)
        try:
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    return proc.returncode, usage.ru_utime + usage.ru_stime
                if stop.is_set():
                    return None
                if time.monotonic() > deadline:
                    _kill_group(proc.pid)
                    _, status, usage = os.wait4(proc.pid, 0)
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    log.write_text("Error: py-spy did not finish in time and was killed\n")
                    return 1, usage.ru_utime + usage.ru_stime
                if pidfd is not None:
                    # Wakes the moment py-spy exits (no gap between windows), else every POLL_S
                    # to look at ``stop``.
                    select.select([pidfd], [], [], POLL_S)
                elif stop.wait(POLL_S):
                    return None
        finally:
            if pidfd is not None:
                os.close(pidfd)
            if proc.returncode is None:
                _kill_group(proc.pid)
                with contextlib.suppress(ChildProcessError):
                    _, status, _ = os.wait4(proc.pid, 0)
                    proc.returncode = os.waitstatus_to_exitcode(status)
            children.release(proc.pid)


def _scan_cost_per_s() -> float:
    """py-spy --subprocesses rescans all of /proc every 100 ms: its CPU per second, estimated."""
    try:
        n = sum(1 for name in os.listdir("/proc") if name.isdigit())
    except OSError:
        n = 100
    return SCAN_S_PER_PROCESS * n


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits (Linux 5.3+), else None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
