"""Agent frames to samples: strict validation of what an agent sends (a malformed frame is a
``FrameError``, and the collector drops that peer with the reason)."""

from __future__ import annotations

import time
from typing import Any

from sofa_top.agent.clocks import clock_of
from sofa_top.agent.protocol import (
    BUSY_SOURCES,
    COMPUTE_STEP_FIELDS,
    GPU_STEP_FIELDS,
    PHASE_AUTOGRAD,
    PHASE_EVAL,
    PHASE_TORCH,
    PHASE_TRAIN,
    STEP_FIELDS,
    FrameError,
)
from sofa_top.datamodel.ranks import RankId
from sofa_top.datamodel.samples import (
    AgentInfo,
    CudaSample,
    CudaWindow,
    Event,
    PhaseHint,
    PipelineSample,
    PipelineStage,
    Sample,
    StepSample,
    event_kind,
    gpu_busy_source,
    stage_kind,
)


def _num(obj: dict[str, Any], key: str) -> float:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise FrameError(f"{obj.get('type')}.{key}: expected a number")
    return float(v)


def int_field(obj: dict[str, Any], key: str, default: int | None = None) -> int:
    """An integer field of a frame (``default`` when absent; FrameError when malformed)."""
    v = obj.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise FrameError(f"{obj.get('type')}.{key}: expected an integer")
    return v


def _str(obj: dict[str, Any], key: str, default: str | None = None) -> str:
    v = obj.get(key, default)
    if not isinstance(v, str):
        raise FrameError(f"{obj.get('type')}.{key}: expected a string")
    return v


def _list(obj: dict[str, Any], key: str) -> list[Any]:
    v = obj.get(key, [])
    if not isinstance(v, list):
        raise FrameError(f"{obj.get('type')}.{key}: expected a list")
    return v


def _opt_int(v: object, what: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise FrameError(f"{what}: expected an integer or null")
    return v


def _opt_num(v: object, what: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise FrameError(f"{what}: expected a number or null")
    return float(v)


def _gpu_rows(frame: dict[str, Any], rows: int) -> list[tuple[float | None, float | None, int]]:
    """The optional ``gpu`` field of a steps frame: (span s, busy s, source code) per row."""
    if "gpu" not in frame:
        return [(None, None, 0)] * rows
    gpu = _list(frame, "gpu")
    width = len(GPU_STEP_FIELDS)
    if len(gpu) != rows * width:
        raise FrameError(f"steps.gpu: length {len(gpu)} is not {width} per step")
    out: list[tuple[float | None, float | None, int]] = []
    for i in range(0, len(gpu), width):
        span = _opt_int(gpu[i], "steps.gpu: span")
        busy = _opt_int(gpu[i + 1], "steps.gpu: busy")
        code = _opt_int(gpu[i + 2], "steps.gpu: busy source") or 0
        if (span is not None and span < 0) or (busy is not None and busy < 0):
            raise FrameError("steps.gpu: a GPU time < 0")
        if not 0 <= code < len(BUSY_SOURCES):
            raise FrameError(f"steps.gpu: unknown busy source {code}")
        out.append(
            (None if span is None else span / 1e6, None if busy is None else busy / 1e6, code)
        )
    return out


_ComputeRow = tuple[float | None, float | None, float | None, PhaseHint, bool | None]


def _compute_rows(frame: dict[str, Any], rows: int) -> list[_ComputeRow]:
    """The optional ``compute`` field of a steps frame: (forward s, backward s, optimizer s,
    phase hint, autograd) per row."""
    if "compute" not in frame:
        return [(None, None, None, "", None)] * rows
    raw = _list(frame, "compute")
    width = len(COMPUTE_STEP_FIELDS)
    if len(raw) != rows * width:
        raise FrameError(f"steps.compute: length {len(raw)} is not {width} per step")
    out: list[_ComputeRow] = []
    for i in range(0, len(raw), width):
        spans = [_opt_int(v, "steps.compute: a span") for v in raw[i : i + 3]]
        if any(v is not None and v < 0 for v in spans):
            raise FrameError("steps.compute: a span < 0")
        flags = _opt_int(raw[i + 3], "steps.compute: flags") or 0
        hint: PhaseHint = "train" if flags & PHASE_TRAIN else "eval" if flags & PHASE_EVAL else ""
        f, b, o = (None if v is None else v / 1e6 for v in spans)
        autograd = bool(flags & PHASE_AUTOGRAD) if flags & PHASE_TORCH else None
        out.append((f, b, o, hint, autograd))
    return out


def _steps(frame: dict[str, Any], pid: int) -> list[Sample]:
    source, name = clock_of(_str(frame, "source"))  # a name of the user's: an api loop
    data = _list(frame, "data")
    width = len(STEP_FIELDS)
    if len(data) % width:
        raise FrameError(f"steps.data: length {len(data)} is not a multiple of {width}")
    collective = _collective(frame, len(data) // width)
    gpu = _gpu_rows(frame, len(data) // width)
    sched = _sched_rows(frame, len(data) // width)
    compute = _compute_rows(frame, len(data) // width)
    out: list[Sample] = []
    for i in range(0, len(data), width):
        step, start_us, end_us, wait_us, bs, cpu_us = data[i : i + width]
        span, busy, code = gpu[i // width]
        run, queue = sched[i // width]
        forward, backward, optimizer, hint, autograd = compute[i // width]
        for v in (step, start_us, end_us, wait_us):
            if isinstance(v, bool) or not isinstance(v, int):
                raise FrameError("steps.data: step and times must be integers")
        if end_us < start_us or wait_us < 0:
            raise FrameError("steps.data: a step ends before it starts, or waits < 0")
        wait_cpu = _opt_int(cpu_us, "steps.data: wait CPU")
        if wait_cpu is not None and wait_cpu < 0:
            raise FrameError("steps.data: wait CPU < 0")
        out.append(
            StepSample(
                ts=end_us / 1e6,
                step=step,
                start=start_us / 1e6,
                duration_s=(end_us - start_us) / 1e6,
                input_wait_s=wait_us / 1e6,
                source=source,
                name=name,
                batch_size=_opt_int(bs, "steps.data: batch size"),
                pid=pid,
                wait_cpu_s=None if wait_cpu is None else wait_cpu / 1e6,
                collective_s=collective[i // width],
                gpu_span_s=span,
                gpu_busy_s=busy,
                gpu_busy_source=gpu_busy_source(BUSY_SOURCES[code]) if busy is not None else None,
                wait_run_s=run,
                wait_queue_s=queue,
                forward_s=forward,
                backward_s=backward,
                optimizer_s=optimizer,
                phase_hint=hint,
                autograd=autograd,
            )
        )
    return out


def _sched_rows(frame: dict[str, Any], rows: int) -> list[tuple[float | None, float | None]]:
    """The optional ``sched_us`` of a steps frame: (on a CPU s, waiting for one s) per row."""
    if "sched_us" not in frame:
        return [(None, None)] * rows
    raw = _list(frame, "sched_us")
    if len(raw) != 2 * rows:
        raise FrameError(f"steps.sched_us: length {len(raw)} is not 2 per step")
    out: list[tuple[float | None, float | None]] = []
    for i in range(0, len(raw), 2):
        run = _opt_int(raw[i], "steps.sched_us: on CPU")
        queue = _opt_int(raw[i + 1], "steps.sched_us: waiting")
        if (run is not None and run < 0) or (queue is not None and queue < 0):
            raise FrameError("steps.sched_us: a time < 0")
        out.append((None if run is None else run / 1e6, None if queue is None else queue / 1e6))
    return out


def _collective(frame: dict[str, Any], rows: int) -> list[float | None]:
    """The optional ``collective_us`` of a steps frame: one value (or null) per row."""
    raw = frame.get("collective_us")
    if raw is None:
        return [None] * rows
    if not isinstance(raw, list) or len(raw) != rows:
        raise FrameError("steps.collective_us: expected one value per step")
    out: list[float | None] = []
    for v in raw:
        us = _opt_int(v, "steps.collective_us")
        if us is not None and us < 0:
            raise FrameError("steps.collective_us: < 0")
        out.append(None if us is None else us / 1e6)
    return out


_WINDOW_INTS = (
    "steps", "kernels", "short_gaps", "long_gaps", "h2d_copies", "h2d_bytes", "pageable_h2d",
    "blocking_h2d", "d2h_copies", "launches", "syncs", "conv_kernels", "bf16_kernels",
)  # fmt: skip
_WINDOW_FLOATS = (
    "wall_s", "busy_s", "input_wait_s", "kernel_s", "short_gap_s", "long_gap_s", "h2d_s",
    "pageable_h2d_s", "d2h_s",
)  # fmt: skip


def cuda_window(w: object, where: str = "cuda.window") -> CudaWindow | None:
    """A ``CudaWindow`` from its JSON object (a frame's or a stored one's)."""
    if w is None:
        return None
    if not isinstance(w, dict):
        raise FrameError(f"{where}: expected an object or null")
    ints: dict[str, int] = {}
    for k in _WINDOW_INTS:
        v = w.get(k, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise FrameError(f"{where}.{k}: expected a count")
        ints[k] = v
    floats: dict[str, float] = {}
    for k in _WINDOW_FLOATS:
        v = w.get(k, 0.0)
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise FrameError(f"{where}.{k}: expected a number >= 0")
        floats[k] = float(v)
    return CudaWindow(
        **ints,
        **floats,  # type: ignore[arg-type]
        median_kernel_s=_opt_num(w.get("median_kernel_s"), f"{where}.median_kernel_s"),
    )


def _opt_bool(v: object, what: str) -> bool | None:
    if v is None or isinstance(v, bool):
        return v
    raise FrameError(f"{what}: expected true, false or null")


def _cuda(frame: dict[str, Any], pid: int) -> CudaSample:
    error = frame.get("error")
    if error is not None and not isinstance(error, str):
        raise FrameError("cuda.error: expected a string or null")
    return CudaSample(
        ts=_num(frame, "t"),
        pid=pid,
        device=int_field(frame, "device", 0),
        device_name=_str(frame, "device_name", ""),
        bf16_supported=_opt_bool(frame.get("bf16_supported"), "cuda.bf16_supported"),
        capability=_str(frame, "capability", ""),
        mem_allocated=_opt_int(frame.get("mem_allocated"), "cuda.mem_allocated"),
        mem_reserved=_opt_int(frame.get("mem_reserved"), "cuda.mem_reserved"),
        mem_total=_opt_int(frame.get("mem_total"), "cuda.mem_total"),
        mem_free=_opt_int(frame.get("mem_free"), "cuda.mem_free"),
        alloc_retries=_opt_int(frame.get("alloc_retries"), "cuda.alloc_retries"),
        ooms=_opt_int(frame.get("ooms"), "cuda.ooms"),
        window=cuda_window(frame.get("window")),
        error=error,
    )


def _info(frame: dict[str, Any], pid: int) -> AgentInfo:
    frameworks: list[tuple[str, str]] = []
    for fw in _list(frame, "frameworks"):
        if not (isinstance(fw, list) and len(fw) == 2 and all(isinstance(x, str) for x in fw)):
            raise FrameError("info.frameworks: expected [name, version] pairs")
        frameworks.append((fw[0], fw[1]))
    applied = _list(frame, "hooks_applied")
    if not all(isinstance(h, str) for h in applied):
        raise FrameError("info.hooks_applied: expected strings")
    skipped: list[tuple[str, str]] = []
    for sk in _list(frame, "hooks_skipped"):
        if not (isinstance(sk, list) and len(sk) == 2 and all(isinstance(x, str) for x in sk)):
            raise FrameError("info.hooks_skipped: expected [hook, reason] pairs")
        skipped.append((sk[0], sk[1]))
    notes: list[tuple[str, str]] = []
    for note in _list(frame, "step_notes"):  # optional: older agents do not send it
        pair = isinstance(note, list) and len(note) == 2
        if not (pair and all(isinstance(x, str) for x in note)):
            raise FrameError("info.step_notes: expected [source, note] pairs")
        notes.append((note[0], note[1]))
    return AgentInfo(
        ts=_num(frame, "t"),
        pid=pid,
        python=_str(frame, "python", ""),
        frameworks=tuple(frameworks),
        hooks_applied=tuple(applied),
        hooks_skipped=tuple(skipped),
        dropped=int_field(frame, "dropped", 0),
        step_notes=tuple(notes),
    )


def _pipeline(frame: dict[str, Any], pid: int) -> PipelineSample:
    stages: list[PipelineStage] = []
    for st in _list(frame, "stages"):
        if not isinstance(st, dict):
            raise FrameError("pipeline.stages: expected objects")
        bottleneck = st.get("is_bottleneck", False)
        if not isinstance(bottleneck, bool):
            raise FrameError("pipeline.stages.is_bottleneck: expected a boolean")
        stages.append(
            PipelineStage(
                name=_str(st, "name"),
                kind=stage_kind(st.get("kind")),
                parallelism=_opt_int(st.get("parallelism"), "pipeline.stages.parallelism"),
                buffer=_opt_int(st.get("buffer"), "pipeline.stages.buffer"),
                self_time_s=_opt_num(st.get("self_time_s"), "pipeline.stages.self_time_s"),
                is_bottleneck=bottleneck,
            )
        )
    return PipelineSample(
        ts=_num(frame, "t"),
        framework=_str(frame, "framework"),
        stages=tuple(stages),
        pid=pid,
        note=_str(frame, "note", ""),
    )


def _data(frame: dict[str, Any], key: str) -> dict[str, object]:
    v = frame.get(key, {})
    if not isinstance(v, dict):
        raise FrameError(f"{frame.get('type')}.{key}: expected an object")
    return dict(v)


def convert_frame(frame: dict[str, Any], pid: int) -> list[Sample]:
    """Turn one decoded frame from the agent of process ``pid`` into samples."""
    kind = frame["type"]
    if kind == "steps":
        return _steps(frame, pid)
    if kind == "info":
        return [_info(frame, pid)]
    if kind == "pipeline":
        return [_pipeline(frame, pid)]
    if kind == "cuda":
        return [_cuda(frame, pid)]
    if kind == "workers":
        workers = _list(frame, "workers")
        if not all(isinstance(w, int) and not isinstance(w, bool) for w in workers):
            raise FrameError("workers.workers: expected pids")
        framework = _str(frame, "framework", "")
        return [
            Event(
                ts=_num(frame, "t"),
                kind="agent-workers",
                message=f"pid {pid}: {len(workers)} {framework} data-loading worker(s)",
                data={"pid": pid, "framework": framework, "workers": list(workers)},
            )
        ]
    if kind == "event":
        told = _str(frame, "kind")
        data = {"pid": pid, **_data(frame, "data")}
        event = event_kind(told)
        if event is None:  # an agent newer than this sofa-top: keep what it said, as data
            return [
                Event(
                    ts=_num(frame, "t"),
                    kind="agent-unknown-frame",
                    message=f"pid {pid}: unknown event kind {told!r}: {_str(frame, 'message', '')}",
                    data={"pid": pid, "type": "event", "kind": told},
                )
            ]
        return [
            Event(
                ts=_num(frame, "t"),
                kind=event,
                message=_str(frame, "message", ""),
                data=data,
            )
        ]
    if kind == "hello":
        argv = _list(frame, "argv")
        mode = _str(frame, "mode", "launch")  # added in attach's protocol: absent means launch
        how = "injected into" if mode == "attach" else "connected from"
        hello: dict[str, object] = {
            "pid": pid,
            "ppid": int_field(frame, "ppid", 0),
            "version": int_field(frame, "v", 0),
            "argv": [str(a) for a in argv],
            "settings": _data(frame, "settings"),
            "mode": mode,
        }
        rank = frame.get("rank")
        if rank is not None:
            ident = RankId.from_json(rank) if isinstance(rank, dict) else None
            if ident is None:
                raise FrameError("hello.rank: expected an object with an integer rank >= 0")
            hello["rank"] = ident.as_json()
        return [
            Event(
                ts=_num(frame, "t"),
                kind="agent-connected",
                message=f"agent {how} pid {pid} (python {_str(frame, 'python', '?')})",
                data=hello,
            )
        ]
    if kind == "bye":
        bye: dict[str, object] = {"pid": pid, "dropped": int_field(frame, "dropped", 0)}
        error = frame.get("error")
        if error is not None:
            bye["error"] = _str(frame, "error")
        return [
            Event(
                ts=_num(frame, "t"),
                kind="agent-exit",
                message=f"agent of pid {pid} exited" + (f" ({error})" if error else ""),
                data=bye,
            )
        ]
    # a newer agent: tell, but keep the connection
    return [
        Event(
            ts=time.time(),
            kind="agent-unknown-frame",
            message=f"pid {pid}: unknown frame type {kind!r} ignored",
            data={"pid": pid, "type": kind},
        )
    ]
