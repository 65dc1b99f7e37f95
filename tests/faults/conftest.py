"""Shared helpers of the fault matrix: hostile targets, sofa-top runs, session reads.

Everything here drives real processes (the ``sofa-top`` console script, real py-spy, real
SQLite); see ``tests/faults/README.md`` for the matrix.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from other_uid import OtherUser
from procs import read_now as read_now
from procs import wait_for as wait_until
from procs import wait_ready

REPO = Path(__file__).resolve().parents[2]
SOFA_TOP = str(Path(sys.executable).with_name("sofa-top"))
FAULT_TARGET = Path(__file__).with_name("fault_target.py")
WORKLOADS = REPO / "tests" / "workloads"
IS_ROOT = os.geteuid() == 0
NOBODY = 65534

needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root (to switch users or mount)")


def as_user(argv: Sequence[str | bytes], user: OtherUser | None) -> list[str | bytes]:
    """``argv`` run as ``user`` (through setpriv, like conftest.run_cli), or unchanged."""
    return list(argv) if user is None else user.argv(argv)


def target_argv(
    mode: str, *args: str, seconds: float = 60, user: OtherUser | None = None
) -> list[str]:
    """The argv of ``fault_target.py MODE ARGS --seconds S`` (as ``user``: its staged copy,
    which that user can read, under an interpreter it may run)."""
    if user is None:
        argv = [sys.executable, str(FAULT_TARGET)]
    else:
        argv = [str(user.bin / "python"), user.script(FAULT_TARGET.name)]
    return [*argv, mode, *args, "--seconds", str(seconds)]


@contextlib.contextmanager
def running(
    argv: Sequence[str | bytes],
    *,
    ready: bytes | None = b"READY",
    user: OtherUser | None = None,
    **kw: object,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``argv`` in its own session, wait for its ``ready`` line, kill its group after."""
    if user is not None:
        kw.setdefault("env", user.env())
    proc: subprocess.Popen[bytes] = subprocess.Popen(  # type: ignore[call-overload]
        as_user(argv, user),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
        **kw,
    )
    try:
        if ready is not None:
            wait_ready(proc, ready)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def sofa(
    *args: str,
    timeout: float = 90,
    user: OtherUser | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the real ``sofa-top`` to completion (stdin closed, output captured); as ``user``,
    its staged copy."""
    return subprocess.run(
        [SOFA_TOP, *args] if user is None else user.sofa_top(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})} if user is None else user.env(env),
        stdin=subprocess.DEVNULL,
    )


def start_sofa(
    *args: str, user: OtherUser | None = None, env: dict[str, str] | None = None, **kw: object
) -> subprocess.Popen[str]:
    """Start the real ``sofa-top`` in the background (output captured); as ``user``, its
    staged copy."""
    if user is not None:
        kw["env"] = user.env(env)
    elif env is not None:
        kw["env"] = {**os.environ, **env}
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [SOFA_TOP, *args] if user is None else user.sofa_top(*args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def no_traceback(*texts: str) -> None:
    """Nothing sofa-top printed is a Python traceback."""
    for text in texts:
        assert "Traceback" not in text, text


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """Promise 4: a non-zero exit and exactly one line on stderr, never a traceback."""
    assert proc.returncode != 0, proc
    no_traceback(proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def committed(path: Path, series: str = "tree.cpu") -> int:
    """How many points of ``series`` another process can read from the session file now."""
    return read_now(path, lambda r: len(r.points(series)), 0)


def wait_committed(path: Path, n: int, timeout: float = 60, series: str = "tree.cpu") -> None:
    """Wait until ``n`` points of ``series`` are committed to the session file."""
    wait_until(lambda: committed(path, series) >= n, timeout, f"{n} committed {series} points")


def integrity_ok(path: Path) -> bool:
    """SQLite's own check of the file (opened read-only)."""
    import sqlite3

    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return bool(db.execute("PRAGMA integrity_check").fetchone()[0] == "ok")
    finally:
        db.close()


@pytest.fixture(scope="session", autouse=True)
def _no_sessions_in_the_users_data_dir(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[None]:
    """Like the top conftest's per-test data dir, but also for module and session fixtures
    (which run before any per-test fixture)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOFA_TOP_DATA_DIR", str(tmp_path_factory.mktemp("faults-data")))
        yield


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temp dir other users can enter and write (pytest's tmp_path is 0700 all the way)."""
    base = Path(tempfile.mkdtemp(prefix="sofa-top-faults-", dir="/tmp"))
    os.chmod(base, 0o777)
    yield base
    shutil.rmtree(base, ignore_errors=True)


# -- sofa-top SIGKILLed mid-run, launch mode (shared by the sofa-top and agent rows) ----------

KILL_SCENARIO = """
import ctypes, json, os, signal, subprocess, sys, time
import psutil
from pathlib import Path
from sofa_top.recording.reader import SessionReader
# A subreaper: the workload orphaned by the SIGKILL is re-parented to us, so we read its code.
assert ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0
sofa_top, out, workload = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
rec = subprocess.Popen([sofa_top, "record", "-o", str(out), "--", *workload],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def steps():
    try:
        return SessionReader(out).count_steps()
    except Exception:
        return 0
deadline = time.monotonic() + 60
while steps() < 50 and time.monotonic() < deadline:
    time.sleep(0.05)
def runs(p, name):  # argv[1], not anywhere: a forked, not yet exec'd child shows sofa-top's argv
    try:
        argv = p.cmdline()
    except psutil.Error:
        return False
    return len(argv) > 1 and Path(argv[1]).name == name
(child,) = [p for p in psutil.Process(rec.pid).children() if runs(p, "agent_plain.py")]
stdout_file = os.readlink(f"/proc/{child.pid}/fd/1")
environ = open(f"/proc/{child.pid}/environ").read().split("\\0")
socket = dict(v.split("=", 1) for v in environ if "=" in v)["SOFA_TOP_SOCKET"]
# py-spy runs in its own session: it outlives the kill, and its window dir stays behind
spies, spy_dirs = [], []
for p in psutil.Process(rec.pid).children():
    try:
        argv = p.cmdline()
    except psutil.Error:  # a window that just ended
        continue
    if argv and argv[0].endswith("py-spy") and "-o" in argv:
        spies.append(p)
        spy_dirs.append(str(Path(argv[argv.index("-o") + 1]).parent))
killed_at = time.time()
os.kill(rec.pid, signal.SIGKILL)
rec.wait()
_, status = os.waitpid(child.pid, 0)
for spy in spies:  # re-parented to us too
    try:
        os.waitpid(spy.pid, 0)
    except ChildProcessError:
        pass
print(json.dumps({"killed_at": killed_at, "exit_code": os.waitstatus_to_exitcode(status),
                  "stdout_file": stdout_file, "stdout": Path(stdout_file).read_text(),
                  "socket": socket, "spy_dirs": spy_dirs}))
"""


@dataclass
class KilledMidRun:
    """What ``killed_mid_run`` saw."""

    session: Path
    killed_at: float  # time.time() just before the SIGKILL
    exit_code: int  # the orphaned workload's own exit code
    stdout: str  # everything the workload printed, before and after the kill


@pytest.fixture(scope="session")
def killed_mid_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KilledMidRun]:
    """``sofa-top record -- agent_plain.py --exit-code 4`` SIGKILLed while steps stream in."""
    out = tmp_path_factory.mktemp("killed") / "k.sofa"
    workload = [
        sys.executable, str(WORKLOADS / "agent_plain.py"),
        "--steps", "250", "--input-ms", "5", "--compute-ms", "5", "--exit-code", "4",
    ]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", KILL_SCENARIO, SOFA_TOP, str(out), *workload],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    # A SIGKILLed sofa-top cannot clean up: its output, agent-socket and py-spy directories
    # stay.
    shutil.rmtree(Path(result["stdout_file"]).parent, ignore_errors=True)
    shutil.rmtree(Path(result["socket"]).parent, ignore_errors=True)
    for spy_dir in result["spy_dirs"]:
        shutil.rmtree(spy_dir, ignore_errors=True)
    yield KilledMidRun(out, result["killed_at"], result["exit_code"], result["stdout"])
