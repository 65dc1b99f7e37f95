"""What the exports share: the result, the event budget, counter tracks, steps, markers and the
all-or-nothing output file."""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.ranks import RankId
from sofa_top.datamodel.samples import Event, EventKind, Frame
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.series import (
    BYTES,
    BYTES_PER_S,
    GPU_MEM_USED,
    GPU_POWER,
    GPU_UTIL,
    PERCENT,
    STEP_INPUT_FRACTION,
    SYS_CPU,
    SYS_IOWAIT,
    SYS_MEM_USED,
    TREE_CPU,
    TREE_READ_RATE,
    TREE_RSS,
    TREE_THREADS,
    TREE_WRITE_RATE,
    WATTS,
)

# Perfetto UI and chrome://tracing both slow to a crawl (or give up) somewhere past a million
# events; every export plans to stay under this and says what it merged to get there.
MAX_EVENTS = 1_000_000

MARKER_KINDS: tuple[EventKind, ...] = (
    "verdict",
    "target-exit",
    "optimize",
    "collector-failed",
    "rank-verdict",
    "rank-exit",
)

# Synthetic ids for things that are not OS processes/threads. Linux PIDs stay below 2**22, so
# these never collide with a real one.
MACHINE_PID = (1 << 30) - 1
SYNTHETIC_TID_BASE = 1 << 30


@dataclass
class ExportResult:
    """What an export wrote; ``notes`` says what was merged or left out (the CLI prints them)."""

    path: Path
    fmt: str
    events: int  # trace events (counters, slices, markers, samples) written
    bytes: int
    seconds: float
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Written:
    """What a format writer reports back: events written and notes on what it merged."""

    events: int
    notes: list[str]


@dataclass(frozen=True, slots=True)
class CounterSpec:
    """One counter track: which series feeds it, how it is shown, which process owns it."""

    series: str
    label: str
    unit: str  # a unit of ``recording.series`` (PERCENT, BYTES, ...), "steps/s" or ""
    pid: int | None  # None: machine-wide (system, GPUs)


THROUGHPUT_SERIES = "derived.throughput"  # computed from the steps table, not stored

_TREE = {
    TREE_CPU: ("CPU (process tree)", PERCENT),
    TREE_RSS: ("RSS (process tree)", BYTES),
    TREE_READ_RATE: ("disk read (process tree)", BYTES_PER_S),
    TREE_WRITE_RATE: ("disk write (process tree)", BYTES_PER_S),
    TREE_THREADS: ("threads (process tree)", ""),
    STEP_INPUT_FRACTION: ("input fraction (of step time)", ""),
}
_SYSTEM = {
    SYS_CPU: ("CPU (system)", PERCENT),
    SYS_IOWAIT: ("iowait (system)", PERCENT),
    SYS_MEM_USED: ("memory used (system)", BYTES),
}
_GPU = {
    GPU_UTIL: ("utilization", PERCENT),
    GPU_MEM_USED: ("memory used", BYTES),
    GPU_POWER: ("power", WATTS),
}


def counter_spec(series: str, target_pid: int) -> CounterSpec | None:
    """The counter track for a stored series, or None for series the exports leave out."""
    if series in _TREE:
        label, unit = _TREE[series]
        return CounterSpec(series, label, unit, target_pid)
    if series in _SYSTEM:
        label, unit = _SYSTEM[series]
        return CounterSpec(series, label, unit, None)
    parts = series.split(".")
    if len(parts) == 3 and parts[0] == "gpu" and parts[1].isdigit() and parts[2] in _GPU:
        label, unit = _GPU[parts[2]]
        return CounterSpec(series, f"GPU {parts[1]} {label}", unit, None)
    if len(parts) == 3 and parts[0] == "proc" and parts[1].isdigit() and parts[2] == "cpu":
        return CounterSpec(series, "CPU", PERCENT, int(parts[1]))
    return None


_ORDER = [*_TREE, *_SYSTEM]


def _counter_order(c: CounterSpec) -> tuple[int, int, str]:
    """Tracks in reading order: the tree first, then per-process CPU, the machine, the GPUs."""
    if c.series in _ORDER:
        rank = _ORDER.index(c.series)
        return (0 if rank < len(_TREE) else 2, rank, "")
    parts = c.series.split(".")
    if parts[0] == "proc":
        return (1, int(parts[1]), c.series)
    return (3, int(parts[1]) if parts[1].isdigit() else 0, c.series)


@dataclass(frozen=True, slots=True)
class ProcessLabel:
    pid: int
    name: str
    cmdline: tuple[str, ...]
    role: str | None


@dataclass
class SessionModel:
    """The small, session-wide facts every export needs before it streams the big tables."""

    meta: dict[str, Any]
    target_pid: int
    target_name: str
    processes: dict[int, ProcessLabel]
    threads: list[tuple[int, int, str]]  # (pid, tid, name) of sampled threads
    point_stats: dict[str, tuple[int, float, float]]  # of the counter series only
    span: tuple[float, float] | None  # first and last point of any series
    counters: list[CounterSpec]
    steps: int
    markers: int
    stack_rows: int
    stack_samples: int
    stack_depth_sum: int
    stack_thread_windows: int
    ranks: dict[int, RankId] = field(default_factory=dict)  # pid -> rank, for a distributed job

    def process_title(self, pid: int) -> str:
        """How a process track is named: its name and role in the target tree; a rank leads
        with its rank and node, so that each rank reads as its own track."""
        rank = self.ranks.get(pid)
        if rank is not None:
            p = self.processes.get(pid)
            return f"rank {rank.rank} · node {rank.node} ({p.name if p else f'pid {pid}'})"
        p = self.processes.get(pid)
        if p is None:
            return self.target_name if pid == self.target_pid else f"pid {pid}"
        role = p.role if p.role and p.role != p.name else ""
        return f"{p.name} ({role})" if role else p.name

    def start(self) -> float:
        """Where the trace starts: the session's start, else its first point."""
        started = self.meta.get("started")
        if isinstance(started, int | float):
            return float(started)
        return self.span[0] if self.span is not None else 0.0


def load_model(reader: SessionReader) -> SessionModel:
    """Read the session-wide facts (meta, process tree, thread list, table sizes)."""
    meta = reader.meta()
    raw_target = meta.get("target")
    target: dict[str, Any] = raw_target if isinstance(raw_target, dict) else {}
    target_pid = int(target.get("pid") or 0)
    target_name = str(target.get("name") or "target")
    processes: dict[int, ProcessLabel] = {}
    for p in reader.processes():
        cmdline = tuple(str(a) for a in p["cmdline"] or ())
        # PID reuse within a session is rare; the latest process under a PID names its track.
        processes[int(p["pid"])] = ProcessLabel(
            int(p["pid"]), str(p["name"] or ""), cmdline, str(p["role"]) if p["role"] else None
        )
    if target_pid and target_pid not in processes:
        cmd = tuple(str(a) for a in target.get("cmdline") or ())
        processes[target_pid] = ProcessLabel(target_pid, target_name, cmd, "target")
    specs = [c for c in (counter_spec(n, target_pid) for n in reader.series_names()) if c]
    stats = reader.point_stats(c.series for c in specs)
    counters = sorted((c for c in specs if c.series in stats), key=_counter_order)
    rows, samples, depth = reader.stack_stats()
    return SessionModel(
        meta=meta,
        target_pid=target_pid,
        target_name=target_name,
        processes=processes,
        threads=reader.stack_threads(),
        point_stats=stats,
        span=reader.fast_time_range(),
        counters=counters,
        steps=reader.count_steps(),
        markers=reader.count_events(MARKER_KINDS),
        stack_rows=rows,
        stack_samples=samples,
        stack_depth_sum=depth,
        stack_thread_windows=reader.stack_thread_windows() if rows else 0,
        ranks=_ranks(reader),
    )


def _ranks(reader: SessionReader) -> dict[int, RankId]:
    out: dict[int, RankId] = {}
    for e in reader.events("rank"):
        pid, ident = e.data.get("pid"), RankId.from_json(e.data)
        if isinstance(pid, int) and ident is not None:
            out[pid] = ident
    return out


def allocate(needs: Mapping[str, int], budget: int) -> dict[str, int]:
    """Share ``budget`` between categories: each gets what it needs if it can, and the ones
    that need more split what is left evenly (water-filling)."""
    alloc = dict.fromkeys(needs, 0)
    left = max(0, budget)
    pending = sorted(needs, key=lambda k: needs[k])
    while pending:
        share = left // len(pending)
        k = pending[0]
        if needs[k] <= share:
            alloc[k] = needs[k]
            left -= needs[k]
            pending.pop(0)
            continue
        for k in pending:
            alloc[k] = share
        break
    return alloc


@dataclass
class Plan:
    """How an export fits the event budget: each category's share, the counter averaging
    bucket, how many steps go into one slice, and notes saying so."""

    max_events: int
    alloc: dict[str, int]
    bucket: float | None
    group: int
    notes: list[str]

    def limit(self) -> str:
        return f"to stay under ~{fmt_count(self.max_events)} trace events"


def plan(model: SessionModel, max_events: int, stack_need: int, reserved: int = 0) -> Plan:
    """Share ``max_events`` (less ``reserved`` for metadata) between counters, steps (a slice,
    a wait slice and a throughput point each), markers and stacks (``stack_need``)."""
    counter_need = sum(model.point_stats[c.series][0] for c in model.counters)
    needs = {
        "counters": counter_need,
        "steps": 3 * model.steps,
        "markers": model.markers,
        "stacks": stack_need,
    }
    alloc = allocate(needs, max_events - reserved)
    p = Plan(max_events, alloc, counter_bucket(model, alloc["counters"]), 1, [])
    if p.bucket is not None:
        p.notes.append(
            f"counters averaged over {p.bucket:.3g} s buckets ({fmt_count(counter_need)} points "
            f"recorded) {p.limit()}"
        )
    if alloc["steps"] and needs["steps"] > alloc["steps"]:
        p.group = math.ceil(needs["steps"] / alloc["steps"])
        p.notes.append(
            f"every {p.group} consecutive steps merged into one slice "
            f"({fmt_count(model.steps)} steps recorded) {p.limit()}"
        )
    return p


def counter_bucket(model: SessionModel, allowed: int) -> float | None:
    """The averaging bucket (seconds) that brings the counters under ``allowed`` points, or None
    when they fit as recorded."""
    spans = [model.point_stats[c.series] for c in model.counters]
    need = sum(n for n, _, _ in spans)
    if need <= allowed or not spans:
        return None

    def points(width: float) -> float:
        # A span of L seconds touches at most L / width + 2 aligned buckets.
        return sum(min(n, (t1 - t0) / width + 2) for n, t0, t1 in spans)

    lo, hi = 1e-3, max(1.0, max(t1 - t0 for _, t0, t1 in spans))
    while points(hi) > allowed and hi < 1e9:
        hi *= 2
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if points(mid) > allowed:
            lo = mid
        else:
            hi = mid
    return hi


def counter_ids(reader: SessionReader, specs: Iterable[CounterSpec]) -> dict[int, CounterSpec]:
    """Series id -> counter, for the counters that have a stored series."""
    ids = reader.series_ids()
    return {ids[s.series]: s for s in specs if s.series in ids}


_FETCH = 8192


def iter_counter_chunks(
    reader: SessionReader, by_id: Mapping[int, CounterSpec], bucket_s: float | None
) -> Iterator[tuple[int, list[tuple[float, float]]]]:
    """(series id, [(ts, value), ...]) chunks, one series after the other, each in time order;
    failed readings are left out; with ``bucket_s`` each series is averaged over aligned
    buckets. Chunks, not points: the writers format them in list comprehensions, the one loop
    in Python that keeps up with a million points."""
    isfinite = math.isfinite
    for sid in by_id:
        cur = reader.series_points(sid)
        if bucket_s is None:
            while rows := cur.fetchmany(_FETCH):
                pts = [(ts, v) for ts, v in rows if v is not None and isfinite(v)]
                if pts:
                    yield sid, pts
            continue
        out: list[tuple[float, float]] = []
        bucket, total, n = math.nan, 0.0, 0
        while rows := cur.fetchmany(_FETCH):
            for ts, v in rows:
                if v is None or not isfinite(v):
                    continue
                b = math.floor(ts / bucket_s)
                if b != bucket:
                    if n:
                        out.append((bucket * bucket_s, total / n))
                    bucket, total, n = b, 0.0, 0
                total += v
                n += 1
            if out:
                yield sid, out
                out = []
        if n:
            yield sid, [(bucket * bucket_s, total / n)]


@dataclass(frozen=True, slots=True)
class StepSpan:
    """One step, or ``count`` consecutive steps of one process merged to fit the budget."""

    pid: int
    start: float
    end: float
    input_wait_s: float  # placed at the start of the span (where a step waits for its batch)
    first: int
    last: int
    count: int
    source: str
    batch_size: int | None

    @property
    def name(self) -> str:
        return f"step {self.first}" if self.count == 1 else f"steps {self.first}-{self.last}"

    @property
    def throughput(self) -> float | None:
        dur = self.end - self.start
        return self.count / dur if dur > 0 else None


def iter_step_spans(reader: SessionReader, group: int) -> Iterator[StepSpan]:
    """Steps as non-overlapping spans per process (a step starting before the previous one ended
    is clipped), ``group`` consecutive steps merged into one span."""
    prev_end: dict[int, float] = {}
    pending: dict[int, list[tuple[float, float, float, int, str, int | None]]] = {}
    for _ts, step, start, duration, wait, source, batch, pid in reader.iter_step_rows():
        end = start + max(0.0, duration)
        start = max(start, prev_end.get(pid, -math.inf))
        if end < start:
            continue
        prev_end[pid] = end
        wait = min(max(0.0, wait), end - start)
        if group == 1:  # the common case, without the buffering
            yield StepSpan(pid, start, end, wait, step, step, 1, source, batch)
            continue
        buf = pending.setdefault(pid, [])
        buf.append((start, end, wait, step, source, batch))
        if len(buf) >= group:
            yield _span(pid, buf)
            buf.clear()
    for pid, buf in pending.items():
        if buf:
            yield _span(pid, buf)


def _span(pid: int, buf: list[tuple[float, float, float, int, str, int | None]]) -> StepSpan:
    start, end = buf[0][0], buf[-1][1]
    wait = min(sum(b[2] for b in buf), end - start)
    return StepSpan(pid, start, end, wait, buf[0][3], buf[-1][3], len(buf), buf[0][4], buf[0][5])


def marker_name(ev: Event) -> str:
    """The label of an instant marker."""
    if ev.kind == "verdict":
        return f"verdict: {ev.message}"
    if ev.kind == "optimize":
        return f"optimizer: {ev.message}"
    if ev.kind == "rank-verdict":
        return f"ranks: {ev.message}"
    return ev.message or ev.kind


def fmt_count(n: int) -> str:
    return f"{n:,}"


class JsonSink:
    """Buffered UTF-8 text out to a binary file: one ``write`` per megabyte, not per event."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self._parts: list[str] = []
        self._size = 0

    def write(self, text: str) -> None:
        self._parts.append(text)
        self._size += len(text)
        if self._size >= 1 << 20:
            self.flush()

    def flush(self) -> None:
        if self._parts:
            self._f.write("".join(self._parts).encode())
            self._parts.clear()
            self._size = 0


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[IO[bytes]]:
    """A binary file that appears under ``path`` only once everything was written: a temp file
    in the same directory, renamed over ``path`` at the end and removed on any failure."""
    if path.is_dir():
        raise UserError(f"cannot write {path}: it is a directory")
    try:
        fd, tmp_name = tempfile.mkstemp(
            dir=path.parent or Path("."), prefix=f".{path.name}.", suffix=".part"
        )
    except OSError as exc:
        raise UserError(f"cannot write {path}: {_reason(exc)}") from None
    tmp = Path(tmp_name)
    ok = False
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())  # a crash after the rename must not leave an empty file
        os.chmod(tmp, 0o644 & ~_umask())
        os.replace(tmp, path)
        ok = True
    except OSError as exc:
        raise UserError(f"cannot write {path}: {_reason(exc)}") from None
    finally:
        if not ok:
            with contextlib.suppress(OSError):
                tmp.unlink()


def _umask() -> int:
    # mkstemp creates 0600; the export should get the permissions any other new file gets.
    # Read it rather than set-and-restore it: os.umask is process-wide, and the TUI has threads.
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def thread_ids(threads: Iterable[tuple[int, int, str]]) -> dict[tuple[int, int], int]:
    """The tid each sampled thread gets in a trace. py-spy reports pthread ids (64-bit
    addresses) where it cannot see native ones; trace formats want 32-bit tids, so those get a
    synthetic id above every real Linux tid."""
    out: dict[tuple[int, int], int] = {}
    n = 0
    for pid, tid, _name in threads:
        if 0 < tid < (1 << 22):
            out[(pid, tid)] = tid
        else:
            out[(pid, tid)] = SYNTHETIC_TID_BASE + n
            n += 1
    return out


def thread_title(name: str, tid: int) -> str:
    """A thread's track name (its Python name; the raw id when it has none)."""
    return name or (f"thread {tid:#x}" if tid >= (1 << 22) else f"thread {tid}")


@dataclass(slots=True)
class ThreadWindow:
    """What one stack window saw of one thread: (stack_id, count, klass) rows."""

    t0: float
    t1: float
    rate_hz: float
    samples: int  # sampling instants in the window (a thread may appear in fewer)
    pid: int
    tid: int
    name: str
    counts: list[tuple[int, int, str]]

    @property
    def total(self) -> int:
        return sum(c for _, c, _ in self.counts)

    def span(self) -> float:
        """Seconds this thread's samples stand for: the window, less the part it was absent."""
        width = max(0.0, self.t1 - self.t0)
        if self.samples > 0:
            width *= min(1.0, self.total / self.samples)
        return width


def iter_thread_windows(reader: SessionReader) -> Iterator[ThreadWindow]:
    """Stack windows split per thread, in time order; one window in memory at a time."""
    cur_id: int | None = None
    per: dict[tuple[int, int], ThreadWindow] = {}
    for wid, t0, t1, rate, samples, pid, tid, tname, sid, count, klass in reader.iter_stack_rows():
        if wid != cur_id:
            yield from per.values()
            per = {}
            cur_id = wid
        tw = per.get((pid, tid))
        if tw is None:
            tw = per[(pid, tid)] = ThreadWindow(
                float(t0), float(t1), float(rate or 0.0), int(samples or 0), pid, tid, "", []
            )
        if tname and not tw.name:
            tw.name = tname
        tw.counts.append((int(sid), int(count), str(klass)))
    yield from per.values()


SortKey = tuple[tuple[str, str, int], ...]


class FrameCache:
    """Frames of interned stacks (and their sort keys), loaded a batch at a time as new stack
    ids show up."""

    def __init__(self, reader: SessionReader) -> None:
        self._reader = reader
        self._frames: dict[int, tuple[Frame, ...]] = {}
        self._keys: dict[int, SortKey] = {}

    def load(self, stack_ids: Iterable[int]) -> dict[int, tuple[Frame, ...]]:
        missing = [s for s in stack_ids if s not in self._frames]
        if missing:
            got = self._reader.stack_frames(missing)
            for s in missing:
                frames = self._frames[s] = got.get(s, ())
                self._keys[s] = tuple((f.function, f.filename, f.line) for f in frames)
        return self._frames

    def key(self, stack_id: int) -> SortKey:
        """Orders stacks so that shared prefixes sit side by side (the stack must be loaded)."""
        return self._keys[stack_id]
