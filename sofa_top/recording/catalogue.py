"""Saved sessions: list them (date, command, duration, last verdict, size) and prune old ones.

A session is a ``*.sofa`` file under ``sofa_top.recording.paths.sessions_dir()`` with its SQLite
``-wal`` / ``-shm`` side files. A file that is being recorded keeps changing (its WAL at least
once a second), so "age" is the time since the last change of the file or its WAL, and a file
changed in the last ``ACTIVE_S`` seconds is never pruned.

The runs of one ``compare`` (a dozen files: each configuration's repeats, the parallelism
search) are one entry of the listing (``SessionEntry``, its ``runs`` inside), so that they never
push the user's own sessions out of sight; ``last`` is the user's last launch, attach or record
(``last-compare``: the last comparison's first run)."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sofa_top.datamodel.command import command_text
from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.literals import one_of
from sofa_top.datamodel.snapshot import MODES, Mode
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.series import BYTES

if TYPE_CHECKING:
    from rich.console import Console

SUFFIX = ".sofa"
SIDE_FILES = ("-wal", "-shm")
ACTIVE_S = 60.0
# the run files of a comparison from before runs said which comparison they belong to
_COMPARE_FILE = re.compile(r"^(compare-\d{8}-\d{6})-(.+)\.sofa$")


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
    mode: Mode | None  # None: a session file that does not say
    verdict: str | None  # headline of the last verdict marker
    verdict_kind: str | None
    size_bytes: int  # the file and its WAL
    modified: float  # last change of the file or its WAL (Unix time)
    recording: bool  # no end written: being recorded now, or the recorder was killed
    error: str | None = None  # why the file could not be read (the other fields are then empty)
    compare: str | None = None  # the comparison this session is a run of (its id)

    @property
    def command(self) -> str:
        """What was run, as people name it: the script and its arguments."""
        return command_text(self.cmdline, self.target_name)

    @property
    def run_label(self) -> str:
        """A comparison run's name: ``baseline-1``, ``search-p16`` (else the file's)."""
        m = _COMPARE_FILE.match(self.path.name)
        return m.group(2) if m else self.path.stem


@dataclass(frozen=True, slots=True)
class SessionEntry:
    """One entry of the listing: a session, or a comparison with its runs (oldest first)."""

    kind: Literal["session", "compare"]
    runs: tuple[SessionInfo, ...]  # one for a session

    @property
    def first(self) -> SessionInfo:
        """The session, or the comparison's first run (its baseline)."""
        return self.runs[0]

    @property
    def started(self) -> float | None:
        return min((r.started for r in self.runs if r.started is not None), default=None)

    @property
    def ended(self) -> float | None:
        if any(r.recording for r in self.runs):
            return None
        return max((r.ended for r in self.runs if r.ended is not None), default=None)

    @property
    def duration_s(self) -> float | None:
        if self.kind == "session":
            return self.first.duration_s
        ends = [r.started + r.duration_s for r in self.runs if r.started and r.duration_s]
        started = self.started
        return None if started is None or not ends else max(ends) - started

    @property
    def recording(self) -> bool:
        return any(r.recording for r in self.runs)

    @property
    def command(self) -> str:
        return self.first.command

    @property
    def size_bytes(self) -> int:
        return sum(r.size_bytes for r in self.runs)

    @property
    def modified(self) -> float:
        return max(r.modified for r in self.runs)

    @property
    def sort_key(self) -> float:
        started = self.started
        return started if started is not None else self.modified


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
        with SessionReader(path) as reader, reader.reading():
            return _info(path, reader, size, mtime)
    except UserError as exc:
        return _broken(path, size, mtime, str(exc))


def _info(path: Path, reader: SessionReader, size: int, mtime: float) -> SessionInfo:
    with reader.read_snapshot():
        meta = reader.meta()
        verdict = reader.last_event("verdict", math.inf)
        span = reader.fast_time_range() if meta.get("ended") is None else None
    raw = meta.get("target")
    target: dict[str, Any] = raw if isinstance(raw, dict) else {}
    group = meta.get("compare")
    compare = group.get("id") if isinstance(group, dict) else None
    if not isinstance(compare, str):
        m = _COMPARE_FILE.match(path.name)
        compare = m.group(1) if m else None
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
        mode=one_of(meta.get("mode"), MODES),
        verdict=None if verdict is None else str(verdict.data.get("headline") or verdict.message),
        verdict_kind=None if verdict is None else str(verdict.data.get("kind") or "") or None,
        size_bytes=size,
        modified=mtime,
        recording=ended is None,
        compare=compare,
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
        None,
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


def group_sessions(infos: Sequence[SessionInfo]) -> list[SessionEntry]:
    """The listing's entries: each comparison's runs gathered into one, newest first."""
    groups: dict[str, list[SessionInfo]] = {}
    entries: list[SessionEntry] = []
    for info in infos:
        if info.compare is None:
            entries.append(SessionEntry("session", (info,)))
        else:
            groups.setdefault(info.compare, []).append(info)
    for runs in groups.values():
        runs.sort(key=lambda s: (s.started if s.started is not None else s.modified, s.path.name))
        entries.append(SessionEntry("compare", tuple(runs)))
    entries.sort(key=lambda e: e.sort_key, reverse=True)
    return entries


def list_entries(directory: Path | None = None) -> list[SessionEntry]:
    """``list_sessions``, a comparison's runs as one entry."""
    return group_sessions(list_sessions(directory))


def last_session(directory: Path | None = None, *, compare: bool = False) -> SessionInfo:
    """The user's last session (launch, attach or record), or with ``compare`` the last
    comparison's first run."""
    for entry in list_entries(directory):
        if (entry.kind == "compare") == compare and entry.first.error is None:
            return entry.first
    d = directory if directory is not None else _default_dir()
    what = "comparison" if compare else "session"
    raise UserError(f"no saved {what} in {d}")


def human_size(n: int) -> str:
    """Bytes for people: 512 B, 3.4 MiB, 1.2 GiB."""
    size = float(n)
    for unit in (BYTES, "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == BYTES else f"{size:.1f} {unit}"
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


def render_sessions(entries: Sequence[SessionEntry], console: Console | None = None) -> None:
    """Print the entries as a table for people (whole, at any width, when piped)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    con = console if console is not None else Console()
    if not entries:
        con.print("no saved sessions")
        return
    table = Table("started", "command", "duration", "last verdict", "size", "file")
    for e in entries:
        s = e.first
        if s.error is not None:
            table.add_row(
                _date(s.modified),
                "[red]unreadable[/]",
                "-",
                Text(s.error),  # Text: a name's own '[...]' is not rich markup
                human_size(s.size_bytes),
                Text(s.path.name),
            )
            continue
        duration = human_duration(e.duration_s) + (" [yellow]rec[/]" if e.recording else "")
        command = s.command
        verdict = s.verdict or "-"
        file = s.path.name
        if e.kind == "compare":
            command = f"compare ({len(e.runs)} runs): {command}"
            verdict = f"{s.run_label}: {verdict}"
            file = f"{s.compare} ({len(e.runs)} files)"
        table.add_row(
            _date(e.started),
            Text(command),
            duration,
            Text(verdict),
            human_size(e.size_bytes),
            Text(file),
        )
    con.print(table)


def _session_json(s: SessionInfo) -> dict[str, Any]:
    return {
        "path": str(s.path),
        "command": s.command,
        "started": s.started,
        "ended": s.ended,
        "duration_s": None if s.duration_s is None else round(s.duration_s, 3),
        "target": {"pid": s.target_pid, "name": s.target_name, "cmdline": list(s.cmdline)},
        "mode": s.mode,
        "verdict": None if s.verdict is None else {"headline": s.verdict, "kind": s.verdict_kind},
        "size_bytes": s.size_bytes,
        "modified": s.modified,
        "recording": s.recording,
        "error": s.error,
    }


def sessions_json(entries: Sequence[SessionEntry]) -> dict[str, Any]:
    """The listing for machines (``schema: 2``): one entry per session, and one per
    comparison with its sessions in ``runs`` (each with its ``run``: ``baseline-1``, ...)."""
    out: list[dict[str, Any]] = []
    for e in entries:
        if e.kind == "session":
            out.append({"kind": "session", **_session_json(e.first)})
            continue
        first = e.first
        out.append(
            {
                "kind": "compare",
                "id": first.compare,
                "command": first.command,
                "started": e.started,
                "ended": e.ended,
                "duration_s": None if e.duration_s is None else round(e.duration_s, 3),
                "target": {"cmdline": list(first.cmdline)},
                "size_bytes": e.size_bytes,
                "modified": e.modified,
                "recording": e.recording,
                "runs": [{"run": r.run_label, **_session_json(r)} for r in e.runs],
            }
        )
    return {"schema": 2, "sessions": out}


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
