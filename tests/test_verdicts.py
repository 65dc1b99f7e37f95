"""Verdicts are pure functions: each threshold is checked on both sides."""

from __future__ import annotations

import pytest

from sofa_top.samples import PipelineSample, PipelineStage, StepSample, SystemSample
from sofa_top.snapshot import StackSummary, ThreadStat
from sofa_top.verdicts import (
    HIGH_INPUT_FRACTION,
    MODERATE_INPUT_FRACTION,
    Evidence,
    judge,
)


def _steps(n: int, wait_fraction: float, step_s: float = 0.1) -> list[StepSample]:
    return [
        StepSample(float(i), i, float(i) - step_s, step_s, step_s * wait_fraction, "tf-eager")
        for i in range(n)
    ]


def _stacks(**split: float) -> StackSummary:
    full = {"input": 0.0, "compute": 0.0, "python": 0.0, "idle": 0.0, **split}
    return StackSummary(
        0.0, 5.0, 500, (), full, (ThreadStat(1, 1, "MainThread", 500, full),), 100.0, 2.0
    )


SERIAL_TF = PipelineSample(
    0.0,
    "tf.data",
    (
        PipelineStage("Range", "source", None, None, None),
        PipelineStage("Map", "map", 1, None, 0.01, is_bottleneck=True),
        PipelineStage("Batch", "batch", None, None, None),
    ),
)


@pytest.mark.parametrize(
    "fraction, kind, severity",
    [
        (0.78, "input-bound", "high"),
        (HIGH_INPUT_FRACTION, "input-bound", "high"),
        (HIGH_INPUT_FRACTION - 0.01, "input-bound", "moderate"),
        (MODERATE_INPUT_FRACTION, "input-bound", "moderate"),
        (MODERATE_INPUT_FRACTION - 0.01, "compute-bound", ""),
        (0.0, "compute-bound", ""),
    ],
)
def test_step_thresholds_follow_xprof(fraction: float, kind: str, severity: str) -> None:
    v = judge(Evidence(steps=_steps(20, fraction), tree_cpu=100.0, cpu_count=2))
    assert (v.kind, v.severity) == (kind, severity)
    assert v.evidence["input_fraction"] == pytest.approx(fraction, abs=1e-3)


def test_input_bound_names_the_stage_and_the_fix() -> None:
    v = judge(Evidence(steps=_steps(20, 0.78), pipeline=SERIAL_TF))
    assert v.headline == "input-bound: 78% of each step waits for input in stage Map"
    texts = [r.text for r in v.recommendations]
    assert any("num_parallel_calls=tf.data.AUTOTUNE" in t for t in texts)
    assert "add .prefetch(tf.data.AUTOTUNE) after batch()" in texts
    assert {r.toggle for r in v.recommendations} == {"prefetch"}
    assert v.as_json()["evidence"]["bottleneck_stage"] == "Map"


def test_torch_dataloader_recommendation() -> None:
    p = PipelineSample(0.0, "torch", (PipelineStage("DataLoader", "source", 0, None, None),))
    v = judge(Evidence(steps=_steps(10, 0.5), pipeline=p))
    assert "num_workers" in v.recommendations[0].text


def test_few_steps_fall_back_to_stacks() -> None:
    v = judge(
        Evidence(
            steps=_steps(2, 0.9),
            stacks=_stacks(compute=0.8, python=0.2),
            tree_cpu=180.0,
            cpu_count=2,
        )
    )
    assert v.kind == "compute-bound" and v.evidence["source"] == "stacks"


@pytest.mark.parametrize(
    "split, kind",
    [
        ({"input": 0.6, "compute": 0.4}, "input-bound"),
        ({"input": 0.1, "compute": 0.7, "python": 0.2}, "compute-bound"),
        ({"python": 0.9, "compute": 0.1}, "python-overhead"),
        ({"python": 0.3, "compute": 0.3, "idle": 0.4}, "unknown"),
    ],
)
def test_attach_mode_from_stacks(split: dict[str, float], kind: str) -> None:
    assert judge(Evidence(stacks=_stacks(**split), tree_cpu=90.0)).kind == kind


def test_idle_and_unknown_and_memory() -> None:
    assert judge(Evidence(stacks=_stacks(idle=1.0), tree_cpu=0.5)).kind == "idle"
    unknown = judge(Evidence())
    assert unknown.kind == "unknown" and "launch" in unknown.recommendations[0].text
    sys_full = SystemSample(0.0, (100.0,), 100.0, 0.0, 97, 100, 50, 100)
    assert judge(Evidence(system=sys_full, steps=_steps(10, 0.0))).kind == "memory-pressure"
