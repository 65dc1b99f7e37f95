"""``collectors.children``: a guarded child ends with the process that started it, SIGKILL
included (its watchdog), a released one does not, and the watchdog itself goes; a
``Lifeline`` ends its process when its stdin's writer or its parent is gone."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from procs import read_line, read_now, wait_for, wait_until

# A parent that starts a sleeping child in a session of its own (as sofa-top starts py-spy and
# workloads), guards it (and releases it with "release"), and says the child's PID.
PARENT = """
import subprocess, sys, time
from sofa_top.collectors import children
child = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
)
children.guard(child.pid)
if sys.argv[1] == "release":
    children.release(child.pid)
print("CHILD", child.pid, flush=True)
time.sleep(120)
"""


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def watchdogs_of(pid: int) -> list[int]:
    """The watchdogs whose parent was ``pid`` (their command line names it)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        argv = p.info["cmdline"] or []
        ours = len(argv) >= 2 and argv[-2].endswith("watchdog.py") and argv[-1] == str(pid)
        if ours and running(p.pid):
            found.append(p.pid)
    return found


@pytest.fixture
def cleanup() -> Iterator[list[int]]:
    """PIDs to kill at the end whatever happened (a failed test leaves nothing)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("mode", ["guard", "release"])
def test_a_guarded_child_ends_with_its_killed_parent(mode: str, cleanup: list[int]) -> None:
    argv = [sys.executable, "-c", PARENT, mode]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True)
    cleanup.append(proc.pid)
    try:
        line = read_line(proc, 60)
        assert line.startswith(b"CHILD"), line
        child = int(line.split()[1])
        cleanup.append(child)
        assert running(child)
        if mode == "guard":
            assert wait_until(lambda: len(watchdogs_of(proc.pid)) == 1, 30)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        if mode == "guard":
            wait_for(lambda: not running(child), 10, "the guarded child to be stopped")
            wait_for(lambda: not watchdogs_of(proc.pid), 10, "the watchdog to exit")
        else:
            # released: handed on, it outlives its parent; the watchdog still goes
            wait_for(lambda: not watchdogs_of(proc.pid), 10, "the watchdog to exit")
            assert running(child)
    finally:
        if proc.stdout is not None:
            proc.stdout.close()


LIFELINE = """
import os, sys, time
from sofa_top.collectors.children import Lifeline
Lifeline(lambda why: print("GONE", why, flush=True), parent=int(sys.argv[1]), stdin=True,
         exit_after_s=1.0, exit_code=3).start()
print("READY", flush=True)
time.sleep(120)
"""


def test_lifeline_ends_its_process_when_its_stdin_closes() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", LIFELINE, str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert read_line(proc, 60).startswith(b"READY")
        assert proc.poll() is None
        assert proc.stdin is not None
        proc.stdin.close()
        assert read_line(proc, 10).strip() == b"GONE its input was closed"
        assert proc.wait(10) == 3
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


# A middle process: starts the Lifeline process with the test's pipe as its stdin (so that its
# stdin stays open) and says its PID; then the test kills the middle one.
MIDDLE = """
import os, subprocess, sys, time
code, fd = sys.argv[1], int(sys.argv[2])
child = subprocess.Popen([sys.executable, "-c", code, str(os.getpid())], stdin=fd, pass_fds=(fd,),
                         stdout=subprocess.DEVNULL)
print("CHILD", child.pid, flush=True)
time.sleep(120)
"""


def test_lifeline_ends_its_process_when_its_parent_is_killed(cleanup: list[int]) -> None:
    keep_r, keep_w = os.pipe()  # the grandchild's stdin: this test holds its writer
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", MIDDLE, LIFELINE, str(keep_r)],
            stdout=subprocess.PIPE,
            pass_fds=(keep_r,),
            start_new_session=True,
        )
        cleanup.append(proc.pid)
        line = read_line(proc, 60)
        assert line.startswith(b"CHILD"), line
        child = int(line.split()[1])
        cleanup.append(child)
        assert running(child)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        wait_for(lambda: not running(child), 10, "the orphaned child to end itself")
        if proc.stdout is not None:
            proc.stdout.close()
    finally:
        os.close(keep_r)
        os.close(keep_w)


def test_compares_run_ends_with_a_killed_compare(tmp_path: Path, cleanup: list[int]) -> None:
    """``sofa-top compare`` killed with SIGKILL mid-run: the workload it re-ran is stopped
    within 10 s (a SIGTERM or Ctrl-C of compare stops it through compare's own handling)."""
    marker = f"sofa-top-compare-run-{os.getpid()}"
    loop = f"import time  # {marker}\nwhile True:\n    time.sleep(0.05)"
    sofa_top = str(Path(sys.executable).with_name("sofa-top"))
    argv = [sofa_top, "compare", "--configs", "baseline", "--repeats", "1", "--max-repeats", "1"]
    argv += ["--steps", "1000", "-o", str(tmp_path), "--", sys.executable, "-c", loop]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    cleanup.append(proc.pid)

    def job() -> psutil.Process | None:
        for p in psutil.process_iter(["cmdline"]):
            argv = p.info["cmdline"] or []
            if len(argv) == 3 and marker in argv[2] and running(p.pid):
                return p
        return None

    run = wait_for(job, 60, "compare's run of the workload")
    cleanup.append(run.pid)
    # the run's session records (it started after the run was guarded)
    wait_for(
        lambda: any(read_now(f, lambda r: r.series_names(), []) for f in tmp_path.glob("*.sofa")),
        60,
        "the run's session to record",
    )
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    wait_for(lambda: not running(run.pid), 10, "compare's run to be stopped")
    wait_for(lambda: not watchdogs_of(proc.pid), 10, "compare's watchdog to exit")


def test_doctors_probe_ends_with_a_killed_doctor(cleanup: list[int]) -> None:
    """``sofa-top doctor`` killed with SIGKILL while its probe process runs (it sleeps 60 s):
    the probe is stopped within 10 s."""
    from sofa_top.cli.doctor import _PROBE_CODE

    sofa_top = str(Path(sys.executable).with_name("sofa-top"))
    proc = subprocess.Popen(
        [sofa_top, "doctor"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    cleanup.append(proc.pid)

    def probe() -> psutil.Process | None:
        try:
            kids = psutil.Process(proc.pid).children()
        except psutil.NoSuchProcess:
            return None
        for p in kids:
            with contextlib.suppress(psutil.Error):
                if p.cmdline()[-1:] == [_PROBE_CODE] and running(p.pid):
                    return p
        return None

    child = wait_for(probe, 60, "doctor's probe process")
    cleanup.append(child.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    wait_for(lambda: not running(child.pid), 10, "the probe to be stopped")
