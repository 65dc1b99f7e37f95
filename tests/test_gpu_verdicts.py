"""GPU verdicts (``analysis/gpu.py`` and the GPU branch of ``verdicts.judge``): both sides of
each threshold, on steps and CUDA readings built here (pure functions: no GPU, no processes)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sofa_top.agent.toggles import toggle_name
from sofa_top.analysis import gpu as g
from sofa_top.analysis.verdicts import HIGH_INPUT_FRACTION, MODERATE_INPUT_FRACTION, Evidence, judge
from sofa_top.datamodel.samples import (
    CudaSample,
    CudaWindow,
    GpuDevice,
    GpuSample,
    PipelineSample,
    PipelineStage,
    StepSample,
)
from sofa_top.datamodel.verdict import Verdict

GIB = 1024**3
STEP = 0.010


def steps(
    busy: float, wait: float = 0.0, n: int = 20, source: str = "estimate"
) -> list[StepSample]:
    """``n`` 10 ms steps, the GPU busy ``busy`` of each, the loop waiting ``wait`` of each."""
    return [
        StepSample(
            ts=100.0 + (i + 1) * STEP, step=i, start=100.0 + i * STEP, duration_s=STEP,
            input_wait_s=wait * STEP, source="torch-dataloader", batch_size=16, pid=1,
            gpu_span_s=STEP, gpu_busy_s=busy * STEP, gpu_busy_source=source,  # type: ignore[arg-type]
        )
        for i in range(n)
    ]  # fmt: skip


def window(**kw: float) -> CudaWindow:
    """A profiler window of 5 steps of 10 ms (every gap and copy 0 unless given)."""
    base = {
        "steps": 5, "wall_s": 5 * STEP, "busy_s": 0.0, "input_wait_s": 0.0, "kernels": 50,
        "kernel_s": 0.0, "median_kernel_s": 1e-4, "short_gaps": 0, "short_gap_s": 0.0,
        "long_gaps": 0, "long_gap_s": 0.0, "h2d_copies": 0, "h2d_s": 0.0, "h2d_bytes": 0,
        "pageable_h2d": 0, "pageable_h2d_s": 0.0, "blocking_h2d": 0, "d2h_copies": 0,
        "d2h_s": 0.0, "launches": 50, "syncs": 5, "conv_kernels": 0, "bf16_kernels": 0,
    }  # fmt: skip
    base.update(kw)
    return CudaWindow(**base)  # type: ignore[arg-type]


def cuda(
    w: CudaWindow | None = None,
    reserved: float = 0.3,
    retries: tuple[int, int] = (0, 0),
    bf16: bool | None = True,
) -> list[CudaSample]:
    total = 80 * GIB

    def one(ts: float, r: int, win: CudaWindow | None) -> CudaSample:
        return CudaSample(
            ts=ts, pid=1, device=0, device_name="NVIDIA H200", bf16_supported=bf16,
            capability="9.0", mem_allocated=int(reserved * total * 0.9),
            mem_reserved=int(reserved * total), mem_total=total,
            mem_free=int((1 - reserved) * total), alloc_retries=r, ooms=0, window=win,
        )  # fmt: skip

    return [one(100.0, retries[0], None), one(100.2, retries[1], w)]


def verdict(
    busy: float,
    w: CudaWindow | None = None,
    wait: float = 0.0,
    pipeline: PipelineSample | None = None,
    **kw: object,
) -> Verdict:
    return judge(
        Evidence(
            steps=steps(busy, wait), cuda=cuda(w, **kw), cpu_count=8, pipeline=pipeline,  # type: ignore[arg-type]
            frameworks=("torch",),
        )
    )  # fmt: skip


def toggles(v: Verdict) -> list[str | None]:
    return [r.toggle and toggle_name(r.toggle) for r in v.recommendations]


@pytest.mark.parametrize(("busy", "kind"), [(0.81, "compute-bound"), (0.79, "gpu-underutilized")])
def test_compute_bound_needs_the_gpu_busy_80_percent(busy: float, kind: str) -> None:
    v = verdict(busy, window(busy_s=busy * 5 * STEP))
    assert v.kind == kind
    assert (
        v.as_json()["evidence"]["device"] == "gpu"
        and v.as_json()["evidence"]["gpu_busy_fraction"] == busy
    )


def test_gpu_compute_bound_recommends_bf16_and_channels_last_for_convolutions() -> None:
    v = verdict(0.95, window(busy_s=0.0475, conv_kernels=20))
    assert v.kind == "compute-bound" and "NVIDIA H200" in v.headline
    assert toggles(v) == ["bf16", None, "xla"]
    assert "channels_last" in v.recommendations[1].text
    # a card without bf16: float16 with a GradScaler, no bf16 toggle
    no_bf16 = verdict(0.95, window(busy_s=0.0475), bf16=False)
    assert "float16" in no_bf16.recommendations[0].text and "bf16" not in toggles(no_bf16)
    # kernels already in 16 bits: no autocast advice
    half = verdict(0.95, window(busy_s=0.0475, kernels=50, bf16_kernels=40))
    assert toggles(half) == ["xla"]


@pytest.mark.parametrize(
    ("wait", "busy", "kind", "severity"),
    [
        (HIGH_INPUT_FRACTION, 0.30, "input-bound", "high"),
        # a moderate wait that explains at least half of the GPU's idle time
        (0.06, 0.89 - 0.06, "compute-bound", None),  # busy >= 80%: the wait overlaps GPU work
        (0.12, 0.78, "input-bound", "moderate"),  # idle 22%: the wait explains 12/22
        (0.08, 0.78, "gpu-underutilized", "moderate"),  # idle 22%: 8/22 < half
        (MODERATE_INPUT_FRACTION - 0.01, 0.10, "gpu-underutilized", "high"),
    ],
)
def test_input_bound_means_the_gpu_idles_waiting_for_the_batch(
    wait: float, busy: float, kind: str, severity: str | None
) -> None:
    v = verdict(busy, window(busy_s=busy * 5 * STEP, long_gap_s=0.01), wait=wait)
    assert (v.kind, v.severity) == (kind, severity)


def test_input_bound_on_gpu_recommends_pinned_copies_unless_pinned() -> None:
    loader = PipelineSample(
        1.0, "torch", (PipelineStage("ImageFolder", "source", 1, None, None, True),)
    )
    v = verdict(0.2, window(busy_s=0.01), wait=0.5, pipeline=loader)
    assert v.kind == "input-bound" and v.as_json()["evidence"]["device"] == "gpu"
    assert toggles(v)[0] == "prefetch" and toggles(v)[-1] == "pin-memory"
    pinned = replace(
        loader, stages=(*loader.stages, PipelineStage("pin_memory", "other", 1, None, None))
    )
    assert "pin-memory" not in toggles(verdict(0.2, window(busy_s=0.01), wait=0.5, pipeline=pinned))


@pytest.mark.parametrize(("h2d", "cause"), [(0.16, "copy"), (0.14, "cpu")])
def test_copy_bound_takes_15_percent_of_the_time_in_copies(h2d: float, cause: str) -> None:
    w = window(busy_s=0.01, h2d_s=h2d * 5 * STEP, pageable_h2d=5, long_gap_s=0.02)
    v = verdict(0.2, w)
    assert v.kind == "gpu-underutilized" and v.as_json()["evidence"]["cause"] == cause
    if cause == "copy":
        assert toggles(v)[0] == "pin-memory"


@pytest.mark.parametrize(
    ("short", "long_", "wait", "cause"),
    [
        (0.020, 0.019, 0.0, "launch"),  # most idle time in gaps under 100 us
        (0.019, 0.020, 0.0, "cpu"),
        # long gaps that are the loop's input wait are not the host's own work
        (0.015, 0.025, 0.012, "launch"),
    ],
)
def test_launch_bound_idles_in_short_gaps_between_kernels(
    short: float, long_: float, wait: float, cause: str
) -> None:
    w = window(busy_s=0.01, kernels=5000, short_gaps=4990, short_gap_s=short, long_gaps=5,
               long_gap_s=long_, input_wait_s=wait)  # fmt: skip
    v = verdict(0.2, w)
    assert v.kind == "gpu-underutilized" and v.as_json()["evidence"]["cause"] == cause
    if cause == "launch":
        assert toggles(v)[0] == "compile-mode"
        assert "reduce-overhead" in v.recommendations[0].text
        assert v.as_json()["evidence"]["kernels_per_step"] == 1000.0


@pytest.mark.parametrize(
    ("reserved", "retries", "cause"),
    [(0.96, (0, 0), "memory-pressure"), (0.94, (0, 0), "launch"), (0.5, (3, 7), "memory-pressure")],
)
def test_memory_pressure_is_the_allocator_near_the_card_or_retrying(
    reserved: float, retries: tuple[int, int], cause: str
) -> None:
    w = window(busy_s=0.01, short_gap_s=0.03)
    v = verdict(0.2, w, reserved=reserved, retries=retries)
    assert v.as_json()["evidence"]["cause"] == cause
    if cause == "memory-pressure":
        assert v.as_json()["evidence"]["alloc_retries"] == retries[1] - retries[0]
        assert "expandable_segments" in " ".join(r.text for r in v.recommendations)


def test_before_any_window_nvml_stands_in_at_low_confidence() -> None:
    gpu = GpuSample(
        1.0, "ok", (GpuDevice(0, "H200", 30.0, 1, 2, 100.0, 40.0, 1980.0, 1, target_util=25.0),)
    )
    plain = [replace(s, gpu_busy_s=None, gpu_busy_source=None) for s in steps(0.0)]
    load = g.gpu_load(plain, cuda(None), gpu)
    assert load is not None and (load.source, load.busy_fraction) == ("nvml", 0.25)
    v = judge(Evidence(steps=plain, cuda=cuda(None), gpu=gpu, frameworks=("torch",)))
    assert v.kind == "gpu-underutilized" and v.as_json()["evidence"]["cause"] == "cpu"
    assert v.confidence < 0.7
    assert v.as_json()["evidence"]["gpu_busy_source"] == "nvml"


def test_a_cpu_loop_is_judged_as_before() -> None:
    plain = [replace(s, gpu_busy_s=None, gpu_span_s=None, gpu_busy_source=None) for s in steps(0)]
    assert g.gpu_load(plain, (), None) is None
    v = judge(Evidence(steps=plain))
    assert v.kind == "compute-bound" and v.as_json()["evidence"]["device"] == "cpu"
    # NVML alone says the GPU is the busy device
    busy_gpu = GpuSample(1.0, "ok", (GpuDevice(0, "H200", 97.0, 1, 2, 600.0, 60.0, 1980.0, 1),))
    assert judge(Evidence(steps=plain, gpu=busy_gpu)).as_json()["evidence"]["device"] == "gpu"


def test_measured_steps_say_profiler() -> None:
    load = g.gpu_load(steps(0.5, source="profiler"), cuda(window(busy_s=0.025)), None)
    assert load is not None and load.source == "profiler"
    mixed = steps(0.5, source="profiler")[:10] + steps(0.5)[10:]
    load = g.gpu_load(mixed, cuda(window(busy_s=0.025)), None)
    assert load is not None and load.source == "estimate"
