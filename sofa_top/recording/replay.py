"""Replay a session file: the same ``Snapshot`` the live hub builds, for any instant of it.

``ReplaySource`` is a ``SnapshotSource`` over a finished session, or over one another sofa-top is
still writing (the file is opened read-only; WAL readers never block the writer). It keeps a time
cursor: by default it follows the end of the file; ``seek``/``step``/``next_marker``/
``prev_marker`` move it. ``snapshot_at(ts)`` is the pure part: it rebuilds what the hub would
have shown at ``ts`` from the stored tables:

- ``history``: per-second means of every series (except ``proc.*``) over the 15 minutes up to
  ``ts``, as the rings hold them;
- ``process``/``system``/``gpu``: the last sample at or before ``ts``, reassembled from the points
  and processes tables (what the store does not keep, e.g. process states and thread counts, is
  left unknown);
- ``stacks``: the stack windows of the 5 s up to ``ts``, summarized like the hub does;
- ``verdict``: the last verdict event at or before ``ts``: at the end of a finished file, the
  session's final verdict, which ``record --json`` reports too; ``events`` and ``steps``: the
  recent ones up to ``ts``;
- ``target`` (launched or attached, from the file), ``agent`` (its last report), ``pipeline``
  and ``model``: as the hub last had them at ``ts``;
- ``ranks`` and ``rank_verdict``: a distributed job's ranks over the verdict window up to
  ``ts`` (their steps; the CPU of their workers is not replayed), judged as the hub judges them.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from sofa_top.analysis.ranks import cross_rank_verdict, rank_stats
from sofa_top.analysis.sources import session_lines
from sofa_top.analysis.stackstats import STACK_SUMMARY_S, summarize_by_thread
from sofa_top.analysis.verdicts import WINDOW_S, Evidence
from sofa_top.collectors.cores import recorded_cores
from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.ranks import RankStat
from sofa_top.datamodel.samples import (
    CudaSample,
    Event,
    GpuDevice,
    GpuSample,
    ProcessSample,
    ProcInfo,
    SystemSample,
    throttle_names,
)
from sofa_top.datamodel.snapshot import LOG_LINES, Snapshot, TargetInfo
from sofa_top.datamodel.source import OnSnapshot, SnapshotSource
from sofa_top.datamodel.verdict import Verdict
from sofa_top.recording.ranks_live import session_ranks
from sofa_top.recording.reader import SessionReader, launched
from sofa_top.recording.rings import HISTORY_S

EVENTS_KEPT = 50  # as many events and steps as the hub hands the UI
STEPS_KEPT = 600
HIDDEN_EVENT_KINDS = (
    "agent",
    "pipeline",
    "cuda",
    "log",
    "log-progress",
    "log-dropped",
    "neighbours",
)  # stored, not hub events
RANK_STEPS_KEPT = 50_000  # the ranks' steps of one verdict window (8 ranks at 600 steps/s)
MARKER_KIND = "verdict"
_GPU_FIELDS = ("util", "mem_used", "power", "temp", "sm_clock", "target_mem")
# the readings only some devices have (series.points_of: written once they have a value)
_GPU_EXTRA = ("target_util", "target_from_device", "power_limit", "mem_clock", "throttle", "mig")
CUDA_KEPT = 20  # the agent's last CUDA readings looked at for the latest profiler window


class ReplaySource:
    """Snapshots of a recorded session at a movable time cursor."""

    def __init__(self, path: Path, *, interval: float = 1.0) -> None:
        self.path = path
        self.session_path = str(path)
        self.interval = interval
        self._reader = SessionReader(path)
        self._lock = threading.RLock()
        self._cursor: float | None = None  # None: follow the end of the file
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._history = _HistoryCache()

    # -- cursor ----------------------------------------------------------------------------
    @property
    def time_range(self) -> tuple[float, float] | None:
        """First and last recorded instant (the end moves while the session is recorded)."""
        with self._lock, self._reader.reading():
            return self._reader.fast_time_range()

    @property
    def following(self) -> bool:
        """True while the cursor follows the end of the file."""
        return self._cursor is None

    @property
    def cursor(self) -> float:
        """The instant snapshots are built for."""
        if self._cursor is not None:
            return self._cursor
        rng = self.time_range
        if rng is not None:
            return rng[1]
        with self._lock, self._reader.reading():
            started = self._reader.meta().get("started")
        return float(started) if isinstance(started, int | float) else 0.0

    def seek(self, ts: float) -> float:
        """Move the cursor to ``ts`` (clamped to the recording); returns where it landed."""
        rng = self.time_range
        if rng is not None:
            ts = min(max(ts, rng[0]), rng[1])
        self._cursor = ts
        self._wake.set()
        return ts

    def step(self, seconds: float) -> float:
        """Move the cursor by ``seconds`` (negative: back)."""
        return self.seek(self.cursor + seconds)

    def follow(self) -> None:
        """Let the cursor follow the end of the file again."""
        self._cursor = None
        self._wake.set()

    def next_marker(self) -> float | None:
        """Jump to the next verdict change after the cursor; None (cursor unchanged) if none."""
        at = self.cursor
        with self._lock, self._reader.reading():
            times = self._reader.event_times(MARKER_KIND)
        t = next((t for t in times if t > at + 1e-6), None)
        return None if t is None else self.seek(t)

    def prev_marker(self) -> float | None:
        """Jump to the previous verdict change before the cursor; None if none."""
        at = self.cursor
        with self._lock, self._reader.reading():
            times = self._reader.event_times(MARKER_KIND)
        t = next((t for t in reversed(times) if t < at - 1e-6), None)
        return None if t is None else self.seek(t)

    # -- SnapshotSource --------------------------------------------------------------------
    def start(self, on_snapshot: OnSnapshot) -> None:
        """Publish a snapshot about every ``interval`` seconds, and at once after each move of
        the cursor; returns at once."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._run, args=(on_snapshot,), name="sofa-replay", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop publishing and close the file. Idempotent."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        with self._lock:
            if not self._closed:
                self._closed = True
                self._reader.close()

    def _run(self, on_snapshot: OnSnapshot) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                snap = self.snapshot()
            except (sqlite3.Error, UserError):
                snap = None  # a damaged tail or a passing error: try again next tick
            if snap is not None and not self._stop.is_set():
                with contextlib.suppress(Exception):  # the UI going away must not kill replay
                    on_snapshot(snap)
            self._wake.wait(self.interval)

    def snapshot(self) -> Snapshot:
        """The snapshot at the cursor."""
        return self.snapshot_at(self.cursor)

    # -- the pure part ---------------------------------------------------------------------
    def snapshot_at(self, ts: float) -> Snapshot:
        """What the live hub would have shown at ``ts``, rebuilt from the file (a damaged
        file: the reader's one ``UserError`` line)."""
        with self._reader.reading():
            return self._snapshot_at(ts)

    def _snapshot_at(self, ts: float) -> Snapshot:
        with self._lock, self._reader.read_snapshot():
            r = self._reader
            meta = r.meta()
            names = r.series_names()
            history = {}
            for name in names:
                if name.startswith("proc."):
                    continue
                pts = self._history.get(r, name, ts)
                if pts:
                    history[name] = pts
            exit_ev = r.last_event("target-exit", ts)
            process = _process_at(r, ts, meta, exit_ev)
            system = _system_at(r, ts, meta, names)
            gpu = _gpu_at(r, ts, names)
            windows = r.stack_windows_between(ts - STACK_SUMMARY_S, ts)
            last_window = r.last_stack_window(ts)
            if not windows and last_window is not None:
                windows = [last_window]
            verdict_ev = r.last_event(MARKER_KIND, ts)
            events = r.events_before(ts, EVENTS_KEPT, HIDDEN_EVENT_KINDS)
            steps = r.steps_before(ts, STEPS_KEPT)
            rank_events = r.events_of_kind_before("rank", ts, 100_000)
            ranks: tuple[RankStat, ...] = ()
            if rank_events:
                evidence = session_ranks(
                    rank_events,
                    r.events_of_kind_before("rank-exit", ts, 100_000),
                    r.steps_before(ts, RANK_STEPS_KEPT, since=ts - WINDOW_S),
                    {},
                    {},
                    {},
                )
                ranks = rank_stats(evidence, Evidence(cpu_count=recorded_cores(meta)))
            cuda = _cuda_at(r, ts)
            target = _target(meta)
            agent = r.agent_info(target.pid, ts)
            pipeline = r.last_pipeline(ts)
            model = r.model_report(ts)
        summary, by_thread = summarize_by_thread(windows, session_lines(meta))
        exit_code = _exit_code(exit_ev)
        started = meta.get("started")
        return Snapshot(
            ts=ts,
            started=float(started) if isinstance(started, int | float) else ts,
            target=target,
            session_path=self.session_path,
            recording=False,
            history=history,
            process=process,
            system=system,
            gpu=gpu,
            stacks=summary,
            stacks_by_thread=by_thread,
            last_stack_window=last_window,
            events=tuple(events),
            target_exited=exit_ev is not None,
            exit_code=exit_code,
            cpu_count=recorded_cores(meta),
            verdict=None if verdict_ev is None else verdict_from_event(verdict_ev),
            steps=tuple(steps),
            logs=tuple(r.events_of_kind_before("log", ts, LOG_LINES)),
            read_only=True,
            ranks=ranks,
            rank_verdict=cross_rank_verdict(ranks),
            cuda=cuda,
            pipeline=pipeline,
            agent=agent,
            model=model,
        )


def _is_a_source(r: ReplaySource) -> SnapshotSource:
    return r  # mypy checks here that ReplaySource keeps to the protocol


Point = tuple[float, float | None]


class _HistoryCache:
    """Per-second means already read, per series. Seconds more than ``SETTLED_S`` before the
    cursor no longer change (even in a file still being written), so a cursor that moves
    forward reads only the seconds it has not seen yet; a jump back reads the window afresh.
    The result is what ``SessionReader.second_means`` gives for the whole window."""

    SETTLED_S = 10

    def __init__(self) -> None:
        # name -> (first cached second, seconds before this one are cached, [(second, mean)])
        self._series: dict[str, tuple[int, int, list[Point]]] = {}

    def get(self, r: SessionReader, name: str, ts: float) -> tuple[Point, ...]:
        # The seconds a ring would hold: the last HISTORY_S of them, the cursor's included.
        now = math.floor(ts)
        first = now - HISTORY_S + 1
        settled = max(first, math.floor(ts - self.SETTLED_S))
        cached = self._series.get(name)
        # Usable if it starts early enough and holds only whole seconds before the cursor's.
        if cached is not None and cached[0] <= first and cached[1] <= now:
            start = max(cached[1], first)
            pts = [p for p in cached[2] if p[0] >= first]
        else:
            start, pts = first, []
        fresh = r.second_means(name, start, ts)
        pts += [p for p in fresh if p[0] < settled]
        self._series[name] = (first, max(start, settled), pts)
        return (*pts, *(p for p in fresh if p[0] >= settled))


def verdict_from_event(ev: Event) -> Verdict:
    """Rebuild a ``Verdict`` from its stored marker (``Verdict.as_json`` in the event's data)."""
    return Verdict.from_json(ev.data, ev.message)


def _target(meta: dict[str, Any]) -> TargetInfo:
    raw = meta.get("target")
    t: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return TargetInfo(
        pid=int(t.get("pid") or 0),
        name=str(t.get("name") or ""),
        cmdline=tuple(str(a) for a in t.get("cmdline") or ()),
        launched=launched(meta),
    )


def _exit_code(ev: Event | None) -> int | None:
    if ev is None:
        return None
    code = ev.data.get("exit_code")
    return code if isinstance(code, int) else None


def _value(r: SessionReader, series: str, at: float) -> float | None:
    pt = r.last_point(series, at)
    return None if pt is None else pt[1]


def _process_at(
    r: SessionReader, ts: float, meta: dict[str, Any], exit_ev: Event | None
) -> ProcessSample | None:
    last = r.last_point("tree.cpu", ts)
    if last is None:
        return None
    at, cpu = last
    procs: list[ProcInfo] = []
    for p in r.processes():
        first, seen = float(p["first_seen"]), float(p["last_seen"])
        if first > at:
            continue
        alive = seen > at or (seen == at and p["alive"])
        exited_now = seen == at and not p["alive"]
        if not (alive or exited_now):
            continue
        pid = int(p["pid"])
        rss = _value(r, f"proc.{pid}.rss", at) if alive else None
        procs.append(
            ProcInfo(
                pid=pid,
                ppid=int(p["ppid"] or 0),
                name=str(p["name"] or ""),
                cmdline=tuple(str(a) for a in p["cmdline"] or ()),
                create_time=float(p["create_time"] or 0.0),
                cpu_percent=_value(r, f"proc.{pid}.cpu", at) if alive else None,
                num_threads=None,  # not stored per process
                rss=None if rss is None else int(rss),
                read_bytes=None,
                write_bytes=None,
                ctx_switches=None,
                state="?" if alive else "exited",  # psutil's state is not stored
                alive=alive,
                role=str(p["role"]) if p["role"] else None,
            )
        )
    rss = _value(r, "tree.rss", at)
    threads = _value(r, "tree.threads", at)
    target = meta.get("target")
    target_pid = int(target.get("pid") or 0) if isinstance(target, dict) else 0
    exited = exit_ev is not None and exit_ev.ts <= at
    return ProcessSample(
        ts=at,
        target_pid=target_pid,
        target_alive=not exited,
        procs=tuple(procs),
        tree_cpu_percent=cpu,
        tree_rss=None if rss is None else int(rss),
        tree_read_bytes=None,  # only the rates are stored
        tree_write_bytes=None,
        tree_threads=None if threads is None else int(threads),
        exit_code=_exit_code(exit_ev) if exited else None,
    )


def _system_at(
    r: SessionReader, ts: float, meta: dict[str, Any], names: list[str]
) -> SystemSample | None:
    last = r.last_point("sys.cpu", ts)
    if last is None:
        return None
    at, total = last
    cores = sorted(
        (int(n.rsplit(".", 1)[1]), n)
        for n in names
        if n.startswith("sys.cpu.") and n.rsplit(".", 1)[1].isdigit()
    )
    per_core = tuple(_value(r, n, at) or 0.0 for _, n in cores)
    mem = _value(r, "sys.mem_used", at)
    swap = _value(r, "sys.swap_used", at)
    return SystemSample(
        ts=at,
        cpu_per_core=per_core,
        cpu_total=total if total is not None else 0.0,
        iowait=_value(r, "sys.iowait", at),
        mem_used=int(mem or 0),
        mem_total=int(meta.get("mem_total") or 0),
        swap_used=int(swap or 0),
        swap_total=int(meta.get("swap_total") or 0),
    )


def _gpu_at(r: SessionReader, ts: float, names: list[str]) -> GpuSample | None:
    indexes = sorted(
        {int(n.split(".")[1]) for n in names if n.startswith("gpu.") and n.split(".")[1].isdigit()}
    )
    devices: list[GpuDevice] = []
    latest = -math.inf
    for i in indexes:
        values: dict[str, float | None] = {}
        for field in _GPU_FIELDS:
            pt = r.last_point(f"gpu.{i}.{field}", ts)
            values[field] = None if pt is None else pt[1]
            if pt is not None:
                latest = max(latest, pt[0])
        if all(v is None for v in values.values()):
            continue

        def as_int(v: float | None) -> int | None:
            return None if v is None else int(v)

        extra: dict[str, float | None] = {}
        for field in _GPU_EXTRA:
            pt = r.last_point(f"gpu.{i}.{field}", ts) if f"gpu.{i}.{field}" in names else None
            extra[field] = None if pt is None else pt[1]
        scope = extra["target_from_device"]
        throttle = extra["throttle"]
        devices.append(
            GpuDevice(
                index=i,
                name=f"GPU {i}",  # the device name is not stored
                util=values["util"],
                mem_used=as_int(values["mem_used"]),
                mem_total=None,
                power_w=values["power"],
                temp_c=values["temp"],
                sm_clock_mhz=values["sm_clock"],
                target_mem=as_int(values["target_mem"]),
                target_util=extra["target_util"],
                target_scope=None if scope is None else "device" if scope else "pids",
                power_limit_w=extra["power_limit"],
                mem_clock_mhz=extra["mem_clock"],
                throttle=None if throttle is None else throttle_names(int(throttle)),
                mig=None if extra["mig"] is None else bool(extra["mig"]),
            )
        )
    if not devices:
        return None
    return GpuSample(ts=latest, status="ok", devices=tuple(devices))


def _cuda_at(r: SessionReader, ts: float) -> CudaSample | None:
    """The agent's last CUDA reading at ``ts``, with the last profiler window (as the hub)."""
    samples = [
        c
        for c in (
            CudaSample.from_json(e.data) for e in r.events_of_kind_before("cuda", ts, CUDA_KEPT)
        )
        if c
    ]
    if not samples:
        return None
    last = samples[-1]
    window = next((c.window for c in reversed(samples) if c.window is not None), None)
    return last if last.window is not None or window is None else replace(last, window=window)
