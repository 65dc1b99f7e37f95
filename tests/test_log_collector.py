"""Workload output is kept, bounded, and never blocks the workload."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from sofa_top.collectors.logs import MAX_LINE, MAX_LINES_PER_S, LogCollector
from sofa_top.samples import Event, Sample


def _run(code: str, timeout: float = 30) -> tuple[list[Event], LogCollector, int]:
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert p.stdout is not None and p.stderr is not None
    col = LogCollector({"stdout": p.stdout, "stderr": p.stderr})
    out: list[Sample] = []
    stop = threading.Event()
    t = threading.Thread(target=col.run, args=(out.append, stop))
    t.start()
    rc = p.wait(timeout)
    t.join(10)
    assert not t.is_alive()
    return [s for s in out if isinstance(s, Event)], col, rc


def test_lines_from_both_streams_and_partial_last_line() -> None:
    events, _, rc = _run(
        "import sys; print('hello'); print('oops', file=sys.stderr); "
        "sys.stdout.write('no newline é'); sys.exit(3)"
    )
    logs = {(e.data["stream"], e.message) for e in events if e.kind == "log"}
    assert logs == {("stdout", "hello"), ("stderr", "oops"), ("stdout", "no newline é")}
    assert rc == 3


def test_flood_is_bounded_and_counted_without_blocking_the_workload() -> None:
    t0 = time.monotonic()
    events, col, rc = _run(
        "import sys\nfor i in range(200_000): print(i, 'x' * 50)\nprint('y' * 100_000)"
    )
    assert rc == 0 and time.monotonic() - t0 < 20
    logs = [e for e in events if e.kind == "log"]
    # At most MAX_LINES_PER_S kept per second of the flood (it lasts a few seconds at most).
    assert len(logs) <= MAX_LINES_PER_S * (time.monotonic() - t0 + 2)
    assert col.kept + col.dropped >= 200_000
    assert all(len(e.message) <= MAX_LINE for e in logs)
    dropped = [e for e in events if e.kind == "log-dropped"]
    assert dropped and dropped[-1].data["dropped"] == col.dropped
