"""The live half of ``finalize.py``: a real ``sofa-top record --duration S`` of the bundled torch
demo, timed from the job's end to sofa-top's exit (see ``finalize.py``)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _read(path: Path) -> dict[str, object]:
    """What the finished file says: its meta, the target's exit, the final verdict, row counts."""
    db = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        meta = {k: json.loads(v) for k, v in db.execute("SELECT key, value FROM meta")}
        pid = (meta.get("target") or {}).get("pid")
        row = db.execute(
            "SELECT max(last_seen) FROM processes WHERE pid = ? AND alive = 0", (pid,)
        ).fetchone()
        final = db.execute(
            "SELECT count(*) FROM events WHERE kind = 'verdict' "
            "AND json_extract(data, '$.final') = 1"
        ).fetchone()[0]
        counts = {
            t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("points", "stack_windows", "stack_counts", "steps", "events", "processes")
        }
    finally:
        db.close()
    return {"meta": meta, "job_end": row[0], "final": final, "counts": counts}


def live(seconds: float, keep: Path | None) -> list[str]:
    """Run the live recording once; the lines of its report."""
    d = keep or Path(tempfile.mkdtemp(prefix="sofa-bench-finalize-"))
    d.mkdir(parents=True, exist_ok=True)
    session = d / f"live-{int(time.time())}.sofa"
    demo = HERE.parent / "sofa_top" / "demos" / "torch_input_bound.py"
    cmd = [sys.executable, "-m", "sofa_top", "record", "--duration", f"{seconds:g}", "--json"]
    cmd += ["-o", str(session), "--", sys.executable, str(demo)]
    lines = [f"live: {' '.join(cmd)}", f"load average at the start: {_load()}"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    t_exit = time.time()
    lines.append(f"load average at the end: {_load()}")
    lines.append(f"sofa-top exited {p.returncode} after {t_exit - t0:.1f} s")
    if p.stderr.strip():
        lines += [f"  stderr: {ln}" for ln in p.stderr.strip().splitlines()[-5:]]
    r = _read(session)
    meta = r["meta"]
    assert isinstance(meta, dict)
    job_end = r["job_end"]
    ended = meta.get("ended")
    lines.append(f"rows: {r['counts']}; file {session.stat().st_size / 2**20:.1f} MiB")
    lines.append(f"end_reason {meta.get('end_reason')!r}; final verdict stored: {r['final'] > 0}")
    # record's --duration counts from its session's start (after its imports)
    started = meta.get("started")
    deadline = (started if isinstance(started, float) else t0) + seconds
    if isinstance(job_end, float):
        lines.append(f"--duration reached -> the job's end (its stop): {job_end - deadline:.2f} s")
        lines.append(f"the job's end -> the `ended` record: {(ended or 0) - job_end:.2f} s")
        lines.append(f"the job's end -> sofa-top's exit: {t_exit - job_end:.2f} s")
    else:
        lines.append("the job's end was not recorded (no dead sample of the target)")
    try:
        summary = json.loads(p.stdout)
        lines.append(f"record --json verdict: {summary['verdict']['headline']}")
    except (ValueError, KeyError, TypeError):
        lines.append("record --json printed no summary")
    return lines
