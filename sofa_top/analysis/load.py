"""What the workload's cores and the machine's GPU did (``evidence.load``): one derivation, for
a verdict's evidence and for the screen before the first verdict."""

from __future__ import annotations

from sofa_top.datamodel.samples import GpuSample
from sofa_top.datamodel.verdict_evidence import Load


def cpu_saturation(tree_cpu: float | None, cores: int) -> float | None:
    """The tree's CPU (percent of one core) over the cores it may use, 0..1, as kept (3 places)."""
    if tree_cpu is None:
        return None
    return round(min(1.0, tree_cpu / (100.0 * max(1, cores))), 3)


def gpu_util(gpu: GpuSample | None) -> float | None:
    """The busiest GPU's utilization (NVML), None without a reading."""
    if gpu is None or gpu.status != "ok":
        return None
    utils = [d.util for d in gpu.devices if d.util is not None]
    return max(utils) if utils else None


def machine_load(
    tree_cpu: float | None, cores: int, gpu: GpuSample | None, others_cores: float | None
) -> Load:
    """The load figures every process verdict carries (``others_cores``: measured, what other
    processes keep busy)."""
    return Load(
        cpu_saturation=cpu_saturation(tree_cpu, cores),
        gpu_util_percent=gpu_util(gpu),
        others_cores=None if others_cores is None else round(others_cores, 3),
    )
