"""What a verdict may look at (``analysis.verdicts.judge``'s input): one window of evidence."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sofa_top.analysis.causes import Neighbours, SchedMeans
from sofa_top.analysis.steps import RunFacts
from sofa_top.datamodel.samples import (
    CudaSample,
    GpuSample,
    PipelineSample,
    StepSample,
    SystemSample,
)
from sofa_top.datamodel.snapshot import StackSummary
from sofa_top.datamodel.units import Percent
from sofa_top.datamodel.verdict import Measured
from sofa_top.datamodel.workload import ModelReport


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the verdict may look at; every field may be missing."""

    steps: Sequence[StepSample] = ()
    stacks: StackSummary | None = None
    tree_cpu: Percent | None = None  # % of one core, summed over the tree
    cpu_count: int = 1
    system: SystemSample | None = None
    gpu: GpuSample | None = None
    pipeline: PipelineSample | None = None
    frameworks: tuple[str, ...] = ()  # e.g. ("tensorflow",), from the agent or the stacks
    child_cpu: Percent | None = None  # % of one core used by the tree less the target itself
    cuda: Sequence[CudaSample] = ()  # the agent's CUDA readings (GPU loops), oldest first
    runnable_threads: float | None = None  # mean threads of the tree running or runnable
    model: ModelReport | None = None  # the agent's model and thread-pool report
    facts: RunFacts = field(default_factory=RunFacts)  # mode, agent, exit: for the reasons
    # the scheduler's accounting of the tree's threads over the window, per group
    sched: SchedMeans = field(default_factory=dict)
    neighbours: Neighbours | None = None  # what other processes keep busy, and the busiest
    measured: tuple[Measured, ...] = ()  # what comparisons of this workload measured
    training: bool | None = None  # the session trains (None: judge from ``steps`` alone)
