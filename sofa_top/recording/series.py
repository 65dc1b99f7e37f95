"""Numeric series: the flat (name, value, error) points every sample contributes.

The store and the in-memory rings are both fed from ``points_of``, so the two can never
disagree about what a series means. Series names are documented here and nowhere else:

- ``tree.cpu`` (% of one core, summed over the target tree), ``tree.rss`` (bytes),
  ``tree.read_rate`` / ``tree.write_rate`` (bytes/s), ``tree.threads``, ``tree.runnable``
  (threads running or waiting for a core, counted about twice a second)
- ``sched.<group>.on_cpu`` / ``sched.<group>.cpu_wait`` (cores: seconds per second on a CPU,
  and runnable but waiting for one, from the scheduler's accounting) and
  ``sched.<group>.threads``, for the groups ``loop`` (the target's main thread), ``threads``
  (its other threads), ``workers`` (its input worker processes; ``sched.workers.procs``
  counts them) and ``tree``; ``sched.tree.io_blocked`` (threads in disk I/O at the reading);
  about twice a second, with ``tree.runnable``
- ``proc.<pid>.cpu`` / ``proc.<pid>.rss`` (per process of the tree; store only)
- ``sys.cpu`` (0..100, mean of cores), ``sys.cpu.<i>``, ``sys.iowait``, ``sys.mem_used``,
  ``sys.swap_used``
- ``gpu.<i>.util`` (%), ``gpu.<i>.mem_used`` (bytes), ``gpu.<i>.power`` (W), ``gpu.<i>.temp``
  (C), ``gpu.<i>.sm_clock`` (MHz), ``gpu.<i>.target_mem`` (bytes); where NVML reads them:
  ``gpu.<i>.target_util`` (% SM, the target tree's processes), ``gpu.<i>.target_from_device``
  (1: NVML's process ids are not this namespace's, the device totals stand in for the target),
  ``gpu.<i>.mem_clock`` (MHz), ``gpu.<i>.power_limit`` (W), ``gpu.<i>.throttle`` (NVML's clock
  event bitmask, ``datamodel.samples.THROTTLE_REASONS``), ``gpu.<i>.mig`` (1: MIG mode)
- ``step.duration`` / ``step.input_wait`` (s) and ``step.input_fraction`` (0..1), per step;
  ``step.collective_wait`` (s), per step where torch.distributed collectives were timed; CUDA
  loops add ``step.gpu_span`` (s) and ``step.gpu_busy_fraction`` (0..1) when known
- ``stacks.rate`` (Hz) and ``stacks.sampler_cpu`` (%), per stack window
"""

from __future__ import annotations

from sofa_top.datamodel.samples import (
    GpuDevice,
    GpuSample,
    ProcessSample,
    Sample,
    StackWindow,
    StepSample,
    SystemSample,
    TreeSched,
    throttle_mask,
)
from sofa_top.datamodel.units import Timestamp

SeriesPoint = tuple[str, float | None, str | None]

# Rates need the previous cumulative reading of the same series; the caller keeps this state.
RateState = dict[str, tuple[Timestamp, float]]

# Units, one spelling each: the series, the exports and the dashboard compare against these.
PERCENT = "%"
BYTES = "B"
BYTES_PER_S = "B/s"
WATTS = "W"

# The series names read outside this module (the dashboard, the exports).
TREE_CPU = "tree.cpu"
TREE_RSS = "tree.rss"
TREE_READ_RATE = "tree.read_rate"
TREE_WRITE_RATE = "tree.write_rate"
TREE_THREADS = "tree.threads"
SYS_CPU = "sys.cpu"
SYS_IOWAIT = "sys.iowait"
SYS_MEM_USED = "sys.mem_used"
STEP_INPUT_FRACTION = "step.input_fraction"
GPU_UTIL = "util"  # the fields of ``gpu_series``
GPU_MEM_USED = "mem_used"
GPU_POWER = "power"


def gpu_series(index: int, field: str) -> str:
    """The name of one GPU's series: ``gpu_series(0, GPU_POWER)`` -> ``gpu.0.power``."""
    return f"gpu.{index}.{field}"


UNITS: dict[str, str] = {
    "cpu": PERCENT,
    "rss": BYTES,
    "read_rate": BYTES_PER_S,
    "write_rate": BYTES_PER_S,
    "threads": "",
    "runnable": "",
    "on_cpu": "cores",
    "cpu_wait": "cores",
    "procs": "",
    "io_blocked": "",
    "iowait": PERCENT,
    "mem_used": BYTES,
    "swap_used": BYTES,
    "util": PERCENT,
    "power": WATTS,
    "temp": "C",
    "sm_clock": "MHz",
    "target_mem": BYTES,
    "target_util": PERCENT,
    "target_from_device": "",
    "mem_clock": "MHz",
    "power_limit": WATTS,
    "throttle": "",
    "mig": "",
    "gpu_span": "s",
    "gpu_busy_fraction": "",
    "duration": "s",
    "input_wait": "s",
    "input_fraction": "",
    "collective_wait": "s",
    "rate": "Hz",
    "sampler_cpu": PERCENT,
}


def unit_of(series: str) -> str:
    """The unit of a series, from the last part of its name (e.g. ``gpu.0.power`` -> ``W``)."""
    last = series.rsplit(".", 1)[-1]
    if last.isdigit():  # sys.cpu.<i>
        last = series.split(".")[1]
    return UNITS.get(last, "")


def _rate(state: RateState, key: str, ts: Timestamp, total: float | None) -> float | None:
    if total is None:
        return None
    prev = state.get(key)
    state[key] = (ts, total)
    if prev is None or ts <= prev[0]:
        return None
    # A process leaving the tree lowers the cumulative total; a negative rate would be a lie.
    return max(0.0, (total - prev[1]) / (ts - prev[0]))


def points_of(sample: Sample, rates: RateState) -> list[SeriesPoint]:
    """Numeric points carried by ``sample`` (empty for samples without numbers)."""
    if isinstance(sample, ProcessSample):
        err = sample.error
        pts: list[SeriesPoint] = [
            (TREE_CPU, sample.tree_cpu_percent, err),
            (TREE_RSS, _num(sample.tree_rss), err),
            (TREE_THREADS, _num(sample.tree_threads), err),
            (
                TREE_READ_RATE,
                _rate(rates, "tree.read", sample.ts, _num(sample.tree_read_bytes)),
                err,
            ),
            (
                TREE_WRITE_RATE,
                _rate(rates, "tree.write", sample.ts, _num(sample.tree_write_bytes)),
                err,
            ),
        ]
        if sample.tree_runnable is not None:  # counted about twice a second
            pts.append(("tree.runnable", float(sample.tree_runnable), err))
        if sample.sched is not None:
            pts.extend(sched_points(sample.sched))
        for p in sample.procs:
            if p.alive:
                pts.append((f"proc.{p.pid}.cpu", p.cpu_percent, p.error))
                pts.append((f"proc.{p.pid}.rss", _num(p.rss), p.error))
        return pts
    if isinstance(sample, SystemSample):
        pts = [
            (SYS_CPU, sample.cpu_total, sample.error),
            (SYS_IOWAIT, sample.iowait, sample.error),
            (SYS_MEM_USED, float(sample.mem_used), sample.error),
            ("sys.swap_used", float(sample.swap_used), sample.error),
        ]
        pts.extend((f"sys.cpu.{i}", v, sample.error) for i, v in enumerate(sample.cpu_per_core))
        return pts
    if isinstance(sample, GpuSample):
        pts = []
        for d in sample.devices:
            errs = dict(d.errors)
            for field, value in (
                ("util", d.util),
                ("mem_used", _num(d.mem_used)),
                ("power", d.power_w),
                ("temp", d.temp_c),
                ("sm_clock", d.sm_clock_mhz),
                ("target_mem", _num(d.target_mem)),
            ):
                pts.append((gpu_series(d.index, field), value, errs.get(field)))
            pts.extend(_gpu_extra(d, errs))
        return pts
    if isinstance(sample, StepSample):
        frac = sample.input_wait_s / sample.duration_s if sample.duration_s > 0 else None
        pts = [
            ("step.duration", sample.duration_s, None),
            ("step.input_wait", sample.input_wait_s, None),
            (STEP_INPUT_FRACTION, frac, None),
        ]
        if sample.collective_s is not None:
            pts.append(("step.collective_wait", sample.collective_s, None))
        if sample.gpu_span_s is not None:
            pts.append(("step.gpu_span", sample.gpu_span_s, None))
        if sample.gpu_busy_fraction is not None:
            pts.append(("step.gpu_busy_fraction", sample.gpu_busy_fraction, None))
        return pts
    if isinstance(sample, StackWindow):
        return [
            ("stacks.rate", sample.rate_hz, sample.error),
            ("stacks.sampler_cpu", sample.sampler_cpu, sample.error),
        ]
    return []


def _gpu_extra(d: GpuDevice, errs: dict[str, str]) -> list[SeriesPoint]:
    """The readings NVML gives on some devices only: a series once it has a value or an error."""
    values: tuple[tuple[str, float | None], ...] = (
        ("target_util", d.target_util),
        (
            "target_from_device",
            None if d.target_scope is None else float(d.target_scope == "device"),
        ),
        ("mem_clock", d.mem_clock_mhz),
        ("power_limit", d.power_limit_w),
        ("throttle", None if d.throttle is None else float(throttle_mask(d.throttle))),
        ("mig", None if d.mig is None else float(d.mig)),
    )
    return [
        (gpu_series(d.index, field), value, errs.get(field))
        for field, value in values
        if value is not None or field in errs
    ]


def _num(v: int | float | None) -> float | None:
    return None if v is None else float(v)


def sched_points(sched: TreeSched) -> list[SeriesPoint]:
    """The ``sched.*`` points of one reading of the scheduler's accounting."""
    if sched.error is not None:
        return [("sched.tree.on_cpu", None, sched.error)]
    pts: list[SeriesPoint] = []
    for group, t in sched.groups:
        pts += [
            (f"sched.{group}.on_cpu", t.on_cpu, None),
            (f"sched.{group}.cpu_wait", t.cpu_wait, None),
            (f"sched.{group}.threads", float(t.threads), None),
        ]
        if group == "workers":
            pts.append(("sched.workers.procs", float(t.procs), None))
        if group == "tree":
            pts.append(("sched.tree.io_blocked", float(t.io_blocked), None))
    return pts
