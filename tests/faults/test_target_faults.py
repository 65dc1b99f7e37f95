"""Fault matrix, target side: whatever the watched process does, sofa-top records it, never
changes its fate, and says clearly what it could not see."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import CTRL_C, validate_record_json
from other_uid import OtherUser

from faults.conftest import (
    FAULT_TARGET,
    committed,
    needs_root,
    no_traceback,
    running,
    sofa,
    start_sofa,
    target_argv,
    wait_committed,
    wait_until,
)
from sofa_top.cli.exits import workload_status
from sofa_top.datamodel.samples import StackWindow
from sofa_top.recording.reader import SessionReader


def _record_json(out: Path, *args: str, timeout: float = 90) -> dict[str, object]:
    proc = sofa("record", "--json", "-o", str(out), *args, timeout=timeout)
    no_traceback(proc.stderr)
    summary: dict[str, object] = json.loads(proc.stdout)
    validate_record_json(summary)
    # sofa-top exits as the workload did (it ended by itself here)
    code = summary["exit_code"]
    assert proc.returncode == workload_status(code if isinstance(code, int) else None), proc.stderr
    return summary


def _logs(path: Path) -> list[str]:
    return [e.message for e in SessionReader(path).events("log")]


def _frames(path: Path) -> list[tuple[str, ...]]:
    """Every recorded stack as a tuple of function names, outermost first."""
    return [
        tuple(f.function for f in c.frames)
        for w in SessionReader(path).stack_windows()
        for c in w.stacks
    ]


def _stack_windows(path: Path) -> list[StackWindow]:
    """The stack windows committed to ``path`` so far ([] before the file is initialised)."""
    try:
        reader = SessionReader(path)
    except Exception:
        return []
    try:
        return list(reader.stack_windows())
    finally:
        reader.close()


def _cpu_points_after(path: Path, t: float) -> int:
    """How many readable CPU points the session has after ``t``."""
    try:
        reader = SessionReader(path)
    except Exception:
        return 0
    try:
        return sum(1 for ts, v, _ in reader.points("tree.cpu") if ts > t and v is not None)
    finally:
        reader.close()


# -- the target ends --------------------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 3], ids=["exits-0", "exits-3"])
def test_target_exits_normally_or_not(tmp_path: Path, code: int) -> None:
    """Launched: the exit code and the last output line are recorded; sofa-top exits 0."""
    out = tmp_path / "s.sofa"
    summary = _record_json(
        out,
        "--",
        sys.executable,
        "-c",
        f"import time; time.sleep(1); print('last words', flush=True); raise SystemExit({code})",
    )
    assert summary["exit_code"] == code
    assert summary["end_reason"] == "target exited"
    assert "last words" in _logs(out)
    assert SessionReader(out).meta()["exit_code"] == code


@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_target_is_sigkilled(tmp_path: Path, mode: str) -> None:
    """SIGKILL of the target: recording ends with what was seen, the code is -9 (launched)."""
    out = tmp_path / "s.sofa"
    if mode == "launch":
        code = "import os, time\nprint('up', flush=True); time.sleep(1.5)\nos.kill(os.getpid(), 9)"
        summary = _record_json(out, "--", sys.executable, "-c", code)
        assert summary["exit_code"] == -signal.SIGKILL
        assert "up" in _logs(out)
    else:
        with running(target_argv("busy")) as target:
            rec = start_sofa("record", "--pid", str(target.pid), "--json", "-o", str(out))
            wait_committed(out, 5)
            target.kill()
            stdout, stderr = rec.communicate(timeout=30)
        summary = json.loads(stdout)
        # the target's status when sofa-top could read it (its zombie), as a shell says it
        assert rec.returncode == workload_status(summary["exit_code"]), stderr
    assert summary["end_reason"] == "target exited"
    assert len(SessionReader(out).points("tree.cpu")) >= 5
    assert SessionReader(out).meta()["ended"] > 0


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_target_becomes_a_zombie(tmp_path: Path) -> None:
    """Attached to a process that exits but is never reaped: sofa-top sees it as exited (it
    does not wait for --duration) and leaves the zombie to its parent."""
    out = tmp_path / "z.sofa"
    with running(target_argv("busy", seconds=600)) as target:
        rec = start_sofa(
            "record", "--pid", str(target.pid), "--duration", "600", "--json", "-o", str(out)
        )
        wait_committed(out, 5)
        os.kill(target.pid, signal.SIGUSR1)  # finish: it exits, and nobody reaps it
        wait_until(lambda: _state(target.pid) == "Z", 30, "the target to become a zombie")
        stdout, stderr = rec.communicate(timeout=30)
        assert _state(target.pid) == "Z"  # still there: sofa-top did not reap it
    assert rec.returncode == 0, stderr
    assert json.loads(stdout)["end_reason"] == "target exited"
    assert len(SessionReader(out).points("tree.cpu")) >= 5


IMPOSTOR = "import time\ndef impostor_spin():\n    while True: sum(range(1000))\nimpostor_spin()\n"


def _spawn_with_pid(pid: int) -> subprocess.Popen[bytes] | None:
    """Start the impostor so that it gets ``pid`` (via ns_last_pid); None if another process
    took that PID first."""
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(pid - 1))
    # Not a new session: its group would be ``pid``, which the target's cleanup kills.
    proc = subprocess.Popen([sys.executable, "-c", IMPOSTOR])
    if proc.pid == pid:
        return proc
    proc.kill()
    proc.wait()
    return None


@needs_root
def test_pid_reused_during_the_session(tmp_path: Path) -> None:
    """The target dies and a new process gets its PID between two samples: sofa-top ends the
    recording ("target exited") and not one sample of the newcomer enters the session."""
    if not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):
        pytest.skip("cannot choose the next PID here (ns_last_pid not writable)")
    for attempt in range(3):
        out = tmp_path / f"reuse-{attempt}.sofa"
        with running(target_argv("busy")) as target:
            pid = target.pid
            original = psutil.Process(pid).create_time()
            rec = start_sofa("record", "--pid", str(pid), "--json", "-o", str(out))
            wait_committed(out, 5)
            wait_until(lambda: any(_frames(out)), 30, "a first stack window")  # noqa: B023
            target.kill()
            target.wait()
            impostor = _spawn_with_pid(pid)
        try:
            stdout, stderr = rec.communicate(timeout=30)
            if impostor is None:
                continue  # some other process took the PID: try again
            code = json.loads(stdout)["exit_code"]
            assert rec.returncode == workload_status(code), stderr
            assert json.loads(stdout)["end_reason"] == "target exited"
            assert impostor.poll() is None  # the newcomer is untouched
            r = SessionReader(out)
            times = [p["create_time"] for p in r.processes() if p["pid"] == pid]
            assert times == [pytest.approx(original, abs=0.01)]  # the original, and only it
            assert not any("impostor_spin" in stack for stack in _frames(out))
            return
        finally:
            if impostor is not None:
                impostor.kill()
                impostor.wait()
    pytest.skip("could not hand the PID over in 3 attempts (a busy machine)")


# -- what the target is -----------------------------------------------------------------------


def test_target_forks_50_short_lived_children(tmp_path: Path) -> None:
    """50 children of ~20 ms each, one after another: every one exits 0 (sofa-top touched
    none), the ones it saw are recorded once each, and the collectors keep running."""
    out = tmp_path / "f.sofa"
    summary = _record_json(out, "--", *target_argv("fork", "50", seconds=1))
    assert summary["exit_code"] == 0
    assert "DONE 50" in _logs(out)  # all 50 children exited 0
    r = SessionReader(out)
    children = [p for p in r.processes() if p["role"] != "target"]
    assert children, "no child was ever seen"
    assert len({(p["pid"], p["create_time"]) for p in children}) == len(children)
    assert not r.events("collector-failed")
    assert any(w.samples for w in r.stack_windows())


def test_target_runs_150_threads(tmp_path: Path) -> None:
    """150 extra Python threads: sampled (at a rate the CPU budget allows), all threads seen."""
    out = tmp_path / "t.sofa"
    with running(target_argv("threads", "150")) as target:
        summary = _record_json(out, "--pid", str(target.pid), "--duration", "4")
        assert target.poll() is None
    assert summary["cpu"]["threads_max"] >= 151  # type: ignore[index]
    assert summary["stacks"]["thread_samples"] > 0  # type: ignore[index]
    r = SessionReader(out)
    assert len(r.stack_threads()) >= 151
    assert not [w.error for w in r.stack_windows() if w.error]


def test_target_in_900_deep_recursion(tmp_path: Path) -> None:
    """A 900-deep Python stack is recorded whole and exports."""
    out = tmp_path / "deep.sofa"
    with running(target_argv("recurse", "900")) as target:
        _record_json(out, "--pid", str(target.pid), "--duration", "3")
        # a CI run once recorded 0.1 s and no stack: the injection timed out, then the target
        # read as exited; say whether it had, and how
        status = target.poll()
    frames = _frames(out)
    if not frames:
        r = SessionReader(out)
        raise AssertionError((status, r.meta(), [e.message for e in r.events()]))
    deepest = max(frames, key=len)
    assert deepest.count("fault_recurse") >= 900
    assert deepest[-1] == "fault_spin"
    export = sofa("export", str(out), "--format", "speedscope", "-o", str(tmp_path / "d.json"))
    assert export.returncode == 0, export.stderr
    profile = json.loads((tmp_path / "d.json").read_text())
    names = [f["name"] for f in profile["shared"]["frames"]]
    assert "fault_recurse" in names


def test_target_with_unicode_and_non_utf8_names(tmp_path: Path) -> None:
    """Unicode in the script's path, function and thread names; non-UTF-8 bytes in the command
    line, the process name (comm) and the working directory. The text summary prints, the
    session stores valid text (U+FFFD where bytes were not UTF-8) and exports."""
    home = tmp_path / "données-训练"
    home.mkdir()
    script = home / "fault_目标.py"
    shutil.copy(FAULT_TARGET, script)
    cwd = os.fsencode(tmp_path) + b"/cwd-\xff\xfe"
    os.mkdir(cwd)
    hostile = b"arg-\xff-\xc3\x28"  # not UTF-8
    argv = [os.fsencode(sys.executable), os.fsencode(script), b"unicode", b"0", hostile]
    out = tmp_path / "u.sofa"
    with running(argv, cwd=cwd) as target:
        proc = sofa("record", "--pid", str(target.pid), "--duration", "3", "-o", str(out))
        assert target.poll() is None
    assert proc.returncode == 0, proc.stderr
    no_traceback(proc.stdout, proc.stderr)
    assert "ended: duration reached" in " ".join(proc.stdout.split())  # rich wraps lines
    r = SessionReader(out)
    (me,) = [p for p in r.processes() if p["role"] == "target"]
    assert me["name"] == "\ufffd\ufffd-λ-bad"
    assert me["cmdline"][1:] == [str(script), "unicode", "0", "arg-\ufffd-\ufffd("]
    stacks = [c for w in r.stack_windows() for c in w.stacks]
    hot = [c for c in stacks if any(f.function == "计算_λ_ß" for f in c.frames)]
    assert hot and {c.thread_name for c in hot} == {"工作-线程-ß"}
    assert {f.filename for c in hot for f in c.frames} >= {"fault_目标.py"}
    export = sofa("export", str(out), "--format", "chrome", "-o", str(tmp_path / "u.json"))
    assert export.returncode == 0, export.stderr
    assert "计算_λ_ß" in (tmp_path / "u.json").read_text(encoding="utf-8")


def test_target_is_not_python(tmp_path: Path) -> None:
    """A shell loop: CPU and output recorded, its exit code kept, stacks say why not. The loop
    spins until the test has seen py-spy's verdict (however fast the machine)."""
    out = tmp_path / "sh.sofa"
    stop = tmp_path / "stop"
    loop = f"i=0; while [ ! -e {shlex.quote(str(stop))} ]; do i=$((i+1)); done; "
    loop += "echo counted $i; exit 7"
    rec = start_sofa("record", "--json", "-o", str(out), "--", "sh", "-c", loop)
    try:
        wait_until(lambda: any(w.error for w in _stack_windows(out)), 60, "py-spy's verdict")
        wait_committed(out, 5)
    finally:
        stop.touch()
        stdout, stderr = rec.communicate(timeout=60)
    assert rec.returncode == 7, stderr  # the workload's own exit status
    no_traceback(stderr)
    summary = json.loads(stdout)
    assert summary["exit_code"] == 7
    assert summary["end_reason"] == "target exited"
    assert any(line.startswith("counted ") for line in _logs(out))
    assert summary["cpu"]["tree_mean_percent"] is not None  # type: ignore[index]
    assert "not a Python process" in (summary["stacks"]["error"] or "")  # type: ignore[index]


def test_python_that_py_spy_does_not_support(tmp_path: Path) -> None:
    """A Python that reports a version py-spy does not know (3.99): one clear line with the
    fix in the summary; CPU and memory still recorded; the target runs on."""
    out = tmp_path / "v.sofa"
    with running(target_argv("future")) as target:
        proc = sofa("record", "--pid", str(target.pid), "--duration", "3", "-o", str(out))
        assert target.poll() is None
    assert proc.returncode == 0, proc.stderr
    no_traceback(proc.stdout, proc.stderr)
    text = " ".join(proc.stdout.split())  # rich wraps long lines
    assert "stacks unavailable: py-spy does not support Python 3.99.0" in text, text
    assert "fix: upgrade py-spy" in text
    assert len(SessionReader(out).points("tree.cpu")) >= 10


def test_ptrace_denied_midway(shared_tmp: Path, nobody: OtherUser) -> None:
    """sofa-top as an unprivileged user; the target (same user) turns non-dumpable once its
    stacks were sampled, so ptrace is denied from then on. The stack windows say why and how
    to fix it; CPU and memory keep being recorded; the target runs on."""
    out = shared_tmp / "p.sofa"
    env = {"SOFA_TOP_DATA_DIR": str(shared_tmp), "HOME": str(shared_tmp)}
    with running(target_argv("nodump", seconds=600, user=nobody), user=nobody) as target:
        rec = start_sofa("record", "--pid", str(target.pid), "-o", str(out), user=nobody, env=env)
        try:
            wait_until(
                lambda: any(w.samples for w in _stack_windows(out)), 60, "a first sampled window"
            )
            os.kill(target.pid, signal.SIGUSR1)  # from now on, not dumpable
            assert target.stdout is not None and b"NODUMP" in target.stdout.readline()

            def denied() -> list[StackWindow]:
                return [w for w in _stack_windows(out) if w.error and "ptrace denied" in w.error]

            t_denied = wait_until(denied, 60, "a 'ptrace denied' window")[0].ts_end
            wait_until(
                lambda: _cpu_points_after(out, t_denied + 1) >= 5,
                60,
                "CPU points after the denial",
            )
        finally:
            rec.send_signal(signal.SIGINT)
            stdout, stderr = rec.communicate(timeout=60)
        assert target.poll() is None
    assert rec.returncode == CTRL_C, stderr
    no_traceback(stdout, stderr)
    r = SessionReader(out)
    assert r.meta()["end_reason"] == "SIGINT"
    windows = list(r.stack_windows())
    first_denied = next(i for i, w in enumerate(windows) if w.error and "ptrace denied" in w.error)
    assert any(w.samples for w in windows[:first_denied])  # it worked until the target changed
    denied = windows[first_denied]
    assert "sudo" in (denied.hint or "") and "SYS_PTRACE" in (denied.hint or "")
    after = [ts for ts, v, _ in r.points("tree.cpu") if ts > denied.ts_end + 1 and v is not None]
    assert len(after) >= 5


def test_target_stopped_then_continued(tmp_path: Path) -> None:
    """SIGSTOP for ~1.5 s (15 committed points at 10 Hz), then SIGCONT: not mistaken for an
    exit, CPU reads 0 while stopped, stacks come back after, the target finishes its work."""
    out = tmp_path / "s.sofa"
    with running(target_argv("busy", seconds=600)) as target:
        rec = start_sofa("record", "--pid", str(target.pid), "--json", "-o", str(out))
        try:
            wait_committed(out, 10)
            os.kill(target.pid, signal.SIGSTOP)
            stopped_at = time.time()
            n = committed(out)
            wait_committed(out, n + 15)  # 1.5 s at 10 Hz while it is stopped
            os.kill(target.pid, signal.SIGCONT)
            continued_at = time.time()
            wait_until(
                lambda: any(w.samples and w.ts_start > continued_at for w in _stack_windows(out)),
                60,
                "a sampled stack window after SIGCONT",
            )
            wait_until(
                lambda: _cpu_points_after(out, continued_at + 0.3) >= 10,
                60,
                "CPU points after SIGCONT",
            )
        finally:
            rec.send_signal(signal.SIGINT)
            stdout, stderr = rec.communicate(timeout=60)
        assert target.poll() is None  # never taken for an exit, never harmed
        os.kill(target.pid, signal.SIGUSR1)  # now finish the work
        assert target.wait(timeout=30) == 0
        assert target.stdout is not None and b"DONE True" in target.stdout.read()
    assert rec.returncode == CTRL_C, stderr
    assert json.loads(stdout)["end_reason"] == "SIGINT"  # not "target exited"
    r = SessionReader(out)
    cpu = [(ts, v) for ts, v, _ in r.points("tree.cpu") if v is not None]
    during = [v for ts, v in cpu if stopped_at + 0.3 < ts < continued_at - 0.1]
    assert len(during) >= 8 and max(during) < 5, during
    assert any(v > 20 for ts, v in cpu if ts > continued_at + 0.3)
    assert any(w.samples and w.ts_start > continued_at for w in r.stack_windows())
