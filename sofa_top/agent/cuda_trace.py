"""One profiler window's CUDA activity, from a ``torch.profiler`` Chrome trace (stdlib only).

``torch.profiler`` (Kineto over CUPTI) writes GPU work as complete events (``"ph": "X"``, times in
microseconds) of categories ``kernel``, ``gpu_memcpy`` and ``gpu_memset``, named after what they
did (a copy is ``"Memcpy HtoD (Pageable -> Device)"``: direction, then source and destination
memory), and the host's CUDA API calls as ``cuda_runtime`` / ``cuda_driver`` events; a GPU event
and the call that launched it share ``args.correlation``. That format is what HTA and Perfetto
read too. ``window_stats`` turns one window of it into the numbers of a ``CudaWindow``.

What counts:

- **busy**: the union of the intervals in which the device ran a kernel (on any stream), at most
  the window's wall time. Copies and memsets run on the copy engines while the SMs wait: they
  are counted apart (HTA's "non-compute" time), not as busy;
- **gaps**: the idle intervals between two GPU activities (kernels, copies, memsets). A gap
  shorter than ``SHORT_GAP_S`` is the GPU waiting for the host to launch the next kernel
  (Python dispatch of one eager op takes ~10-50 us); a longer one is the host doing something
  else (waiting for input, its own computation, a synchronisation);
- **pageable copies**: host-to-device copies from memory that is not pinned (a ``DataLoader``
  without ``pin_memory``), which the driver stages through a bounce buffer, synchronously;
- **blocking copies**: host-to-device copies the host waited for: a synchronous ``cudaMemcpy``,
  or a ``cudaMemcpyAsync`` followed on the same thread by a stream/device synchronisation (what
  ``tensor.to(device)`` without ``non_blocking=True`` does).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

SHORT_GAP_S = 100e-6
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_CATEGORIES = ("cuda_runtime", "cuda_driver")
SYNC_CALLS = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
)
LAUNCH_CALLS = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaLaunchCooperativeKernel",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaGraphLaunch",
    "cuGraphLaunch",
)
_CONV = re.compile(r"conv|cudnn|fprop|dgrad|wgrad|implicit_gemm", re.IGNORECASE)
_HALF = re.compile(r"bf16|bfloat16|fp16|f16|half|h884|h1688|h16816", re.IGNORECASE)


def _num(v: object) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):  # some Kineto versions write ts as a string (for precision)
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _events(trace: object) -> Sequence[Mapping[str, Any]]:
    raw = trace.get("traceEvents") if isinstance(trace, Mapping) else trace
    if not isinstance(raw, list):
        return []
    return [e for e in raw if isinstance(e, Mapping) and e.get("ph") == "X"]


def _args(e: Mapping[str, Any]) -> Mapping[str, Any]:
    a = e.get("args")
    return a if isinstance(a, Mapping) else {}


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _blocking(copies: list[Mapping[str, Any]], host: list[Mapping[str, Any]]) -> int:
    """Host-to-device copies whose launching call blocked the host (see the module doc)."""
    by_thread: dict[object, list[tuple[float, str]]] = {}
    call_of: dict[object, tuple[object, float, str]] = {}
    for e in host:
        ts = _num(e.get("ts"))
        if ts is None:
            continue
        name = str(e.get("name", ""))
        by_thread.setdefault(e.get("tid"), []).append((ts, name))
        corr = _args(e).get("correlation")
        if corr is not None:
            call_of[corr] = (e.get("tid"), ts, name)
    for calls in by_thread.values():
        calls.sort()
    n = 0
    for c in copies:
        call = call_of.get(_args(c).get("correlation"))
        if call is None:
            continue
        tid, ts, name = call
        if name in ("cudaMemcpy", "cuMemcpyHtoD", "cuMemcpyHtoD_v2"):
            n += 1
            continue
        later = [nm for t, nm in by_thread.get(tid, []) if t > ts]
        if later and later[0] in SYNC_CALLS:
            n += 1
    return n


def window_stats(
    trace: object, steps: int, wall_s: float, input_wait_s: float, device: int | None = None
) -> dict[str, Any]:
    """The ``CudaWindow`` fields (as a JSON object) of one profiler window's trace.

    ``steps``, ``wall_s`` and ``input_wait_s`` are the host's view of the window (its whole
    steps, their wall time and the loop's input wait in them); ``device`` keeps only that
    device's GPU events (None: all)."""
    events = _events(trace)
    gpu: list[Mapping[str, Any]] = []
    host: list[Mapping[str, Any]] = []
    for e in events:
        cat = e.get("cat")
        if cat in GPU_CATEGORIES:
            dev = _args(e).get("device")
            if device is None or dev is None or dev == device:
                gpu.append(e)
        elif cat in HOST_CATEGORIES:
            host.append(e)
    intervals: list[tuple[float, float]] = []  # every GPU activity
    compute: list[tuple[float, float]] = []  # kernels
    kernels: list[float] = []
    names: list[str] = []
    h2d: list[Mapping[str, Any]] = []
    h2d_s = d2h_s = pageable_s = 0.0
    h2d_bytes = pageable = d2h = 0
    for e in gpu:
        ts, dur = _num(e.get("ts")), _num(e.get("dur"))
        if ts is None or dur is None or dur < 0:
            continue
        intervals.append((ts, ts + dur))
        name = str(e.get("name", ""))
        secs = dur / 1e6
        if e.get("cat") == "kernel":
            compute.append((ts, ts + dur))
            kernels.append(secs)
            names.append(name)
        elif e.get("cat") == "gpu_memcpy":
            if "HtoD" in name:
                h2d.append(e)
                h2d_s += secs
                h2d_bytes += int(_num(_args(e).get("bytes")) or 0)
                if "Pageable" in name:
                    pageable += 1
                    pageable_s += secs
            elif "DtoH" in name:
                d2h += 1
                d2h_s += secs
    merged = _merge(intervals)
    busy = sum(end - start for start, end in _merge(compute)) / 1e6
    active = sum(end - start for start, end in merged) / 1e6
    gaps = [(merged[i + 1][0] - merged[i][1]) / 1e6 for i in range(len(merged) - 1)]
    short = [g for g in gaps if g < SHORT_GAP_S]
    long_ = [g for g in gaps if g >= SHORT_GAP_S]
    wall = max(wall_s, 0.0)
    busy = min(busy, wall) if wall > 0 else busy
    idle = max(0.0, wall - active)
    gap_total = sum(gaps)
    # GPU time runs a little past the host's window (work queued before its end): keep the
    # parts within the wall time, in proportion
    scale = min(1.0, idle / gap_total) if gap_total > 0 else 1.0
    host_names = [str(e.get("name", "")) for e in host]
    return {
        "steps": steps,
        "wall_s": wall,
        "busy_s": busy,
        "input_wait_s": max(0.0, input_wait_s),
        "kernels": len(kernels),
        "kernel_s": sum(kernels),
        "median_kernel_s": statistics.median(kernels) if kernels else None,
        "short_gaps": len(short),
        "short_gap_s": sum(short) * scale,
        "long_gaps": len(long_),
        "long_gap_s": sum(long_) * scale,
        "h2d_copies": len(h2d),
        "h2d_s": h2d_s,
        "h2d_bytes": h2d_bytes,
        "pageable_h2d": pageable,
        "pageable_h2d_s": pageable_s,
        "blocking_h2d": _blocking(h2d, host),
        "d2h_copies": d2h,
        "d2h_s": d2h_s,
        "launches": sum(1 for n in host_names if n.startswith(LAUNCH_CALLS)),
        "syncs": sum(1 for n in host_names if n in SYNC_CALLS),
        "conv_kernels": sum(1 for n in names if _CONV.search(n)),
        "bf16_kernels": sum(1 for n in names if _HALF.search(n)),
    }
