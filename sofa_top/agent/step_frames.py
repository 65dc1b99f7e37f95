"""A steps frame from queued step records (stdlib only; ``step_record.StepRecord``)."""

from __future__ import annotations

import collections
from typing import Any

from sofa_top.agent import protocol
from sofa_top.agent.step_record import StepRecord


def _us(seconds: float | None) -> int | None:
    return int(seconds * 1e6) if seconds is not None and seconds >= 0 else None


def steps_frame(steps: collections.deque[StepRecord], pid: int, offset: float, most: int) -> bytes:
    """One frame of up to ``most`` queued steps of the first one's source (popped from
    ``steps``, which is not empty); ``offset`` turns perf_counter into Unix time."""
    source = steps[0].source
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
    while steps and len(data) < limit and steps[0].source == source:
        rec = steps.popleft()
        start, end, cpu = rec.start, rec.end, rec.cpu
        run = queue = -1.0
        if isinstance(cpu, tuple):  # (CPU, schedstat run, schedstat queue) of the wait
            cpu, run, queue = cpu
        has_sched = has_sched or run >= 0
        sched += (_us(run), _us(queue) if run >= 0 else None)
        # a step's start is the previous one's end (same float): they stay equal in µs
        data += (
            rec.step,
            int((start + offset) * 1e6),
            int((end + offset) * 1e6),
            int(rec.wait * 1e6),
            rec.batch_size,
            _us(cpu),
        )
        measured = measured or rec.collective is not None
        collective.append(_us(rec.collective))
        has_compute = has_compute or rec.flags != 0
        compute += (_us(rec.forward), _us(rec.backward), _us(rec.optimizer), rec.flags)
        if rec.gpu_timed:
            has_gpu = True
            gpu += (_us(rec.gpu_span), _us(rec.gpu_busy), rec.busy_source)
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
