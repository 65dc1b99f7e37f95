"""Reading a session file back: ``SessionReader`` (read-only; also while another sofa-top is
still writing the file). The schema is in ``sofa_top.recording.store``."""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

from sofa_top.agent.clocks import clock_of
from sofa_top.analysis.stackstats import AGENT_THREADS
from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.samples import (
    AgentInfo,
    CudaSample,
    Event,
    Frame,
    PipelineSample,
    PipelineStage,
    StackClass,
    StackCount,
    StackWindow,
    StepSample,
    event_kind,
    gpu_busy_source,
    phase_hint,
    stage_kind,
)
from sofa_top.datamodel.workload import ModelReport, merge, model_report
from sofa_top.recording.readable import check_file, check_schema, damaged, reading
from sofa_top.recording.store import SCHEMA_VERSION, STEP_COLUMNS, connect

# The workload's stack counts, for the exports: the agent's threads (``stackstats.AGENT_THREADS``)
# are stored for its overhead, not shown as the workload's.
_WORKLOAD = "substr(coalesce(c.thread_name, ''), 1, length(?1)) != ?1"
_AGENT = (AGENT_THREADS,)


class SessionReader:
    """Read-only access to a session file (also while another sofa-top is writing it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        check_file(path)
        try:
            self._db = connect(path, readonly=True)
        except sqlite3.Error as exc:
            raise damaged(path, exc) from None
        except OSError as exc:  # resolving the path (a working directory that is gone)
            raise UserError(f"cannot read session file {path}: {exc.strerror or exc}") from None
        try:
            check_schema(self._db, path, SCHEMA_VERSION)
            with reading(path):
                cols = {r[1] for r in self._db.execute("PRAGMA table_info(steps)")}
        except UserError:
            self._db.close()
            raise
        # columns a file written by an older version lacks read as NULL
        self._step_cols = ", ".join(c if c in cols else "NULL" for c in STEP_COLUMNS)

    def __enter__(self) -> SessionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reading(self) -> contextlib.AbstractContextManager[None]:
        """A block of reads (and of what is derived from them) in which damage the opening
        checks could not see reads as the one ``UserError`` line (``readable.reading``)."""
        return reading(self.path)

    def meta(self) -> dict[str, Any]:
        """All metadata keys, JSON-decoded."""
        return {k: json.loads(v) for k, v in self._db.execute("SELECT key, value FROM meta")}

    def series_names(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT name FROM series ORDER BY name")]

    def points(self, series: str) -> list[tuple[float, float | None, str | None]]:
        """(ts, value, error) of one series, in time order."""
        return list(
            self._db.execute(
                "SELECT p.ts, p.value, p.error FROM points p JOIN series s ON s.id = p.series_id "
                "WHERE s.name = ? ORDER BY p.ts",
                (series,),
            )
        )

    def values(self, series: str) -> list[float | None]:
        """The values of one series, in time order (``points`` without the rest: a long
        session's summary reads millions)."""
        return [
            r[0]
            for r in self._db.execute(
                "SELECT p.value FROM points p JOIN series s ON s.id = p.series_id "
                "WHERE s.name = ? ORDER BY p.ts",
                (series,),
            )
        ]

    def errors(self, series: str) -> list[str]:
        """Why readings of one series failed, in time order (its points with an error)."""
        return [
            r[0]
            for r in self._db.execute(
                "SELECT p.error FROM points p JOIN series s ON s.id = p.series_id "
                "WHERE s.name = ? AND p.error IS NOT NULL AND p.error != '' ORDER BY p.ts",
                (series,),
            )
        ]

    def stack_windows(self) -> Iterator[StackWindow]:
        """All stack windows with their counts, in time order."""
        frames_by_id: dict[int, tuple[Frame, ...]] = {}
        for sid, text in self._db.execute("SELECT id, frames FROM stack_strings"):
            frames_by_id[sid] = tuple(Frame(f, fn, int(ln)) for f, fn, ln in json.loads(text))
        counts: dict[int, list[StackCount]] = {}
        for wid, pid, tid, tname, sid, count, klass in self._db.execute(
            "SELECT window_id, pid, tid, thread_name, stack_id, count, klass FROM stack_counts"
        ):
            kl: StackClass = klass
            counts.setdefault(wid, []).append(
                StackCount(pid, tid, tname, frames_by_id.get(sid, ()), count, kl)
            )
        for row in self._db.execute(
            "SELECT id, ts_start, ts_end, rate_hz, samples, sampler_cpu, error, hint "
            "FROM stack_windows ORDER BY ts_start"
        ):
            wid, t0, t1, rate, n, cpu, err, hint = row
            yield StackWindow(t0, t1, rate, n, tuple(counts.get(wid, ())), cpu, err, hint)

    def steps(self) -> list[StepSample]:
        return [
            _step(r) for r in self._db.execute(f"SELECT {self._step_cols} FROM steps ORDER BY ts")
        ]

    def cuda_samples(self) -> list[CudaSample]:
        """The agent's CUDA readings, in time order (unreadable ones left out)."""
        samples = (CudaSample.from_json(e.data) for e in self.events("cuda"))
        return [c for c in samples if c is not None]

    def last_pipeline(self, at: float = math.inf) -> PipelineSample | None:
        """The last input pipeline the agent described at or before ``at`` (None if none, or
        unreadable)."""
        row = self._db.execute(
            "SELECT data FROM events WHERE kind = 'pipeline' AND ts <= ? "
            "ORDER BY ts DESC, rowid DESC LIMIT 1",
            (at,),
        ).fetchone()
        return None if row is None else _pipeline(row[0])

    def agent_info(self, target_pid: object, at: float = math.inf) -> AgentInfo | None:
        """The last report of the target's agent at or before ``at`` (of any agent when the
        target's is missing): hooks, frameworks, step notes, as the hub last saw them."""
        last: AgentInfo | None = None
        for e in self.events_of_kind_before("agent", at, 100_000):
            info = _agent_info(e)
            if last is None or info.pid == target_pid or last.pid != target_pid:
                last = info
        return last

    def model_report(self, at: float = math.inf) -> ModelReport | None:
        """What the agents reported of the model and the thread pools, up to ``at``."""
        out: ModelReport | None = None
        for e in self.events_of_kind_before("agent-model", at, 100_000):
            report = model_report(e.data)
            if report is not None:
                out = merge(out, report)
        return out

    def last_pipelines(self) -> dict[int, PipelineSample]:
        """The last input pipeline each process's agent described, by pid."""
        out: dict[int, PipelineSample] = {}
        for (data,) in self._db.execute(
            "SELECT data FROM events WHERE kind = 'pipeline' ORDER BY ts"
        ):
            p = _pipeline(data)
            if p is not None:
                out[p.pid] = p
        return out

    def events(self, kind: str | None = None) -> list[Event]:
        q = "SELECT ts, kind, message, data FROM events"
        args: tuple[str, ...] = ()
        if kind is not None:
            q += " WHERE kind = ?"
            args = (kind,)
        return [
            _event(ts, k, msg, data)
            for ts, k, msg, data in self._db.execute(q + " ORDER BY ts", args)
        ]

    def processes(self) -> list[dict[str, Any]]:
        cols = ("pid", "create_time", "ppid", "name", "cmdline", "role", "first_seen")
        rows = self._db.execute(
            "SELECT pid, create_time, ppid, name, cmdline, role, first_seen, last_seen, alive "
            "FROM processes ORDER BY first_seen"
        )
        out = []
        for r in rows:
            d = dict(zip(cols, r[:7], strict=True))
            d["cmdline"] = json.loads(d["cmdline"])
            d["last_seen"], d["alive"] = r[7], bool(r[8])
            out.append(d)
        return out

    def time_range(self) -> tuple[float, float] | None:
        row = self._db.execute("SELECT min(ts), max(ts) FROM points").fetchone()
        return None if row[0] is None else (float(row[0]), float(row[1]))

    def close(self) -> None:
        self._db.close()

    def check_intact(self) -> None:
        """Raise UserError for damaged pages: an export would silently miss data, a replay
        wait for snapshots it can never read. ``quick_check`` reads every page once, without
        the slow index cross-checks."""
        try:
            problem = str(self._db.execute("PRAGMA quick_check(1)").fetchone()[0])
        except sqlite3.Error as exc:
            problem = str(exc)
        if problem != "ok":
            # quick_check starts its report with a "*** in database main ***" line
            where = "; ".join(ln for ln in problem.splitlines() if not ln.startswith("***"))
            raise UserError(f"cannot read session {self.path}: the file is damaged ({where})")

    # -- streaming reads (exports, replay): bounded memory, one cursor at a time --------------
    @contextlib.contextmanager
    def read_snapshot(self) -> Iterator[None]:
        """Run several reads against one consistent state of a file that is still being written.

        A WAL reader never blocks the writer; keep the block short all the same, since an open
        read transaction holds back the writer's checkpoint. Damage met inside is a
        ``UserError`` (``reading``).
        """
        with reading(self.path):
            self._db.execute("BEGIN")
        try:
            with reading(self.path):
                yield
        finally:
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error:
                # A statement left unfinished by an error: ROLLBACK ends the read regardless.
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")

    def series_ids(self) -> dict[str, int]:
        """Series name -> id."""
        return {name: int(sid) for sid, name in self._db.execute("SELECT id, name FROM series")}

    def point_stats(self, series: Iterable[str]) -> dict[str, tuple[int, float, float]]:
        """Per series: (number of points, first ts, last ts), from the series index; series
        without points are left out."""
        out: dict[str, tuple[int, float, float]] = {}
        for name in series:
            n, t0, t1 = self._db.execute(
                "SELECT count(*), min(p.ts), max(p.ts) FROM points p "
                "WHERE p.series_id = (SELECT id FROM series WHERE name = ?)",
                (name,),
            ).fetchone()
            if n:
                out[name] = (int(n), float(t0), float(t1))
        return out

    def series_points(self, series_id: int) -> sqlite3.Cursor:
        """(ts, value) of one series in time order, straight off the (series_id, ts) index;
        the cursor itself, so that callers can ``fetchmany``."""
        return self._db.execute(
            "SELECT ts, value FROM points WHERE series_id = ? ORDER BY ts", (series_id,)
        )

    def second_means(self, series: str, t0: float, t1: float) -> list[tuple[float, float | None]]:
        """Per-second means of ``series`` over ``t0 <= ts <= t1`` (as ``ring.SeriesRing`` has them:
        a second with only failed readings has ``None``, a second without points is absent)."""
        return [
            (float(sec), value)
            for sec, value in self._db.execute(
                "SELECT CAST(p.ts AS INTEGER) AS sec, avg(p.value) FROM points p "
                "JOIN series s ON s.id = p.series_id WHERE s.name = ? AND p.ts >= ? AND p.ts <= ? "
                "GROUP BY sec ORDER BY sec",
                (series, t0, t1),
            )
        ]

    def last_point(self, series: str, at: float) -> tuple[float, float | None] | None:
        """The last (ts, value) of ``series`` at or before ``at``."""
        row = self._db.execute(
            "SELECT p.ts, p.value FROM points p JOIN series s ON s.id = p.series_id "
            "WHERE s.name = ? AND p.ts <= ? ORDER BY p.ts DESC LIMIT 1",
            (series, at),
        ).fetchone()
        return None if row is None else (float(row[0]), row[1])

    def fast_time_range(self) -> tuple[float, float] | None:
        """First and last point time, one index probe per series (``time_range`` scans)."""
        row = self._db.execute(
            "SELECT min(t0), max(t1) FROM (SELECT "
            "(SELECT min(ts) FROM points WHERE series_id = s.id) AS t0, "
            "(SELECT max(ts) FROM points WHERE series_id = s.id) AS t1 FROM series s)"
        ).fetchone()
        return None if row is None or row[0] is None else (float(row[0]), float(row[1]))

    def stack_frames(self, stack_ids: Iterable[int]) -> dict[int, tuple[Frame, ...]]:
        """Frames (outermost first) of interned stacks."""
        ids = sorted(set(stack_ids))
        out: dict[int, tuple[Frame, ...]] = {}
        for i in range(0, len(ids), 500):  # stays under SQLite's bound-parameter limit
            chunk = ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for sid, text in self._db.execute(
                f"SELECT id, frames FROM stack_strings WHERE id IN ({marks})", chunk
            ):
                out[int(sid)] = tuple(Frame(f, fn, int(ln)) for f, fn, ln in json.loads(text))
        return out

    def stack_thread_windows(self) -> int:
        """How many (window, thread) pairs of the workload's threads have samples."""
        return int(
            self._db.execute(
                "SELECT count(*) FROM (SELECT DISTINCT window_id, pid, tid FROM stack_counts c "
                f"WHERE {_WORKLOAD})",
                _AGENT,
            ).fetchone()[0]
        )

    def stack_stats(self) -> tuple[int, int, int]:
        """(stack_counts rows, thread-samples, sum of stack depths over rows), of the
        workload's threads."""
        # Group by stack first: each distinct stack's JSON is then measured once, not per row.
        row = self._db.execute(
            "SELECT coalesce(sum(c.rows), 0), coalesce(sum(c.samples), 0), "
            "coalesce(sum(c.rows * coalesce(json_array_length(s.frames), 0)), 0) FROM "
            "(SELECT stack_id, count(*) AS rows, sum(count) AS samples FROM stack_counts c "
            f"WHERE {_WORKLOAD} GROUP BY stack_id) c "
            "LEFT JOIN stack_strings s ON s.id = c.stack_id",
            _AGENT,
        ).fetchone()
        return int(row[0]), int(row[1]), int(row[2])

    def stack_threads(self) -> list[tuple[int, int, str]]:
        """(pid, tid, thread name) of every sampled thread of the workload (not the agent's),
        the name most seen."""
        rows = self._db.execute(
            "SELECT pid, tid, thread_name, sum(count) AS n FROM stack_counts c "
            f"WHERE {_WORKLOAD} GROUP BY pid, tid, thread_name ORDER BY pid, tid, n DESC",
            _AGENT,
        )
        out: list[tuple[int, int, str]] = []
        for pid, tid, name, _n in rows:
            if out and out[-1][:2] == (pid, tid):
                if not out[-1][2] and name:
                    out[-1] = (pid, tid, name)
                continue
            out.append((int(pid), int(tid), name or ""))
        return out

    def iter_stack_rows(
        self, by_thread: bool = False
    ) -> Iterator[tuple[int, float, float, float, int, int, int, str, int, int, str]]:
        """Stack counts joined to their window: (window_id, ts_start, ts_end, rate_hz, samples,
        pid, tid, thread_name, stack_id, count, klass), in time order or by thread then time;
        the workload's threads only (the exports show the workload, not sofa-top's agent)."""
        order = "c.pid, c.tid, w.ts_start, w.id" if by_thread else "w.ts_start, w.id"
        return self._db.execute(
            "SELECT w.id, w.ts_start, w.ts_end, w.rate_hz, w.samples, c.pid, c.tid, "
            "c.thread_name, c.stack_id, c.count, c.klass FROM stack_windows w "
            f"JOIN stack_counts c ON c.window_id = w.id WHERE c.count > 0 AND {_WORKLOAD} "
            f"ORDER BY {order}",
            _AGENT,
        )

    def stack_windows_between(self, t0: float, t1: float) -> list[StackWindow]:
        """Stack windows that ended in ``t0 < ts_end <= t1``, with their counts, in time order."""
        rows = list(
            self._db.execute(
                "SELECT id, ts_start, ts_end, rate_hz, samples, sampler_cpu, error, hint "
                "FROM stack_windows WHERE ts_end > ? AND ts_end <= ? ORDER BY ts_start, id",
                (t0, t1),
            )
        )
        return self._windows_with_counts(rows)

    def last_stack_window(self, at: float) -> StackWindow | None:
        """The last stack window that ended at or before ``at``."""
        rows = list(
            self._db.execute(
                "SELECT id, ts_start, ts_end, rate_hz, samples, sampler_cpu, error, hint "
                "FROM stack_windows WHERE ts_end <= ? ORDER BY ts_end DESC, id DESC LIMIT 1",
                (at,),
            )
        )
        windows = self._windows_with_counts(rows)
        return windows[0] if windows else None

    def _windows_with_counts(self, rows: list[Any]) -> list[StackWindow]:
        if not rows:
            return []
        ids = [r[0] for r in rows]
        counts: dict[int, list[tuple[int, int, str, int, int, StackClass]]] = {}
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for wid, pid, tid, tname, sid, count, klass in self._db.execute(
                "SELECT window_id, pid, tid, thread_name, stack_id, count, klass "
                f"FROM stack_counts WHERE window_id IN ({marks})",
                chunk,
            ):
                counts.setdefault(wid, []).append((pid, tid, tname, sid, count, klass))
        frames = self.stack_frames(c[3] for cs in counts.values() for c in cs)
        out: list[StackWindow] = []
        for wid, t0, t1, rate, n, cpu, err, hint in rows:
            stacks = tuple(
                StackCount(pid, tid, tname or "", frames.get(sid, ()), count, klass)
                for pid, tid, tname, sid, count, klass in counts.get(wid, ())
            )
            out.append(StackWindow(t0, t1, rate, n, stacks, cpu, err, hint))
        return out

    def count_steps(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM steps").fetchone()[0])

    def iter_step_rows(
        self,
    ) -> Iterator[tuple[float, int, float, float, float, str, int | None, int]]:
        """All steps as (ts, step, start, duration_s, input_wait_s, source, batch_size, pid), in
        arrival order (time order per process): the cursor itself, for exports of many steps."""
        return self._db.execute(
            "SELECT ts, step, start, duration_s, input_wait_s, source, batch_size, pid "
            "FROM steps ORDER BY rowid"
        )

    def steps_before(self, at: float, limit: int, since: float | None = None) -> list[StepSample]:
        """The last ``limit`` steps that ended at or before ``at`` (and after ``since``), oldest
        first."""
        rows = self._db.execute(
            f"SELECT {self._step_cols} FROM steps WHERE ts <= ? AND ts > ? "
            "ORDER BY ts DESC LIMIT ?",
            (at, float("-inf") if since is None else since, limit),
        ).fetchall()
        return [_step(r) for r in reversed(rows)]

    def count_events(self, kinds: Iterable[str]) -> int:
        ks = sorted(set(kinds))
        marks = ",".join("?" * len(ks))
        q = f"SELECT count(*) FROM events WHERE kind IN ({marks})"
        return int(self._db.execute(q, ks).fetchone()[0])

    def iter_events(self, kinds: Iterable[str]) -> Iterator[Event]:
        """Events of the given kinds, in time order."""
        ks = sorted(set(kinds))
        marks = ",".join("?" * len(ks))
        for ts, k, msg, data in self._db.execute(
            f"SELECT ts, kind, message, data FROM events WHERE kind IN ({marks}) ORDER BY ts", ks
        ):
            yield _event(ts, k, msg, data)

    def events_before(
        self, at: float, limit: int, exclude_kinds: Iterable[str] = ()
    ) -> list[Event]:
        """The last ``limit`` events at or before ``at`` (except some kinds), oldest first."""
        ks = sorted(set(exclude_kinds))
        marks = ",".join("?" * len(ks))
        rows = self._db.execute(
            f"SELECT ts, kind, message, data FROM events WHERE ts <= ? AND kind NOT IN ({marks}) "
            "ORDER BY ts DESC, rowid DESC LIMIT ?",
            (at, *ks, limit),
        ).fetchall()
        return [_event(ts, k, msg, data) for ts, k, msg, data in reversed(rows)]

    def events_of_kind_before(self, kind: str, at: float, limit: int) -> list[Event]:
        """The last ``limit`` events of one kind at or before ``at``, oldest first."""
        rows = self._db.execute(
            "SELECT ts, kind, message, data FROM events WHERE kind = ? AND ts <= ? "
            "ORDER BY ts DESC, rowid DESC LIMIT ?",
            (kind, at, limit),
        ).fetchall()
        return [_event(ts, k, msg, data) for ts, k, msg, data in reversed(rows)]

    def last_event(self, kind: str, at: float) -> Event | None:
        """The last event of ``kind`` at or before ``at``."""
        row = self._db.execute(
            "SELECT ts, kind, message, data FROM events WHERE kind = ? AND ts <= ? "
            "ORDER BY ts DESC, rowid DESC LIMIT 1",
            (kind, at),
        ).fetchone()
        if row is None:
            return None
        ts, k, msg, data = row
        return _event(ts, k, msg, data)

    def event_times(self, kind: str) -> list[float]:
        """Timestamps of every event of ``kind``, in order (markers are few)."""
        return [
            float(r[0])
            for r in self._db.execute("SELECT ts FROM events WHERE kind = ? ORDER BY ts", (kind,))
        ]


def launched(meta: dict[str, Any]) -> bool:
    """Whether sofa-top launched the session's workload with its agent (older files have no
    ``launched``: only a launch recorded agent settings, and ``launch`` mode is one)."""
    value = meta.get("launched")
    if isinstance(value, bool):
        return value
    return "settings" in meta or meta.get("mode") in ("launch", "demo")


def _pairs(value: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list):
        return ()
    return tuple((str(v[0]), str(v[1])) for v in value if isinstance(v, list) and len(v) == 2)


def _int_of(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _agent_info(e: Event) -> AgentInfo:
    """A stored ``agent`` event (the agent's info frame) as an ``AgentInfo``."""
    d = e.data
    applied = d.get("hooks_applied")
    return AgentInfo(
        ts=e.ts,
        pid=_int_of(d.get("pid")),
        python=str(d.get("python") or ""),
        frameworks=_pairs(d.get("frameworks")),
        hooks_applied=tuple(str(h) for h in applied) if isinstance(applied, list) else (),
        hooks_skipped=_pairs(d.get("hooks_skipped")),
        dropped=_int_of(d.get("dropped")),
        step_notes=_pairs(d.get("step_notes")),
    )


def _pipeline(data: str | None) -> PipelineSample | None:
    """A stored ``pipeline`` event's data as a PipelineSample (None if unreadable)."""
    if not data:
        return None
    try:
        d = json.loads(data)
        stages = tuple(
            PipelineStage(**{**st, "kind": stage_kind(st.get("kind"))})
            for st in d.pop("stages", ())
        )
        return PipelineSample(**{**d, "stages": stages})
    except (TypeError, ValueError):
        return None


_BUSY_SOURCE = STEP_COLUMNS.index("gpu_busy_source")
_PHASE_HINT = STEP_COLUMNS.index("phase_hint")
_AUTOGRAD = STEP_COLUMNS.index("autograd")
_SOURCE = STEP_COLUMNS.index("source")
# StepSample's fields, by their column: positional arguments (a long session has ~100 k steps);
# ``name`` (an api loop's own name) shares the ``source`` column and comes last, by keyword
_FIELD_COLUMNS = tuple(STEP_COLUMNS.index(f.name) for f in fields(StepSample) if f.name != "name")


def _step(row: tuple[Any, ...]) -> StepSample:
    values = list(row)
    values[_BUSY_SOURCE] = gpu_busy_source(values[_BUSY_SOURCE])
    values[_SOURCE], name = clock_of(values[_SOURCE])  # other names: api loops
    values[_PHASE_HINT] = phase_hint(values[_PHASE_HINT])
    autograd = values[_AUTOGRAD]
    values[_AUTOGRAD] = None if autograd is None else bool(autograd)
    args = [values[i] for i in _FIELD_COLUMNS]
    args.append(name)  # the last field
    return StepSample(*args)


def _event(ts: float, kind: str, message: str | None, data: str | None) -> Event:
    """An events row as an ``Event``; a kind this version does not know (a file written by a
    newer sofa-top) reads as ``agent-unknown-frame`` with the kind kept in the data."""
    known = event_kind(kind)
    payload = json.loads(data) if data else {}
    if known is None:
        return Event(ts, "agent-unknown-frame", message or kind, {**payload, "kind": kind})
    return Event(ts, known, message or "", payload)
