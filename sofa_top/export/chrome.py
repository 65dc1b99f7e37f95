"""Trace Event Format JSON (the "JSON Object Format"), for Perfetto UI and chrome://tracing.

- ``M`` metadata: process names (the target tree), thread names, sort order;
- ``C`` counters: per process (tree CPU/RSS/IO/threads, input fraction, throughput, per-process
  CPU) and, under a synthetic "machine" process, system and GPU counters;
- ``X`` slices: training steps with their input wait as a child slice at the start, and the
  sampled Python stacks as a flame chart on each sampled thread;
- ``i`` instants: verdict changes, target exit, optimizer runs.

``ts``/``dur`` are microseconds since the Unix epoch. Stack windows only say how often each stack
was seen, not in which order, so within a window the stacks are laid out sorted (shared prefixes
merge into one slice) with widths proportional to their counts. Per track, events come in
time order.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

from sofa_top import __version__
from sofa_top.export.common import (
    MACHINE_PID,
    MARKER_KINDS,
    SYNTHETIC_TID_BASE,
    FrameCache,
    JsonSink,
    SessionModel,
    ThreadWindow,
    Written,
    allocate,
    counter_bucket,
    fmt_count,
    iter_counter_points,
    iter_step_spans,
    iter_thread_windows,
    marker_name,
    thread_ids,
    thread_title,
)
from sofa_top.samples import Frame
from sofa_top.store import SessionReader

STEPS_TID_BASE = SYNTHETIC_TID_BASE + (1 << 20)
MARKERS_TID = SYNTHETIC_TID_BASE + (1 << 21)
SEGMENT_S = 60.0  # flame slices are closed and flushed this often (bounds what is buffered)
MIN_BLOCK_SHARE = 0.005  # stacks below this share of a window fold into "(other stacks)"
MAX_BLOCKS = 32  # and so do all but the most seen this many
OTHER = (Frame("(other stacks)", "", 0),)
NO_FRAMES = (Frame("(no Python frames)", "", 0),)

_UNIT_KEYS = {"%": "percent", "bytes": "bytes", "B/s": "bytes_per_s", "W": "watts"}


def _us(ts: float) -> str:
    return f"{ts * 1e6:.3f}"


def _j(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


@dataclass
class _Flame:
    """One thread's open frames and the finished slices waiting for the segment flush."""

    pid: int
    tid: int
    open: list[tuple[Frame, float]] = field(default_factory=list)
    end: float = -math.inf
    done: list[tuple[float, float, int, Frame]] = field(default_factory=list)

    def close_to(self, depth: int, at: float) -> None:
        while len(self.open) > depth:
            fr, start = self.open.pop()
            self.done.append((start, max(0.0, at - start), len(self.open), fr))

    def block(self, frames: tuple[Frame, ...], b0: float, b1: float) -> None:
        if b0 > self.end + 1e-6:
            self.close_to(0, self.end)
        common = 0
        for (open_fr, _), fr in zip(self.open, frames, strict=False):
            if open_fr != fr:
                break
            common += 1
        self.close_to(common, b0)
        for fr in frames[common:]:
            self.open.append((fr, b0))
        self.end = b1


def write_chrome(
    reader: SessionReader, model: SessionModel, f: IO[bytes], max_events: int
) -> Written:
    """Write the session as Trace Event Format JSON to ``f``."""
    notes: list[str] = []
    counter_need = sum(model.point_stats[c.series][0] for c in model.counters)
    needs = {
        "counters": counter_need,
        "steps": 3 * model.steps,
        "markers": model.markers,
        # An upper bound (every row opens its whole stack); merging shared prefixes writes less.
        "stacks": model.stack_depth_sum,
    }
    # Names, sort keys and labels per process, thread names, the steps and markers tracks.
    meta_events = 5 * len(model.processes) + 2 * len(model.threads) + 4
    alloc = allocate(needs, max_events - meta_events)
    bucket = counter_bucket(model, alloc["counters"])
    if bucket is not None:
        notes.append(
            f"counters averaged over {bucket:.3g} s buckets ({fmt_count(counter_need)} points "
            f"recorded) to stay under ~{fmt_count(max_events)} trace events"
        )
    group = max(1, math.ceil(needs["steps"] / alloc["steps"])) if alloc["steps"] else 1
    if group > 1:
        notes.append(
            f"every {group} consecutive steps merged into one slice ({fmt_count(model.steps)} "
            f"steps recorded) to stay under ~{fmt_count(max_events)} trace events"
        )
    merge = 1
    if alloc["stacks"] and needs["stacks"] > alloc["stacks"]:
        merge = math.ceil(needs["stacks"] / alloc["stacks"])
        notes.append(
            f"stack windows merged {merge} at a time for the flame chart to stay under "
            f"~{fmt_count(max_events)} trace events (the speedscope export keeps every window)"
        )

    out = JsonSink(f)
    out.write(
        '{"displayTimeUnit":"ms","otherData":'
        + json.dumps(
            {
                "exporter": f"sofa-top {__version__}",
                "target": model.meta.get("target"),
                "mode": model.meta.get("mode"),
                "started": model.meta.get("started"),
                "ended": model.meta.get("ended"),
                "host": model.meta.get("host"),
            },
            default=str,
        )
        + ',\n"traceEvents":[\n'
    )
    w = _Events(out)
    tids = thread_ids(model.threads)
    _metadata(w, model, tids)

    names = {c.series: (_j(c.label), _j(_UNIT_KEYS.get(c.unit, "value"))) for c in model.counters}
    pids = {c.series: MACHINE_PID if c.pid is None else c.pid for c in model.counters}
    for spec, ts, value in iter_counter_points(reader, model.counters, bucket):
        name, key = names[spec.series]
        pid = pids[spec.series]
        w.raw(
            f'{{"ph":"C","name":{name},"pid":{pid},"tid":{pid},"ts":{_us(ts)},'
            f'"args":{{{key}:{value!r}}}}}'
        )

    steps_tids: dict[int, int] = {}
    for span in iter_step_spans(reader, group):
        tid = steps_tids.get(span.pid)
        if tid is None:
            tid = steps_tids[span.pid] = STEPS_TID_BASE + len(steps_tids)
            w.meta("thread_name", span.pid, tid, "training steps")
            w.meta("thread_sort_index", span.pid, tid, -1)
        args = {
            "duration_s": span.end - span.start,
            "input_wait_s": span.input_wait_s,
            "steps": span.count,
            "source": span.source,
            "batch_size": span.batch_size,
        }
        w.raw(
            f'{{"ph":"X","cat":"step","name":{_j(span.name)},"pid":{span.pid},"tid":{tid},'
            f'"ts":{_us(span.start)},"dur":{_us(span.end - span.start)},'
            f'"args":{json.dumps(args)}}}'
        )
        if span.input_wait_s > 0:
            w.raw(
                f'{{"ph":"X","cat":"step","name":"input wait","pid":{span.pid},"tid":{tid},'
                f'"ts":{_us(span.start)},"dur":{_us(span.input_wait_s)}}}'
            )
        rate = span.throughput
        if rate is not None:
            w.raw(
                f'{{"ph":"C","name":"throughput","pid":{span.pid},"tid":{span.pid},'
                f'"ts":{_us(span.end)},"args":{{"steps_per_s":{rate!r}}}}}'
            )

    markers = 0
    if model.markers:
        w.meta("thread_name", model.target_pid, MARKERS_TID, "markers")
        w.meta("thread_sort_index", model.target_pid, MARKERS_TID, -2)
        for ev in reader.iter_events(MARKER_KINDS):
            if markers >= alloc["markers"]:
                notes.append(f"markers after the first {fmt_count(markers)} left out")
                break
            ev_args = json.dumps({"message": ev.message, "data": ev.data}, default=str)
            w.raw(
                f'{{"ph":"i","s":"g","cat":{_j(ev.kind)},"name":{_j(marker_name(ev))},'
                f'"pid":{model.target_pid},"tid":{MARKERS_TID},"ts":{_us(ev.ts)},'
                f'"args":{ev_args}}}'
            )
            markers += 1

    _slices, cut = _stacks(reader, model, w, tids, merge, alloc["stacks"])
    if cut is not None:
        notes.append(
            f"stack slices stop at {cut:.3f} (Unix time) to stay under "
            f"~{fmt_count(max_events)} trace events (the speedscope export has them all)"
        )
    out.write("\n]}\n")
    out.flush()
    return Written(w.count, notes)


class _Events:
    """Comma-separated events into the ``traceEvents`` array."""

    def __init__(self, out: JsonSink) -> None:
        self._out = out
        self.count = 0

    def raw(self, text: str) -> None:
        self._out.write(text if self.count == 0 else ",\n" + text)
        self.count += 1

    def meta(self, name: str, pid: int, tid: int, value: str | int) -> None:
        key = "sort_index" if name.endswith("sort_index") else "name"
        if name == "process_labels":
            key = "labels"
        self.raw(
            f'{{"ph":"M","name":"{name}","pid":{pid},"tid":{tid},'
            f'"args":{{"{key}":{json.dumps(value)}}}}}'
        )


def _metadata(w: _Events, model: SessionModel, tids: dict[tuple[int, int], int]) -> None:
    order = sorted(model.processes, key=lambda pid: (pid != model.target_pid, pid))
    for i, pid in enumerate(order):
        w.meta("process_name", pid, pid, model.process_title(pid))
        w.meta("process_sort_index", pid, pid, i)
        role = model.processes[pid].role
        if role:
            w.meta("process_labels", pid, pid, role)
    w.meta("process_name", MACHINE_PID, MACHINE_PID, "machine (system, GPUs)")
    w.meta("process_sort_index", MACHINE_PID, MACHINE_PID, len(order))
    for pid, tid, name in model.threads:
        if pid not in model.processes:
            w.meta("process_name", pid, pid, f"pid {pid}")
        w.meta("thread_name", pid, tids[(pid, tid)], thread_title(name, tid))


def _merged_windows(reader: SessionReader, merge: int) -> Iterator[ThreadWindow]:
    """Thread windows, ``merge`` consecutive ones of a thread summed into one."""
    if merge <= 1:
        yield from iter_thread_windows(reader)
        return
    acc: dict[tuple[int, int], tuple[ThreadWindow, Counter[int], int]] = {}
    for tw in iter_thread_windows(reader):
        key = (tw.pid, tw.tid)
        cur = acc.get(key)
        if cur is None:
            cur = acc[key] = (tw, Counter(), 0)
        first, counts, n = cur
        for sid, c, _ in tw.counts:
            counts[sid] += c
        first.t1 = tw.t1
        if n:
            first.samples += tw.samples
            first.name = first.name or tw.name
        acc[key] = (first, counts, n + 1)
        if n + 1 >= merge:
            first.counts = [(sid, c, "") for sid, c in counts.items()]
            yield first
            del acc[key]
    for first, counts, _ in acc.values():
        first.counts = [(sid, c, "") for sid, c in counts.items()]
        yield first


def _stacks(
    reader: SessionReader,
    model: SessionModel,
    w: _Events,
    tids: dict[tuple[int, int], int],
    merge: int,
    budget: int,
) -> tuple[int, float | None]:
    """Flame-chart slices per sampled thread; returns (slices written, where they were cut)."""
    if not model.stack_rows or budget <= 0:
        return 0, None
    cache = FrameCache(reader)
    flames: dict[tuple[int, int], _Flame] = {}
    rendered: dict[Frame, str] = {}
    written = 0
    segment_end = -math.inf
    cut: float | None = None

    def flush() -> None:
        nonlocal written, cut
        for fl in flames.values():
            fl.close_to(0, fl.end)
            fl.done.sort(key=lambda d: (d[0], -d[1], d[2]))
            for start, dur, _depth, fr in fl.done:
                if written >= budget:
                    cut = start if cut is None else min(cut, start)
                    break
                frag = rendered.get(fr)
                if frag is None:
                    frag = rendered[fr] = (
                        f'"name":{_j(fr.function)},"args":{{"file":{_j(fr.filename)},'
                        f'"line":{fr.line}}}'
                    )
                w.raw(
                    f'{{"ph":"X","cat":"stack","pid":{fl.pid},"tid":{fl.tid},'
                    f'"ts":{_us(start)},"dur":{_us(dur)},{frag}}}'
                )
                written += 1
            fl.done.clear()

    for tw in _merged_windows(reader, merge):
        if cut is not None:
            break
        if tw.t0 >= segment_end:
            flush()
            segment_end = tw.t0 + SEGMENT_S
        key = (tw.pid, tw.tid)
        fl = flames.get(key)
        if fl is None:
            fl = flames[key] = _Flame(tw.pid, tids.get(key, tw.tid))
        _layout(fl, tw, cache)
    if cut is None:
        flush()
    return written, cut


def _layout(fl: _Flame, tw: ThreadWindow, cache: FrameCache) -> None:
    total = tw.total
    if total <= 0:
        return
    frames = cache.load(sid for sid, _, _ in tw.counts)
    ranked = sorted(tw.counts, key=lambda c: -c[1])
    keep = [c for i, c in enumerate(ranked) if i < MAX_BLOCKS and c[1] >= MIN_BLOCK_SHARE * total]
    other = total - sum(c[1] for c in keep)
    blocks = [(frames.get(sid) or NO_FRAMES, n) for sid, n, _ in keep]
    blocks.sort(key=lambda b: [(f.function, f.filename, f.line) for f in b[0]])
    if other > 0:
        blocks.append((OTHER, other))
    width = tw.span()
    t = tw.t0
    for stack, n in blocks:
        t1 = t + width * n / total
        fl.block(stack, t, t1)
        t = t1
