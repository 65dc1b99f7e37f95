"""GPU loops: how busy the GPU is in each step, and why it idles. Pure functions; the verdicts
(``verdicts.py``) turn them into ``compute-bound`` / ``input-bound`` / ``gpu-underutilized``.

The measure. **GPU-busy fraction** of a step = the time the GPU ran the step's kernels (the
union of their intervals: overlapping streams count once; copies and memsets, which leave the
SMs idle, are counted apart) / the step's wall time. It is measured exactly in the agent's
profiler windows (``torch.profiler``, a few steps every ~30 s); between windows a step is
credited with the last window's busy time per step, capped by its own GPU span (CUDA events at
its boundaries). Over a verdict's window the GPU is:

- **busy** (>= ``GPU_BUSY_HIGH``): GPU compute-bound;
- **waiting for input** when the loop's input wait is high (>= the input-bound bars of
  ``verdicts``) and explains most of the GPU's idle time;
- otherwise **underused**, for a cause read from the last profiler window: ``memory-pressure``
  (the caching allocator retried cudaMalloc, or it holds nearly all the card's memory),
  ``copy`` (host-to-device copies take >= ``COPY_FRACTION`` of the wall time), ``launch`` (the
  GPU idles mostly in gaps shorter than ``cuda_trace.SHORT_GAP_S`` between kernels: it waits
  for Python to dispatch the next one) or ``cpu`` (it idles in longer gaps: the host does other
  work between kernels).

Without a profiler window yet, NVML's utilisation (the target's processes, else the device)
stands in for the busy fraction, and the cause is ``cpu`` at low confidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sofa_top.datamodel.samples import CudaSample, CudaWindow, GpuSample, StepSample
from sofa_top.datamodel.verdict import GpuCause
from sofa_top.datamodel.verdict_evidence import KernelWindow
from sofa_top.datamodel.verdict_kinds import BusySource as BusySource  # one table

GPU_BUSY_HIGH = 0.80  # the GPU runs kernels >= 80% of the step: it is the bottleneck
GPU_BUSY_LOW = 0.50  # below half: badly underused (severity high)
INPUT_IDLE_SHARE = 0.50  # input wait explaining >= half of the GPU's idle time: input-bound
COPY_FRACTION = 0.15  # host-to-device copies taking >= 15% of the wall time: copy-bound
GPU_MEMORY_FULL = 0.95  # the allocator reserves >= 95% of the card (or < 5% is free)


@dataclass(frozen=True, slots=True)
class GpuLoad:
    """How busy the GPU was over a window of steps."""

    busy_fraction: float
    source: BusySource
    input_fraction: float
    window: CudaWindow | None  # the latest profiler window
    cuda: CudaSample | None  # the latest CUDA reading
    alloc_retries: int  # cudaMalloc retries during the evidence window


def _latest(cuda: Sequence[CudaSample]) -> tuple[CudaSample | None, CudaWindow | None]:
    last = cuda[-1] if cuda else None
    window = next((c.window for c in reversed(cuda) if c.window is not None), None)
    return last, window


def _nvml_busy(gpu: GpuSample | None, device: int) -> float | None:
    if gpu is None or gpu.status != "ok":
        return None
    d = next((d for d in gpu.devices if d.index == device), None)
    if d is None:
        return None
    util = d.target_util if d.target_util is not None else d.util
    return None if util is None else min(1.0, util / 100.0)


def gpu_load(
    steps: Sequence[StepSample], cuda: Sequence[CudaSample], gpu: GpuSample | None
) -> GpuLoad | None:
    """The GPU's load over ``steps``; None when the loop does not use CUDA (no readings)."""
    if not cuda or not steps:
        return None
    last, window = _latest(cuda)
    total = sum(s.duration_s for s in steps)
    if total <= 0:
        return None
    input_fraction = sum(s.input_wait_s for s in steps) / total
    busy: float | None = None
    source: BusySource = "profiler"
    timed = [s for s in steps if s.gpu_busy_s is not None]
    if timed:
        busy = sum(s.gpu_busy_s or 0.0 for s in timed) / max(
            1e-12, sum(s.duration_s for s in timed)
        )
        source = "profiler" if all(s.gpu_busy_source == "profiler" for s in timed) else "estimate"
    elif window is not None and window.busy_fraction is not None:
        busy = window.busy_fraction
    else:
        busy = _nvml_busy(gpu, last.device if last else 0)
        source = "nvml"
    if busy is None:
        return None
    retries = [c.alloc_retries for c in cuda if c.alloc_retries is not None]
    return GpuLoad(
        busy_fraction=min(1.0, max(0.0, busy)),
        source=source,
        input_fraction=input_fraction,
        window=window,
        cuda=last,
        alloc_retries=(retries[-1] - retries[0]) if len(retries) > 1 else 0,
    )


def waits_for_input(load: GpuLoad, moderate: float, high: float) -> bool:
    """The GPU idles waiting for the next batch (``moderate``/``high``: the input bars)."""
    if load.busy_fraction >= GPU_BUSY_HIGH:
        return False  # the wait overlaps GPU work: the GPU is the limit
    f = load.input_fraction
    idle = 1.0 - load.busy_fraction
    return f >= high or (f >= moderate and f >= INPUT_IDLE_SHARE * idle)


def memory_pressure(load: GpuLoad) -> float | None:
    """The share of the card the allocator holds, when it says pressure; else None."""
    c = load.cuda
    if c is None or not c.mem_total:
        return None
    held = (c.mem_reserved or 0) / c.mem_total
    free = None if c.mem_free is None else c.mem_free / c.mem_total
    if load.alloc_retries > 0 or held >= GPU_MEMORY_FULL or (free is not None and free < 0.05):
        return held
    return None


def gpu_cause(load: GpuLoad) -> GpuCause:
    """Why an underused GPU idles (see the module doc)."""
    if memory_pressure(load) is not None:
        return "memory-pressure"
    w = load.window
    if w is None or w.wall_s <= 0:
        return "cpu"
    if w.h2d_s / w.wall_s >= COPY_FRACTION:
        return "copy"
    # the loop's input wait shows as long gaps too: they are not the host's own work
    host_gaps = max(0.0, w.long_gap_s - w.input_wait_s)
    return "launch" if w.short_gap_s >= host_gaps else "cpu"


def window_evidence(w: CudaWindow | None) -> KernelWindow | None:
    """The profiler window's numbers, per step, for a verdict's evidence."""
    if w is None:
        return None
    n = max(1, w.steps)
    return KernelWindow(
        kernels_per_step=round(w.kernels / n, 1),
        median_kernel_us=None if w.median_kernel_s is None else round(w.median_kernel_s * 1e6, 1),
        launch_gap_fraction=round(w.short_gap_s / w.wall_s, 3) if w.wall_s > 0 else None,
        host_gap_fraction=round(max(0.0, w.long_gap_s - w.input_wait_s) / w.wall_s, 3)
        if w.wall_s > 0
        else None,
        h2d_fraction=round(w.h2d_s / w.wall_s, 3) if w.wall_s > 0 else None,
        h2d_mib_per_step=round(w.h2d_bytes / n / 2**20, 2),
        pageable_copies_per_step=round(w.pageable_h2d / n, 2),
        blocking_copies_per_step=round(w.blocking_h2d / n, 2),
        syncs_per_step=round(w.syncs / n, 2),
        window_steps=w.steps,
    )
