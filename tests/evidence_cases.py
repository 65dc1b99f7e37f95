"""Verdicts of every kind, by every rule that reaches one, built from evidence made here (pure
functions): ``test_evidence_json`` checks their JSON against what the string-keyed evidence
wrote (``tests/data/verdict_evidence_judged.json``, written by ``python tests/evidence_cases.py``
before evidence was typed; write it again only for a change of the JSON that is meant, and
additions only)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from sofa_top.analysis.causes import Neighbours
from sofa_top.analysis.measured import apply_measured
from sofa_top.analysis.ranks import RankEvidence, cross_rank_verdict, headline_verdict, rank_stat
from sofa_top.analysis.steps import RunFacts
from sofa_top.analysis.verdicts import Evidence, judge
from sofa_top.datamodel.ranks import RankId, RankStat
from sofa_top.datamodel.samples import (
    CudaSample,
    CudaWindow,
    GpuDevice,
    GpuSample,
    Neighbour,
    PipelineSample,
    PipelineStage,
    StepSample,
    SystemSample,
    ThreadTimes,
)
from sofa_top.datamodel.snapshot import StackSummary, ThreadStat
from sofa_top.datamodel.verdict import Measured, Verdict

GOLDEN = Path(__file__).parent / "data" / "verdict_evidence_judged.json"
HOG = Neighbours(1.0, (Neighbour(4242, "python", 1.0), Neighbour(7, "kworker", 0.01)))
SERIAL_TF = PipelineSample(
    0.0,
    "tf.data",
    (
        PipelineStage("Range", "source", None, None, None),
        PipelineStage("Map", "map", 1, None, 0.01, is_bottleneck=True),
        PipelineStage("Batch", "batch", None, None, None),
    ),
)
LOADER0 = PipelineSample(0.0, "torch", (PipelineStage("Images", "source", 1, None, None),))


def _steps(n: int, wait: float, source: str = "tf-eager", busy: float = 0.0) -> list[StepSample]:
    return [
        StepSample(float(i), i, i - 0.1, 0.1, 0.1 * wait, source, 8, 1, 0.1 * wait * busy)
        for i in range(n)
    ]


def _loop_steps(run: float, queue: float) -> list[StepSample]:
    return [
        StepSample(
            float(i), i, i - 0.1, 0.1, 0.08, "torch-dataloader", 8, 1, 0.08 * run,
            wait_run_s=0.08 * run, wait_queue_s=0.08 * queue,
        )
        for i in range(20)
    ]  # fmt: skip


def _stacks(samples: int = 500, **split: float) -> StackSummary:
    full = {"input": 0.0, "compute": 0.0, "python": 0.0, "idle": 0.0, **split}
    return StackSummary(
        0.0, 5.0, samples, (), full, (ThreadStat(1, 1, "MainThread", samples, full),), 100.0, 2.0
    )


def _gpu_steps(busy: float, wait: float = 0.0) -> list[StepSample]:
    return [
        StepSample(
            ts=100.0 + (i + 1) * 0.01, step=i, start=100.0 + i * 0.01, duration_s=0.01,
            input_wait_s=wait * 0.01, source="torch-dataloader", batch_size=16, pid=1,
            gpu_span_s=0.01, gpu_busy_s=busy * 0.01, gpu_busy_source="profiler",
        )
        for i in range(20)
    ]  # fmt: skip


def _window(**kw: float) -> CudaWindow:
    base: dict[str, float] = {
        "steps": 5, "wall_s": 0.05, "busy_s": 0.0, "input_wait_s": 0.0, "kernels": 50,
        "kernel_s": 0.0, "median_kernel_s": 1e-4, "short_gaps": 0, "short_gap_s": 0.0,
        "long_gaps": 0, "long_gap_s": 0.0, "h2d_copies": 0, "h2d_s": 0.0, "h2d_bytes": 0,
        "pageable_h2d": 0, "pageable_h2d_s": 0.0, "blocking_h2d": 0, "d2h_copies": 0,
        "d2h_s": 0.0, "launches": 50, "syncs": 5, "conv_kernels": 0, "bf16_kernels": 0,
    }  # fmt: skip
    base.update(kw)
    return CudaWindow(**base)  # type: ignore[arg-type]


def _cuda(w: CudaWindow | None, reserved: float = 0.3, retries: int = 0) -> list[CudaSample]:
    total = 80 * 1024**3

    def one(ts: float, r: int, win: CudaWindow | None) -> CudaSample:
        return CudaSample(
            ts=ts, pid=1, device=0, device_name="NVIDIA H200", bf16_supported=True,
            capability="9.0", mem_allocated=int(reserved * total * 0.9),
            mem_reserved=int(reserved * total), mem_total=total,
            mem_free=int((1 - reserved) * total), alloc_retries=r, ooms=0, window=win,
        )  # fmt: skip

    return [one(100.0, 0, None), one(100.2, retries, w)]


def _gpu(util: float) -> GpuSample:
    return GpuSample(1.0, "ok", (GpuDevice(0, "H200", util, 1, 2, 600.0, 60.0, 1980.0, 1),))


def _rank(rank: int, wait: float, coll: float) -> RankStat:
    steps = [
        StepSample(
            100.0 + (i + 1) * 0.04, i, 100.0 + i * 0.04, 0.04, 0.04 * wait, "torch-dataloader",
            8, 100 + rank, wait_cpu_s=0.0, collective_s=0.04 * coll,
        )
        for i in range(30)
    ]  # fmt: skip
    ident = RankId(rank, 4, rank, 4, 0, "h")
    return rank_stat(RankEvidence(ident, 100 + rank, steps, 5.0, 0.0), Evidence(cpu_count=2))


def _pool(runnable: float, nb: Neighbours | None) -> Evidence:
    sched = {"tree": ThreadTimes(0.9, 0.9, int(runnable)), "threads": ThreadTimes(0.4, 0.4, 3)}
    return Evidence(
        steps=_steps(20, 0.0, "torch-optimizer"), cpu_count=2, runnable_threads=runnable,
        tree_cpu=90.0, sched=sched, neighbours=nb,  # type: ignore[arg-type]
    )  # fmt: skip


def _straggler() -> Verdict | None:
    ranks = [_rank(0, 0.01, 0.96), _rank(1, 0.01, 0.96), _rank(2, 0.77, 0.2), _rank(3, 0.01, 0.96)]
    job = judge(Evidence(steps=_steps(20, 0.3), cpu_count=2))
    return headline_verdict(job, cross_rank_verdict(ranks))


FAILED = RunFacts("launch", True, exit_code=1, workload_error="ValueError: bad shape")
WON = Measured("prefetch", "faster", 3.63, 3.1, 4.0, parallelism=16, change="DataLoader(16)")
LOST = Measured("threads", "slower", 0.55, 0.5, 0.6, threads=1)
FULL_RAM = SystemSample(0.0, (50.0,), 50.0, 3.0, 99, 100, 0, 0)

CASES: dict[str, Callable[[], Verdict | None]] = {
    "steps input-bound, agent cause": lambda: judge(
        Evidence(steps=_steps(20, 0.8, busy=0.95), pipeline=SERIAL_TF, cpu_count=2)
    ),
    "steps input-bound, schedstat cause": lambda: judge(
        Evidence(steps=_loop_steps(0.02, 0.2), pipeline=LOADER0, cpu_count=2, neighbours=HOG)
    ),
    "steps compute-bound": lambda: judge(Evidence(steps=_steps(20, 0.0), tree_cpu=100.0)),
    "steps compute-bound, minor input": lambda: judge(
        Evidence(steps=_steps(20, 0.10, busy=0.5), pipeline=SERIAL_TF, cpu_count=2, tree_cpu=80.0)
    ),
    "steps gpu-underutilized (nvml)": lambda: judge(
        Evidence(steps=_steps(20, 0.0), gpu=_gpu(30.0), cpu_count=2)
    ),
    "steps compute-bound, nvml gpu": lambda: judge(
        Evidence(steps=_steps(20, 0.0), gpu=_gpu(97.0), cpu_count=2)
    ),
    "steps oversubscribed": lambda: judge(_pool(8.0, HOG)),
    "steps oversubscribed, runnable": lambda: judge(
        Evidence(steps=_steps(20, 0.0), cpu_count=2, runnable_threads=1.86, tree_cpu=40.0)
    ),
    "untimed clock compute-bound": lambda: judge(
        Evidence(
            steps=_steps(20, 0.0, "torch-backward"),
            stacks=_stacks(compute=0.9, python=0.1),
            facts=RunFacts("launch", True),
        )
    ),
    "untimed clock unknown": lambda: judge(
        Evidence(steps=_steps(20, 0.0, "torch-backward"), facts=RunFacts("launch", True))
    ),
    "stacks input-bound": lambda: judge(
        Evidence(stacks=_stacks(input=0.7, compute=0.3), tree_cpu=150.0, cpu_count=2)
    ),
    "stacks compute-bound": lambda: judge(Evidence(stacks=_stacks(compute=0.8), tree_cpu=90.0)),
    "stacks python-overhead": lambda: judge(Evidence(stacks=_stacks(python=0.8), tree_cpu=90.0)),
    "stacks unknown": lambda: judge(
        Evidence(stacks=_stacks(input=0.1, compute=0.3, python=0.3), tree_cpu=90.0)
    ),
    "stacks too few": lambda: judge(Evidence(stacks=_stacks(5, compute=0.8), tree_cpu=90.0)),
    "idle": lambda: judge(Evidence(stacks=_stacks(idle=1.0), tree_cpu=0.5)),
    "nothing": lambda: judge(Evidence()),
    "memory-pressure": lambda: judge(Evidence(system=FULL_RAM, steps=_steps(10, 0.0))),
    "failed before its loop": lambda: judge(Evidence(facts=FAILED)),
    "failed after its loop": lambda: judge(Evidence(steps=_steps(20, 0.0), facts=FAILED)),
    "measured": lambda: judge(
        Evidence(
            steps=_steps(20, 0.8, busy=0.95), pipeline=SERIAL_TF, cpu_count=2, measured=(LOST, WON)
        )
    ),
    "measured after": lambda: apply_measured(judge(Evidence(steps=_steps(20, 0.0))), [WON]),
    "gpu input-bound": lambda: judge(
        Evidence(steps=_gpu_steps(0.30, 0.2), cuda=_cuda(_window(busy_s=0.015)), cpu_count=8)
    ),
    "gpu compute-bound": lambda: judge(
        Evidence(steps=_gpu_steps(0.95), cuda=_cuda(_window(busy_s=0.0475)), cpu_count=8)
    ),
    "gpu compute-bound, no window": lambda: judge(
        Evidence(steps=_gpu_steps(0.95), cuda=_cuda(None), cpu_count=8)
    ),
    "gpu underutilized, launch": lambda: judge(
        Evidence(
            steps=_gpu_steps(0.4),
            cuda=_cuda(_window(busy_s=0.02, short_gap_s=0.02, short_gaps=40)),
            cpu_count=8,
        )
    ),
    "gpu underutilized, memory": lambda: judge(
        Evidence(steps=_gpu_steps(0.4), cuda=_cuda(_window(busy_s=0.02), 0.97, 3), cpu_count=8)
    ),
    "straggler": _straggler,
    "balanced": lambda: cross_rank_verdict([_rank(0, 0.01, 0.1), _rank(1, 0.01, 0.1)]),
    "rank's own verdict": lambda: _rank(2, 0.77, 0.2).verdict,
    "eval phase": lambda: judge(
        Evidence(steps=[replace(s, source="keras-evaluate") for s in _steps(20, 0.3)])
    ),
}


def judged() -> dict[str, str]:
    """Each case's verdict as JSON text (key order as written)."""
    out = {}
    for name, case in CASES.items():
        v = case()
        out[name] = json.dumps(None if v is None else v.as_json())
    return out


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(judged(), indent=1) + "\n")
    sys.stdout.write(f"wrote {GOLDEN}\n")
