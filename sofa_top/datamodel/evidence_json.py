"""The one serializer of a verdict's typed evidence and its one parser.

``evidence_json`` writes ``verdict.evidence`` of ``record --json``, ``compare --json``, the
metrics' cluster JSON and a session file's verdict markers; ``parse_evidence`` reads it back
from a session file. The JSON's keys, their order and their types are those the evidence had
when it was a string-keyed map: a group of figures writes its keys where the map gained them
(a key two groups share keeps its first place, as a map's update does).

Reading tolerates any older file: a key it does not know is dropped, a missing or ill-typed one
takes its neutral value (None, 0, "", False), a kind is kept only where it is one
(``literals.one_of``), so a verdict read back writes at most more keys than it was read with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sofa_top.datamodel.literals import one_of
from sofa_top.datamodel.neighbours import Neighbour
from sofa_top.datamodel.verdict_evidence import (
    NO_EVIDENCE,
    BalancedEvidence,
    BareEvidence,
    ComputeBoundEvidence,
    Failure,
    GpuIdle,
    GpuStepFigures,
    GpuUnderutilizedEvidence,
    IdleEvidence,
    InputBoundEvidence,
    InputCauseFigures,
    JobFigures,
    JobVerdict,
    KernelWindow,
    Load,
    Measured,
    MemoryPressureEvidence,
    OversubscribedEvidence,
    Oversubscription,
    ProcessEvidence,
    ProcessVerdictEvidence,
    PythonOverheadEvidence,
    StackShares,
    StepFigures,
    StragglerEvidence,
    TimeSplit,
    UnknownEvidence,
    VerdictEvidence,
    as_kind,
)
from sofa_top.datamodel.verdict_kinds import (
    BUSY_SOURCES,
    DEVICES,
    GPU_CAUSES,
    INPUT_CAUSE_SOURCES,
    INPUT_CAUSES,
    OVERSUBSCRIBED_BY,
    PHASES,
    VERDICT_KINDS,
    VerdictKind,
)

# ---------------------------------------------------------------------------------- writing


def evidence_json(e: VerdictEvidence) -> dict[str, object]:
    """``verdict.evidence`` as JSON."""
    if isinstance(e, StragglerEvidence):
        return _straggler(e)
    if isinstance(e, BalancedEvidence):
        return {**_job(e.job), "spread_fraction": e.spread_fraction}
    if isinstance(e, BareEvidence):
        return {} if e.input_cause is None else {"input_cause": e.input_cause}
    return _process(e)


def _process(e: ProcessEvidence) -> dict[str, object]:
    out: dict[str, object] = {}
    if e.load is not None:
        out["cpu_saturation"] = e.load.cpu_saturation
        out["gpu_util_percent"] = e.load.gpu_util_percent
        out["others_cores"] = e.load.others_cores
    if e.phase is not None:
        out["phase"] = e.phase
    if e.gpu_steps is not None:
        out.update(_gpu_steps(e.gpu_steps))
    if e.steps is not None:
        out.update(_steps(e.steps))
    if e.steps_reason is not None:
        out["steps_reason"] = e.steps_reason
    if e.stacks is not None:
        out["input_share"] = e.stacks.input_share
        out["compute_share"] = e.stacks.compute_share
        if e.stacks.python_share is not None:
            out["python_share"] = e.stacks.python_share
            out["source"] = "stacks"
    if e.input_speedup_bound is not None:
        out["input_speedup_bound"] = e.input_speedup_bound
    if e.input_cause is not None:
        out.update(_cause(e.input_cause))
    # what only this kind reads, where its rule added it: after the shared groups
    if isinstance(e, MemoryPressureEvidence) and e.memory_used_fraction is not None:
        out["memory_used_fraction"] = e.memory_used_fraction
    if isinstance(e, OversubscribedEvidence) and e.oversubscription is not None:
        out.update(_oversubscription(e.oversubscription))
    if isinstance(e, ComputeBoundEvidence) and e.device is not None:
        out["device"] = e.device
    if isinstance(e, GpuUnderutilizedEvidence) and e.gpu_idle is not None:
        out["cause"] = e.gpu_idle.cause
        if e.gpu_idle.memory_reserved_fraction is not None:
            out["gpu_memory_reserved_fraction"] = e.gpu_idle.memory_reserved_fraction
            out["alloc_retries"] = e.gpu_idle.alloc_retries
    if e.measured is not None:
        out["measured"] = [m.as_json() for m in e.measured]
    if e.failure is not None:
        out["workload_error"] = e.failure.error
    return out


def _steps(s: StepFigures) -> dict[str, object]:
    return {
        "input_fraction": s.input_fraction,
        "steps": s.steps,
        "median_step_s": s.median_step_s,
        "p90_step_s": s.p90_step_s,
        "p99_step_s": s.p99_step_s,
        "bottleneck_stage": s.bottleneck_stage,
        "compute_split": None if s.compute_split is None else dict(s.compute_split),
        "host_split": None if s.host_split is None else dict(s.host_split),
        "call_setup_share": s.call_setup_share,
        "step_source": s.step_source,
        "step_sources": dict(s.step_sources),
        "input_wait_measured": s.input_wait_measured,
        "step_note": s.step_note,
    }


def _gpu_steps(g: GpuStepFigures) -> dict[str, object]:
    out: dict[str, object] = {
        "device": "gpu",
        "gpu_busy_fraction": g.gpu_busy_fraction,
        "gpu_busy_source": g.gpu_busy_source,
        "input_fraction": g.input_fraction,
        "steps": g.steps,
        "median_step_s": g.median_step_s,
        "bottleneck_stage": g.bottleneck_stage,
        "gpu_name": g.gpu_name,
    }
    w = g.window
    if w is not None:
        out.update(
            kernels_per_step=w.kernels_per_step,
            median_kernel_us=w.median_kernel_us,
            launch_gap_fraction=w.launch_gap_fraction,
            host_gap_fraction=w.host_gap_fraction,
            h2d_fraction=w.h2d_fraction,
            h2d_mib_per_step=w.h2d_mib_per_step,
            pageable_copies_per_step=w.pageable_copies_per_step,
            blocking_copies_per_step=w.blocking_copies_per_step,
            syncs_per_step=w.syncs_per_step,
            window_steps=w.window_steps,
        )
    return out


def _neighbours(nb: tuple[Neighbour, ...] | None) -> list[dict[str, object]] | None:
    return None if nb is None else [{"pid": n.pid, "name": n.name, "cores": n.cores} for n in nb]


def _cause(c: InputCauseFigures) -> dict[str, object]:
    return {
        "input_cause": c.cause,
        "input_time_split": None if c.time_split is None else c.time_split.as_json(),
        "input_producers": c.producers,
        "input_contention": c.contention,
        "input_cpu_cores": c.cpu_cores,
        "input_usable_cores": c.usable_cores,
        "input_parallelism": c.parallelism,
        "input_cpu_utilization": c.cpu_utilization,
        "input_cause_source": c.source,
        "cores": c.cores,
        "others_cores": c.others_cores,
        "neighbours": _neighbours(c.neighbours),
        "wait_cpu_cores": c.wait_cpu_cores,
        "iowait_percent": c.iowait_percent,
    }


def _oversubscription(o: Oversubscription) -> dict[str, object]:
    return {
        "runnable_threads": o.runnable_threads,
        "cores_busy": o.cores_busy,
        "cores": o.cores,
        "threads_waiting": o.threads_waiting,
        "intra_op_threads": o.intra_op_threads,
        "oversubscribed_by": o.oversubscribed_by,
        "others_cores": o.others_cores,
        "neighbours": _neighbours(o.neighbours),
    }


def _job(j: JobFigures) -> dict[str, object]:
    return {
        "ranks": j.ranks,
        "step_s": j.step_s,
        "steps_per_s": j.steps_per_s,
        "collective_wait_measured": j.collective_wait_measured,
        "others_collective_wait_fraction": j.others_collective_wait_fraction,
    }


def _straggler(e: StragglerEvidence) -> dict[str, object]:
    out: dict[str, object] = {
        **_job(e.job),
        "rank": e.rank,
        "local_rank": e.local_rank,
        "node": e.node,
        "pid": e.pid,
        "verdict": e.verdict,
        "cause": e.cause,
        "rank_headline": e.rank_headline,
        "gap_s": e.gap_s,
        "steps_per_s_if_matched": e.steps_per_s_if_matched,
        "speedup_if_matched": e.speedup_if_matched,
    }
    if e.job_verdict is not None:
        out["job_verdict"] = {"kind": e.job_verdict.kind, "headline": e.job_verdict.headline}
    return out


# ---------------------------------------------------------------------------------- reading


def _num(d: Mapping[str, object], key: str) -> float | None:
    """A number as it was written (an int stays an int: it is written back as it was)."""
    v = d.get(key)
    return v if isinstance(v, int | float) and not isinstance(v, bool) else None


def _int(d: Mapping[str, object], key: str) -> int | None:
    v = d.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(d: Mapping[str, object], key: str) -> str | None:
    v = d.get(key)
    return v if isinstance(v, str) else None


def _shares(d: Mapping[str, object], key: str) -> dict[str, float] | None:
    """A per-name table of shares (``host_split``, ``compute_split``); None when not one."""
    v = d.get(key)
    if not isinstance(v, dict):
        return None
    return {str(k): x for k in v if (x := _num(v, k)) is not None}


def _counts(d: Mapping[str, object], key: str) -> dict[str, int]:
    """A per-name table of counts (``step_sources``)."""
    v = d.get(key)
    return (
        {} if not isinstance(v, dict) else {str(k): x for k in v if (x := _int(v, k)) is not None}
    )


def _has(d: Mapping[str, object], *keys: str) -> bool:
    return any(k in d for k in keys)


def _neighbours_of(d: Mapping[str, object]) -> tuple[Neighbour, ...] | None:
    raw = d.get("neighbours")
    if not isinstance(raw, list):
        return None
    out: list[Neighbour] = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        pid, cores = _int(item, "pid"), _num(item, "cores")
        if pid is not None and cores is not None:
            out.append(Neighbour(pid, str(item.get("name") or "?"), cores))
    return tuple(out)


def _load(d: Mapping[str, object]) -> Load | None:
    if not _has(d, "cpu_saturation", "gpu_util_percent", "others_cores"):
        return None
    return Load(_num(d, "cpu_saturation"), _num(d, "gpu_util_percent"), _num(d, "others_cores"))


STEP_KEYS = (
    "input_fraction", "steps", "median_step_s", "p90_step_s", "p99_step_s", "bottleneck_stage",
    "compute_split", "host_split", "call_setup_share", "step_source", "step_sources",
    "input_wait_measured", "step_note",
)  # fmt: skip


def _steps_of(d: Mapping[str, object]) -> StepFigures | None:
    if "gpu_busy_fraction" in d or not _has(d, *STEP_KEYS):
        return None
    measured = d.get("input_wait_measured")
    return StepFigures(
        input_fraction=_num(d, "input_fraction"),
        steps=_int(d, "steps") or 0,
        median_step_s=_num(d, "median_step_s"),
        p90_step_s=_num(d, "p90_step_s"),
        p99_step_s=_num(d, "p99_step_s"),
        bottleneck_stage=_str(d, "bottleneck_stage"),
        compute_split=_shares(d, "compute_split"),
        host_split=_shares(d, "host_split"),
        call_setup_share=_num(d, "call_setup_share"),
        step_source=_str(d, "step_source"),
        step_sources=_counts(d, "step_sources"),
        # an older file's steps were all timed ones
        input_wait_measured=measured if isinstance(measured, bool) else True,
        step_note=_str(d, "step_note"),
    )


def _gpu_steps_of(d: Mapping[str, object]) -> GpuStepFigures | None:
    busy = _num(d, "gpu_busy_fraction")
    if busy is None:
        return None
    window = None
    if "kernels_per_step" in d:
        window = KernelWindow(
            kernels_per_step=_num(d, "kernels_per_step") or 0.0,
            median_kernel_us=_num(d, "median_kernel_us"),
            launch_gap_fraction=_num(d, "launch_gap_fraction"),
            host_gap_fraction=_num(d, "host_gap_fraction"),
            h2d_fraction=_num(d, "h2d_fraction"),
            h2d_mib_per_step=_num(d, "h2d_mib_per_step") or 0.0,
            pageable_copies_per_step=_num(d, "pageable_copies_per_step") or 0.0,
            blocking_copies_per_step=_num(d, "blocking_copies_per_step") or 0.0,
            syncs_per_step=_num(d, "syncs_per_step") or 0.0,
            window_steps=_int(d, "window_steps") or 0,
        )
    return GpuStepFigures(
        gpu_busy_fraction=busy,
        gpu_busy_source=one_of(d.get("gpu_busy_source"), BUSY_SOURCES) or "estimate",
        input_fraction=_num(d, "input_fraction") or 0.0,
        steps=_int(d, "steps") or 0,
        median_step_s=_num(d, "median_step_s"),
        bottleneck_stage=_str(d, "bottleneck_stage"),
        gpu_name=_str(d, "gpu_name"),
        window=window,
    )


def _stacks_of(d: Mapping[str, object]) -> StackShares | None:
    if not _has(d, "input_share", "compute_share"):
        return None
    python = _num(d, "python_share")
    if python is None and d.get("source") == "stacks":
        python = 0.0
    return StackShares(_num(d, "input_share") or 0.0, _num(d, "compute_share") or 0.0, python)


def _time_split_of(d: Mapping[str, object]) -> TimeSplit | None:
    raw = d.get("input_time_split")
    if not isinstance(raw, dict):
        return None
    on, wait, blocked = _num(raw, "on_cpu"), _num(raw, "cpu_wait"), _num(raw, "blocked")
    if on is None or wait is None or blocked is None:
        return None
    return TimeSplit(on, wait, blocked)


def _cause_of(d: Mapping[str, object]) -> InputCauseFigures | None:
    cause = one_of(d.get("input_cause"), INPUT_CAUSES)
    if cause is None:
        return None
    contention = d.get("input_contention")
    return InputCauseFigures(
        cause=cause,
        time_split=_time_split_of(d),
        producers=_str(d, "input_producers"),
        contention=contention if isinstance(contention, bool) else False,
        cpu_cores=_num(d, "input_cpu_cores") or 0.0,
        usable_cores=_int(d, "input_usable_cores") or 1,
        parallelism=_int(d, "input_parallelism"),
        cpu_utilization=_num(d, "input_cpu_utilization") or 0.0,
        source=one_of(d.get("input_cause_source"), INPUT_CAUSE_SOURCES) or "tree",
        cores=_int(d, "cores") or 1,
        others_cores=_num(d, "others_cores"),
        neighbours=_neighbours_of(d),
        wait_cpu_cores=_num(d, "wait_cpu_cores"),
        iowait_percent=_num(d, "iowait_percent"),
    )


def _oversubscription_of(d: Mapping[str, object]) -> Oversubscription | None:
    if not _has(d, "runnable_threads", "oversubscribed_by"):
        return None
    return Oversubscription(
        runnable_threads=_num(d, "runnable_threads") or 0.0,
        cores_busy=_num(d, "cores_busy") or 0.0,
        cores=_int(d, "cores") or 1,
        threads_waiting=_num(d, "threads_waiting") or 0.0,
        intra_op_threads=_int(d, "intra_op_threads"),
        oversubscribed_by=one_of(d.get("oversubscribed_by"), OVERSUBSCRIBED_BY) or "unknown",
        others_cores=_num(d, "others_cores"),
        neighbours=_neighbours_of(d),
    )


def _measured_of(d: Mapping[str, object]) -> tuple[Measured, ...] | None:
    raw = d.get("measured")
    if not isinstance(raw, list):
        return None
    found = (Measured.from_json(m) for m in raw if isinstance(m, dict))
    return tuple(m for m in found if m is not None)


def _process_of(kind: VerdictKind, d: Mapping[str, object]) -> ProcessVerdictEvidence:
    # the groups every process verdict may carry (Any: each is typed where it is read above)
    shared: dict[str, Any] = {
        "load": _load(d),
        "phase": one_of(d.get("phase"), PHASES),
        "steps": _steps_of(d),
        "gpu_steps": _gpu_steps_of(d),
        "steps_reason": _str(d, "steps_reason"),
        "stacks": _stacks_of(d),
        "input_speedup_bound": _num(d, "input_speedup_bound"),
        "input_cause": _cause_of(d),
        "measured": _measured_of(d),
        "failure": Failure(_str(d, "workload_error")) if "workload_error" in d else None,
    }
    draft = ProcessEvidence(**shared)
    if kind == "compute-bound":
        return as_kind(ComputeBoundEvidence, draft, device=one_of(d.get("device"), DEVICES))
    if kind == "gpu-underutilized":
        cause = one_of(d.get("cause"), GPU_CAUSES)
        idle = None
        if cause is not None:
            idle = GpuIdle(cause, _num(d, "gpu_memory_reserved_fraction"), _int(d, "alloc_retries"))
        return as_kind(GpuUnderutilizedEvidence, draft, gpu_idle=idle)
    if kind == "memory-pressure":
        used = _num(d, "memory_used_fraction")
        return as_kind(MemoryPressureEvidence, draft, memory_used_fraction=used)
    if kind == "cpu-oversubscribed":
        return as_kind(OversubscribedEvidence, draft, oversubscription=_oversubscription_of(d))
    if kind == "input-bound":
        return as_kind(InputBoundEvidence, draft)
    if kind == "python-overhead":
        return as_kind(PythonOverheadEvidence, draft)
    if kind == "idle":
        return as_kind(IdleEvidence, draft)
    return as_kind(UnknownEvidence, draft)


def _job_of(d: Mapping[str, object]) -> JobFigures:
    measured = d.get("collective_wait_measured")
    return JobFigures(
        ranks=_int(d, "ranks") or 0,
        step_s=_num(d, "step_s") or 0.0,
        steps_per_s=_num(d, "steps_per_s") or 0.0,
        collective_wait_measured=measured if isinstance(measured, bool) else False,
        others_collective_wait_fraction=_num(d, "others_collective_wait_fraction"),
    )


def _straggler_of(d: Mapping[str, object]) -> StragglerEvidence:
    kept = d.get("job_verdict")
    job_verdict = None
    if isinstance(kept, dict):
        job_verdict = JobVerdict(
            one_of(kept.get("kind"), VERDICT_KINDS) or "unknown", str(kept.get("headline") or "")
        )
    return StragglerEvidence(
        job=_job_of(d),
        rank=_int(d, "rank") or 0,
        local_rank=_int(d, "local_rank"),
        node=str(d.get("node") or ""),
        pid=_int(d, "pid") or 0,
        verdict=one_of(d.get("verdict"), VERDICT_KINDS),
        cause=_str(d, "cause"),
        rank_headline=str(d.get("rank_headline") or ""),
        gap_s=_num(d, "gap_s") or 0.0,
        steps_per_s_if_matched=_num(d, "steps_per_s_if_matched") or 0.0,
        speedup_if_matched=_num(d, "speedup_if_matched") or 0.0,
        job_verdict=job_verdict,
    )


def parse_evidence(kind: VerdictKind, raw: object) -> VerdictEvidence:
    """A ``kind`` verdict's evidence read back from its JSON (none, or not an object: no
    figures)."""
    if not isinstance(raw, dict) or not raw:
        return NO_EVIDENCE
    d: Mapping[str, object] = raw
    if kind == "straggler":
        return _straggler_of(d)
    if kind == "balanced":
        return BalancedEvidence(_job_of(d), _num(d, "spread_fraction") or 0.0)
    return _process_of(kind, d)
