"""Fault matrix, sofa-top side: killed, signalled, out of disk, denied its directory, run twice,
squeezed into a tiny terminal, left running for a day. What it recorded stays readable and
the workload never notices."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from other_uid import OtherUser

from faults.conftest import (
    IS_ROOT,
    SOFA_TOP,
    KilledMidRun,
    committed,
    integrity_ok,
    no_traceback,
    one_line_error,
    read_now,
    running,
    sofa,
    start_sofa,
    target_argv,
    wait_committed,
    wait_until,
)
from sofa_top.recording.reader import SessionReader

# -- signals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode, sig",
    [
        ("attach", signal.SIGTERM),
        ("attach", signal.SIGINT),
        ("attach", signal.SIGHUP),
        ("launch", signal.SIGINT),
        ("launch", signal.SIGTERM),
        ("launch", signal.SIGHUP),
    ],
    ids=lambda v: v.name if isinstance(v, signal.Signals) else v,
)
def test_signal_finalizes_the_session(tmp_path: Path, mode: str, sig: signal.Signals) -> None:
    """SIGTERM/SIGINT/SIGHUP: the session is closed cleanly (end reason, end time, WAL folded
    into the file, integrity ok). An attached target runs on; a launched one is stopped,
    because stopping sofa-top is how the user stops what it launched."""
    out = tmp_path / "s.sofa"
    with running(target_argv("busy")) as target:
        what = ["--pid", str(target.pid)] if mode == "attach" else ["--", *target_argv("busy")]
        rec = start_sofa("record", "--json", "-o", str(out), *what)
        wait_committed(out, 10)
        rec.send_signal(sig)
        stdout, stderr = rec.communicate(timeout=30)
        attached_alive = target.poll() is None
    assert rec.returncode == 128 + sig, stderr  # a signal stopped sofa-top: 128 + N
    no_traceback(stderr)
    summary = json.loads(stdout)
    assert summary["end_reason"] == sig.name
    meta = SessionReader(out).meta()
    assert meta["end_reason"] == sig.name and meta["ended"] > meta["started"]
    assert integrity_ok(out)
    wal = out.with_name(out.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0  # checkpointed at close
    if mode == "attach":
        assert attached_alive
    else:
        # sofa-top stopped what it launched as Ctrl-C would: a Python dies of the SIGINT
        assert summary["exit_code"] == -signal.SIGINT
        assert SessionReader(out).meta()["stopped_job"] is True


# -- out of disk ------------------------------------------------------------------------------


@dataclass
class DiskFull:
    mode: str
    returncode: int
    stdout: str
    stderr: str
    session: Path
    filled_at: float
    workload_done: bool  # it ran to its end after sofa-top stopped


def _fill(directory: Path) -> None:
    """Write zeros into ``directory`` until the file system says it is full."""
    with open(directory / "filler", "wb", buffering=0) as f:
        chunk = b"\0" * 65536
        try:
            while True:
                f.write(chunk)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 512)


def _record_until_full(mode: str, mnt: Path, marker: Path) -> DiskFull:
    """Record (attach or launch) to ``mnt``, fill it, wait for sofa-top and the workload."""
    out = mnt / "s.sofa"
    # the workload runs until sofa-top has stopped (then it finishes: the test lets it)
    go = marker.with_name(marker.name + "-go")
    code = (
        "import os, time\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
        f"open({str(marker)!r}, 'w').write('done')\n"
    )
    workload = [sys.executable, "-c", code]
    with contextlib.ExitStack() as stack:
        if mode == "attach":
            target = stack.enter_context(running(workload, ready=None))
            what = ["--pid", str(target.pid)]
        else:
            what = ["--", *workload]  # sofa-top's child: only sofa-top may stop it
        rec = start_sofa("record", "--duration", "30", "-o", str(out), *what)
        wait_committed(out, 10)
        _fill(mnt)
        filled_at = time.time()
        stdout, stderr = rec.communicate(timeout=60)
        go.touch()
        # the workload (attached, or launched and left running) finishes on its own
        wait_until(marker.exists, 60, "the workload to finish")
    return DiskFull(mode, rec.returncode, stdout, stderr, out, filled_at, marker.exists())


@pytest.fixture(scope="module", params=["attach", "launch"])
def disk_full(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DiskFull]:
    """sofa-top records to a 2 MiB tmpfs that another process fills to the last byte."""
    if not IS_ROOT:
        pytest.skip("needs root to mount a small tmpfs")
    mnt = tmp_path_factory.mktemp("small-disk")
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True
    )
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.decode().strip()}")
    try:
        yield _record_until_full(request.param, mnt, mnt.parent / f"{mnt.name}-done")
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_full_keeps_the_file_valid_and_the_workload_untouched(disk_full: DiskFull) -> None:
    """Everything committed up to a second before the disk filled is readable; sofa-top
    stops rather than hangs; the workload, attached or launched, runs to its end."""
    assert disk_full.workload_done
    assert integrity_ok(disk_full.session)
    r = SessionReader(disk_full.session)
    last = max(ts for ts, _, _ in r.points("tree.cpu"))
    assert disk_full.filled_at - last <= 1.2, f"last point {disk_full.filled_at - last:.2f} s"
    assert len(r.points("tree.cpu")) >= 10


def test_disk_full_is_one_clear_line(disk_full: DiskFull) -> None:
    """Recording stops with one line saying the disk is full (and, launched, that the workload
    keeps running), and a non-zero exit."""
    no_traceback(disk_full.stdout, disk_full.stderr)
    assert disk_full.returncode != 0
    problems = [ln for ln in disk_full.stderr.splitlines() if ln.startswith("sofa-top:")]
    assert len(problems) == 1 and "disk is full" in problems[0], disk_full.stderr
    assert str(disk_full.session) in problems[0]
    if disk_full.mode == "launch":
        assert "keeps running" in problems[0]


# -- unwritable session directory -------------------------------------------------------------


@pytest.mark.parametrize("mode", ["attach", "launch"])
def test_unwritable_session_directory(
    shared_tmp: Path, mode: str, request: pytest.FixtureRequest
) -> None:
    """One line, non-zero exit; an attached target runs on, a command is never started."""
    # root writes anywhere; an ordinary user does not
    user: OtherUser | None = request.getfixturevalue("nobody") if IS_ROOT else None
    data = shared_tmp / "read-only"
    data.mkdir()
    os.chmod(data, 0o555)
    env = {"SOFA_TOP_DATA_DIR": str(data), "HOME": str(shared_tmp)}
    marker = shared_tmp / "the-command-ran"
    if mode == "launch":
        cmd = ["--", "/bin/sh", "-c", f"echo ran > {shlex.quote(str(marker))}"]
        proc = sofa("record", *cmd, user=user, env=env)
        assert not marker.exists()
    else:
        with running(target_argv("busy", user=user), user=user) as target:
            proc = sofa("record", "--pid", str(target.pid), user=user, env=env)
            assert target.poll() is None
    line = one_line_error(proc)
    assert "cannot write session file" in line and str(data) in line
    assert "ermission denied" in line


# -- two instances ----------------------------------------------------------------------------


def test_two_instances_attach_to_one_pid(tmp_path: Path) -> None:
    """Both record everything (their own files, their own py-spy); the target runs on."""
    files = [tmp_path / f"{i}.sofa" for i in range(2)]

    def sampled(path: Path) -> bool:
        samples = lambda r: any(c.count for w in r.stack_windows() for c in w.stacks)  # noqa: E731
        return committed(path) >= 20 and read_now(path, samples, False)

    with running(target_argv("busy")) as target:
        args = ("record", "--pid", str(target.pid), "--duration", "600", "--json")
        recs = [start_sofa(*args, "-o", str(f)) for f in files]
        # both sample the target's stacks (a loaded machine may take seconds to get there); an
        # instance that exits first, or never gets there, fails the test with what it printed
        for f, rec in zip(files, recs, strict=True):
            with contextlib.suppress(AssertionError):
                wait_until(lambda f=f, r=rec: sampled(f) or r.poll() is not None, 120, str(f))
            if not sampled(f):
                for r in recs:
                    r.kill()
                said = [r.communicate(timeout=30)[1][-3000:] for r in recs]
                pytest.fail(f"{f}: no stack samples and 20 CPU points (exit {rec.poll()}): {said}")
        for r in recs:
            r.send_signal(signal.SIGINT)
        outs = [r.communicate(timeout=60) for r in recs]
        assert target.poll() is None
    for rec, (stdout, stderr) in zip(recs, outs, strict=True):
        assert rec.returncode == 128 + signal.SIGINT, stderr
        summary = json.loads(stdout)
        assert summary["end_reason"] == "SIGINT"
        assert summary["stacks"]["thread_samples"] > 0
        # what the target runs (threads that wait, the other instance's agent among them
        # while it is attached, are idle)
        busy = [f["function"] for f in summary["stacks"]["top"] if f["class"] != "idle"]
        assert busy[:1] == ["fault_spin"], summary["stacks"]["top"]
        assert len(SessionReader(Path(summary["session"])).points("tree.cpu")) >= 20


# -- SIGKILL of sofa-top (launched workload; see conftest.killed_mid_run) -------------------


def test_sigkill_of_sofa_top_keeps_data_to_the_last_second(killed_mid_run: KilledMidRun) -> None:
    """The session opens afterwards with steps, counters and output up to <= 1 s (plus one
    sampling interval) before the kill; it was not finalized (it really was killed)."""
    r = SessionReader(killed_mid_run.session)
    assert integrity_ok(killed_mid_run.session)
    last_point = max(ts for ts, _, _ in r.points("tree.cpu"))
    last_step = max(s.ts for s in r.steps())
    for what, ts in (("point", last_point), ("step", last_step)):
        assert killed_mid_run.killed_at - ts <= 1.2, f"last {what} {killed_mid_run.killed_at - ts}"
    assert r.count_steps() >= 50
    assert "ended" not in r.meta()


# -- a small terminal -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_terminal_resized_to_40x12_and_back() -> None:
    """The dashboard under tmux: 160x48 -> 40x12 says "too small" (recording goes on) -> back
    to 160x48 redraws the panes; q still saves the session. The target is the unicode one
    (wide CJK thread name, a non-UTF-8 process name), the classic way to break a redraw."""
    from tmux_term import EXIT_MARK, Tmux, saved_session

    tmux = Tmux()
    sessions = Path(os.environ["SOFA_TOP_DATA_DIR"]) / "sessions"
    try:
        with running(target_argv("unicode")) as target:
            tmux.start(f"{shlex.quote(SOFA_TOP)} attach {target.pid}")
            tmux.wait_for(lambda s: "fault_spin" in s and "工作-线程" in s, 60, "the hot thread")
            (live,) = wait_until(lambda: list(sessions.glob("*.sofa")), 30, "the session file")
            tmux.tmux("resize-window", "-t", "0", "-x", "40", "-y", "12")
            screen = tmux.wait_for(lambda s: "too small" in s, 60, "the too-small notice")
            assert "40x12" in screen
            small = committed(live)
            wait_committed(live, small + 10)  # recording goes on while the notice shows
            assert "too small" in tmux.screen()
            tmux.tmux("resize-window", "-t", "0", "-x", "160", "-y", "48")
            tmux.wait_for(
                lambda s: "fault_spin" in s and "too small" not in s, 60, "the panes again"
            )
            tmux.keys("q")
            screen = tmux.wait_for(lambda s: EXIT_MARK in s, 60, "sofa-top to exit")
            assert f"{EXIT_MARK} 0" in screen
            no_traceback(screen)
            path = saved_session(screen)
            assert target.poll() is None
        assert path == live
        assert committed(path) >= small + 10
    finally:
        tmux.kill()


# -- a day in seconds -------------------------------------------------------------------------


def test_a_24_hour_session_keeps_memory_flat() -> None:
    """24 simulated hours through the real session hub, store and snapshot builder (a
    synthetic clock drives the samples; see day_in_seconds.py): RSS after the first 4 hours
    grows by at most 10% to the end, nothing is dropped, the file covers the whole day."""
    script = Path(__file__).with_name("day_in_seconds.py")
    argv = [sys.executable, str(script), "--hours", "24", "--tick", "10"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    rss = result["rss_mib"]  # one reading per simulated hour
    assert len(rss) == 24
    growth = max(rss[4:]) / rss[3] - 1
    assert growth <= 0.10, f"RSS {rss[3]:.1f} -> {max(rss[4:]):.1f} MiB ({growth:+.1%}): {rss}"
    assert result["dropped"] == 0
    assert result["covered_h"] >= 23.9
