"""Finalizing a long session: how long the end of a recording takes, and what bounds it.

(a) ``--synthetic``: a 2-hour recording (``--hours``) written with the store's own writer at a
real session's rates (``tests/long_session.py``: process and system samples at 10 Hz, the
scheduler's accounting at 2 Hz, a stack window a second, 10 steps/s, the agent's events), then
finalized as the hub does it when a session ends (``Session.stop``: the `ended` record, the
final verdict judged from the whole file, the file's close), and ``record``'s own read of the
file for its summary (``report.session_summary``). Each repeat writes a fresh file; the final
verdict's read alone (``report.session_verdict``) is timed on the first file too.

(b) ``--live``: a real ``sofa-top record --duration S -- python DEMO`` (the bundled torch demo,
``sofa_top/demos/torch_input_bound.py``; ``--seconds``, default 600), timed from the job's end
(its last process sample, in the file) to sofa-top's exit.

Prints min / median / max per figure, the machine's load before and after, and the rows
written. Usage::

    python benchmarks/finalize.py [--synthetic] [--hours 2] [--repeats 3] [--live] [--seconds 600]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))
T = TypeVar("T")


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f}, n={len(xs)})"


def _timed(fn: Callable[[], T], wall: list[float], cpu: list[float]) -> T:
    """Call ``fn``; its wall and CPU seconds (the process's: the hub's thread included)."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    wall.append(time.perf_counter() - t)
    cpu.append(time.process_time() - c)
    return out


def _rows(path: Path) -> str:
    import sqlite3

    db = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        tables = ("points", "stack_windows", "stack_counts", "steps", "events", "stack_strings")
        counts = {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
    finally:
        db.close()
    return ", ".join(f"{t} {n:,}" for t, n in counts.items())


def synthetic(hours: float, repeats: int, keep: Path | None) -> list[str]:
    """Write ``repeats`` fresh files of ``hours`` and finalize each; the report's lines."""
    from long_session import write_long

    from sofa_top.recording.hub import FINALIZE_S
    from sofa_top.recording.report import session_summary, session_verdict

    seconds = int(hours * 3600)
    d = keep or Path(tempfile.mkdtemp(prefix="sofa-bench-finalize-"))
    d.mkdir(parents=True, exist_ok=True)
    lines = [f"synthetic: {hours:g} h at a real session's rates, {repeats} fresh files"]
    lines.append(f"load average at the start: {_load()}")
    writes: list[float] = []
    wall: dict[str, list[float]] = {"verdict": [], "final": [], "summary": []}
    cpu: dict[str, list[float]] = {"verdict": [], "final": [], "summary": []}
    for i in range(repeats):
        path = d / f"long-{i}-{int(time.time())}.sofa"
        t = time.perf_counter()
        session = write_long(path, seconds)
        writes.append(time.perf_counter() - t)
        if i == 0:
            lines.append(f"rows: {_rows(path)}; {path.stat().st_size / 2**20:.0f} MiB")
            for _ in range(3):
                _timed(partial(session_verdict, path), wall["verdict"], cpu["verdict"])
        session.start()
        done = _timed(partial(session.stop, "duration reached"), wall["final"], cpu["final"])
        cut = getattr(session, "cut", None)
        if done is False or cut:
            lines.append(f"repeat {i}: cut: {cut}")
        summary = _timed(partial(session_summary, path), wall["summary"], cpu["summary"])
        if summary["ended"] is None:
            lines.append(f"repeat {i}: no `ended` record")
        print(
            f"repeat {i}: written {writes[-1]:.1f} s, finalized {wall['final'][-1]:.2f} s, "
            f"summary {wall['summary'][-1]:.2f} s, load {_load()}",
            flush=True,
        )
    lines.append(f"writing the file: {_spread(writes)}")
    what = {
        "verdict": "the final verdict's read alone (report.session_verdict, on file 0)",
        "final": f"the hub's finalization (Session.stop: `ended`, final verdict, close; "
        f"bound {FINALIZE_S:g} s)",
        "summary": "record's summary read after it (report.session_summary)",
    }
    for key, text in what.items():
        lines.append(f"{text}: wall {_spread(wall[key])}; CPU {_spread(cpu[key])}")
    lines.append(f"load average at the end: {_load()}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synthetic", action="store_true", help="(a): the synthetic long file")
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--live", action="store_true", help="(b): a live record of the torch demo")
    ap.add_argument("--seconds", type=float, default=600.0, help="the live record's --duration")
    ap.add_argument("--keep", type=Path, help="keep the session files in this directory")
    ap.add_argument("--out", type=Path, help="also write the report to this file")
    args = ap.parse_args()
    if not (args.synthetic or args.live):
        args.synthetic = True
    lines = [
        f"# benchmarks/finalize.py, {time.strftime('%Y-%m-%d %H:%M')} UTC, "
        f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"
    ]
    if args.synthetic:
        lines += synthetic(args.hours, args.repeats, args.keep)
    if args.live:
        from finalize_live import live

        lines += live(args.seconds, args.keep)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
