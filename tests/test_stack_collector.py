"""The py-spy stack collector against REAL processes and the REAL py-spy."""

from __future__ import annotations

import itertools
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from other_uid import OtherUser, setpriv
from procs import children_named, spawned, wait_until, workload

from sofa_top.analysis.stackstats import summarize
from sofa_top.collectors.stacks import (
    BACKOFF_S,
    DEFAULT_CPU_BUDGET,
    GIL_BUDGET_SHARE,
    RateController,
    StackCollector,
    diagnose,
    find_pyspy,
)
from sofa_top.datamodel.samples import Sample, StackWindow
from sofa_top.datamodel.snapshot import StackSummary

PYSPY = find_pyspy()
pytestmark = pytest.mark.skipif(PYSPY is None, reason="py-spy is not installed")


class Collecting:
    """A StackCollector running in its own thread, as the session runs it."""

    def __init__(self, collector: StackCollector) -> None:
        self.collector = collector
        self.samples: list[Sample] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.raised: BaseException | None = None

    def _run(self) -> None:
        try:
            self.collector.run(self.samples.append, self.stop)
        except BaseException as exc:  # the protocol says run() never raises: record it
            self.raised = exc

    @property
    def windows(self) -> list[StackWindow]:
        return [s for s in list(self.samples) if isinstance(s, StackWindow)]

    def wait_for(self, pred: Callable[[list[StackWindow]], bool], timeout: float) -> bool:
        return wait_until(lambda: pred(self.windows), timeout, interval=0.1)

    def stop_and_join(self, within: float = 30.0) -> float:
        t0 = time.monotonic()
        self.stop.set()
        self.thread.join(timeout=60)
        took = time.monotonic() - t0
        assert not self.thread.is_alive(), "collector did not stop"
        assert took < within, f"stop took {took:.2f} s"
        assert self.raised is None, repr(self.raised)
        return took


@contextmanager
def collecting(pid: int, **kwargs: object) -> Iterator[Collecting]:
    run = Collecting(StackCollector(pid, **kwargs))  # type: ignore[arg-type]
    run.thread.start()
    try:
        yield run
    finally:
        if run.thread.is_alive():
            run.stop.set()
            run.thread.join(timeout=60)


def thread_samples(windows: list[StackWindow], tid: int) -> int:
    return sum(c.count for w in windows for c in w.stacks if c.tid == tid)


def main_thread(windows: list[StackWindow], pid: int) -> StackSummary:
    # the main thread's OS id is the process id
    s = summarize(windows, tid=pid)
    assert s is not None, [w.error for w in windows]
    return s


def pyspy_processes_for(pid: int) -> list[int]:
    """Live py-spy processes aimed at ``pid`` (any parent)."""
    out: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state != "Z" and argv and argv[0].endswith(b"py-spy") and str(pid).encode() in argv:
            out.append(int(entry))
    return out


# -- (a) a busy pure-Python loop -------------------------------------------------------------


def test_busy_loop_top_function() -> None:
    with spawned(workload("busy_python", 600), ready=b"READY") as proc, collecting(proc.pid) as run:
        assert run.wait_for(lambda ws: thread_samples(ws, proc.pid) >= 150, timeout=60)
        run.stop_and_join()
    windows = run.windows
    assert all(w.error is None for w in windows), [w.error for w in windows]
    s = main_thread(windows, proc.pid)
    top = s.functions[0]
    assert (top.function, top.filename) == ("spin_here", "busy_python.py")
    assert top.own_pct >= 80.0, s.functions[:3]
    assert top.klass == "python"
    assert s.split["python"] >= 0.8
    for w in windows:
        assert w.rate_hz >= 1 and w.samples > 0 and w.sampler_cpu is not None
        assert w.ts_end > w.ts_start


def test_cpu_budget_is_respected() -> None:
    """py-spy's measured CPU, after the first (probe) window, stays near the budget, and the
    rate uses the budget: what a sample costs decides the rate (a slow or loaded machine's
    samples cost more), never a collapse to the floor while the budget is unspent."""
    budget = DEFAULT_CPU_BUDGET
    with spawned(workload("busy_python", 600), ready=b"READY") as proc, collecting(proc.pid) as run:
        assert run.wait_for(lambda ws: len(ws) >= 6, timeout=60)
        run.stop_and_join()
    steady = run.windows[2:]
    spent = sum((w.sampler_cpu or 0.0) * (w.ts_end - w.ts_start) for w in steady)
    wall = sum(w.ts_end - w.ts_start for w in steady)
    rates = [w.rate_hz for w in steady]
    # sampler_cpu is in percent of one core and counts the GIL sampler, whose own budget comes on
    # top of py-spy's; allow for timing noise on a shared machine
    assert spent / wall <= 100 * budget * (1 + GIL_BUDGET_SHARE) * 1.6, (spent / wall, rates)
    at_max_rate = max(rates) >= run.collector.rate_hz
    assert at_max_rate or spent / wall >= 100 * budget * 0.3, (spent / wall, rates)


# -- (b) a sleeping process --------------------------------------------------------------------


def test_sleeping_process_is_idle() -> None:
    with spawned(workload("sleeper", 600)) as proc, collecting(proc.pid) as run:
        assert run.wait_for(lambda ws: thread_samples(ws, proc.pid) >= 60, timeout=60)
        run.stop_and_join()
    windows = run.windows
    s = summarize(windows)
    assert s is not None
    assert {t.name for t in s.threads} == {"MainThread", "waiter"}
    # the main thread sits in time.sleep: no frame says so, the OS does
    assert main_thread(windows, proc.pid).split["idle"] >= 0.9
    assert s.split["idle"] >= 0.9


# -- (c) not a Python process ------------------------------------------------------------------


def assert_backs_off(windows: list[StackWindow]) -> None:
    """Error windows come at the back-off delays (1 s, 2 s, ...), not once per window: each
    gap is at least its delay (a lower bound, which a slow machine only lengthens)."""
    assert len(windows) >= 3, windows
    starts = [w.ts_start for w in windows]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    for gap, delay in zip(gaps, BACKOFF_S, strict=False):
        assert gap >= 0.95 * delay, (gaps, BACKOFF_S)


def test_non_python_process_reports_and_keeps_running() -> None:
    with spawned(["sleep", "600"]) as proc, collecting(proc.pid) as run:
        assert run.wait_for(lambda ws: len(ws) >= 3, timeout=60)
        assert run.thread.is_alive()
        run.stop_and_join()
    windows = run.windows
    for w in windows:
        assert w.error is not None and w.error.startswith("not a Python process"), w.error
        assert w.hint is None
        assert w.stacks == ()
    # backs off (1 s, 2 s, ...) instead of respawning py-spy every window
    assert_backs_off(windows)


def test_non_python_launcher_with_python_child() -> None:
    """A shell that runs Python: the child's stacks are found through --subprocesses."""
    script = f"{sys.executable} {workload('busy_python', 600)[1]} 600; true"
    with spawned(["sh", "-c", script]) as proc:
        assert wait_until(lambda: bool(children_named(proc.pid, "busy_python")), 60)
        child = children_named(proc.pid, "busy_python")[0]
        with collecting(proc.pid) as run:
            assert run.wait_for(lambda ws: thread_samples(ws, child) >= 50, timeout=60), [
                (w.error, w.rate_hz, len(w.stacks)) for w in run.windows
            ]
            run.stop_and_join()
    assert main_thread(run.windows, child).functions[0].function == "spin_here"


# -- (d) a process that forks children ---------------------------------------------------------


def test_forked_children_are_sampled() -> None:
    with spawned(workload("forker", 600, "2")) as proc:
        assert wait_until(lambda: len(children_named(proc.pid, "forker")) >= 2, 60)
        kids = set(children_named(proc.pid, "forker"))
        with collecting(proc.pid) as run:

            def both_seen(ws: list[StackWindow]) -> bool:
                seen = {c.pid for w in ws for c in w.stacks}
                return kids <= seen and proc.pid in seen

            assert run.wait_for(both_seen, timeout=60)
            run.stop_and_join()
    stacks = [c for w in run.windows for c in w.stacks]
    child_leaves = {c.frames[-1].function for c in stacks if c.pid in kids and c.frames}
    # py-spy names a generator expression by its qualified name on 3.11+
    assert any(f.startswith("child_spin") for f in child_leaves), child_leaves
    parent = [c for c in stacks if c.pid == proc.pid]
    # the parent waits in Process.join: idle
    assert sum(c.count for c in parent if c.klass == "idle") >= 0.8 * sum(c.count for c in parent)


# -- (e) stopping -------------------------------------------------------------------------------


def test_stop_is_prompt_and_leaves_no_pyspy() -> None:
    """Stop lands while py-spy records a 10-minute window: it does not wait for the window to
    end, and py-spy goes with it (the speed of a stop is a benchmark: benchmarks/latency.py)."""
    with (
        spawned(workload("busy_python", 600), ready=b"READY") as proc,
        collecting(proc.pid, window_s=600) as run,
    ):
        assert wait_until(lambda: bool(pyspy_processes_for(proc.pid)), 60)
        run.stop_and_join(within=60)
        assert pyspy_processes_for(proc.pid) == [], "py-spy outlived stop"


def test_target_exit_ends_the_collector() -> None:
    with spawned(workload("busy_python", 3)) as proc, collecting(proc.pid) as run:
        run.thread.join(timeout=60)
        assert not run.thread.is_alive(), "collector kept running after the target exited"
        assert run.raised is None
    windows = run.windows
    assert windows[-1].error == "target exited"
    assert sum(1 for w in windows if w.error == "target exited") == 1
    assert pyspy_processes_for(proc.pid) == []


def test_missing_pyspy(tmp_path: Path) -> None:
    with (
        spawned(workload("busy_python", 600), ready=b"READY") as proc,
        collecting(proc.pid, pyspy=str(tmp_path / "no-such-py-spy")) as run,
    ):
        assert run.wait_for(lambda ws: len(ws) >= 1, timeout=60)
        run.stop_and_join()
    w = run.windows[0]
    assert w.error is not None and "py-spy not found" in w.error
    assert w.hint is not None and "pip install py-spy" in w.hint


# -- (f) ptrace denied, for real ---------------------------------------------------------------


def test_ptrace_denied(tmp_path: Path, nobody: OtherUser) -> None:
    """The target runs as root; py-spy runs as ``nobody`` and may not read its memory. (The
    staged, world-readable py-spy: nobody may not reach the venv's one in a 0700 clone, and a
    py-spy that cannot even start must not pass for a ptrace refusal.)"""
    wrapper = tmp_path / "py-spy-as-nobody"
    as_nobody = " ".join(shlex.quote(a) for a in setpriv(nobody.user))
    wrapper.write_text(f'#!/bin/sh\nexec {as_nobody} {shlex.quote(nobody.py_spy)} "$@"\n')
    wrapper.chmod(0o755)
    version = subprocess.run([str(wrapper), "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("py-spy"), version
    with (
        spawned(workload("busy_python", 600), ready=b"READY") as proc,
        collecting(proc.pid, pyspy=str(wrapper)) as run,
    ):
        assert run.wait_for(lambda ws: len(ws) >= 3, timeout=60)
        run.stop_and_join()
    windows = run.windows
    for w in windows:
        assert w.error is not None and w.error.startswith("ptrace denied"), w.error
        assert w.hint is not None
        assert "root" in w.hint and "SYS_PTRACE" in w.hint
        assert "kernel.yama.ptrace_scope=0" in w.hint
    assert_backs_off(windows)


def test_diagnose_messages() -> None:
    """py-spy's own error texts (captured from 0.4.3) map to errors and hints."""
    perm = diagnose(
        "Permission Denied: Try running again with elevated permissions by going 'sudo env ...'",
        42,
    )
    assert perm.kind == "permission" and perm.error.startswith("ptrace denied")
    notpy = diagnose("Error: Failed to find python version from target process", 42)
    assert notpy.kind == "not-python" and notpy.hint is None
    old = diagnose("Error: Unsupported version of Python: 3.99.0", 42)
    assert old.kind == "unsupported" and "3.99" in old.error and old.hint is not None
    gone = diagnose(
        "Error: Failed to get process executable name. Check that the process is running.", 42
    )
    assert gone.kind == "exited"
    assert diagnose("Error: something new", 42).error == "py-spy failed: Error: something new"


# -- the rate controller -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("startup", "per_sample", "max_rate", "min_rate", "max_window"),
    [
        (0.014, 0.00025, 100, 40, 2),  # pure-Python loop, as measured
        (0.015, 0.0055, 100, 1, 5),  # torch, 300 native threads
        (0.035, 0.011, 100, 1, 5),  # torch, 150 Python threads
        (0.014, 0.00001, 100, 100, 1),  # cheap: the requested rate at 1 s windows
    ],
)
def test_rate_controller_converges_within_budget(
    startup: float, per_sample: float, max_rate: int, min_rate: int, max_window: int
) -> None:
    budget = 0.02
    rc = RateController(budget=budget, max_rate=max_rate)
    plans = []
    for _ in range(12):
        window, rate = rc.plan()
        rc.observe(window, rate, startup + per_sample * (rate * window + 1))
        plans.append((window, rate))
    window, rate = plans[-1]
    cost = startup + per_sample * (rate * window + 1)
    assert cost / window <= budget * 1.05, plans
    assert rate >= min_rate and window <= max_window, plans
    assert 1 <= rate <= max_rate


def test_rate_controller_first_window_is_a_cheap_probe() -> None:
    assert RateController(budget=0.02, max_rate=100).plan() == (1, 5)
    assert RateController(budget=0.02, max_rate=2).plan() == (1, 2)


# -- (g) classification against real framework workloads ---------------------------------------


def _class_split_after(
    name: str, marker: Callable[[StackWindow], bool], pid_windows: int = 3
) -> tuple[StackSummary, list[StackWindow]]:
    """Run a workload until ``marker`` sees its loop, then summarize a few more windows."""
    with spawned(workload(name, 600)) as proc, collecting(proc.pid) as run:
        assert run.wait_for(lambda ws: any(marker(w) for w in ws), timeout=60), [
            w.error for w in run.windows
        ]
        start = next(i for i, w in enumerate(run.windows) if marker(w))
        assert run.wait_for(lambda ws: len(ws) >= start + 1 + pid_windows, timeout=60)
        run.stop_and_join()
        pid = proc.pid
    loop = run.windows[start + 1 :]
    return main_thread(loop, pid), loop


def _has(function: str) -> Callable[[StackWindow], bool]:
    return lambda w: any(c.frames and c.frames[-1].function == function for c in w.stacks)


@pytest.mark.slow
def test_tf_input_bound_is_input() -> None:
    s, _ = _class_split_after("tf_input_bound", _has("iterator_get_next"))
    assert s.split["input"] >= 0.6, s.split
    assert s.functions[0].function == "iterator_get_next"


@pytest.mark.slow
def test_torch_input_bound_is_input() -> None:
    s, _ = _class_split_after("torch_input_bound", _has("SlowDataset.__getitem__"))
    assert s.split["input"] >= 0.6, s.split


@pytest.mark.slow
def test_torch_compute_bound_is_compute() -> None:
    s, _ = _class_split_after("torch_compute_bound", _has("_engine_run_backward"))
    assert s.split["compute"] >= 0.6, s.split
    assert s.split["input"] == 0.0
