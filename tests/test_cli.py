"""The real ``sofa-top`` command against real processes: bad input is one line, never a
traceback; record works headless; the session survives SIGKILL and closes cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from conftest import SOFA_TOP, run_cli, validate_record_json
from faults.conftest import wait_committed
from other_uid import OtherUser

from sofa_top import __version__
from sofa_top.recording.reader import SessionReader


def _one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode != 0, proc
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_version() -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"sofa-top {__version__}"


def test_the_cli_imports_no_framework() -> None:
    """Every command builds the whole parser, compare's included: that must not import torch
    or tensorflow (optional dependencies, and seconds of start-up for every command)."""
    code = (
        "import sys; from sofa_top.cli.main import build_parser; build_parser(); "
        "print([m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "args, expected",
    [
        (["attach"], "required"),
        (["attach", "abc"], "not a PID"),
        (["attach", "-5"], "PID"),
        (["attach", "1", "--interval", "0"], "positive"),
        (["attach", "1", "--stack-rate", "nan"], "positive"),
        (["record", "--pid", "1", "--duration", "-1"], "duration"),
        (["record"], "--pid"),
        (["--bogus"], "unrecognized"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_flags(args: list[str], expected: str) -> None:
    assert expected in _one_line_error(run_cli(*args))


@pytest.mark.parametrize("cmd", ["attach", "record"])
def test_unknown_pid(cmd: str) -> None:
    pid = 4_000_000  # above the default pid_max, so it cannot exist
    args = [cmd, str(pid)] if cmd == "attach" else [cmd, "--pid", str(pid)]
    assert f"no such process: PID {pid}" in _one_line_error(run_cli(*args))


def test_zombie() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # exited but not reaped: a zombie
        with open(f"/proc/{child.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.05)
    try:
        assert "zombie" in _one_line_error(run_cli("attach", str(child.pid)))
    finally:
        child.wait()


def test_unwritable_output(tmp_path: Path, busy_python: subprocess.Popen[bytes]) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    line = _one_line_error(
        run_cli("record", "--pid", str(busy_python.pid), "-o", str(blocker / "s.sofa"))
    )
    assert "cannot write session file" in line
    existing = tmp_path / "existing.sofa"
    existing.write_text("keep me")
    line = _one_line_error(run_cli("record", "--pid", str(busy_python.pid), "-o", str(existing)))
    assert "already exists" in line and existing.read_text() == "keep me"


def test_record_json_busy_loop(tmp_path: Path, busy_python: subprocess.Popen[bytes]) -> None:
    out = tmp_path / "busy.sofa"
    me = psutil.Process(busy_python.pid)
    cpu0, t0 = sum(me.cpu_times()[:2]), time.monotonic()
    proc = run_cli(
        "record", "--pid", str(busy_python.pid), "--duration", "4", "--json", "-o", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    validate_record_json(summary)
    assert summary["session"] == str(out) and summary["target"]["pid"] == busy_python.pid
    assert summary["end_reason"] == "duration reached"
    assert 3.5 <= summary["duration_s"] <= 8
    # What the kernel says the loop used over the same span (other tests may share the cores).
    truth = 100 * (sum(me.cpu_times()[:2]) - cpu0) / (time.monotonic() - t0)
    assert summary["cpu"]["tree_mean_percent"] == pytest.approx(truth, abs=25)
    assert summary["gpu"] is None or summary["gpu"]["devices"] == []
    top = summary["stacks"]["top"][0]
    assert top["function"] == "spin_here" and top["own_pct"] > 50
    assert summary["stacks"]["split"]["python"] > 0.4


def test_record_non_python_target(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        proc = run_cli(
            "record",
            "--pid",
            str(sleeper.pid),
            "--duration",
            "3",
            "--json",
            "-o",
            str(tmp_path / "s.sofa"),
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    validate_record_json(summary)
    assert summary["cpu"]["tree_mean_percent"] is not None  # CPU/memory still recorded
    assert "not a Python process" in (summary["stacks"]["error"] or "")


def test_record_stops_when_target_exits(tmp_path: Path) -> None:
    """The target exits (when the test closes its stdin, once recording is under way)."""
    out = tmp_path / "s.sofa"
    short = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        rec = subprocess.Popen(
            [SOFA_TOP, "record", "--pid", str(short.pid), "--json", "-o", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_committed(out, 5)
        assert short.stdin is not None
        short.stdin.close()
        stdout, stderr = rec.communicate(timeout=60)
    finally:
        short.kill()
        short.wait()
    assert rec.returncode == 0, stderr
    assert json.loads(stdout)["end_reason"] == "target exited"


def test_sigkill_keeps_data_to_the_last_second(
    tmp_path: Path, busy_python: subprocess.Popen[bytes]
) -> None:
    out = tmp_path / "killed.sofa"
    rec = subprocess.Popen(
        [SOFA_TOP, "record", "--pid", str(busy_python.pid), "-o", str(out)],
        stderr=subprocess.DEVNULL,
    )
    wait_committed(out, 20)  # ~10 Hz for a few seconds
    killed_at = time.time()
    os.kill(rec.pid, signal.SIGKILL)
    rec.wait()
    r = SessionReader(out)
    _t0, t1 = r.time_range() or (0.0, 0.0)
    assert killed_at - t1 <= 1.2, f"last point {killed_at - t1:.2f} s before the kill"
    assert len(r.points("tree.cpu")) >= 20  # ~10 Hz for several seconds
    assert "ended" not in r.meta()  # it really was killed, not finalized


def test_sigterm_finalizes(tmp_path: Path, busy_python: subprocess.Popen[bytes]) -> None:
    out = tmp_path / "term.sofa"
    rec = subprocess.Popen(
        [SOFA_TOP, "record", "--pid", str(busy_python.pid), "-o", str(out), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_committed(out, 10)
    rec.send_signal(signal.SIGTERM)
    stdout, stderr = rec.communicate(timeout=30)
    # a signal that stops sofa-top: 128 + N, as a shell reports it
    assert rec.returncode == 128 + signal.SIGTERM and "Traceback" not in stderr
    assert json.loads(stdout)["end_reason"] == "SIGTERM"
    meta = SessionReader(out).meta()
    assert meta["end_reason"] == "SIGTERM" and meta["ended"] > meta["started"]
    assert busy_python.poll() is None  # the target is untouched


@pytest.mark.parametrize("cmd", ["attach", "record"])
def test_pid_you_may_not_trace(
    cmd: str, busy_python: subprocess.Popen[bytes], nobody: OtherUser
) -> None:
    """sofa-top as 'nobody' against a root-owned process: the kernel refuses to let it read
    the process (the same check that guards ptrace), so it says so and how to fix it."""
    # pytest's tmp_path lives under a 0700 root directory that 'nobody' cannot enter.
    with tempfile.TemporaryDirectory(prefix="sofa-top-nobody-") as out_dir:
        os.chmod(out_dir, 0o777)
        args = [cmd, str(busy_python.pid)]
        if cmd == "record":
            args = [cmd, "--pid", str(busy_python.pid)]
        proc = run_cli(*args, user=nobody, env={"SOFA_TOP_DATA_DIR": out_dir, "HOME": out_dir})
    line = _one_line_error(proc)
    assert "permission denied" in line and "root" in line and "sudo" in line
    assert busy_python.poll() is None
