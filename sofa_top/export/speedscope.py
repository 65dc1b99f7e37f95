"""speedscope file (https://www.speedscope.app/file-format-schema.json): one "sampled" profile
per sampled thread, weights in milliseconds.

A stack window stores how often each stack was seen, so each (window, stack) becomes one weighted
sample (count / rate): within a window stacks are ordered by their frames, and the same stack in
consecutive samples is merged into one. Idle gaps (a thread absent from windows) are not kept:
speedscope's sampled profiles have no notion of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import IO

from sofa_top import __version__
from sofa_top.datamodel.samples import Frame
from sofa_top.export.common import (
    FrameCache,
    JsonSink,
    SessionModel,
    Written,
    fmt_count,
    thread_title,
)
from sofa_top.recording.reader import SessionReader

SCHEMA_URL = "https://www.speedscope.app/file-format-schema.json"
NO_FRAMES = (Frame("(no Python frames)", "", 0),)


@dataclass
class _Profile:
    """The thread being written: its pending sample and what has been written so far."""

    pid: int
    tid: int
    name: str
    weights: list[float] = field(default_factory=list)
    pending: tuple[int, ...] | None = None  # frame indexes of the last, not yet written, sample
    pending_w: float = 0.0
    busy: float = 0.0  # non-idle weight, to pick the profile speedscope opens first


def write_speedscope(
    reader: SessionReader, model: SessionModel, f: IO[bytes], max_events: int
) -> Written:
    """Write the session's Python stacks as a speedscope file to ``f``."""
    notes: list[str] = []
    merge = 1
    if model.stack_rows > max_events > 0:
        merge = -(-model.stack_rows // max_events)
        notes.append(
            f"stack windows merged {merge} at a time ({fmt_count(model.stack_rows)} "
            f"window-stack counts recorded) to stay under ~{fmt_count(max_events)} samples"
        )
    if not model.stack_rows:
        notes.append("this session has no Python stacks: the speedscope file has no profiles")
    out = JsonSink(f)
    name = f"{model.target_name} (pid {model.target_pid})"
    out.write(
        f'{{"$schema":"{SCHEMA_URL}","exporter":"sofa-top {__version__}",'
        f'"name":{json.dumps(name)},\n"profiles":['
    )
    w = _Profiles(out, FrameCache(reader), model, merge)
    for wid, t0, t1, rate, n_inst, pid, tid, _name, sid, count, klass in reader.iter_stack_rows(
        by_thread=True
    ):
        per = _ms_per_sample(float(rate or 0.0), float(t1 - t0), int(n_inst or 0))
        w.add(wid, pid, tid, sid, count * per, klass == "idle")
    w.close()
    out.write("],\n")
    out.write(f'"activeProfileIndex":{w.best[1] if w.profiles else 0},\n"shared":{{"frames":[')
    for i, fr in enumerate(w.frame_index):
        frame = {"name": fr.function or "?", "file": fr.filename, "line": fr.line}
        out.write(("" if i == 0 else ",\n") + json.dumps(frame, ensure_ascii=False))
    out.write("]}}\n")
    out.flush()
    return Written(w.samples, notes)


class _Profiles:
    """Writes one sampled profile per thread as the (pid, tid)-ordered stack rows arrive,
    merging ``merge`` windows into one sample set and runs of equal stacks into one sample."""

    def __init__(self, out: JsonSink, cache: FrameCache, model: SessionModel, merge: int):
        self.out, self.cache, self.model, self.merge = out, cache, model, merge
        self.frame_index: dict[Frame, int] = {}
        self._stack_index: dict[int, tuple[int, ...]] = {}  # stack_id -> frame indexes
        self.profiles = 0
        self.samples = 0
        self.best = (-1.0, 0)  # (busy weight, profile index)
        self._cur: _Profile | None = None
        self._window: tuple[int, int, int] | None = None  # (pid, tid, window id) gathered
        self._merged = 0
        self._acc: dict[int, float] = {}  # stack_id -> ms, over the windows being gathered
        self._idle: set[int] = set()

    def add(self, wid: int, pid: int, tid: int, sid: int, ms: float, idle: bool) -> None:
        """One row: ``ms`` of samples of stack ``sid`` in window ``wid`` of thread (pid, tid)."""
        cur = self._cur
        if cur is None or (cur.pid, cur.tid) != (pid, tid):
            if cur is not None:
                self._end_profile(cur)
            cur = self._cur = _Profile(pid, tid, _profile_name(self.model, pid, tid))
            self.out.write(("" if self.profiles == 0 else ",\n") + _profile_head(cur))
            self._window, self._merged = None, 0
        if self._window != (pid, tid, wid):
            self._merged += 1
            if self._window is not None and self._merged > self.merge:
                self._emit_window(cur)
                self._merged = 1
            self._window = (pid, tid, wid)
        self._acc[sid] = self._acc.get(sid, 0.0) + ms
        if idle:
            self._idle.add(sid)

    def close(self) -> None:
        """Finish the last profile."""
        if self._cur is not None:
            self._end_profile(self._cur)

    def _indexes(self, sid: int) -> tuple[int, ...]:
        idx = self._stack_index.get(sid)
        if idx is None:
            frames = self.cache.load((sid,))[sid] or NO_FRAMES
            idx = tuple(_index(self.frame_index, fr) for fr in frames)
            self._stack_index[sid] = idx
        return idx

    def _emit_window(self, cur: _Profile) -> None:
        self.cache.load(self._acc)  # one query for the window's new stacks
        # Frame indexes follow first appearance, so sort by the frames themselves.
        for sid in sorted(self._acc, key=self.cache.key):
            idx = self._indexes(sid)
            weight = self._acc[sid]
            if sid not in self._idle:
                cur.busy += weight
            if cur.pending == idx:
                cur.pending_w += weight
                continue
            self.samples += _flush_sample(self.out, cur)
            cur.pending, cur.pending_w = idx, weight
        self._acc.clear()
        self._idle.clear()

    def _end_profile(self, cur: _Profile) -> None:
        if self._acc:
            self._emit_window(cur)
        self.samples += _flush_sample(self.out, cur)
        _end_profile(self.out, cur)
        if cur.busy > self.best[0]:
            self.best = (cur.busy, self.profiles)
        self.profiles += 1


def _ms_per_sample(rate_hz: float, width_s: float, instants: int) -> float:
    if rate_hz > 0:
        return 1000.0 / rate_hz
    return 1000.0 * width_s / instants if instants > 0 else 1.0


def _index(frame_index: dict[Frame, int], fr: Frame) -> int:
    i = frame_index.get(fr)
    if i is None:
        i = frame_index[fr] = len(frame_index)
    return i


def _profile_name(model: SessionModel, pid: int, tid: int) -> str:
    tname = next((n for p, t, n in model.threads if (p, t) == (pid, tid)), "")
    return f"{model.process_title(pid)} (pid {pid}) / {thread_title(tname, tid)}"


def _profile_head(p: _Profile) -> str:
    return (
        f'{{"type":"sampled","name":{json.dumps(p.name, ensure_ascii=False)},'
        '"unit":"milliseconds","startValue":0,"samples":['
    )


def _flush_sample(out: JsonSink, p: _Profile) -> int:
    if p.pending is None:
        return 0
    out.write(("" if not p.weights else ",") + "[" + ",".join(map(str, p.pending)) + "]")
    p.weights.append(p.pending_w)
    p.pending = None
    return 1


def _end_profile(out: JsonSink, p: _Profile) -> None:
    # Weights are one float per merged sample: the only per-thread state that grows.
    out.write('],"weights":[' + ",".join(map(repr, p.weights)) + "]")
    out.write(f',"endValue":{sum(p.weights)!r}}}')
