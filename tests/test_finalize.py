"""A session always ends finalized: its `ended` record and its final verdict, within the bound
(``hub.FINALIZE_S``), whatever its length; past the bound the file stays readable and one line
says what was cut.

The long session is synthetic (``long_session.py``, written with the store's own writer): 20
minutes at 1 Hz (its stack windows and steps at their real rates) is what this machine writes
in a few seconds; ``benchmarks/finalize.py`` finalizes the 2-hour, 10 Hz one (README figures).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import fields
from pathlib import Path

from conftest import run_cli
from long_session import write_long

from sofa_top.datamodel.samples import StepSample
from sofa_top.recording.hub import CUT_GRACE_S, FINALIZE_S
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.report import final_verdict, session_summary
from sofa_top.recording.store import STEP_COLUMNS

LONG_S = 1200  # 20 minutes at 1 Hz: 1,200 stack windows (26 k counts), 2,400 steps, 50 k points


def _final(path: Path) -> tuple[dict[str, object], bool]:
    """The file's meta and whether it holds a final verdict (read as any reader does)."""
    r = SessionReader(path)
    try:
        return r.meta(), final_verdict(r.events("verdict")) is not None
    finally:
        r.close()


def test_long_session_ends_with_its_ended_record_and_final_verdict(tmp_path: Path) -> None:
    path = tmp_path / "long.sofa"
    session = write_long(path, LONG_S, steps_per_s=2.0, hz=1)
    session.start()
    t = time.monotonic()
    assert session.stop("duration reached") is True
    took = time.monotonic() - t
    assert took < FINALIZE_S and session.cut is None and session.done
    meta, has_final = _final(path)
    assert meta["end_reason"] == "duration reached" and isinstance(meta["ended"], float)
    assert has_final
    summary = session_summary(path)  # record --json of it: the final verdict, as stored
    assert summary["ended"] == meta["ended"] and summary["steps"]["count"] > 2000
    assert summary["verdict"]["kind"] == "input-bound", summary["verdict"]["headline"]
    # the WAL is checkpointed into the file at the close
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0


def test_a_cut_at_finalizing_leaves_a_readable_file_and_one_line(tmp_path: Path) -> None:
    path = tmp_path / "cut.sofa"
    session = write_long(path, 600, steps_per_s=2.0, hz=1)
    session.start()
    t = time.monotonic()
    # a bound of 0 s: the final verdict's read of the file cannot be done by then
    assert session.stop("duration reached", timeout=0.0) is False
    assert time.monotonic() - t < CUT_GRACE_S + 5.0
    line = session.cut
    assert line is not None and "\n" not in line, line
    assert line.startswith("the session was cut at finalizing: no final verdict"), line
    assert "(the hub took > " in line and str(path) in line
    meta, has_final = _final(path)  # readable while the hub may still be closing it
    assert meta["end_reason"] == "duration reached" and "ended" in meta and not has_final
    assert session.wait(30.0)  # the hub then closes the file without the verdict it dropped
    meta, has_final = _final(path)
    assert not has_final and meta["ended"]
    assert session_summary(path)["verdict"]["kind"] == "input-bound"  # judged by the reader
    assert session.stop("again", timeout=FINALIZE_S) is False  # at once: the cut stands
    assert session.cut == line


def test_steps_read_back_field_for_field() -> None:
    """The reader builds steps positionally from the store's columns: one field each."""
    assert sorted(STEP_COLUMNS) == sorted(f.name for f in fields(StepSample) if f.name != "name")


def test_record_returns_a_session_with_its_ended_record_and_final_verdict(
    tmp_path: Path,
) -> None:
    out = tmp_path / "short.sofa"
    script = "import time; [sum(range(20000)) or time.sleep(0.01) for _ in range(120)]"
    r = run_cli("record", "--json", "-o", str(out), "--", sys.executable, "-c", script)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    meta, has_final = _final(out)
    assert meta["end_reason"] == "target exited" and meta["ended"] == summary["ended"]
    assert has_final, "no final verdict in the file record returned"
    reader = SessionReader(out)
    try:
        final = final_verdict(reader.events("verdict"))
    finally:
        reader.close()
    assert final is not None and summary["verdict"]["headline"] == final.headline
