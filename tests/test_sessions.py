"""Saved sessions: the listing (date, target, duration, last verdict, size) and pruning."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import pytest
from rich.console import Console
from synthetic_session import PID, T0, make_session

from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.samples import ProcessSample
from sofa_top.recording.catalogue import (
    human_duration,
    human_size,
    list_entries,
    list_sessions,
    prune,
    render_sessions,
    sessions_json,
)
from sofa_top.recording.store import SessionStore

DAY = 86400.0


def _age(path: Path, days: float) -> None:
    t = time.time() - days * DAY
    for p in (path, path.with_name(path.name + "-wal")):
        if p.exists():
            os.utime(p, (t, t))


@pytest.fixture
def sessions(tmp_path: Path) -> tuple[Path, SessionStore]:
    """A finished session, one still being recorded (writer open) and an unreadable file."""
    d = tmp_path / "sessions"
    make_session(d / "done.sofa")
    live = SessionStore(d / "live.sofa")
    live.set_meta(target={"pid": 99, "name": "serve", "cmdline": ["serve"]}, started=T0 + 100)
    live.write([ProcessSample(T0 + 100 + t, 99, True, (), 1.0, 1, 0, 0, 1) for t in range(5)])
    live.commit()
    (d / "junk.sofa").write_bytes(b"not sqlite at all" * 100)
    (d / "notes.txt").write_text("not a session")
    return d, live


def test_list_sessions(sessions: tuple[Path, SessionStore]) -> None:
    d, live = sessions
    try:
        infos = list_sessions(d)
    finally:
        live.close()
    assert [s.path.name for s in infos] == ["junk.sofa", "live.sofa", "done.sofa"]
    junk, rec, done = infos
    assert junk.error is not None and "not a readable sofa-top session" in junk.error
    assert "\n" not in junk.error and junk.size_bytes == 1700

    assert (done.target_pid, done.target_name, done.mode) == (PID, "train", "record")
    assert done.started == T0 and done.ended == T0 + 10 and done.duration_s == 10.0
    assert (done.verdict, done.verdict_kind) == ("compute-bound", "compute-bound")
    assert not done.recording and done.error is None
    assert done.size_bytes >= (d / "done.sofa").stat().st_size

    # Still being written: no end yet, its duration runs to the last recorded point.
    assert rec.recording and rec.ended is None and rec.duration_s == 4.0
    assert rec.verdict is None and rec.target_name == "serve"


def test_render_and_json(sessions: tuple[Path, SessionStore]) -> None:
    d, live = sessions
    live.close()
    infos = list_entries(d)
    buf = io.StringIO()
    render_sessions(infos, Console(file=buf, width=200, color_system=None))
    text = buf.getvalue()
    # the script as people name it, not the interpreter with its PID
    assert "train.py" in text and "compute-bound" in text and "10s" in text
    assert "(4242)" not in text
    assert "unreadable" in text and "junk.sofa" in text and "serve" in text

    doc = json.loads(json.dumps(sessions_json(infos)))
    assert doc["schema"] == 2
    by_name = {Path(s["path"]).name: s for s in doc["sessions"]}
    assert by_name["done.sofa"]["command"] == "train.py"
    assert by_name["done.sofa"]["kind"] == "session"
    assert by_name["done.sofa"]["verdict"] == {"headline": "compute-bound", "kind": "compute-bound"}
    assert by_name["done.sofa"]["target"] == {
        "pid": PID,
        "name": "train",
        "cmdline": ["python", "train.py"],
    }
    assert by_name["junk.sofa"]["error"] and by_name["junk.sofa"]["verdict"] is None

    buf = io.StringIO()
    render_sessions([], Console(file=buf, width=80, color_system=None))
    assert "no saved sessions" in buf.getvalue()


def test_prune_asks_and_keeps_recent(sessions: tuple[Path, SessionStore]) -> None:
    d, live = sessions
    try:
        _age(d / "done.sofa", 10)
        _age(d / "junk.sofa", 10)
        list_sessions(d)  # a reader leaves an empty WAL behind; that must not look like a change
        questions: list[str] = []

        def no(q: str) -> bool:
            questions.append(q)
            return False

        assert prune(7, no, d) == 0
        assert len(questions) == 1 and "2 sessions" in questions[0] and "7 days" in questions[0]
        assert (d / "done.sofa").exists()

        assert prune(7, lambda q: True, d) == 2
        assert not (d / "done.sofa").exists() and not (d / "junk.sofa").exists()
        assert not list(d.glob("done.sofa-*"))  # its WAL and shared-memory files too
        # The session being recorded is kept whatever the age asked for.
        assert prune(0, lambda q: True, d) == 0 and (d / "live.sofa").exists()
        assert (d / "notes.txt").exists()
    finally:
        live.close()
    asked: list[str] = []
    assert prune(30, lambda q: asked.append(q) or True, d) == 0 and asked == []


def test_prune_rejects_bad_days(tmp_path: Path) -> None:
    for days in (-1.0, float("nan"), float("inf")):
        with pytest.raises(UserError, match="days"):
            prune(days, lambda q: True, tmp_path)


def test_default_directory(tmp_path: Path) -> None:
    from sofa_top.recording.paths import sessions_dir

    d = sessions_dir()
    make_session(d / "mine.sofa")
    assert [s.path.name for s in list_sessions()] == ["mine.sofa"]
    assert list_sessions(tmp_path / "missing") == []


def test_human_units() -> None:
    assert human_size(512) == "512 B" and human_size(3 << 20) == "3.0 MiB"
    assert human_duration(42.4) == "42s" and human_duration(185) == "3m05s"
    assert human_duration(3720) == "1h02m" and human_duration(None) == "-"
