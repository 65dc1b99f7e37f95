"""Fault matrix, attach: nothing of the target's is ever executed. sofa-top (often root) tells
which Python a target runs from /proc and its files; a program that only calls itself
``python3`` is recorded from outside, never run and never injected into. Process starts are
watched with CPython's audit hooks (``subprocess.Popen``, ``os.exec``, ``os.posix_spawn``,
``os.system``, ``os.fork``): what sofa-top's code starts, it starts through them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from other_uid import GROUP, USER, setpriv

from faults.conftest import IS_ROOT, no_traceback, running, sofa, wait_until
from sofa_top.recording.reader import SessionReader

GCC = shutil.which("gcc")
SETPRIV = shutil.which("setpriv")

# A C program called python3: run with any argument, it appends who ran it to MARKER; run
# with none, it says READY and sleeps until killed.
FAKE_PYTHON = r"""
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc > 1) {
        FILE *f = fopen(MARKER, "a");
        if (f) { fprintf(f, "uid=%d euid=%d argv1=%s\n", getuid(), geteuid(), argv[1]); fclose(f); }
        return 0;
    }
    printf("READY\n");
    fflush(stdout);
    for (;;) pause();
}
"""

# Runs sofa-top's own reading of PID (argv[1]) with every process start recorded; prints what
# it found and what was started, as JSON.
WATCHED = r"""
import json, sys
started = []
WATCH = {"subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.fork",
         "os.forkpty", "pty.spawn"}
def hook(event, args):
    if event in WATCH:
        started.append([event, [str(a) for a in (args[1] if event == "subprocess.Popen"
                                                 else args)][:3]])
sys.addaudithook(hook)
from sofa_top.collectors.agent import AgentServer
from sofa_top.collectors.discovery import is_python_process
from sofa_top.collectors.inject import inject
from sofa_top.collectors.pyversion import identify
pid = int(sys.argv[1])
out = {"identify": repr(identify(pid)), "is_python": is_python_process(pid)}
if sys.argv[2:] == ["inject"]:
    with AgentServer() as server:
        r = inject(pid, server, timeout_s=30)
    out["inject"] = [r.status, r.reason, r.python]
out["started"] = started
print(json.dumps(out))
"""


def _watched(pid: int, *what: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", WATCHED, str(pid), *what],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout)
    return result


@pytest.fixture
def fake_python() -> Iterator[tuple[Path, Path]]:
    """(the compiled ``python3``, the marker it writes when run with arguments), in a fresh
    world-readable directory (nobody may run it) with a world-writable marker directory (any
    user that runs it leaves its mark)."""
    if GCC is None:
        pytest.skip("needs gcc to compile the non-Python program")
    base = Path(tempfile.mkdtemp(prefix="sofa-top-fake-python-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        marks = base / "marks"
        marks.mkdir()
        os.chmod(marks, 0o777)
        marker = marks / "ran"
        src = base / "fake.c"
        src.write_text(FAKE_PYTHON)
        exe = base / "bin" / "python3"
        exe.parent.mkdir()
        os.chmod(exe.parent, 0o755)
        subprocess.run(
            [GCC, f'-DMARKER="{marker}"', "-o", str(exe), str(src)], check=True, timeout=120
        )
        os.chmod(exe, 0o755)
        yield exe, marker
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _ran(marker: Path) -> str:
    return marker.read_text() if marker.exists() else ""


@pytest.mark.skipif(not IS_ROOT, reason="needs root (sofa-top as root, the target as nobody)")
@pytest.mark.skipif(SETPRIV is None, reason="needs setpriv (util-linux) to run as nobody")
def test_a_program_named_python3_of_nobody_is_never_run_by_root(
    tmp_path: Path, fake_python: tuple[Path, Path]
) -> None:
    """The issue's check: root attaches to user nobody's compiled ``python3``. It is never run
    (no marker: not as root, not as nobody, not through anything), never injected into (it runs
    on), and the session records it from outside, saying why there is no agent."""
    exe, marker = fake_python
    out = tmp_path / "fake.sofa"
    with running([*setpriv(USER, GROUP), str(exe)]) as proc:
        wait_until(lambda: os.readlink(f"/proc/{proc.pid}/exe") == str(exe), 30, "the exec")
        rec = sofa("record", "--pid", str(proc.pid), "--duration", "3", "--json", "-o", str(out))
        assert rec.returncode == 0, rec.stderr
        no_traceback(rec.stdout, rec.stderr)
        assert _ran(marker) == "", f"sofa-top ran the target's executable: {_ran(marker)}"
        assert proc.poll() is None, "the target did not survive the attach"
        assert f"no agent in PID {proc.pid}" in rec.stderr and "not Python" in rec.stderr
        summary = json.loads(rec.stdout)
        assert summary["injected"] is False
        assert summary["cpu"]["tree_mean_percent"] is not None  # recorded from outside
        inject = SessionReader(out).meta()["inject"]
        assert inject["status"] == "not-python", inject
        assert str(exe) in inject["reason"] and "no Py_Version" in inject["reason"], inject
        assert [e for e in SessionReader(out).events("agent-error") if "not Python" in e.message]
    assert _ran(marker) == ""


def test_injecting_a_program_named_python3_starts_nothing(
    fake_python: tuple[Path, Path],
) -> None:
    """The same program as sofa-top's own user: reading it, deciding it is not Python and
    declining to inject start no process at all."""
    exe, marker = fake_python
    with running([str(exe)]) as proc:
        found = _watched(proc.pid, "inject")
        assert found["started"] == [], found
        assert found["is_python"] is False, found
        assert "kind='not-python'" in str(found["identify"]), found
        status, reason, _ = found["inject"]  # type: ignore[misc]
        assert status == "not-python" and "not Python" in reason, found
        assert proc.poll() is None
    assert _ran(marker) == ""


def test_the_venvs_python_is_read_not_asked() -> None:
    """The venv's CPython (a shared build: the version is in its libpython) reads as this
    interpreter's version with no process started; injecting it starts only sofa-top's own
    interpreter (the injector helper), never the target's executable."""
    code = "import sys, time; print('READY', flush=True); time.sleep(120)"
    with running([sys.executable, "-c", code]) as proc:
        found = _watched(proc.pid, "inject")
        want = f"version={sys.version_info[:2]!r}"
        assert "implementation='cpython'" in str(found["identify"]), found
        assert want in str(found["identify"]), found
        assert found["is_python"] is True
        status, _, python = found["inject"]  # type: ignore[misc]
        assert status == "injected", found
        assert python == f"cpython {sys.version_info[0]}.{sys.version_info[1]}"
        started = found["started"]
        assert isinstance(started, list) and started, found  # the injector helper
        for event, argv in started:
            assert event == "subprocess.Popen" and argv[0] == sys.executable, found


def _system_python() -> str | None:
    """A statically linked CPython 3.11+ of the system's (Debian's /usr/bin/python3.X)."""
    for minor in range(20, 10, -1):
        path = f"/usr/bin/python3.{minor}"
        if os.path.isfile(path) and os.path.realpath(path) != os.path.realpath(sys.executable):
            return path
    return None


SYSTEM_PYTHON = _system_python()


@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="no /usr/bin/python3.X (3.11+) here")
def test_a_system_python_is_read_from_its_executable() -> None:
    """Debian's interpreter links libpython in: its Py_Version is read from the executable."""
    assert SYSTEM_PYTHON is not None
    minor = int(SYSTEM_PYTHON.rsplit(".", 1)[1])
    code = "import time; print('READY', flush=True); time.sleep(120)"
    with running([SYSTEM_PYTHON, "-I", "-c", code]) as proc:
        found = _watched(proc.pid)
        assert f"version=(3, {minor})" in str(found["identify"]), found
        assert f"Py_Version in {os.path.realpath(SYSTEM_PYTHON)}" in str(found["identify"])
        assert found["started"] == [], found


def _old_cpython() -> str | None:
    for exe in filter(None, (shutil.which(f"python3.{m}") for m in range(10, 5, -1))):
        out = subprocess.run([exe, "-c", "print(1)"], capture_output=True, timeout=60)
        if out.returncode == 0:
            return exe
    return None


def test_an_older_cpython_is_unsupported_and_never_run() -> None:
    """A CPython before 3.11 (no Py_Version): "unsupported", said with its version, and
    nothing is started to learn it."""
    old = _old_cpython()
    if old is None:
        pytest.skip("no CPython 3.6-3.10 on PATH")
    code = "import sys, time; print('READY %d' % sys.version_info[1], flush=True); time.sleep(120)"
    with running([old, "-c", code]) as proc:
        found = _watched(proc.pid, "inject")
        status, reason, python = found["inject"]  # type: ignore[misc]
        assert status == "unsupported" and "older" in reason, found
        assert found["started"] == [], found
        assert found["is_python"] is True
        assert str(python).startswith("cpython 3."), found


@pytest.mark.skipif(not IS_ROOT, reason="needs root (sofa-top as root, the job as nobody)")
@pytest.mark.skipif(SETPRIV is None, reason="needs setpriv (util-linux) to run as nobody")
def test_compare_like_does_not_rerun_another_users_job_as_root(
    tmp_path: Path, fake_python: tuple[Path, Path]
) -> None:
    """``compare --like PID`` re-runs PID's command with its environment (its PATH, its
    LD_PRELOAD): as root, for nobody's job, that would run nobody's program as root. One line
    says to run it as the job's owner; nothing is run."""
    exe, marker = fake_python
    with running([*setpriv(USER, GROUP), str(exe)]) as proc:
        wait_until(lambda: os.readlink(f"/proc/{proc.pid}/exe") == str(exe), 30, "the exec")
        rec = sofa(
            "compare", "--like", str(proc.pid), "--yes", "--configs", "baseline",
            "--repeats", "1", "--steps", "5", "--json", "-o", str(tmp_path / "out"),
        )  # fmt: skip
        assert rec.returncode == 2, rec
        no_traceback(rec.stdout, rec.stderr)
        (line,) = rec.stderr.strip().splitlines()
        assert line.startswith("sofa-top: ") and f"sudo -u {USER}" in line, line
        assert proc.poll() is None
    assert _ran(marker) == ""


def test_the_handed_over_directory_follows_nothing_planted(tmp_path: Path) -> None:
    """What root writes into a directory the target owns (``collectors.handoff``): a file or
    directory already there, or a link in its place, is refused, and what it points at is
    untouched."""
    from sofa_top.collectors import handoff

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "file").write_text("keep")
    os.chmod(victim / "file", 0o600)
    hand = tmp_path / "hand"
    hand.mkdir()
    (hand / "payload.py").symlink_to(victim / "file")
    (hand / "agent").symlink_to(victim)
    fd = handoff.open_dir(hand)
    try:
        with pytest.raises(FileExistsError):
            handoff.write_new(fd, "payload.py", b"x = 1\n")
        with pytest.raises(FileExistsError):
            handoff.make_dirs(fd, "agent", "sofa_top")
        handoff.write_new(fd, "new.py", b"x = 1\n")
        inner = handoff.make_dirs(fd, "fresh", "sofa_top")
        src = Path(__file__).parent
        handoff.copy_tree(src, inner, "copy")
        os.close(inner)
    finally:
        os.close(fd)
    assert (victim / "file").read_text() == "keep"
    assert (victim / "file").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in victim.iterdir()) == ["file"]
    assert (hand / "new.py").stat().st_mode & 0o777 == 0o644
    copied = hand / "fresh" / "sofa_top" / "copy"
    assert (copied / Path(__file__).name).read_bytes() == Path(__file__).read_bytes()
    assert copied.stat().st_mode & 0o777 == 0o755
    swapped = tmp_path / "swapped"
    swapped.symlink_to(victim)  # the directory itself replaced by a link
    with pytest.raises(OSError):
        handoff.open_dir(swapped)


def test_a_314_target_is_injected_only_from_sofa_tops_own_python() -> None:
    """CPython 3.14+ is injected with ``sys.remote_exec``, which needs the target's
    major.minor: it is run by sofa-top's own interpreter when that matches, never by the
    target's executable; else the injection is skipped, saying what would work."""
    from sofa_top.collectors.inject import _helper_cmd, remote_exec_available
    from sofa_top.collectors.pyversion import TargetPython

    own = TargetPython("cpython", (sys.version_info[0], sys.version_info[1]))
    assert remote_exec_available(own) is None
    other = TargetPython("cpython", (3, 14 if sys.version_info[:2] != (3, 14) else 15))
    why = remote_exec_available(other)
    assert why is not None and f"install sofa-top in a Python 3.{other.version[1]}" in why, why
    mine = f"sofa-top runs on cpython {sys.version_info[0]}.{sys.version_info[1]}"
    assert mine in why, why
    cmd = _helper_cmd(4242, 4242, TargetPython("cpython", (3, 14)), Path("/run/payload.py"))
    assert cmd[0] == sys.executable and "/proc/" not in " ".join(cmd), cmd
    assert "sys.remote_exec(4242, '/run/payload.py')" in cmd[-1], cmd
