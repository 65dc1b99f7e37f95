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
from sofa_top.export.common import (
    FrameCache,
    JsonSink,
    SessionModel,
    Written,
    fmt_count,
    thread_title,
)
from sofa_top.model.samples import Frame
from sofa_top.recording.store import SessionReader

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
    frame_index: dict[Frame, int] = {}
    cache = FrameCache(reader)
    profiles = 0
    samples = 0
    best = (-1.0, 0)  # (busy weight, profile index)
    cur: _Profile | None = None
    window: tuple[int, int, int] | None = None  # (pid, tid, window id) being gathered
    merged = 0
    acc: dict[int, float] = {}  # stack_id -> ms, over the windows being gathered
    idle: set[int] = set()

    stack_index: dict[int, tuple[int, ...]] = {}  # stack_id -> frame indexes

    def indexes(sid: int) -> tuple[int, ...]:
        idx = stack_index.get(sid)
        if idx is None:
            frames = cache.load((sid,))[sid] or NO_FRAMES
            idx = stack_index[sid] = tuple(_index(frame_index, fr) for fr in frames)
        return idx

    def emit_window() -> None:
        nonlocal samples
        assert cur is not None
        cache.load(acc)  # one query for the window's new stacks
        # Frame indexes follow first appearance, so sort by the frames themselves.
        order = sorted(acc, key=cache.key)
        for sid in order:
            idx = indexes(sid)
            weight = acc[sid]
            if sid not in idle:
                cur.busy += weight
            if cur.pending == idx:
                cur.pending_w += weight
                continue
            samples += _flush_sample(out, cur)
            cur.pending, cur.pending_w = idx, weight
        acc.clear()
        idle.clear()

    def end_profile() -> None:
        nonlocal profiles, best, samples
        assert cur is not None
        if acc:
            emit_window()
        samples += _flush_sample(out, cur)
        _end_profile(out, cur)
        if cur.busy > best[0]:
            best = (cur.busy, profiles)
        profiles += 1

    for wid, t0, t1, rate, n_inst, pid, tid, _name, sid, count, klass in reader.iter_stack_rows(
        by_thread=True
    ):
        if cur is None or (cur.pid, cur.tid) != (pid, tid):
            if cur is not None:
                end_profile()
            cur = _Profile(pid, tid, _profile_name(model, pid, tid))
            out.write(("" if profiles == 0 else ",\n") + _profile_head(cur))
            window, merged = None, 0
        if window != (pid, tid, wid):
            merged += 1
            if window is not None and merged > merge:
                emit_window()
                merged = 1
            window = (pid, tid, wid)
        per = _ms_per_sample(float(rate or 0.0), float(t1 - t0), int(n_inst or 0))
        acc[sid] = acc.get(sid, 0.0) + count * per
        if klass == "idle":
            idle.add(sid)
    if cur is not None:
        end_profile()
    out.write("],\n")
    out.write(f'"activeProfileIndex":{best[1] if profiles else 0},\n"shared":{{"frames":[')
    for i, fr in enumerate(frame_index):
        frame = {"name": fr.function or "?", "file": fr.filename, "line": fr.line}
        out.write(("" if i == 0 else ",\n") + json.dumps(frame, ensure_ascii=False))
    out.write("]}}\n")
    out.flush()
    return Written(samples, notes)


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
