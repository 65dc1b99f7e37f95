"""A steps frame from queued step records (stdlib only; the layout: ``core.StepRecord``)."""

from __future__ import annotations

import collections
from typing import Any

from sofa_top.agent import protocol

RECORD_LEN = 12  # a step record's fields before the CUDA observer's three


def _us(seconds: float) -> int | None:
    return int(seconds * 1e6) if seconds >= 0 else None


def steps_frame(
    steps: collections.deque[tuple[Any, ...]], pid: int, offset: float, most: int
) -> bytes:
    """One frame of up to ``most`` queued steps of the first one's source (popped from
    ``steps``, which is not empty); ``offset`` turns perf_counter into Unix time."""
    source = steps[0][0]
    data: list[int | None] = []
    collective: list[int | None] = []
    measured = False
    gpu: list[int | None] = []
    has_gpu = False
    compute: list[int | None] = []
    has_compute = False
    sched: list[int | None] = []
    has_sched = False
    limit = most * len(protocol.STEP_FIELDS)
    while steps and len(data) < limit and steps[0][0] == source:
        rec = steps.popleft()
        _, n, start, end, wait, bs, cpu = rec[:7]
        run = queue = -1.0
        if isinstance(cpu, tuple):  # (CPU, schedstat run, schedstat queue) of the wait
            cpu, run, queue = cpu
        has_sched = has_sched or run >= 0
        sched += (_us(run), _us(queue) if run >= 0 else None)
        # a step's start is the previous one's end (same float): they stay equal in µs
        data += (
            n,
            int((start + offset) * 1e6),
            int((end + offset) * 1e6),
            int(wait * 1e6),
            bs,
            _us(cpu),
        )
        spent = rec[7] if len(rec) > 7 else -1.0
        measured = measured or spent >= 0
        collective.append(_us(spent))
        if len(rec) >= RECORD_LEN:
            fwd, bwd, opt, flags = rec[8:RECORD_LEN]
            has_compute = has_compute or flags != 0
            compute += (_us(fwd), _us(bwd), _us(opt), flags)
        else:
            compute += (None, None, None, 0)
        if len(rec) > RECORD_LEN:
            span, busy, src = rec[RECORD_LEN : RECORD_LEN + 3]
            has_gpu = True
            gpu += (_us(span), _us(busy), src)
        else:
            gpu += (None, None, 0)
    frame: dict[str, Any] = {"type": "steps", "pid": pid, "source": source, "data": data}
    if measured:  # optional fields: a sofa-top that does not know them ignores them
        frame["collective_us"] = collective
    if has_gpu:
        frame["gpu"] = gpu
    if has_compute:
        frame["compute"] = compute
    if has_sched:
        frame["sched_us"] = sched
    return protocol.encode(frame)
