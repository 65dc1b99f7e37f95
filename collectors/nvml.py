"""NVML behind a small protocol: ``NvmlBackend`` (the calls the GPU collector makes) and
``PynvmlBackend``, the real NVML through nvidia-ml-py (imported on ``init``, so that a missing
package is the collector's "no-driver" state rather than an import error of sofa-top)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from sofa_top.datamodel.samples import MigInstance
from sofa_top.datamodel.units import Bytes, Pid

MiB = 1024 * 1024


class GpuProcess(NamedTuple):
    """One entry of NVML's running-process lists."""

    pid: Pid
    used_memory: Bytes | None  # None where NVML cannot tell (NVML_VALUE_NOT_AVAILABLE)


class NvmlBackend(Protocol):
    """The NVML calls the GPU collector uses. Every method may raise (``pynvml.NVMLError`` and
    subclasses for the real library); the collector turns that into data."""

    def init(self) -> None:
        """nvmlInit; raises ImportError when pynvml is missing."""
        ...

    def shutdown(self) -> None: ...

    def driver_version(self) -> str: ...

    def device_count(self) -> int: ...

    def handle(self, index: int) -> object: ...

    def name(self, handle: object) -> str: ...

    def utilization(self, handle: object) -> int:
        """GPU utilization in percent (nvmlDeviceGetUtilizationRates().gpu)."""
        ...

    def memory_info(self, handle: object) -> tuple[Bytes, Bytes]:
        """(used, total) bytes."""
        ...

    def power_usage_mw(self, handle: object) -> int: ...

    def temperature_c(self, handle: object) -> int: ...

    def sm_clock_mhz(self, handle: object) -> int: ...

    def compute_processes(self, handle: object) -> list[GpuProcess]: ...

    def graphics_processes(self, handle: object) -> list[GpuProcess]: ...

    def process_utilization(self, handle: object, since_us: int) -> list[tuple[Pid, int, int]]:
        """(pid, SM %, timestamp us) samples since ``since_us``; NotFound when there are none."""
        ...

    def power_limit_mw(self, handle: object) -> int: ...

    def mem_clock_mhz(self, handle: object) -> int: ...

    def sm_clock_max_mhz(self, handle: object) -> int: ...

    def throttle_reasons(self, handle: object) -> int:
        """NVML's clock event reasons bitmask."""
        ...

    def mig_mode(self, handle: object) -> bool:
        """Whether MIG mode is on (NotSupported on cards without MIG)."""
        ...

    def mig_devices(self, handle: object) -> list[MigInstance]: ...


class PynvmlBackend:
    """The real NVML through pynvml; pynvml is imported in ``init`` so that a missing package
    becomes the "no-driver" state instead of an import error of sofa-top."""

    def __init__(self) -> None:
        self._nvml: Any = None

    def _lib(self) -> Any:
        if self._nvml is None:
            raise RuntimeError("NVML is not initialised")
        return self._nvml

    def init(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml

    def shutdown(self) -> None:
        nvml, self._nvml = self._nvml, None
        if nvml is not None:
            nvml.nvmlShutdown()

    def driver_version(self) -> str:
        return _text(self._lib().nvmlSystemGetDriverVersion())

    def device_count(self) -> int:
        return int(self._lib().nvmlDeviceGetCount())

    def handle(self, index: int) -> object:
        return self._lib().nvmlDeviceGetHandleByIndex(index)

    def name(self, handle: object) -> str:
        return _text(self._lib().nvmlDeviceGetName(handle))

    def utilization(self, handle: object) -> int:
        return int(self._lib().nvmlDeviceGetUtilizationRates(handle).gpu)

    def memory_info(self, handle: object) -> tuple[Bytes, Bytes]:
        info = self._lib().nvmlDeviceGetMemoryInfo(handle)
        return int(info.used), int(info.total)

    def power_usage_mw(self, handle: object) -> int:
        return int(self._lib().nvmlDeviceGetPowerUsage(handle))

    def temperature_c(self, handle: object) -> int:
        nvml = self._lib()
        return int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))

    def sm_clock_mhz(self, handle: object) -> int:
        nvml = self._lib()
        return int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))

    def compute_processes(self, handle: object) -> list[GpuProcess]:
        return _procs(self._lib().nvmlDeviceGetComputeRunningProcesses(handle))

    def graphics_processes(self, handle: object) -> list[GpuProcess]:
        return _procs(self._lib().nvmlDeviceGetGraphicsRunningProcesses(handle))

    def process_utilization(self, handle: object, since_us: int) -> list[tuple[Pid, int, int]]:
        samples = self._lib().nvmlDeviceGetProcessUtilization(handle, since_us)
        return [(int(x.pid), int(x.smUtil), int(x.timeStamp)) for x in samples]

    def power_limit_mw(self, handle: object) -> int:
        return int(self._lib().nvmlDeviceGetEnforcedPowerLimit(handle))

    def mem_clock_mhz(self, handle: object) -> int:
        nvml = self._lib()
        return int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM))

    def sm_clock_max_mhz(self, handle: object) -> int:
        nvml = self._lib()
        return int(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))

    def throttle_reasons(self, handle: object) -> int:
        nvml = self._lib()
        fn = (
            getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        return int(fn(handle))

    def mig_mode(self, handle: object) -> bool:
        current, _pending = self._lib().nvmlDeviceGetMigMode(handle)
        return bool(current)

    def mig_devices(self, handle: object) -> list[MigInstance]:
        nvml = self._lib()
        out = []
        for i in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            except nvml.NVMLError_NotFound:
                continue  # an empty slot
            info = nvml.nvmlDeviceGetMemoryInfo(mig)
            name = _text(nvml.nvmlDeviceGetName(mig))
            out.append(MigInstance(i, name, int(info.used), int(info.total)))
        return out


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _procs(entries: Sequence[Any]) -> list[GpuProcess]:
    out = []
    for e in entries:
        used = e.usedGpuMemory
        out.append(GpuProcess(int(e.pid), None if used is None else int(used)))
    return out
