"""The numbers behind a verdict, typed per verdict kind (``Verdict.evidence``).

A process's verdict (``analysis.verdicts.judge``) carries ``ProcessEvidence``: one subclass per
kind, each with the groups of figures the rule that reached it read (``load``, the steps', the
stacks', the input cause's, ...; None: that rule read none). A distributed job's cross-rank
verdict (``analysis.ranks``) carries ``StragglerEvidence`` or ``BalancedEvidence``.

Their JSON (``verdict.evidence`` of ``record --json``, of a stored verdict marker) is written
and read back by ``datamodel.evidence_json`` alone; the field comments name its keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeAlias, TypeVar

from sofa_top.agent.toggles import Toggle, toggle_name, toggle_of
from sofa_top.datamodel.literals import one_of
from sofa_top.datamodel.neighbours import Neighbour
from sofa_top.datamodel.verdict_kinds import (
    MEASURED_EFFECTS,
    BusySource,
    Device,
    GpuCause,
    InputCauseKind,
    InputCauseSource,
    MeasuredEffect,
    OversubscribedBy,
    Phase,
    VerdictKind,
)


@dataclass(frozen=True, slots=True)
class TimeSplit:
    """Where the input producers' time went, as the scheduler accounted it (fractions that add
    up to 1): on a CPU, runnable but waiting for one, and asleep or blocked (storage, the
    network, a lock)."""

    on_cpu: float
    cpu_wait: float
    blocked: float

    def as_json(self) -> dict[str, float]:
        """``verdict.evidence.input_time_split``."""
        return {
            "on_cpu": round(self.on_cpu, 3),
            "cpu_wait": round(self.cpu_wait, 3),
            "blocked": round(self.blocked, 3),
        }


@dataclass(frozen=True, slots=True)
class Measured:
    """What a comparison measured for one toggle against the baseline (``compare``, or the
    optimizer panel): the verdict then carries it and withdraws advice it contradicts."""

    toggle: Toggle
    effect: MeasuredEffect
    speedup: float | None  # median over the baseline's median
    low: float | None = None  # the speedup's interval (run spread over the baseline's)
    high: float | None = None
    parallelism: int | None = None  # the prefetch parallelism it ran at
    threads: int | None = None  # the thread count it ran at
    reason: str = ""  # not-applied: why
    change: str = ""  # the code change that keeps what it measured (compare's ``changes``)

    @property
    def name(self) -> str:
        """The toggle as people read it (``depth-first``)."""
        return toggle_name(self.toggle)

    @property
    def text(self) -> str:
        """``measured: prefetch x3.63 at parallelism 16`` (how the verdict quotes it)."""
        if self.effect == "not-applied" or self.speedup is None:
            return f"measured: {self.name} did not apply ({self.reason or 'nothing to change'})"
        at = ""
        if self.parallelism is not None:
            at = f" at parallelism {self.parallelism}"
        elif self.threads is not None:
            at = f" at {self.threads} thread{'s' if self.threads != 1 else ''}"
        spread = ""
        if self.low is not None and self.high is not None:
            spread = f" ({self.low:.2f}-{self.high:.2f})"
        word = {"faster": "", "slower": ": slower", "unclear": ": no clear difference"}.get(
            self.effect, ""
        )
        return f"measured: {self.name} x{self.speedup:.2f}{at}{spread}{word}"

    def as_json(self) -> dict[str, object]:
        """A ``measured`` event's data (and ``verdict.evidence.measured``' items)."""
        return {
            "toggle": self.name,
            "effect": self.effect,
            "speedup": self.speedup,
            "low": self.low,
            "high": self.high,
            "parallelism": self.parallelism,
            "threads": self.threads,
            "reason": self.reason,
            "change": self.change,
            "text": self.text,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> Measured | None:
        """The inverse of ``as_json``; None when ``d`` is not one."""
        t = d.get("toggle")
        toggle = toggle_of(t) if isinstance(t, str) else None
        effect = one_of(d.get("effect"), MEASURED_EFFECTS)
        if toggle is None or effect is None:
            return None

        def num(key: str) -> float | None:
            v = d.get(key)
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

        def count(key: str) -> int | None:
            v = d.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

        return cls(
            toggle, effect, num("speedup"), num("low"), num("high"), count("parallelism"),
            count("threads"), str(d.get("reason") or ""), str(d.get("change") or ""),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Load:
    """What the machine's cores and GPU did in the window, whatever the verdict."""

    cpu_saturation: float | None  # the tree's CPU over the cores it may use, 0..1
    gpu_util_percent: float | None  # the busiest GPU's utilization (NVML)
    others_cores: float | None  # cores other processes kept busy (measured)


@dataclass(frozen=True, slots=True)
class StepFigures:
    """The judged phase's steps, from a host clock (the agent's fetches or model calls)."""

    input_fraction: float | None  # input wait over step time (None: the clock cannot see it)
    steps: int
    median_step_s: float | None
    p90_step_s: float | None
    p99_step_s: float | None
    bottleneck_stage: str | None  # the pipeline's slowest stage, when it reports one
    compute_split: Mapping[str, float] | None  # forward/backward/optimizer/collective
    host_split: Mapping[str, float] | None  # model-call steps: the host time's classes
    call_setup_share: float | None
    step_source: str | None  # the main clock
    step_sources: Mapping[str, int]  # steps per clock, most first
    input_wait_measured: bool  # whether the main clock times the input wait
    step_note: str | None  # how the clock's steps are measured, when not one fetch each


@dataclass(frozen=True, slots=True)
class KernelWindow:
    """The agent's CUDA profiler window, per step (JSON: its keys as they are named here)."""

    kernels_per_step: float
    median_kernel_us: float | None
    launch_gap_fraction: float | None
    host_gap_fraction: float | None
    h2d_fraction: float | None
    h2d_mib_per_step: float
    pageable_copies_per_step: float
    blocking_copies_per_step: float
    syncs_per_step: float
    window_steps: int


@dataclass(frozen=True, slots=True)
class GpuStepFigures:
    """The judged phase's steps of a CUDA loop (JSON: ``device`` is ``gpu``)."""

    gpu_busy_fraction: float
    gpu_busy_source: BusySource
    input_fraction: float
    steps: int
    median_step_s: float | None
    bottleneck_stage: str | None
    gpu_name: str | None
    window: KernelWindow | None  # None: no profiler window yet (its keys are absent)


@dataclass(frozen=True, slots=True)
class StackShares:
    """The loop thread's stack samples: input, compute and (a verdict from stacks alone,
    JSON ``source: stacks``) plain Python shares."""

    input_share: float
    compute_share: float
    python_share: float | None = None  # None: read beside a clock that cannot time input


@dataclass(frozen=True, slots=True)
class InputCauseFigures:
    """Why the input stage is slow, with its numbers (JSON: ``input_*`` and the rest)."""

    cause: InputCauseKind  # input_cause
    time_split: TimeSplit | None  # input_time_split (schedstat only)
    producers: str | None  # input_producers
    contention: bool  # input_contention
    cpu_cores: float  # input_cpu_cores
    usable_cores: int  # input_usable_cores
    parallelism: int | None  # input_parallelism
    cpu_utilization: float  # input_cpu_utilization
    source: InputCauseSource  # input_cause_source
    cores: int
    others_cores: float | None
    neighbours: tuple[Neighbour, ...] | None
    wait_cpu_cores: float | None  # all the tree's CPU during the waits
    iowait_percent: float | None


@dataclass(frozen=True, slots=True)
class Oversubscription:
    """A tree whose threads want more cores than it gets (``cpu-oversubscribed``)."""

    runnable_threads: float
    cores_busy: float
    cores: int
    threads_waiting: float
    intra_op_threads: int | None
    oversubscribed_by: OversubscribedBy
    others_cores: float | None
    neighbours: tuple[Neighbour, ...] | None


@dataclass(frozen=True, slots=True)
class GpuIdle:
    """Why an underused GPU idles (a CUDA loop's ``gpu-underutilized``; JSON ``cause``)."""

    cause: GpuCause
    memory_reserved_fraction: float | None = None  # gpu_memory_reserved_fraction ...
    alloc_retries: int | None = None  # ... and these two only near the card's memory


@dataclass(frozen=True, slots=True)
class Failure:
    """The workload failed (JSON ``workload_error``: its last error line, or null)."""

    error: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessEvidence:
    """What a process's verdict read: each group is None where its rule read none."""

    load: Load | None = None  # None only for a workload that died before its loop
    phase: Phase | None = None  # the phase the steps judged are of
    steps: StepFigures | None = None
    gpu_steps: GpuStepFigures | None = None
    steps_reason: str | None = None  # why the verdict is not from steps
    stacks: StackShares | None = None
    input_speedup_bound: float | None = None  # a minor input share's 1/(1-f)
    input_cause: InputCauseFigures | None = None
    measured: tuple[Measured, ...] | None = None  # what comparisons measured (quoted)
    failure: Failure | None = None

    @property
    def input_fraction(self) -> float | None:
        """The input share of the judged steps (host or CUDA clock); None: not from steps."""
        if self.gpu_steps is not None:
            return self.gpu_steps.input_fraction
        return None if self.steps is None else self.steps.input_fraction

    @property
    def bottleneck_stage(self) -> str | None:
        if self.gpu_steps is not None:
            return self.gpu_steps.bottleneck_stage
        return None if self.steps is None else self.steps.bottleneck_stage


@dataclass(frozen=True, slots=True, kw_only=True)
class InputBoundEvidence(ProcessEvidence):
    """The loop waits for its input (steps, CUDA steps or stacks; ``input_cause``: why)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ComputeBoundEvidence(ProcessEvidence):
    """The model's compute dominates the step (or the loop thread's samples)."""

    device: Device | None = None  # the busy device (from steps), None from stacks alone


@dataclass(frozen=True, slots=True, kw_only=True)
class PythonOverheadEvidence(ProcessEvidence):
    """The loop thread runs plain Python (stacks)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuUnderutilizedEvidence(ProcessEvidence):
    """A GPU idles while the loop computes on the host or launches kernels."""

    gpu_idle: GpuIdle | None = None  # a CUDA loop's; None: NVML read the GPU below the bar


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryPressureEvidence(ProcessEvidence):
    """RAM is nearly full."""

    memory_used_fraction: float | None = None  # used / total RAM (None: an older file's)


@dataclass(frozen=True, slots=True, kw_only=True)
class OversubscribedEvidence(ProcessEvidence):
    """The tree's threads want more cores than it gets."""

    oversubscription: Oversubscription | None = None  # None: an older file's


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleEvidence(ProcessEvidence):
    """The tree does nearly nothing (``load`` only)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownEvidence(ProcessEvidence):
    """Nothing decided: ``steps_reason`` says what is missing."""


@dataclass(frozen=True, slots=True)
class JobFigures:
    """A distributed job's step, over its ranks with steps."""

    ranks: int
    step_s: float
    steps_per_s: float
    collective_wait_measured: bool
    others_collective_wait_fraction: float | None


@dataclass(frozen=True, slots=True)
class BalancedEvidence:
    """A job's ranks within ``STRAGGLER_GAP`` of each other."""

    job: JobFigures
    spread_fraction: float  # slowest less fastest rank's own time, over the step


@dataclass(frozen=True, slots=True)
class JobVerdict:
    """The job's own (averaged) verdict, kept beside the straggler it would contradict."""

    kind: VerdictKind
    headline: str


@dataclass(frozen=True, slots=True)
class StragglerEvidence:
    """One rank holds the others back: who, its own verdict and what it costs the job."""

    job: JobFigures
    rank: int
    local_rank: int | None
    node: str
    pid: int
    verdict: VerdictKind | None  # the straggler's own verdict
    cause: str | None  # its input cause when input-bound, else its verdict's kind
    rank_headline: str
    gap_s: float
    steps_per_s_if_matched: float
    speedup_if_matched: float
    job_verdict: JobVerdict | None = None
    run: str | None = None  # the cluster view's run it is of (never written)


@dataclass(frozen=True, slots=True)
class BareEvidence:
    """No figures, at most the input cause a verdict names: a rank's verdict as another
    sofa-top exported it (metrics), a verdict made or read back without evidence."""

    input_cause: str | None = None


ProcessVerdictEvidence: TypeAlias = (
    InputBoundEvidence
    | ComputeBoundEvidence
    | PythonOverheadEvidence
    | GpuUnderutilizedEvidence
    | MemoryPressureEvidence
    | OversubscribedEvidence
    | IdleEvidence
    | UnknownEvidence
)
VerdictEvidence: TypeAlias = (
    ProcessVerdictEvidence | StragglerEvidence | BalancedEvidence | BareEvidence
)

NO_EVIDENCE = BareEvidence()  # a verdict that read nothing

E = TypeVar("E", bound=ProcessEvidence)


def as_kind(cls: type[E], draft: ProcessEvidence, **kind_fields: Any) -> E:
    """``draft``'s shared groups as a ``cls`` verdict's evidence, with that kind's own fields
    (a rule gathers the shared groups before it knows which kind it reaches; ``kind_fields``
    may also set a shared one)."""
    shared = {f.name: getattr(draft, f.name) for f in fields(ProcessEvidence)}
    return cls(**{**shared, **kind_fields})


def input_cause_of(evidence: VerdictEvidence) -> str | None:
    """The input cause a verdict names (None: none)."""
    if isinstance(evidence, BareEvidence):
        return evidence.input_cause
    if isinstance(evidence, ProcessEvidence) and evidence.input_cause is not None:
        return evidence.input_cause.cause
    return None
