"""The session store: one SQLite file per session, in WAL mode.

Schema (version ``SCHEMA_VERSION``, also in ``PRAGMA user_version``):

- ``meta(key TEXT PRIMARY KEY, value TEXT)`` -- JSON values: ``schema_version``, ``mode``
  (attach/launch/record), ``target`` ({pid, name, cmdline}), ``host``, ``versions``,
  ``started``/``ended`` (Unix time), ``exit_code``, ``end_reason``, ``cpu_count``, ``mem_total``,
  ``launched``, ``stopped_job`` (launched: whether sofa-top signalled the job to end it),
  ``compare`` ({id, run}: the session is a run of that comparison).
- ``series(id INTEGER PRIMARY KEY, name TEXT UNIQUE, unit TEXT)`` -- names in
  ``sofa_top.recording.series``.
- ``points(series_id, ts REAL, value REAL NULL, error TEXT NULL)`` -- numeric samples.
- ``processes(pid, create_time, ppid, name, cmdline, role, first_seen, last_seen, alive)``
  -- one row per process of the target tree (PRIMARY KEY pid, create_time: PID reuse safe).
- ``stack_strings(id INTEGER PRIMARY KEY, frames TEXT UNIQUE)`` -- interned stacks, JSON
  ``[[function, filename, line], ...]`` outermost first.
- ``stack_windows(id INTEGER PRIMARY KEY, ts_start, ts_end, rate_hz, samples, sampler_cpu,
  error, hint)`` and ``stack_counts(window_id, pid, tid, thread_name, stack_id, count, klass)``.
- ``steps(ts, step, start, duration_s, input_wait_s, source, batch_size, pid, wait_cpu_s,
  collective_s, gpu_span_s, gpu_busy_s, gpu_busy_source, forward_s, backward_s, optimizer_s,
  phase_hint, autograd, wait_run_s, wait_queue_s)`` (``wait_cpu_s`` since v2;
  ``collective_s`` -- the time the step was blocked in torch.distributed collectives -- and the
  ``gpu_*`` columns since v3; older files read them as NULL; the compute spans
  ``forward_s``, ``backward_s``, ``optimizer_s``, ``phase_hint`` and ``autograd`` since v4;
  ``wait_run_s`` / ``wait_queue_s``, the loop thread's time on a CPU and waiting for one during
  the input wait, since v5).
- ``events(ts REAL, kind TEXT, message TEXT, data TEXT)`` -- markers (JSON data); agent reports,
  tf.data pipelines and CUDA readings are stored here too (kinds ``agent``, ``pipeline``,
  ``cuda``), and so are the ranks of a distributed job (kinds ``rank``, ``rank-exit``,
  ``rank-verdict``). The last ``verdict`` of a session that ended cleanly has ``final: true``
  in its data: the whole session's verdict, at the recording's last instant.

Durability: the writer commits at least once per second (``Session`` calls ``commit``), WAL
with ``synchronous=NORMAL`` survives the writer being SIGKILLed (only an OS crash can lose the
last commit). Readers open the file read-only and never block the writer.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.samples import (
    AgentInfo,
    CudaSample,
    Event,
    Frame,
    PipelineSample,
    ProcessSample,
    Sample,
    StackWindow,
    StepSample,
)
from sofa_top.recording.series import RateState, SeriesPoint, points_of, unit_of

SCHEMA_VERSION = 5

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS series (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, unit TEXT);
CREATE TABLE IF NOT EXISTS points (series_id INTEGER NOT NULL, ts REAL NOT NULL, value REAL,
    error TEXT);
CREATE INDEX IF NOT EXISTS points_by_series ON points (series_id, ts);
CREATE TABLE IF NOT EXISTS processes (pid INTEGER, create_time REAL, ppid INTEGER, name TEXT,
    cmdline TEXT, role TEXT, first_seen REAL, last_seen REAL, alive INTEGER,
    PRIMARY KEY (pid, create_time));
CREATE TABLE IF NOT EXISTS stack_strings (id INTEGER PRIMARY KEY, frames TEXT UNIQUE NOT NULL);
CREATE TABLE IF NOT EXISTS stack_windows (id INTEGER PRIMARY KEY, ts_start REAL, ts_end REAL,
    rate_hz REAL, samples INTEGER, sampler_cpu REAL, error TEXT, hint TEXT);
CREATE TABLE IF NOT EXISTS stack_counts (window_id INTEGER, pid INTEGER, tid INTEGER,
    thread_name TEXT, stack_id INTEGER, count INTEGER, klass TEXT);
CREATE INDEX IF NOT EXISTS stack_counts_by_window ON stack_counts (window_id);
CREATE TABLE IF NOT EXISTS steps (ts REAL, step INTEGER, start REAL, duration_s REAL,
    input_wait_s REAL, source TEXT, batch_size INTEGER, pid INTEGER, wait_cpu_s REAL,
    collective_s REAL, gpu_span_s REAL, gpu_busy_s REAL, gpu_busy_source TEXT, forward_s REAL,
    backward_s REAL, optimizer_s REAL, phase_hint TEXT, autograd INTEGER, wait_run_s REAL,
    wait_queue_s REAL);
CREATE TABLE IF NOT EXISTS events (ts REAL NOT NULL, kind TEXT NOT NULL, message TEXT,
    data TEXT);
CREATE INDEX IF NOT EXISTS events_by_kind ON events (kind, ts);
"""


STEP_COLUMNS = (
    "ts",
    "step",
    "start",
    "duration_s",
    "input_wait_s",
    "source",
    "batch_size",
    "pid",
    "wait_cpu_s",
    "collective_s",
    "gpu_span_s",
    "gpu_busy_s",
    "gpu_busy_source",
    "forward_s",
    "backward_s",
    "optimizer_s",
    "phase_hint",
    "autograd",
    "wait_run_s",
    "wait_queue_s",
)  # fmt: skip  (StepSample's fields, the v5 columns last)


def uri(path: Path, mode: str) -> str:
    """``path`` as an SQLite URI: every byte of the name percent-encoded (``as_uri``), so that
    ``#``, ``?`` and ``%`` in it are the file's name, not a fragment or parameters (a plain name
    that starts with ``file:`` would be read as a URI too, where SQLite allows URIs)."""
    return f"{Path(path).resolve().as_uri()}?mode={mode}"


def connect(path: Path, readonly: bool, *, create: bool = True) -> sqlite3.Connection:
    """Open a session file read-only, or for writing (``create``: a new file)."""
    if readonly:
        conn = sqlite3.connect(uri(path, "ro"), uri=True, check_same_thread=False)
    else:
        conn = sqlite3.connect(
            uri(path, "rwc" if create else "rw"),
            uri=True,
            isolation_level=None,
            check_same_thread=False,
        )
    conn.execute("PRAGMA busy_timeout = 2000")
    return conn


class SessionStore:
    """Writes one session. Use from a single thread (the session hub's)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                raise UserError(f"session file already exists: {path}")
            self._db = connect(path, readonly=False)
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except (OSError, sqlite3.Error) as exc:
            raise UserError(f"cannot write session file {path}: {_reason(exc)}") from None
        self._series: dict[str, int] = {}
        self._stacks: dict[tuple[Frame, ...], int] = {}
        self._rates: RateState = {}
        self._in_tx = False
        self.last_commit = time.monotonic()
        self.set_meta(schema_version=SCHEMA_VERSION)

    # -- writing ---------------------------------------------------------------------------
    def _begin(self) -> None:
        if not self._in_tx:
            self._db.execute("BEGIN")
            self._in_tx = True

    def set_meta(self, **values: Any) -> None:
        """Set metadata keys (JSON-encoded values)."""
        self._begin()
        self._db.executemany(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
            [(k, json.dumps(v)) for k, v in values.items()],
        )

    def write(self, samples: Iterable[Sample]) -> list[list[SeriesPoint]]:
        """Append samples inside the open transaction (``commit`` makes them durable).

        Returns each sample's series points (``series.points_of``, derived here once: the hub
        feeds the same points to its rings)."""
        self._begin()
        return [self._write_one(s) for s in samples]

    def _series_id(self, name: str) -> int:
        sid = self._series.get(name)
        if sid is None:
            cur = self._db.execute(
                "INSERT INTO series (name, unit) VALUES (?, ?)", (name, unit_of(name))
            )
            sid = int(cur.lastrowid or 0)
            self._series[name] = sid
        return sid

    def _stack_id(self, frames: tuple[Frame, ...]) -> int:
        sid = self._stacks.get(frames)
        if sid is None:
            text = json.dumps([[f.function, f.filename, f.line] for f in frames])
            cur = self._db.execute("INSERT INTO stack_strings (frames) VALUES (?)", (text,))
            sid = int(cur.lastrowid or 0)
            self._stacks[frames] = sid
        return sid

    def _write_one(self, s: Sample) -> list[SeriesPoint]:
        db = self._db
        pts = points_of(s, self._rates)
        if pts:
            db.executemany(
                "INSERT INTO points (series_id, ts, value, error) VALUES (?, ?, ?, ?)",
                [(self._series_id(n), s.ts, v, e) for n, v, e in pts],
            )
        if isinstance(s, ProcessSample):
            db.executemany(
                "INSERT INTO processes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT "
                "(pid, create_time) DO UPDATE SET last_seen = excluded.last_seen, "
                "alive = excluded.alive, role = excluded.role",
                [
                    (
                        p.pid,
                        p.create_time,
                        p.ppid,
                        p.name,
                        json.dumps(list(p.cmdline)),
                        p.role,
                        s.ts,
                        s.ts,
                        int(p.alive),
                    )
                    for p in s.procs
                ],
            )
        elif isinstance(s, StackWindow):
            cur = db.execute(
                "INSERT INTO stack_windows (ts_start, ts_end, rate_hz, samples, sampler_cpu, "
                "error, hint) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (s.ts_start, s.ts_end, s.rate_hz, s.samples, s.sampler_cpu, s.error, s.hint),
            )
            wid = cur.lastrowid
            db.executemany(
                "INSERT INTO stack_counts VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (wid, c.pid, c.tid, c.thread_name, self._stack_id(c.frames), c.count, c.klass)
                    for c in s.stacks
                ],
            )
        elif isinstance(s, StepSample):
            db.execute(
                f"INSERT INTO steps ({', '.join(STEP_COLUMNS)}) "
                f"VALUES ({', '.join('?' for _ in STEP_COLUMNS)})",
                (
                    s.ts,
                    s.step,
                    s.start,
                    s.duration_s,
                    s.input_wait_s,
                    s.name or s.source,  # an api loop's name as it came (``clocks.clock_of``)
                    s.batch_size,
                    s.pid,
                    s.wait_cpu_s,
                    s.collective_s,
                    s.gpu_span_s,
                    s.gpu_busy_s,
                    s.gpu_busy_source,
                    s.forward_s,
                    s.backward_s,
                    s.optimizer_s,
                    s.phase_hint,
                    s.autograd,
                    s.wait_run_s,
                    s.wait_queue_s,
                ),
            )
        elif isinstance(s, Event):
            self._event(s.ts, s.kind, s.message, s.data)
        elif isinstance(s, PipelineSample):
            self._event(s.ts, "pipeline", s.framework, asdict(s))
        elif isinstance(s, AgentInfo):
            self._event(s.ts, "agent", f"agent in pid {s.pid}", asdict(s))
        elif isinstance(s, CudaSample):
            self._event(s.ts, "cuda", f"CUDA in pid {s.pid}", asdict(s))
        return pts

    def _event(self, ts: float, kind: str, message: str, data: dict[str, Any]) -> None:
        self._db.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?)",
            (ts, kind, message, json.dumps(data, default=str)),
        )

    def commit(self) -> None:
        """Make everything written so far durable."""
        if self._in_tx:
            self._db.execute("COMMIT")
            self._in_tx = False
        self.last_commit = time.monotonic()

    def close(self, **final_meta: Any) -> None:
        """Write final metadata, commit and close (checkpointing the WAL into the file)."""
        if final_meta:
            self.set_meta(**final_meta)
        self.commit()
        # A reader holding the WAL only delays the checkpoint; the data is committed anyway.
        with contextlib.suppress(sqlite3.Error):
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._db.close()


def append_events(path: Path, events: Iterable[Event]) -> None:
    """Add ``events`` to a finished session file (what a later comparison measured of its
    workload); raises UserError when the file cannot be written."""
    if not path.is_file():
        raise UserError(f"no such session file: {path}")
    try:
        db = connect(path, readonly=False, create=False)
        try:
            with db:
                db.executemany(
                    "INSERT INTO events VALUES (?, ?, ?, ?)",
                    [(e.ts, e.kind, e.message, json.dumps(e.data, default=str)) for e in events],
                )
        finally:
            db.close()
    except (OSError, sqlite3.Error) as exc:
        raise UserError(f"cannot add to session file {path}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def default_session_path(name: str) -> Path:
    """A fresh file name under the sessions directory."""
    from sofa_top.recording.paths import sessions_dir

    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:40] or "session"
    return sessions_dir() / f"{stamp}-{safe}-{os.getpid()}.sofa"
