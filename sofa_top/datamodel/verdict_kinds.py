"""The ``Literal`` kinds a verdict and its evidence are made of (``datamodel.verdict`` and
``datamodel.verdict_evidence`` share them; each is read back with ``literals.one_of``)."""

from __future__ import annotations

from typing import Literal, get_args

VerdictKind = Literal[
    "input-bound",
    "compute-bound",
    "python-overhead",
    "gpu-underutilized",
    "memory-pressure",
    "cpu-oversubscribed",
    "idle",
    "unknown",
    # across the ranks of a distributed job (``sofa_top.analysis.ranks``); never a process's own
    "straggler",
    "balanced",
]
VERDICT_KINDS: tuple[VerdictKind, ...] = get_args(VerdictKind)
Severity = Literal["high", "moderate"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
# why the input stage is slow: it computes (``cpu``), it waits on storage/network/locks
# (``latency``), other processes take the cores it needs (``contention``), or a mix
InputCauseKind = Literal["cpu", "latency", "mixed", "contention"]
INPUT_CAUSES: tuple[InputCauseKind, ...] = get_args(InputCauseKind)
# "schedstat": the producers' own threads, as the scheduler accounted them; without it
# "agent" (the process's CPU during each wait) or "tree" (the tree's CPU, no agent)
InputCauseSource = Literal["schedstat", "agent", "tree"]
INPUT_CAUSE_SOURCES: tuple[InputCauseSource, ...] = get_args(InputCauseSource)
# Why a GPU idles (``gpu-underutilized``'s ``evidence.cause``): kernel launches from Python,
# host-device copies, other host work, or the allocator near the card's memory
GpuCause = Literal["launch", "copy", "cpu", "memory-pressure"]
GPU_CAUSES: tuple[GpuCause, ...] = get_args(GpuCause)
# how the GPU's busy fraction was read: the agent's profiler window, its per-step estimate, NVML
BusySource = Literal["profiler", "estimate", "nvml"]
BUSY_SOURCES: tuple[BusySource, ...] = get_args(BusySource)
# whose threads hold the cores a cpu-oversubscribed tree's threads want
OversubscribedBy = Literal["own-pool", "neighbours", "both", "unknown"]
OVERSUBSCRIBED_BY: tuple[OversubscribedBy, ...] = get_args(OversubscribedBy)
MeasuredEffect = Literal["faster", "slower", "unclear", "not-applied"]
MEASURED_EFFECTS: tuple[MeasuredEffect, ...] = get_args(MeasuredEffect)
# the steps' phase a verdict judged (``analysis.steps.Phase``)
Phase = Literal["train", "eval", "inference"]
PHASES: tuple[Phase, ...] = get_args(Phase)
Device = Literal["cpu", "gpu"]
DEVICES: tuple[Device, ...] = get_args(Device)
