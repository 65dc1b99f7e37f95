"""The GPU parts of ``record --json``: NVML's readings per device and the agent's CUDA view."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from sofa_top.datamodel.samples import CudaSample, throttle_names


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def _max(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def gpu_json(
    pts: dict[str, list[float | None]], errors: dict[str, list[str]]
) -> dict[str, Any] | None:
    """``gpu``: per device the NVML readings over the session; ``errors`` says, per reading
    that failed at least once, the first reason (a lost GPU, NotSupported, ...)."""
    gpus = sorted({int(n.split(".")[1]) for n in pts if n.startswith("gpu.")})
    if not gpus:
        return None
    devices = []
    for i in gpus:

        def get(field: str, i: int = i) -> list[float | None]:
            return pts.get(f"gpu.{i}.{field}", [])

        masks = {int(v) for v in get("throttle") if v is not None}
        reasons = sorted({name for m in masks for name in throttle_names(m)})
        prefix = f"gpu.{i}."
        devices.append(
            {
                "index": i,
                "util_mean_percent": _mean(get("util")),
                "mem_max_bytes": _max(get("mem_used")),
                "power_mean_w": _mean(get("power")),
                "power_max_w": _max(get("power")),
                "power_limit_w": _max(get("power_limit")),
                "temp_max_c": _max(get("temp")),
                "sm_clock_mean_mhz": _mean(get("sm_clock")),
                "mem_clock_mean_mhz": _mean(get("mem_clock")),
                "target_mem_max_bytes": _max(get("target_mem")),
                "target_util_mean_percent": _mean(get("target_util")),
                # NVML's PIDs were another namespace's: the target_* numbers are the device's
                "target_from_device": any(v for v in get("target_from_device") if v),
                "throttle_reasons": reasons if masks else None,
                "mig": None if not get("mig") else any(v for v in get("mig") if v),
                "errors": {
                    name[len(prefix) :]: errs[0]
                    for name, errs in sorted(errors.items())
                    if name.startswith(prefix) and errs
                },
            }
        )
    return {"devices": devices}


def cuda_json(cuda: Sequence[CudaSample], errors: Sequence[str]) -> dict[str, Any] | None:
    """``cuda``: what the agent read of CUDA in the workload (None: it never saw CUDA)."""
    if not cuda and not errors:
        return None
    last = cuda[-1] if cuda else None
    windows = [c.window for c in cuda if c.window is not None]
    fractions = [w.busy_fraction for w in windows if w.busy_fraction is not None]
    retries = [c.alloc_retries for c in cuda if c.alloc_retries is not None]
    ooms = [c.ooms for c in cuda if c.ooms is not None]
    reading_errors = [c.error for c in cuda if c.error]
    return {
        "device": last.device if last else None,
        "device_name": last.device_name if last else None,
        "capability": last.capability if last else None,
        "bf16_supported": last.bf16_supported if last else None,
        "mem_total_bytes": last.mem_total if last else None,
        "mem_reserved_max_bytes": max(
            (c.mem_reserved for c in cuda if c.mem_reserved is not None), default=None
        ),
        "alloc_retries": retries[-1] - retries[0] if len(retries) > 1 else 0,
        "ooms": max(ooms) if ooms else None,
        "windows": len(windows),
        "busy_fraction": statistics.fmean(fractions) if fractions else None,
        "last_window": asdict(windows[-1]) if windows else None,
        "errors": list(dict.fromkeys([*errors, *reading_errors])),
    }
