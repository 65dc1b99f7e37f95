"""Native Perfetto trace, built with the ``perfetto`` package's generated protos.

Layout (what Perfetto UI shows):

- one process track per process of the target tree, named after it (``processes`` table), with
  a "training steps" child track (steps as slices, the input wait as a child slice at the start
  of each step), a "markers" child track (verdict changes, target exit, optimizer runs as
  instants) and its counters (tree CPU/RSS/IO/threads, input fraction, throughput, per-process
  CPU);
- machine-wide counter tracks (system CPU/iowait/memory, GPU utilization/memory/power);
- per sampled thread, the Python stacks as a CPU profile (``StreamingProfilePacket`` with
  interned callstacks, one packet per thread per stack window).

Counters, slices and markers use absolute timestamps (ns since the Unix epoch) on sequence 1;
each sampled thread has its own sequence, whose ``ThreadDescriptor`` anchors the sample deltas.
A clock snapshot declares REALTIME, BOOTTIME and MONOTONIC equal, so every timestamp is the
wall-clock time it was recorded at.
"""

from __future__ import annotations

import json
import math
from itertools import pairwise
from typing import IO, Any

from perfetto.protos.perfetto.trace import (  # type: ignore[import-untyped]
    perfetto_trace_pb2 as pb,
)

from sofa_top.datamodel.samples import Frame
from sofa_top.export.common import (
    MARKER_KINDS,
    THROUGHPUT_SERIES,
    CounterSpec,
    FrameCache,
    SessionModel,
    StepSpan,
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
from sofa_top.recording.series import BYTES

MAIN_SEQ = 1
FIRST_THREAD_SEQ = 16
_CHUNK = 1024  # packets per serialized Trace chunk

_SLICE_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
_SLICE_END = pb.TrackEvent.TYPE_SLICE_END
_INSTANT = pb.TrackEvent.TYPE_INSTANT
_COUNTER = pb.TrackEvent.TYPE_COUNTER
_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


def _ns(ts: float) -> int:
    return round(ts * 1e9)


class _Packets:
    """Packets out in chunks of one ``Trace`` message each (a trace file is packets
    concatenated, so chunks concatenate too)."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self._trace = pb.Trace()
        self._pending = 0

    def add(self) -> Any:
        if self._pending >= _CHUNK:
            self.flush()
        self._pending += 1
        return self._trace.packet.add()

    def flush(self) -> None:
        if self._pending:
            self._f.write(self._trace.SerializeToString())
            self._trace.Clear()
            self._pending = 0


class _Steps:
    """Step slices (begin step, begin wait, end wait, end step) refilled into template packets,
    one template per shape, for the same reason as ``_Counters``. The slice's own length is
    the step time, so the annotations carry only what it does not show."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self._shapes: dict[tuple[bool, bool], tuple[Any, list[Any], dict[str, Any]]] = {}
        self._track: dict[tuple[bool, bool], int] = {}
        self._source: dict[tuple[bool, bool], str] = {}

    def _shape(self, wait: bool, batch: bool) -> tuple[Any, list[Any], dict[str, Any]]:
        trace = pb.Trace()
        types = [_SLICE_BEGIN, _SLICE_END]
        if wait:
            types = [_SLICE_BEGIN, _SLICE_BEGIN, _SLICE_END, _SLICE_END]
        packets = [
            trace.packet.add(trusted_packet_sequence_id=MAIN_SEQ, track_event=pb.TrackEvent(type=t))
            for t in types
        ]
        if wait:
            packets[1].track_event.name = "input wait"
        names = ["input_wait_s", "steps", "source"] + (["batch_size"] if batch else [])
        args = {n: packets[0].track_event.debug_annotations.add(name=n) for n in names}
        return trace, packets, args

    def add(self, track: int, span: StepSpan) -> None:
        wait = span.input_wait_s > 0
        key = (wait, span.batch_size is not None)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = self._shape(*key)
        trace, packets, args = shape
        if self._track.get(key) != track:  # one process's steps come in runs: set it on change
            self._track[key] = track
            for p in packets:
                p.track_event.track_uuid = track
        if self._source.get(key) != span.source:
            self._source[key] = span.source
            args["source"].string_value = span.source
        begin = packets[0]
        begin.timestamp = _ns(span.start)
        begin.track_event.name = span.name
        packets[-1].timestamp = _ns(span.end)
        if wait:
            packets[1].timestamp = begin.timestamp
            packets[2].timestamp = _ns(span.start + span.input_wait_s)
        args["input_wait_s"].double_value = span.input_wait_s
        args["steps"].int_value = span.count
        if span.batch_size is not None:
            args["batch_size"].int_value = span.batch_size
        self._f.write(trace.SerializeToString())


class _Counters:
    """Counter packets, the hot path: a chunk of template packets is refilled and serialized
    over and over, because building a message per point costs about four times as much."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self._trace = pb.Trace()
        self._packets = [
            self._trace.packet.add(
                trusted_packet_sequence_id=MAIN_SEQ, track_event=pb.TrackEvent(type=_COUNTER)
            )
            for _ in range(_CHUNK)
        ]
        self._events = [p.track_event for p in self._packets]
        self._n = 0
        self.count = 0

    def extend(self, uuid: int, points: list[tuple[float, float]]) -> None:
        """Add (ts, value) points of one track: ``add`` with the lookups hoisted out of the loop."""
        packets, events, write, trace = self._packets, self._events, self._f.write, self._trace
        i = self._n
        for ts, value in points:
            packets[i].timestamp = round(ts * 1e9)
            ev = events[i]
            ev.track_uuid = uuid
            ev.double_counter_value = value
            i += 1
            if i == _CHUNK:
                write(trace.SerializeToString())
                i = 0
        self._n = i
        self.count += len(points)

    def add(self, ts: float, uuid: int, value: float) -> None:
        i = self._n
        self._packets[i].timestamp = round(ts * 1e9)
        ev = self._events[i]
        ev.track_uuid = uuid
        ev.double_counter_value = value
        self._n = i + 1
        self.count += 1
        if self._n == _CHUNK:
            self._f.write(self._trace.SerializeToString())
            self._n = 0

    def close(self) -> None:
        if self._n:
            del self._trace.packet[self._n :]
            self._f.write(self._trace.SerializeToString())
            self._n = 0


class _ThreadProfile:
    """One sampled thread's sequence: its interned frames and callstacks and its clock."""

    def __init__(self, seq: int, pid: int, tid: int, name: str) -> None:
        self.seq = seq
        self.pid = pid
        self.tid = tid
        self.name = name
        self.last_us: int | None = None
        self.carry = 0.0  # fractional samples owed when thinning
        self.callstacks: dict[int, int] = {}  # stack_id -> callstack iid
        self.frames: dict[Frame, int] = {}
        self.functions: dict[str, int] = {}
        self.files: dict[str, int] = {}  # mapping path -> mapping iid (one mapping per file)


def write_perfetto(
    reader: SessionReader, model: SessionModel, f: IO[bytes], max_events: int
) -> Written:
    """Write the session as a Perfetto trace to ``f``."""
    budget = plan(model, max_events, model.stack_samples)
    notes, group, alloc = budget.notes, budget.group, budget.alloc
    keep = 1.0 if not model.stack_samples else min(1.0, alloc["stacks"] / model.stack_samples)
    if keep < 1.0:
        notes.append(
            f"stack samples thinned to {keep:.0%} ({fmt_count(alloc['stacks'])} of "
            f"{fmt_count(model.stack_samples)}, proportions per window kept) {budget.limit()}"
        )

    out = _Packets(f)
    _clock_snapshot(out, model.start())
    uuids = _Uuids()
    proc_tracks = _process_tracks(out, model, uuids)
    counter_tracks = _counter_tracks(out, model, uuids, proc_tracks)
    out.flush()

    counters = _Counters(f)
    by_id = counter_ids(reader, model.counters)
    track_of = {sid: counter_tracks[spec.series] for sid, spec in by_id.items()}
    for sid, pts in iter_counter_chunks(reader, by_id, budget.bucket):
        counters.extend(track_of[sid], pts)

    tracks = _Tracks(out, model, uuids, proc_tracks)
    slices = _write_steps(reader, f, tracks, counters, group)
    counters.close()
    markers = 0
    if model.markers:
        markers = _write_markers(reader, out, tracks, max(alloc["markers"], 0))
        if markers < model.markers:
            notes.append(f"markers after the first {fmt_count(markers)} left out")

    samples = _write_stacks(reader, model, out, proc_tracks, keep)
    out.flush()
    return Written(counters.count + slices + markers + samples, notes)


class _Tracks:
    """What the step and marker writers need to open tracks under a process."""

    def __init__(
        self, out: _Packets, model: SessionModel, uuids: _Uuids, proc_tracks: dict[int, int]
    ) -> None:
        self.out, self.model, self.uuids, self.proc_tracks = out, model, uuids, proc_tracks

    def process(self, pid: int) -> int:
        """The track of process ``pid`` (opened on first use)."""
        return _proc_track(self.out, self.model, self.uuids, self.proc_tracks, pid)


def _write_steps(
    reader: SessionReader, f: IO[bytes], tracks: _Tracks, counters: _Counters, group: int
) -> int:
    """Per process a "training steps" track (the wait opens the step: begin step, begin wait,
    end wait, ..., end step) and a throughput counter; returns the slices written."""
    out, uuids = tracks.out, tracks.uuids
    steps = _Steps(f)
    steps_tracks: dict[int, int] = {}
    throughput_tracks: dict[int, int] = {}
    slices = 0
    for span in iter_step_spans(reader, group):
        track = steps_tracks.get(span.pid)
        if track is None:
            parent = tracks.process(span.pid)
            track = steps_tracks[span.pid] = uuids.child(out, parent, "training steps")
            throughput_tracks[span.pid] = uuids.counter(
                out,
                parent,
                CounterSpec(THROUGHPUT_SERIES, "throughput", "steps/s", span.pid),
            )
            out.flush()  # the descriptors reach the file before the counter chunk using them
        steps.add(track, span)
        rate = span.throughput
        if rate is not None:
            counters.add(span.end, throughput_tracks[span.pid], rate)
        slices += 2 if span.input_wait_s > 0 else 1
    return slices


def _write_markers(reader: SessionReader, out: _Packets, tracks: _Tracks, limit: int) -> int:
    """Instant events on the target's "markers" track, at most ``limit``; returns how many."""
    track = tracks.uuids.child(out, tracks.process(tracks.model.target_pid), "markers")
    n = 0
    for ev in reader.iter_events(MARKER_KINDS):
        if n >= limit:
            break
        p = out.add()
        p.timestamp = _ns(ev.ts)
        p.trusted_packet_sequence_id = MAIN_SEQ
        te = p.track_event
        te.type = _INSTANT
        te.track_uuid = track
        te.name = marker_name(ev)
        te.categories.append(ev.kind)
        _annotate(te, {"message": ev.message, "data": json.dumps(ev.data, default=str)})
        n += 1
    return n


class _Uuids:
    """Track uuids, handed out in order (any unique 64-bit numbers do)."""

    def __init__(self) -> None:
        self._next = 1

    def new(self) -> int:
        u = self._next
        self._next += 1
        return u

    def child(self, out: _Packets, parent: int, name: str) -> int:
        u = self.new()
        p = out.add()
        p.trusted_packet_sequence_id = MAIN_SEQ
        p.track_descriptor.uuid = u
        p.track_descriptor.parent_uuid = parent
        p.track_descriptor.name = name
        return u

    def counter(self, out: _Packets, parent: int | None, spec: CounterSpec) -> int:
        u = self.new()
        p = out.add()
        p.trusted_packet_sequence_id = MAIN_SEQ
        td = p.track_descriptor
        td.uuid = u
        if parent is not None:
            td.parent_uuid = parent
        td.name = f"{spec.label} [{spec.unit}]" if spec.unit else spec.label
        if spec.unit == BYTES:
            td.counter.unit = pb.CounterDescriptor.UNIT_SIZE_BYTES
        elif spec.unit:
            td.counter.unit_name = spec.unit
        else:
            td.counter.unit = pb.CounterDescriptor.UNIT_COUNT
        return u


def _clock_snapshot(out: _Packets, start: float) -> None:
    p = out.add()
    p.trusted_packet_sequence_id = MAIN_SEQ
    p.sequence_flags = _CLEARED
    t = _ns(start)
    for clock in (
        pb.BuiltinClock.BUILTIN_CLOCK_REALTIME,
        pb.BuiltinClock.BUILTIN_CLOCK_MONOTONIC,
        pb.BuiltinClock.BUILTIN_CLOCK_BOOTTIME,
    ):
        p.clock_snapshot.clocks.add(clock_id=clock, timestamp=t)
    p.clock_snapshot.primary_trace_clock = pb.BuiltinClock.BUILTIN_CLOCK_BOOTTIME


def _process_tracks(out: _Packets, model: SessionModel, uuids: _Uuids) -> dict[int, int]:
    tracks: dict[int, int] = {}
    pids = sorted(model.processes, key=lambda pid: (pid != model.target_pid, pid))
    for pid in pids:
        _proc_track(out, model, uuids, tracks, pid)
    return tracks


def _proc_track(
    out: _Packets, model: SessionModel, uuids: _Uuids, tracks: dict[int, int], pid: int
) -> int:
    u = tracks.get(pid)
    if u is not None:
        return u
    u = tracks[pid] = uuids.new()
    p = out.add()
    p.trusted_packet_sequence_id = MAIN_SEQ
    td = p.track_descriptor
    td.uuid = u
    td.process.pid = pid
    td.process.process_name = model.process_title(pid)
    proc = model.processes.get(pid)
    if proc is not None:
        td.process.cmdline.extend(proc.cmdline)
        if proc.role:
            td.process.process_labels.append(proc.role)
    return u


def _counter_tracks(
    out: _Packets, model: SessionModel, uuids: _Uuids, proc_tracks: dict[int, int]
) -> dict[str, int]:
    tracks: dict[str, int] = {}
    for spec in model.counters:
        parent = None if spec.pid is None else _proc_track(out, model, uuids, proc_tracks, spec.pid)
        tracks[spec.series] = uuids.counter(out, parent, spec)
    return tracks


def _annotate(te: Any, args: dict[str, object]) -> None:
    for k, v in args.items():
        a = te.debug_annotations.add()
        a.name = k
        if isinstance(v, bool):
            a.bool_value = v
        elif isinstance(v, int):
            a.int_value = v
        elif isinstance(v, float):
            a.double_value = v
        else:
            a.string_value = str(v)


def _write_stacks(
    reader: SessionReader,
    model: SessionModel,
    out: _Packets,
    proc_tracks: dict[int, int],
    keep: float,
) -> int:
    if not model.stack_rows or keep <= 0:
        return 0
    tids = thread_ids(model.threads)
    names = {(pid, tid): name for pid, tid, name in model.threads}
    profiles: dict[tuple[int, int], _ThreadProfile] = {}
    frames = FrameCache(reader)
    total = 0
    for tw in iter_thread_windows(reader):
        key = (tw.pid, tw.tid)
        prof = profiles.get(key)
        if prof is None:
            seq = FIRST_THREAD_SEQ + len(profiles)
            prof = profiles[key] = _ThreadProfile(
                seq, tw.pid, tids.get(key, tw.tid), thread_title(names.get(key, ""), tw.tid)
            )
        total += _write_window(out, prof, tw, frames, keep)
    return total


def _thin(tw: ThreadWindow, prof: _ThreadProfile, keep: float) -> list[tuple[int, int]]:
    """(stack_id, samples) to write for this window: all of them, or ``keep`` of them split
    across stacks by largest remainder (the fraction owed carries to the thread's next window)."""
    if keep >= 1.0:
        return [(sid, n) for sid, n, _ in tw.counts]
    want = tw.total * keep + prof.carry
    k = math.floor(want)
    prof.carry = want - k
    if k <= 0:
        return []
    total = tw.total
    quotas = [(sid, n * k / total) for sid, n, _ in tw.counts]
    got = [(sid, math.floor(q)) for sid, q in quotas]
    short = k - sum(n for _, n in got)
    order = sorted(range(len(quotas)), key=lambda i: quotas[i][1] - got[i][1], reverse=True)
    for i in order[:short]:
        got[i] = (got[i][0], got[i][1] + 1)
    return [(sid, n) for sid, n in got if n > 0]


def _write_window(
    out: _Packets, prof: _ThreadProfile, tw: ThreadWindow, cache: FrameCache, keep: float
) -> int:
    picks = _thin(tw, prof, keep)
    k = sum(n for _, n in picks)
    if k <= 0:
        return 0
    frames = cache.load(sid for sid, _ in picks)
    # Counts carry no order within a window: lay stacks out sorted, so shared prefixes line up.
    key = cache.key
    picks.sort(key=lambda p: key(p[0]))
    t0_us = round(tw.t0 * 1e6)
    span_us = max(0, round(tw.span() * 1e6))
    if prof.last_us is None:
        first = out.add()
        first.trusted_packet_sequence_id = prof.seq
        first.sequence_flags = _CLEARED | _NEEDS
        td = first.thread_descriptor
        td.pid = prof.pid
        td.tid = prof.tid
        td.thread_name = prof.name
        td.reference_timestamp_us = t0_us
        prof.last_us = t0_us
    p = out.add()
    p.trusted_packet_sequence_id = prof.seq
    p.sequence_flags = _NEEDS
    iids: list[int] = []
    for sid, n in picks:
        iid = prof.callstacks.get(sid)
        if iid is None:
            iid = _intern_stack(p, prof, sid, frames.get(sid, ()))
        iids.extend([iid] * n)
    # Sample j sits in the middle of its 1/k of the span; integer math keeps the deltas exact.
    times = [t0_us + (2 * j + 1) * span_us // (2 * k) for j in range(k)]
    last = prof.last_us
    if times[0] < last:  # windows may overlap by a few microseconds: never step back
        times = [max(t, last) for t in times]
    deltas = [times[0] - last]
    deltas += [b - a for a, b in pairwise(times)]
    prof.last_us = times[-1]
    sp = p.streaming_profile_packet
    sp.callstack_iid.extend(iids)
    sp.timestamp_delta_us.extend(deltas)
    return k


def _intern_stack(p: Any, prof: _ThreadProfile, sid: int, frames: tuple[Frame, ...]) -> int:
    """Add what the callstack needs to the packet's interned data; returns its iid."""
    interned = p.interned_data
    frame_iids: list[int] = []
    if not frames:
        frames = (Frame("(no Python frames)", "", 0),)
    for fr in frames:
        fiid = prof.frames.get(fr)
        if fiid is None:
            name_iid = prof.functions.get(fr.function)
            if name_iid is None:
                name_iid = prof.functions[fr.function] = len(prof.functions) + 1
                interned.function_names.add(iid=name_iid, str=fr.function.encode())
            map_iid = prof.files.get(fr.filename)
            if map_iid is None:
                map_iid = prof.files[fr.filename] = len(prof.files) + 1
                interned.mapping_paths.add(iid=map_iid, str=(fr.filename or "?").encode())
                # Distinct address ranges per file keep Perfetto from folding mappings.
                interned.mappings.add(
                    iid=map_iid,
                    path_string_ids=[map_iid],
                    start=map_iid << 32,
                    end=(map_iid + 1) << 32,
                )
            fiid = prof.frames[fr] = len(prof.frames) + 1
            # rel_pc carries the line: one frame per (function, file, line), like py-spy's.
            interned.frames.add(
                iid=fiid, function_name_id=name_iid, mapping_id=map_iid, rel_pc=max(0, fr.line)
            )
        frame_iids.append(fiid)
    iid = prof.callstacks[sid] = len(prof.callstacks) + 1
    interned.callstacks.add(iid=iid, frame_ids=frame_iids)
    return iid
