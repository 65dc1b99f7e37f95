"""Fault matrix, attach with injection: "never harms the target". Each row is a real process
that sofa-top injects (or tries to inject) the agent into; whatever happens, the target's
output and exit code are its own, and after sofa-top leaves nothing of the agent remains
(no thread, no ``sofa_top`` module, ``sys.path`` and ``sys.meta_path`` as they were)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from other_uid import OtherUser
from procs import read_line

from faults.attach_helpers import ATTACH_TARGET, sofa_threads, value, wait_detached
from faults.conftest import (
    no_traceback,
    one_line_error,
    running,
    sofa,
    start_sofa,
    wait_until,
)
from sofa_top.collectors.inject import tracer_of
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.report import session_summary


def _target(mode: str, stop: Path, *extra: str, python: str = sys.executable) -> list[str]:
    return [python, str(ATTACH_TARGET), mode, "--stop", str(stop), "--exit-code", "5", *extra]


# where the injection's bound is not what a test checks (5 s by default: two loaded runs found
# no agent in 60 s, cause unseen; _wait_for_agent now says what sofa-top printed)
INJECT_BOUND = "60"


def _wait_for_agent(rec: subprocess.Popen[str], pid: int) -> None:
    """Until py-spy sees the agent's thread in ``pid``; if it never does, what ``rec`` said."""
    try:
        wait_until(lambda: bool(sofa_threads(pid)), 90, "the agent")
    except AssertionError as e:
        rec.kill()
        raise AssertionError(f"{e}; sofa-top printed: {rec.communicate(timeout=30)[1]}") from e


def _finish(proc: subprocess.Popen[bytes], stop: Path) -> str:
    """Let the target end; its exit code is its own and nothing of the agent is left."""
    stop.touch()
    assert proc.wait(timeout=60) == 5
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    assert value(out, "THREADS") == "MainThread", out
    assert value(out, "SOFA_MODULES") == "[]", out
    assert "SYSPATH_SAME=True META_PATH_SAME=True" in out, out
    assert "DONE True" in out
    return out


def _record(pid: int, out: Path, *extra: str, user: str | None = None, **kw: object) -> str:
    proc = sofa(
        "record", "--pid", str(pid), "--duration", "3", "--json", "-o", str(out), *extra,
        user=user, **kw,  # type: ignore[arg-type]
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    no_traceback(proc.stdout, proc.stderr)
    json.loads(proc.stdout)
    return proc.stderr


@pytest.fixture
def stop(tmp_path: Path) -> Iterator[Path]:
    """The file that tells a target to finish."""
    yield tmp_path / "stop"


@pytest.mark.parametrize("mode", ["busy", "sleep", "cblock"])
def test_inject_then_detach_leaves_nothing(tmp_path: Path, stop: Path, mode: str) -> None:
    """Busy in Python, blocked in sleep, blocked in a C call (GIL released): injected, hooked,
    detached when the recording ends; the target finishes as without sofa-top."""
    with running(_target(mode, stop), stderr=subprocess.PIPE) as proc:
        err = _record(proc.pid, tmp_path / "a.sofa")
        assert f"agent injected into PID {proc.pid}" in err, err
        wait_detached(proc.pid, "the agent's thread to go")
        _finish(proc, stop)
        assert proc.stderr is not None and proc.stderr.read() == b""
    events = SessionReader(tmp_path / "a.sofa").events("agent-connected")
    assert any(e.data.get("mode") == "attach" for e in events)


def test_attach_again_works_and_a_second_concurrent_attach_is_refused(
    tmp_path: Path, stop: Path
) -> None:
    with running(_target("sleep", stop)) as proc:
        first = start_sofa(
            "record", "--pid", str(proc.pid), "-o", str(tmp_path / "1.sofa"),
            "--inject-timeout", INJECT_BOUND,
        )  # fmt: skip
        try:
            _wait_for_agent(first, proc.pid)
            second = sofa(
                "record", "--pid", str(proc.pid), "--duration", "2", "-o", str(tmp_path / "2.sofa")
            )
            # refused in one line; the second session still records from outside
            assert second.returncode == 0, second.stderr
            no_traceback(second.stdout, second.stderr)
            (line,) = [ln for ln in second.stderr.splitlines() if "agent" in ln]
            assert "already runs a sofa-top agent" in line and "second concurrent" in line, line
        finally:
            first.terminate()
            first.communicate(timeout=60)
        wait_detached(proc.pid, "the first agent to detach")
        err = _record(proc.pid, tmp_path / "3.sofa")  # attaching again works
        assert "agent injected" in err
        wait_detached(proc.pid, "the second agent to detach")
        _finish(proc, stop)


def test_sofa_top_sigkilled_the_agent_detaches(tmp_path: Path, stop: Path) -> None:
    """sofa-top SIGKILLed while attached: the socket closes, the agent restores and goes."""
    # a SIGKILLed sofa-top cannot remove its socket directory: it goes to a runtime dir of
    # this test's own (short: a socket path has at most 107 bytes), removed here
    runtime = Path(tempfile.mkdtemp(prefix="sofa-k-", dir="/tmp"))
    try:
        with running(_target("busy", stop)) as proc:
            rec = start_sofa(
                "record", "--pid", str(proc.pid), "-o", str(tmp_path / "k.sofa"),
                "--inject-timeout", INJECT_BOUND, env={"XDG_RUNTIME_DIR": str(runtime)},
            )  # fmt: skip
            _wait_for_agent(rec, proc.pid)
            rec.kill()
            rec.communicate(timeout=30)
            wait_detached(proc.pid, "the agent to detach")
            _finish(proc, stop)
        (left,) = runtime.glob("sofa-top-*")  # what the killed sofa-top left: nothing else
        assert (left / "agent.sock").exists(), list(left.iterdir())
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def test_target_holds_the_gil_in_a_long_c_call(tmp_path: Path, stop: Path) -> None:
    """The payload cannot run until the C call returns: the injection gives up at its bound,
    the session goes on from outside, and the late payload finds its token expired."""
    with running(_target("gil", stop, "--gil-s", "8"), stderr=subprocess.PIPE) as proc:
        err = _record(proc.pid, tmp_path / "g.sofa", "--inject-timeout", "1")
        assert "no agent in PID" in err and "gave up" in err, err
        assert proc.stdout is not None
        assert read_line(proc, 60).startswith(b"C CALL DONE")
        # the late payload ran (the C call is over) and did nothing
        wait_until(lambda: sofa_threads(proc.pid) == [], 30, "py-spy to read the target")
        out = _finish(proc, stop)
        assert proc.stderr is not None and proc.stderr.read() == b"", out
    msgs = [e.message for e in SessionReader(tmp_path / "g.sofa").events("agent-error")]
    assert any("gave up" in m for m in msgs), msgs


def test_target_exits_during_injection(tmp_path: Path) -> None:
    """Whatever the race gives (injected, or gone first), sofa-top says so in at most one
    line, records, and the target's exit code is its own."""
    argv = [sys.executable, str(ATTACH_TARGET), "exit", "--exit-after", "0.3", "--exit-code", "6"]
    with running(argv) as proc:
        rec = sofa("record", "--pid", str(proc.pid), "--json", "-o", str(tmp_path / "e.sofa"))
        assert proc.wait(timeout=30) == 6
    no_traceback(rec.stdout, rec.stderr)
    # recorded (an outside-only session, or injected in time), or gone first: one line, exit 2
    assert len(rec.stderr.strip().splitlines()) <= 1, rec.stderr
    assert rec.returncode == 0 or (rec.returncode == 2 and rec.stderr.strip()), rec


def test_zombie_is_refused_in_one_line(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_until(lambda: _state(child.pid) == "Z", 30, "a zombie")
    try:
        line = one_line_error(sofa("record", "--pid", str(child.pid)))
        assert "zombie" in line
    finally:
        child.wait()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def test_not_python_keeps_an_outside_session(tmp_path: Path) -> None:
    with running(["sh", "-c", "echo READY; while :; do sleep 0.1; done"]) as proc:
        err = _record(proc.pid, tmp_path / "n.sofa")
    assert f"no agent in PID {proc.pid}" in err and "not Python" in err, err
    summary = session_summary(tmp_path / "n.sofa")
    assert summary["injected"] is False and summary["mode"] == "record"


INJECT_AS_NOBODY = """
import sys
from sofa_top.collectors.agent import AgentServer
from sofa_top.collectors.inject import inject
with AgentServer() as server:
    r = inject(int(sys.argv[1]), server, timeout_s=3)
print(r.status, r.reason)
"""


def test_ptrace_denied(shared_tmp: Path, nobody: OtherUser) -> None:
    """sofa-top as nobody, the target (nobody too) non-dumpable: ptrace is denied. No agent
    and no stacks, each said with its fix (root, ``ptrace_scope``), and the session records what
    /proc still shows (CPU); the injector itself says "denied"; the target runs on and exits
    with its own code. (Both run nobody's staged, world-readable copy: a clone in a 0700
    directory is out of nobody's reach.)"""
    stop = shared_tmp / "stop"
    target = [nobody.script(ATTACH_TARGET.name), *_target("sleep", stop)[2:]]
    code = (
        "import ctypes, runpy, sys; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); "
        f"sys.argv = {target!r}; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    env = {"SOFA_TOP_DATA_DIR": str(shared_tmp), "HOME": str(shared_tmp)}
    out = shared_tmp / "d.sofa"
    with running([str(nobody.bin / "python"), "-c", code], user=nobody, ready=b"READY") as proc:
        rec = sofa(
            "record", "--pid", str(proc.pid), "--duration", "4", "--json", "-o", str(out),
            user=nobody, env=env,
        )  # fmt: skip
        assert rec.returncode == 0, rec.stderr
        no_traceback(rec.stdout, rec.stderr)
        assert f"no agent in PID {proc.pid}" in rec.stderr, rec.stderr
        assert "permission denied" in rec.stderr and "ptrace_scope" in rec.stderr, rec.stderr
        summary = json.loads(rec.stdout)
        assert "ptrace denied" in (summary["stacks"]["error"] or ""), summary["stacks"]
        assert summary["cpu"]["tree_mean_percent"] is not None, summary["cpu"]
        direct = subprocess.run(
            nobody.python_argv("-c", INJECT_AS_NOBODY, str(proc.pid)),
            capture_output=True, text=True, timeout=60, env=nobody.env(env),
        )  # fmt: skip
        assert direct.stdout.startswith("denied "), direct
        assert "ptrace_scope" in direct.stdout and "root" in direct.stdout
        assert proc.poll() is None
        stop.touch()
        assert proc.wait(timeout=60) == 5


def test_target_of_another_user(shared_tmp: Path, nobody: OtherUser) -> None:
    """sofa-top as root, the target as nobody: the agent is injected, its socket directory
    belongs to nobody (0700), and it detaches leaving nothing."""
    stop = shared_tmp / "stop"
    target = [str(nobody.bin / "python"), nobody.script(ATTACH_TARGET.name)]
    with running([*target, *_target("sleep", stop)[2:]], user=nobody) as proc:
        err = _record(proc.pid, shared_tmp / "u.sofa")
        assert f"agent injected into PID {proc.pid}" in err, err
        wait_detached(proc.pid, "the agent to detach")
        _finish(proc, stop)


def test_target_in_a_virtualenv_without_sofa_top(tmp_path: Path, stop: Path) -> None:
    """The agent is stdlib only and loaded from sofa-top's install by path: a bare venv works,
    and its sys.path never sees sofa-top's site-packages."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    # (not from the repository: its folder would put sofa_top on the path)
    check = subprocess.run([python, "-c", "import sofa_top"], capture_output=True, cwd=tmp_path)
    assert check.returncode != 0  # the venv really lacks sofa-top
    with running(_target("busy", stop, python=python), cwd=tmp_path) as proc:
        err = _record(proc.pid, tmp_path / "v.sofa")
        assert f"agent injected into PID {proc.pid}" in err, err
        wait_detached(proc.pid, "the agent to detach")
        _finish(proc, stop)


PYPY = shutil.which("pypy3")


@pytest.mark.skipif(PYPY is None, reason="Debian's pypy3 is not installed (.ci/run installs it)")
def test_pypy_is_an_unsupported_python(tmp_path: Path, stop: Path) -> None:
    assert PYPY is not None
    with running(_target("sleep", stop, python=PYPY)) as proc:
        err = _record(proc.pid, tmp_path / "pypy.sofa")
        assert "not CPython" in err, err
        stop.touch()
        assert proc.wait(timeout=60) == 5


def test_no_inject_keeps_outside_only_mode(tmp_path: Path, stop: Path) -> None:
    with running(_target("sleep", stop)) as proc:
        err = _record(proc.pid, tmp_path / "o.sofa", "--no-inject")
        assert "agent" not in err, err
        assert not SessionReader(tmp_path / "o.sofa").events("agent-connected")
        _finish(proc, stop)


HOLD = """
import ctypes, sys, time
pid, seconds = int(sys.argv[1]), float(sys.argv[2])
if ctypes.CDLL(None, use_errno=True).ptrace(0x4206, pid, None, None) != 0:  # PTRACE_SEIZE
    sys.exit(f"cannot seize {pid}: errno {ctypes.get_errno()}")
print("HELD", flush=True)
time.sleep(seconds)  # the kernel lets the target go when this tracer exits
"""


def _held(pid: int, seconds: float) -> subprocess.Popen[bytes]:
    """Another tracer (as a debugger or ``py-spy dump`` is) on ``pid``'s main thread, for
    ``seconds``: the target runs on (SEIZE stops nothing), but no second tracer may attach."""
    tracer = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(pid), str(seconds)], stdout=subprocess.PIPE
    )
    assert read_line(tracer, 60).startswith(b"HELD")
    assert tracer_of(pid) == tracer.pid
    return tracer


def test_another_tracer_for_a_moment_then_the_agent(tmp_path: Path, stop: Path) -> None:
    """A tracer holding the target when sofa-top injects (a py-spy dump, say) is waited out:
    the injector's attach would fail as if ptrace were denied."""
    with running(_target("sleep", stop)) as proc:
        tracer = _held(proc.pid, 1.5)
        err = _record(proc.pid, tmp_path / "t.sofa", "--inject-timeout", INJECT_BOUND)
        assert tracer.wait(60) == 0
        assert f"agent injected into PID {proc.pid}" in err, err
        wait_detached(proc.pid, "the agent to detach")
        _finish(proc, stop)


def test_another_tracer_throughout_is_named(tmp_path: Path, stop: Path) -> None:
    """Held past the bound: one line names the tracer (not "denied": root may trace), the
    session records from outside, and the target runs on untouched."""
    with running(_target("sleep", stop)) as proc:
        tracer = _held(proc.pid, 600)
        try:
            err = _record(proc.pid, tmp_path / "h.sofa", "--inject-timeout", "2")
        finally:
            tracer.kill()
            tracer.wait(60)
        assert f"no agent in PID {proc.pid}" in err, err
        assert f"traced by PID {tracer.pid} (python" in err and "one tracer at a time" in err
        assert "ptrace_scope" not in err, err
        _finish(proc, stop)
