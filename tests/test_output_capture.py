"""Workload output reaches the session live, without PYTHONUNBUFFERED, and survives a stop."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from conftest import WORKLOADS, log_lines

from sofa_top.datamodel.snapshot import Snapshot
from sofa_top.launch import LaunchRequest, Sampling, open_launch
from sofa_top.recording.reader import SessionReader

pytestmark = pytest.mark.timeout(120)


def _wait(predicate: object, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_lines_arrive_live_a_progress_bar_is_one_line_and_a_stop_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    go = tmp_path / "go"
    req = LaunchRequest(
        cmd=(sys.executable, str(WORKLOADS / "printer.py"), str(go)),
        output=str(tmp_path / "s.db"),
        sampling=Sampling(stacks=False),
    )
    run = open_launch(req)
    snaps: list[Snapshot] = []
    run.start(snaps.append)
    try:
        # the first line is in the session while the workload still waits for us
        assert _wait(lambda: "first line" in log_lines(run.session_path)), "line never arrived"
        assert run.popen is not None and run.popen.poll() is None
        go.touch()
        # "the end" has no newline: the agent flushes it, the live view shows it unfinished
        assert _wait(
            lambda: "the end" in [e.message for s in snaps[-1:] for e in s.log_progress]
        ), [e.message for e in snaps[-1].logs[-3:]]
        assert run.popen.poll() is None
    finally:
        run.finish("user quit")  # SIGTERM, as quitting the dashboard does
    reader = SessionReader(Path(run.session_path))
    try:
        logs = reader.events("log")
        progress = reader.events("log-progress")
        meta = reader.meta()
    finally:
        reader.close()
    out = [e.message for e in logs if e.data["stream"] == "stdout"]
    err = [e.message for e in logs if e.data["stream"] == "stderr"]
    # each line printed is one event; the last one, without its newline, survived the SIGTERM
    assert out == ["first line", "after the bar", "isatty=False", "line_buffering=True", "the end"]
    bar = [line for line in err if "bar" in line]
    assert len(bar) == 1, err  # 500 rewrites of one line: one line, its final text
    assert "500/500" in bar[0]
    assert len(progress) <= 10  # the live view's updates: about one a second, not 500
    assert meta["end_reason"] == "user quit"
