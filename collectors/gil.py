"""Which thread holds the GIL, sampled by a second py-spy alongside each stack window.

``py-spy record --gil`` keeps, at each sampling instant, only the thread that holds the GIL, and
it is cheap: it skips the per-thread ``/proc`` activity reads that make up most of a normal
sample's cost and reads one stack. Counting its samples per thread over a window gives each
thread's GIL-holding share, which tells a thread running Python from one running native code
(a torch kernel) that Python called (``sofa_top.analysis.classify.reconcile_gil``).

It runs concurrently with the window's main py-spy, at the same rate and duration, and never
blocks the target (``--nonblocking``). Any failure is "unknown": the window keeps the classes
its frames gave.

Its cost is one more py-spy start-up per window (measured 15-45 ms: symbols and memory maps
of a TensorFlow process), which alone would double the sampler's cost, so ``GilPlanner`` runs
it only where it can change a class (a thread spent >= ``SUSPECT_SHARE`` of the previous
window in ``python``) and only as often as ``budget`` allows; windows in between reuse the
last shares (at most ``REUSE_S`` old).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from sofa_top.collectors import children
from sofa_top.collectors.pyspy_raw import parse_raw
from sofa_top.datamodel.samples import StackCount
from sofa_top.datamodel.units import Pid

FINISH_GRACE_S = 3.0  # after the main window ends, how long the GIL run may still take
SUSPECT_SHARE = 0.10  # a thread this much in ``python`` may be in native code: ask the GIL
REUSE_S = 15.0  # GIL shares this old still stand in for a window without a GIL run


@dataclass(frozen=True, slots=True)
class GilShares:
    """One window's GIL readings: samples per (pid, tid) holding it, out of ``instants``."""

    counts: dict[tuple[Pid, int], int]
    instants: int
    cpu_s: float  # the GIL sampler's own CPU (rusage of the reaped py-spy)

    def fraction(self, key: tuple[Pid, int]) -> float:
        """The share of the window's instants at which that thread held the GIL."""
        return min(1.0, self.counts.get(key, 0) / self.instants) if self.instants > 0 else 0.0


class GilRun:
    """One ``py-spy record --gil`` run for one window."""

    def __init__(
        self, pyspy: str, pid: Pid, window: int, rate: int, subprocesses: bool, workdir: Path
    ) -> None:
        self.pid = pid
        self.window = window
        self.rate = rate
        self.out = workdir / "gil.txt"
        self.out.unlink(missing_ok=True)
        cmd = [
            pyspy, "record", "--pid", str(pid), "--duration", str(window), "--rate", str(rate),
            "--format", "raw", "--threads", "--nonblocking", "--gil", "-o", str(self.out),
        ]  # fmt: skip
        if subprocesses:
            cmd.append("--subprocesses")
        env = {**os.environ, "RUST_BACKTRACE": "0"}
        env.pop("RUST_LOG", None)
        self.proc: subprocess.Popen[bytes] | None = None
        with contextlib.suppress(OSError):
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        if self.proc is not None:
            children.guard(self.proc.pid)  # killed with sofa-top, even by SIGKILL

    def finish(self, default_pid: Pid, grace_s: float = FINISH_GRACE_S) -> GilShares | None:
        """Wait for the run (killing it past ``grace_s``) and read it; None when it failed."""
        proc = self.proc
        if proc is None:
            return None
        deadline = time.monotonic() + grace_s
        status, usage = None, None
        while True:
            pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                status, usage = st, ru
                break
            if time.monotonic() > deadline:
                self.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        proc.returncode = os.waitstatus_to_exitcode(status)
        children.release(proc.pid)
        cpu = usage.ru_utime + usage.ru_stime
        if proc.returncode != 0:
            return None
        try:
            raw = parse_raw(self.out.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return None
        counts: dict[tuple[Pid, int], int] = {}
        for r in raw:
            key = (r.pid if r.pid is not None else default_pid, r.tid if r.tid is not None else 0)
            counts[key] = counts.get(key, 0) + r.count
        # py-spy takes rate * duration intervals and writes all but the first
        return GilShares(counts, max(1, self.rate * self.window - 1), cpu)

    def kill(self) -> None:
        """Stop the run now, with anything it started (it is reaped by ``finish``)."""
        if self.proc is None or self.proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def abandon(self) -> None:
        """Kill and reap (the window was stopped)."""
        if self.proc is not None and self.proc.returncode is None:
            self.kill()
            with contextlib.suppress(ChildProcessError):
                self.proc.wait()
            children.release(self.proc.pid)


def suspects(stacks: tuple[StackCount, ...]) -> bool:
    """Whether some thread spent ``SUSPECT_SHARE`` of a window in ``python`` (GIL worth asking)."""
    total: dict[tuple[Pid, int], int] = {}
    python: dict[tuple[Pid, int], int] = {}
    for s in stacks:
        key = (s.pid, s.tid)
        total[key] = total.get(key, 0) + s.count
        if s.klass == "python":
            python[key] = python.get(key, 0) + s.count
    return any(n >= SUSPECT_SHARE * total[k] for k, n in python.items() if n > 0)


class GilPlanner:
    """When to run the GIL sampler, within ``budget`` (share of one core), and its last shares."""

    def __init__(self, budget: float) -> None:
        self.budget = max(1e-4, budget)
        self.cost_s: float | None = None  # CPU seconds per GIL run, smoothed
        self.suspect = False  # the last window had a thread in python
        self._waited = 0  # windows since the last run
        self._last: tuple[float, GilShares] | None = None

    def wanted(self, window_s: float) -> bool:
        """Whether the next window should run the GIL sampler."""
        if not self.suspect:
            return False
        self._waited += 1
        if self.cost_s is None:
            return True
        return self._waited >= math.ceil(self.cost_s / (self.budget * max(window_s, 1.0)))

    def ran(self, shares: GilShares | None, now: float) -> None:
        """Record a GIL run's result (None: it failed)."""
        self._waited = 0
        if shares is None:
            return
        cost = shares.cpu_s
        self.cost_s = cost if self.cost_s is None else 0.5 * self.cost_s + 0.5 * cost
        self._last = (now, shares)

    def shares(self, now: float) -> GilShares | None:
        """The last shares, while recent enough to stand in for this window."""
        if self._last is None or now - self._last[0] > REUSE_S:
            return None
        return self._last[1]
