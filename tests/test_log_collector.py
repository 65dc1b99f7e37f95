"""Workload output is kept, bounded, and never blocks or endangers the workload."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

from procs import wait_for

from sofa_top.collectors.logs import MAX_LINE, MAX_LINES_PER_S, LogCollector
from sofa_top.datamodel.samples import Event, Sample


def _run(code: str, tmp: Path, timeout: float = 60) -> tuple[list[Event], LogCollector, int]:
    paths = {"stdout": tmp / "out.log", "stderr": tmp / "err.log"}
    with paths["stdout"].open("wb") as out, paths["stderr"].open("wb") as err:
        p = subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=err)
    col = LogCollector(paths)
    got: list[Sample] = []
    stop = threading.Event()
    t = threading.Thread(target=col.run, args=(got.append, stop))
    t.start()
    rc = p.wait(timeout)
    stop.set()  # as the session does once the target has exited
    t.join(30)
    assert not t.is_alive()
    return [s for s in got if isinstance(s, Event)], col, rc


def test_lines_from_both_streams_and_partial_last_line(tmp_path: Path) -> None:
    events, _, rc = _run(
        "import sys; print('hello'); print('oops', file=sys.stderr); "
        "sys.stdout.write('no newline é'); sys.exit(3)",
        tmp_path,
    )
    logs = {(e.data["stream"], e.message) for e in events if e.kind == "log"}
    assert logs == {("stdout", "hello"), ("stderr", "oops"), ("stdout", "no newline é")}
    assert rc == 3


def test_flood_is_bounded_and_counted(tmp_path: Path) -> None:
    events, col, rc = _run(
        "for i in range(200_000): print(i, 'x' * 50)\nprint('y' * 100_000)", tmp_path
    )
    assert rc == 0
    logs = [e for e in events if e.kind == "log"]
    per_second = Counter(int(e.ts) for e in logs)  # the collector's own one-second buckets
    assert max(per_second.values()) <= MAX_LINES_PER_S, per_second
    assert col.kept + col.dropped == 200_001  # the 100k-char line is cut, not split
    assert all(len(e.message) <= MAX_LINE for e in logs)
    dropped = [e for e in events if e.kind == "log-dropped"]
    assert dropped and dropped[-1].data["dropped"] == col.dropped


def test_a_long_line_read_in_two_pieces_is_one_line(tmp_path: Path) -> None:
    """A line longer than MAX_LINE whose newline arrives after the collector read its start:
    kept once (cut), its rest is not a line of its own. (The flood above hits this only when
    the writer is caught mid-line, so here the two halves are written on either side of a
    read.)"""
    out = tmp_path / "out.log"
    out.write_bytes(b"")
    col = LogCollector({"stdout": out})
    got: list[Sample] = []
    stop = threading.Event()
    t = threading.Thread(target=col.run, args=(got.append, stop))
    t.start()
    try:
        with out.open("ab", buffering=0) as f:
            f.write(b"y" * (MAX_LINE + 1000))
            wait_for(lambda: col.kept == 1, 30, "the collector to keep the cut line")
            f.write(b"y" * (MAX_LINE + 1000) + b"\nnext line\n")
            wait_for(lambda: col.kept >= 2, 30, "the next line")
    finally:
        stop.set()
        t.join(30)
    assert not t.is_alive()
    logs = [e.message for e in got if isinstance(e, Event) and e.kind == "log"]
    assert logs == ["y" * MAX_LINE, "next line"]
    assert (col.kept, col.dropped) == (2, 0)


def test_workload_outlives_a_dead_reader(tmp_path: Path) -> None:
    """No pipe: a workload that keeps printing after sofa-top is gone is unaffected."""
    out = tmp_path / "out.log"
    with out.open("wb") as f:
        p = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import time\nfor i in range(50): print(i, flush=True); "
                "time.sleep(0.01)\nraise SystemExit(7)",
            ],
            stdout=f,
        )
    assert p.wait(30) == 7
    assert out.read_text().split()[-1] == "49"
