"""Replay = recording: at the end of a real recording of each mode, the replay's verdict is the
one the recording ended on and ``record --json`` reports (same kind, headline, confidence,
evidence and advice), and the replay knows the mode (launched or attached) and the agent's
state as the recording did."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import WORKLOADS, run_cli

from sofa_top.datamodel.snapshot import Snapshot
from sofa_top.launch import AttachRequest, LaunchRequest, Run, open_attach, open_launch
from sofa_top.recording.replay import ReplaySource
from sofa_top.recording.report import session_summary

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PLAIN = str(WORKLOADS / "agent_plain.py")


def replay_end(path: Path) -> Snapshot:
    """The replay's snapshot at the end of the file (where its cursor starts)."""
    source = ReplaySource(path)
    try:
        return source.snapshot()
    finally:
        source.stop()


def check(path: Path, summary: dict[str, Any], *, launched: bool, agent: bool) -> Snapshot:
    snap = replay_end(path)
    assert snap.verdict is not None
    assert snap.verdict.as_json() == summary["verdict"]  # evidence and confidence included
    assert snap.target.launched is launched
    assert (snap.agent is not None) is agent, snap.agent
    return snap


def live(run: Run, stop_after: threading.Event | None = None) -> list[Snapshot]:
    """Run a session headless with a consumer (as the dashboard does), until the target exits
    or ``stop_after`` is set; the snapshots it was sent."""
    got: list[Snapshot] = []
    run.start(got.append)
    while not run.session.done:
        if stop_after is not None and stop_after.wait(0.1):
            break
        run.session.wait(0.1)
    run.finish("user quit")
    return got


def test_record_of_a_launch(tmp_path: Path) -> None:
    out = tmp_path / "r.sofa"
    cmd = ["--", sys.executable, PLAIN, "--steps", "60", "--input-ms", "15", "--compute-ms", "5"]
    r = run_cli("record", "--json", "-o", str(out), *cmd, timeout=120)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    snap = check(out, summary, launched=True, agent=True)
    assert summary["verdict"]["kind"] == "input-bound"
    assert snap.pipeline is None  # (no tf.data / DataLoader: nothing was described)


def test_record_of_a_failed_launch(tmp_path: Path) -> None:
    out = tmp_path / "f.sofa"
    r = run_cli(
        "record", "--json", "-o", str(out), "--", sys.executable, "-c", "import no_such_mod"
    )
    assert r.returncode == 1, r.stderr
    summary = json.loads(r.stdout)
    check(out, summary, launched=True, agent=True)
    assert summary["verdict"]["headline"].startswith("unknown: the workload failed (exit code 1)")


def test_record_of_an_attach(tmp_path: Path, busy_python: subprocess.Popen[bytes]) -> None:
    out = tmp_path / "a.sofa"
    r = run_cli(
        "record", "--pid", str(busy_python.pid), "--duration", "4", "--json", "-o", str(out),
        timeout=180,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    check(out, summary, launched=False, agent=summary["injected"])


def test_launch_mode_ends_on_the_verdict_replay_shows(tmp_path: Path) -> None:
    out = tmp_path / "l.sofa"
    cmd = (sys.executable, PLAIN, "--steps", "60", "--input-ms", "15", "--compute-ms", "5")
    got = live(open_launch(LaunchRequest(cmd=cmd, mode="launch", output=str(out))))
    summary = session_summary(out)
    assert summary["mode"] == "launch"
    check(out, summary, launched=True, agent=True)
    # the dashboard's last snapshot: the same verdict, the session final
    assert got and not got[-1].recording and got[-1].verdict is not None
    assert got[-1].verdict.as_json() == summary["verdict"]
    same_as_live(out, got[-1])


def same_as_live(path: Path, snap: Snapshot) -> None:
    """The replay at the instant of a live snapshot computes what the hub computed then: the
    verdict, the cores, the stacks' summary (the same window), the exit and the ranks."""
    source = ReplaySource(path)
    try:
        again = source.snapshot_at(snap.ts)
    finally:
        source.stop()
    assert again.ts == snap.ts
    assert again.verdict == snap.verdict
    assert again.cpu_count == snap.cpu_count
    assert again.stacks == snap.stacks
    assert again.stacks_by_thread == snap.stacks_by_thread
    assert again.last_stack_window == snap.last_stack_window
    assert (again.target_exited, again.exit_code) == (snap.target_exited, snap.exit_code)
    assert again.target.launched == snap.target.launched
    assert again.ranks == snap.ranks and again.rank_verdict == snap.rank_verdict


def test_attach_mode(tmp_path: Path, busy_python: subprocess.Popen[bytes]) -> None:
    out = tmp_path / "at.sofa"
    run = open_attach(AttachRequest(pid=busy_python.pid, mode="attach", output=str(out)))
    stop = threading.Event()
    threading.Timer(4.0, stop.set).start()
    got = live(run, stop)
    summary = session_summary(out)
    assert summary["mode"] == "attach"
    check(out, summary, launched=False, agent=summary["injected"])
    assert got[-1].verdict is not None and got[-1].verdict.as_json() == summary["verdict"]
    same_as_live(out, got[-1])
    assert busy_python.poll() is None  # attaching never stops the target
