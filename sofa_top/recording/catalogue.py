"""Saved sessions: list them (date, target, duration, last verdict, size) and prune old ones.

A session is a ``*.sofa`` file under ``sofa_top.recording.paths.sessions_dir()`` with its SQLite
``-wal`` / ``-shm`` side files. A file that is being recorded keeps changing (its WAL at least
once a second), so "age" is the time since the last change of the file or its WAL, and a file
changed in the last ``ACTIVE_S`` seconds is never pruned."""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sofa_top.model.errors import UserError
from sofa_top.recording.reader import SessionReader

if TYPE_CHECKING:
    from rich.console import Console

SUFFIX = ".sofa"
SIDE_FILES = ("-wal", "-shm")
ACTIVE_S = 60.0


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One saved session, as listed."""

    path: Path
    started: float | None
    ended: float | None
    duration_s: float | None
    target_pid: int | None
    target_name: str
    cmdline: tuple[str, ...]
    mode: str
    verdict: str | None  # headline of the last verdict marker
    verdict_kind: str | None
    size_bytes: int  # the file and its WAL
    modified: float  # last change of the file or its WAL (Unix time)
    recording: bool  # no end written: being recorded now, or the recorder was killed
    error: str | None = None  # why the file could not be read (the other fields are then empty)


def _default_dir() -> Path:
    from sofa_top.recording.paths import sessions_dir

    return sessions_dir()


def _side(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _stat(path: Path) -> tuple[int, float]:
    """(bytes, last change) of a session file and its WAL."""
    size, mtime = 0, 0.0
    for p in (path, _side(path, "-wal")):
        try:
            st = p.stat()
        except OSError:
            continue
        size += st.st_size
        # An empty WAL holds no data; a read-only reader may just have created it, and that
        # must not make an old session look fresh.
        if st.st_size > 0 or p == path:
            mtime = max(mtime, st.st_mtime)
    return size, mtime


def session_info(path: Path) -> SessionInfo:
    """Read what the listing shows of one session file (never raises for a bad file)."""
    size, mtime = _stat(path)
    try:
        reader = SessionReader(path)
    except UserError as exc:
        return _broken(path, size, mtime, str(exc))
    try:
        with reader.read_snapshot():
            meta = reader.meta()
            verdict = reader.last_event("verdict", math.inf)
            span = reader.fast_time_range() if meta.get("ended") is None else None
    except (sqlite3.Error, ValueError) as exc:
        return _broken(path, size, mtime, f"not a readable sofa-top session: {exc}")
    finally:
        reader.close()
    raw = meta.get("target")
    target: dict[str, Any] = raw if isinstance(raw, dict) else {}
    started = _num(meta.get("started"))
    ended = _num(meta.get("ended"))
    last = ended if ended is not None else (span[1] if span is not None else None)
    pid = target.get("pid")
    return SessionInfo(
        path=path,
        started=started,
        ended=ended,
        duration_s=None if started is None or last is None else max(0.0, last - started),
        target_pid=pid if isinstance(pid, int) else None,
        target_name=str(target.get("name") or ""),
        cmdline=tuple(str(a) for a in target.get("cmdline") or ()),
        mode=str(meta.get("mode") or ""),
        verdict=None if verdict is None else str(verdict.data.get("headline") or verdict.message),
        verdict_kind=None if verdict is None else str(verdict.data.get("kind") or "") or None,
        size_bytes=size,
        modified=mtime,
        recording=ended is None,
    )


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _broken(path: Path, size: int, mtime: float, error: str) -> SessionInfo:
    return SessionInfo(
        path,
        None,
        None,
        None,
        None,
        "",
        (),
        "",
        None,
        None,
        size,
        mtime,
        False,
        " ".join(error.split()),
    )


def list_sessions(directory: Path | None = None) -> list[SessionInfo]:
    """Every saved session, newest first (default directory: ``paths.sessions_dir()``)."""
    d = directory if directory is not None else _default_dir()
    try:
        files = [p for p in d.iterdir() if p.suffix == SUFFIX and p.is_file()]
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UserError(f"cannot list sessions in {d}: {exc.strerror or exc}") from None
    infos = [session_info(p) for p in files]
    infos.sort(key=lambda s: s.started if s.started is not None else s.modified, reverse=True)
    return infos


def human_size(n: int) -> str:
    """Bytes for people: 512 B, 3.4 MiB, 1.2 GiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def human_duration(s: float | None) -> str:
    """Seconds for people: 42s, 3m05s, 1h02m."""
    if s is None:
        return "-"
    sec = round(s)
    if sec < 60:
        return f"{sec}s"
    if sec < 3600:
        return f"{sec // 60}m{sec % 60:02d}s"
    return f"{sec // 3600}h{sec % 3600 // 60:02d}m"


def _date(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def render_sessions(sessions: Sequence[SessionInfo], console: Console | None = None) -> None:
    """Print the sessions as a table for people."""
    from rich.console import Console
    from rich.table import Table

    con = console if console is not None else Console()
    if not sessions:
        con.print("no saved sessions")
        return
    table = Table("started", "target", "duration", "last verdict", "size", "file")
    for s in sessions:
        if s.error is not None:
            table.add_row(
                _date(s.modified),
                "[red]unreadable[/]",
                "-",
                s.error,
                human_size(s.size_bytes),
                s.path.name,
            )
            continue
        target = f"{s.target_name or '?'} ({s.target_pid})" if s.target_pid else s.target_name
        duration = human_duration(s.duration_s) + (" [yellow]rec[/]" if s.recording else "")
        table.add_row(
            _date(s.started),
            target,
            duration,
            s.verdict or "-",
            human_size(s.size_bytes),
            s.path.name,
        )
    con.print(table)


def sessions_json(sessions: Sequence[SessionInfo]) -> dict[str, Any]:
    """The listing for machines (``schema: 1``)."""
    return {
        "schema": 1,
        "sessions": [
            {
                "path": str(s.path),
                "started": s.started,
                "ended": s.ended,
                "duration_s": None if s.duration_s is None else round(s.duration_s, 3),
                "target": {"pid": s.target_pid, "name": s.target_name, "cmdline": list(s.cmdline)},
                "mode": s.mode,
                "verdict": None
                if s.verdict is None
                else {"headline": s.verdict, "kind": s.verdict_kind},
                "size_bytes": s.size_bytes,
                "modified": s.modified,
                "recording": s.recording,
                "error": s.error,
            }
            for s in sessions
        ],
    }


def prune(days: float, confirm: Callable[[str], bool], directory: Path | None = None) -> int:
    """Delete sessions unchanged for more than ``days`` days, after ``confirm(question)`` says
    yes; returns how many were deleted. Sessions changed in the last minute are kept (they are
    most likely being recorded)."""
    if not days >= 0 or math.isinf(days):
        raise UserError(f"prune: days must be a number >= 0, not {days!r}")
    now = time.time()
    cutoff = now - days * 86400.0
    old = [
        s for s in list_sessions(directory) if s.modified < cutoff and s.modified < now - ACTIVE_S
    ]
    if not old:
        return 0
    total = sum(s.size_bytes for s in old)
    noun = "session" if len(old) == 1 else "sessions"
    if not confirm(
        f"delete {len(old)} {noun} unchanged for more than {days:g} days ({human_size(total)})?"
    ):
        return 0
    deleted = 0
    failed: list[str] = []
    for s in old:
        try:
            s.path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            failed.append(f"{s.path}: {exc.strerror or exc}")
            continue
        for suffix in SIDE_FILES:
            _side(s.path, suffix).unlink(missing_ok=True)
        deleted += 1
    if failed:
        raise UserError(f"deleted {deleted}, could not delete {len(failed)} (first: {failed[0]})")
    return deleted
