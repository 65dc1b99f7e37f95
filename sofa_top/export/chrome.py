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
from sofa_top.datamodel.samples import Frame
from sofa_top.export.common import (
    MACHINE_PID,
    MARKER_KINDS,
    SYNTHETIC_TID_BASE,
    FrameCache,
    JsonSink,
    SessionModel,
    ThreadWindow,
    Written,
    counter_ids,
    fmt_count,
    iter_counter_chunks,
    iter_step_spans,
    iter_thread_windows,
    marker_name,
    plan,
    thread_ids,
    thread_title,
)
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.series import BYTES, BYTES_PER_S, PERCENT, WATTS

STEPS_TID_BASE = SYNTHETIC_TID_BASE + (1 << 20)
MARKERS_TID = SYNTHETIC_TID_BASE + (1 << 21)
SEGMENT_S = 60.0  # flame slices are closed and flushed this often (bounds what is buffered)
MIN_BLOCK_SHARE = 0.005  # stacks below this share of a window fold into "(other stacks)"
MAX_BLOCKS = 32  # and so do all but the most seen this many
OTHER_ID = -1  # the stack id of "(other stacks)"
OTHER = (Frame("(other stacks)", "", 0),)
NO_FRAMES = (Frame("(no Python frames)", "", 0),)
_BATCH = 4096  # events joined into one string at a time

_UNIT_KEYS = {PERCENT: "percent", BYTES: "bytes", BYTES_PER_S: "bytes_per_s", WATTS: "watts"}


def _us(ts: float) -> str:
    return f"{ts * 1e6:.3f}"


def _ns_us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _span(start: float, end: float) -> tuple[str, str]:
    """``ts`` and ``dur`` of a slice in microseconds, both cut from whole nanoseconds: a
    float64 holds Unix-time microseconds only to 0.25 us, so rounding ts and dur separately
    lets a child end past its parent or its next sibling; whole-nanosecond ends nest exactly."""
    ns0 = round(start * 1e9)
    return _ns_us(ns0), _ns_us(max(0, round(end * 1e9) - ns0))


def _j(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


class _Events:
    """Events into the ``traceEvents`` array, comma-separated, joined a batch at a time."""

    def __init__(self, out: JsonSink) -> None:
        self._out = out
        self.count = 0

    def extend(self, events: list[str]) -> None:
        if events:
            self._out.write((",\n" if self.count else "") + ",\n".join(events))
            self.count += len(events)

    def raw(self, text: str) -> None:
        self.extend([text])

    def meta(self, name: str, pid: int, tid: int, value: str | int) -> None:
        key = "sort_index" if name.endswith("sort_index") else "name"
        if name == "process_labels":
            key = "labels"
        self.raw(
            f'{{"ph":"M","name":"{name}","pid":{pid},"tid":{tid},'
            f'"args":{{"{key}":{json.dumps(value)}}}}}'
        )


class _Frames:
    """Frames as small ints with their rendered JSON, stacks as tuples of those ints: the flame
    builder compares and looks up ints, not frame objects."""

    def __init__(self, cache: FrameCache) -> None:
        self._cache = cache
        self._ids: dict[Frame, int] = {}
        self.frags: list[str] = []
        self._stacks: dict[int, tuple[int, ...]] = {OTHER_ID: (self._id(OTHER[0]),)}

    def _id(self, fr: Frame) -> int:
        i = self._ids.get(fr)
        if i is None:
            i = self._ids[fr] = len(self.frags)
            self.frags.append(
                f'"name":{_j(fr.function)},"args":{{"file":{_j(fr.filename)},"line":{fr.line}}}'
            )
        return i

    def stack(self, sid: int) -> tuple[int, ...]:
        st = self._stacks.get(sid)
        if st is None:
            frames = self._cache.load((sid,))[sid] or NO_FRAMES
            st = self._stacks[sid] = tuple(self._id(fr) for fr in frames)
        return st


@dataclass
class _Flame:
    """One thread's flame chart being built. A slice gets its slot when it opens, so slots are
    in (start, depth) order: parents before children, no sorting needed at the flush."""

    pid: int
    tid: int
    open: list[tuple[int, float, int]] = field(default_factory=list)  # (frame, start, slot)
    end: float = -math.inf
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)

    def close_to(self, depth: int, at: float) -> None:
        if len(self.open) > depth:
            ends = self.ends
            for _fr, start, slot in self.open[depth:]:
                ends[slot] = at if at > start else start
            del self.open[depth:]

    def block(self, stack: tuple[int, ...], b0: float, b1: float) -> None:
        if b0 > self.end + 1e-6:  # the thread was not sampled in between: nothing spans it
            self.close_to(0, self.end)
        common = 0
        for (open_fr, _, _), fr in zip(self.open, stack, strict=False):
            if open_fr != fr:
                break
            common += 1
        self.close_to(common, b0)
        new = stack[common:]
        if new:
            first = len(self.starts)
            self.open += [(fr, b0, first + k) for k, fr in enumerate(new)]
            self.starts += [b0] * len(new)
            self.ends += [b0] * len(new)
            self.frames += new
        self.end = b1


def write_chrome(
    reader: SessionReader, model: SessionModel, f: IO[bytes], max_events: int
) -> Written:
    """Write the session as Trace Event Format JSON to ``f``."""
    # Names, sort keys and labels per process, thread names, the steps and markers tracks.
    reserved = 5 * len(model.processes) + 2 * len(model.threads) + 4
    # The stacks' need is an upper bound: every row opening its whole stack, plus an
    # "(other stacks)" slice per thread window. Merging shared prefixes writes far less.
    need = model.stack_depth_sum + model.stack_thread_windows
    budget = plan(model, max_events, need, reserved)
    notes, alloc = budget.notes, budget.alloc
    merge, blocks = 1, MAX_BLOCKS
    if alloc["stacks"] and need > alloc["stacks"]:
        # k windows merged into one, each keeping only as many stacks as a window has on
        # average, write about 1/k of the bound.
        merge = math.ceil(need / alloc["stacks"])
        blocks = max(1, math.ceil(model.stack_rows / max(1, model.stack_thread_windows)))
        notes.append(
            f"stack windows merged {merge} at a time, {blocks} stacks kept per thread and "
            f"window, for the flame chart {budget.limit()} (the speedscope export keeps all)"
        )

    out = JsonSink(f)
    other = {
        "exporter": f"sofa-top {__version__}",
        **{k: model.meta.get(k) for k in ("target", "mode", "started", "ended", "host")},
    }
    out.write(
        '{"displayTimeUnit":"ms","otherData":'
        + json.dumps(other, default=str)
        + ',\n"traceEvents":[\n'
    )
    w = _Events(out)
    tids = thread_ids(model.threads)
    _metadata(w, model, tids)

    _counters(reader, model, w, budget.bucket)
    _steps(reader, w, budget.group)
    if model.markers and not _markers(reader, model, w, alloc["markers"]):
        notes.append(f"markers after the first {fmt_count(alloc['markers'])} left out")
    cut = _stacks(reader, model, w, tids, merge, blocks, alloc["stacks"])
    if cut is not None:
        notes.append(
            f"stack slices stop at {cut:.3f} (Unix time) {budget.limit()} "
            "(the speedscope export has them all)"
        )
    out.write("\n]}\n")
    out.flush()
    return Written(w.count, notes)


def _counters(reader: SessionReader, model: SessionModel, w: _Events, bucket: float | None) -> None:
    """Counter tracks; everything but the time and the value is formatted once per series."""
    by_id = counter_ids(reader, model.counters)
    heads: dict[int, tuple[str, str]] = {}
    for sid, c in by_id.items():
        pid = MACHINE_PID if c.pid is None else c.pid
        key = _UNIT_KEYS.get(c.unit, "value")
        heads[sid] = (
            f'{{"ph":"C","name":{_j(c.label)},"pid":{pid},"tid":{pid},"ts":',
            f',"args":{{"{key}":',
        )
    for sid, pts in iter_counter_chunks(reader, by_id, bucket):
        head, mid = heads[sid]
        w.extend([f"{head}{ts * 1e6:.3f}{mid}{v!r}}}}}" for ts, v in pts])


def _markers(reader: SessionReader, model: SessionModel, w: _Events, limit: int) -> bool:
    """The markers track (verdict changes, exits, optimizer events); False when cut."""
    w.meta("thread_name", model.target_pid, MARKERS_TID, "markers")
    w.meta("thread_sort_index", model.target_pid, MARKERS_TID, -2)
    for n, ev in enumerate(reader.iter_events(MARKER_KINDS)):
        if n >= limit:
            return False
        ev_args = json.dumps({"message": ev.message, "data": ev.data}, default=str)
        w.raw(
            f'{{"ph":"i","s":"g","cat":{_j(ev.kind)},"name":{_j(marker_name(ev))},'
            f'"pid":{model.target_pid},"tid":{MARKERS_TID},"ts":{_us(ev.ts)},'
            f'"args":{ev_args}}}'
        )
    return True


def _steps(reader: SessionReader, w: _Events, group: int) -> None:
    """Steps as slices (the input wait a child slice at the start) and the throughput."""
    steps_tids: dict[int, int] = {}
    sources: dict[str, str] = {}
    batch: list[str] = []
    for span in iter_step_spans(reader, group):
        tid = steps_tids.get(span.pid)
        if tid is None:
            tid = steps_tids[span.pid] = STEPS_TID_BASE + len(steps_tids)
            w.meta("thread_name", span.pid, tid, "training steps")
            w.meta("thread_sort_index", span.pid, tid, -1)
        dur = span.end - span.start
        ts_us, dur_us = _span(span.start, span.end)
        source = sources.get(span.source)
        if source is None:
            source = sources[span.source] = _j(span.source)
        batch_size = "null" if span.batch_size is None else int(span.batch_size)
        # The name is ours ("step N" / "steps N-M"): nothing in it needs JSON escaping.
        batch.append(
            f'{{"ph":"X","cat":"step","name":"{span.name}","pid":{span.pid},"tid":{tid},'
            f'"ts":{ts_us},"dur":{dur_us},"args":{{"duration_s":{dur!r},'
            f'"input_wait_s":{span.input_wait_s!r},"steps":{span.count},'
            f'"source":{source},"batch_size":{batch_size}}}}}'
        )
        if span.input_wait_s > 0:
            wait_us = _span(span.start, min(span.end, span.start + span.input_wait_s))[1]
            batch.append(
                f'{{"ph":"X","cat":"step","name":"input wait","pid":{span.pid},"tid":{tid},'
                f'"ts":{ts_us},"dur":{wait_us}}}'
            )
        rate = span.throughput
        if rate is not None:
            batch.append(
                f'{{"ph":"C","name":"throughput","pid":{span.pid},"tid":{span.pid},'
                f'"ts":{span.end * 1e6:.3f},"args":{{"steps_per_s":{rate!r}}}}}'
            )
        if len(batch) >= _BATCH:
            w.extend(batch)
            batch = []
    w.extend(batch)


def _metadata(w: _Events, model: SessionModel, tids: dict[tuple[int, int], int]) -> None:
    # the target (the launcher), then the ranks in rank order, then the rest
    order = sorted(
        model.processes,
        key=lambda pid: (
            pid != model.target_pid,
            model.ranks[pid].rank if pid in model.ranks else float("inf"),
            pid,
        ),
    )
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
            cur = (tw, Counter(), 0)
        first, counts, n = cur
        for sid, c, _ in tw.counts:
            counts[sid] += c
        first.t1 = tw.t1
        if n:
            first.samples += tw.samples
            first.name = first.name or tw.name
        if n + 1 >= merge:
            first.counts = [(sid, c, "") for sid, c in counts.items()]
            acc.pop(key, None)
            yield first
        else:
            acc[key] = (first, counts, n + 1)
    for first, counts, _ in acc.values():
        first.counts = [(sid, c, "") for sid, c in counts.items()]
        yield first


def _stacks(
    reader: SessionReader,
    model: SessionModel,
    w: _Events,
    tids: dict[tuple[int, int], int],
    merge: int,
    max_blocks: int,
    budget: int,
) -> float | None:
    """Flame-chart slices per sampled thread; returns where they were cut for the budget."""
    if not model.stack_rows or budget <= 0:
        return None
    cache = FrameCache(reader)
    frames = _Frames(cache)
    frags = frames.frags
    flames: dict[tuple[int, int], _Flame] = {}
    segment_end = -math.inf
    left = budget
    cut: float | None = None

    def flush() -> None:
        nonlocal left, cut
        for fl in flames.values():
            fl.close_to(0, fl.end)
            n = len(fl.starts)
            if n > left:
                cut = fl.starts[left] if cut is None else min(cut, fl.starts[left])
                n = left
            head = f'{{"ph":"X","cat":"stack","pid":{fl.pid},"tid":{fl.tid},"ts":'
            w.extend(
                [
                    f'{head}{ts},"dur":{dur},{frags[i]}}}'
                    for s, e, i in zip(fl.starts[:n], fl.ends[:n], fl.frames[:n], strict=True)
                    for ts, dur in (_span(s, e),)
                ]
            )
            left -= n
            fl.starts, fl.ends, fl.frames = [], [], []

    for tw in _merged_windows(reader, merge):
        if tw.t0 >= segment_end:
            flush()
            if cut is not None:
                break
            segment_end = tw.t0 + SEGMENT_S
        key = (tw.pid, tw.tid)
        fl = flames.get(key)
        if fl is None:
            fl = flames[key] = _Flame(tw.pid, tids.get(key, tw.tid))
        _layout(fl, tw, cache, frames, max_blocks)
    else:
        flush()
    return cut


def _layout(
    fl: _Flame, tw: ThreadWindow, cache: FrameCache, frames: _Frames, max_blocks: int
) -> None:
    total = tw.total
    if total <= 0:
        return
    cache.load(sid for sid, _, _ in tw.counts)
    ranked = sorted(tw.counts, key=lambda c: -c[1])
    keep = [c for i, c in enumerate(ranked) if i < max_blocks and c[1] >= MIN_BLOCK_SHARE * total]
    other = total - sum(c[1] for c in keep)
    key = cache.key
    keep.sort(key=lambda c: key(c[0]))
    blocks = [(frames.stack(sid), n) for sid, n, _ in keep]
    if other > 0:
        blocks.append((frames.stack(OTHER_ID), other))
    width = tw.span()
    t = tw.t0
    for stack, n in blocks:
        t1 = t + width * n / total
        fl.block(stack, t, t1)
        t = t1
