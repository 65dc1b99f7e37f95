"""GPU collector over NVML (nvidia-ml-py), behind a small backend protocol (``nvml.py``).

``GpuCollector`` talks to an ``NvmlBackend``: ``PynvmlBackend`` is the real NVML, and
``RecordedNvmlBackend`` replays readings from a JSON recording (tests and demos: CI has no GPU).

No GPU is a state, not an error: when pynvml is missing or NVML cannot initialise, the collector
emits ``GpuSample(status="no-driver"/"no-gpu", message="no NVIDIA GPU: <reason>")`` once, then
again every ``retry_interval`` seconds (retrying NVML each time) rather than at every tick. A
reading that fails mid-run (``GPU is lost``, ``Not Supported`` for power on some cards, ...) makes
that field None and is listed in ``GpuDevice.errors``; everything else keeps going.

Beyond the basic readings, where the device supports them: the target tree's share (memory from
the running-process lists, SM utilisation from ``nvmlDeviceGetProcessUtilization``), the
enforced power limit, memory and maximum SM clocks, the clock event ("throttle") reasons, MIG
mode and its instances. One of these that the device does not support (``Not Supported`` on the
first try) is left out quietly from then on; any other failure is listed in ``errors``.

The target's share needs NVML's process ids to be this PID namespace's. In a container they are
often the host's: when none of the listed processes exists here, the device totals stand in for
the target (``GpuDevice.target_scope == "device"``), and the panes say so.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from sofa_top.collectors.base import Emit
from sofa_top.collectors.nvml import GpuProcess, MiB, NvmlBackend, PynvmlBackend
from sofa_top.collectors.nvml_recorded import RecordedNvmlBackend
from sofa_top.datamodel.samples import GpuDevice, GpuSample, GpuStatus, TargetScope, throttle_names
from sofa_top.datamodel.units import Bytes, Pid, Seconds

__all__ = [
    "GpuCollector",
    "GpuProcess",
    "MiB",
    "NvmlBackend",
    "PynvmlBackend",
    "RecordedNvmlBackend",
    "probe_gpus",
]

# nvmlInit failures that mean "this machine has no usable NVIDIA GPU" rather than a fault.
_ABSENT: dict[str, tuple[GpuStatus, str]] = {
    "NVMLError_LibraryNotFound": ("no-driver", "NVML library not found (no NVIDIA driver)"),
    "NVMLError_DriverNotLoaded": ("no-driver", "NVIDIA driver not loaded"),
    "NVMLError_GpuNotFound": ("no-gpu", "no NVIDIA device found"),
}


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _pid_exists(pid: Pid) -> bool:
    import psutil

    return bool(psutil.pid_exists(pid))


def _not_supported(exc: BaseException) -> bool:
    return type(exc).__name__ == "NVMLError_NotSupported"


class GpuCollector:
    """Samples every NVIDIA GPU every ``interval`` seconds; ``target_pids`` gives the PIDs of
    the target tree (for ``GpuDevice.target_mem`` / ``target_util``); ``pid_visible`` says
    whether a PID NVML lists exists in this namespace (default: psutil)."""

    name = "gpu"

    def __init__(
        self,
        target_pids: Callable[[], set[Pid]],
        interval: Seconds = 0.5,
        backend: NvmlBackend | None = None,
        *,
        retry_interval: Seconds = 10.0,
        pid_visible: Callable[[Pid], bool] | None = None,
    ) -> None:
        self.target_pids = target_pids
        self.interval = interval
        self.retry_interval = retry_interval
        self.backend: NvmlBackend = backend if backend is not None else PynvmlBackend()
        # A replay says which of its PIDs exist in its world (``RecordedNvmlBackend.pid_visible``):
        # this machine's processes have nothing to do with a recording's.
        self.pid_visible: Callable[[Pid], bool] = (
            pid_visible or getattr(self.backend, "pid_visible", None) or _pid_exists
        )
        self._open = False
        self._driver = ""
        self._handles: list[object | None] = []
        self._handle_errors: list[str] = []
        self._names: list[str] = []
        # per device: the optional readings it does not support (not tried again)
        self._unsupported: dict[int, set[str]] = {}
        self._util_since: dict[int, int] = {}  # per device: last process-utilisation sample

    def run(self, emit: Emit, stop: threading.Event) -> None:
        """Sample until ``stop`` is set; NVML is shut down on the way out."""
        try:
            next_tick = time.monotonic()
            while not stop.is_set():
                if not self._open:
                    absent = self.open()
                    if absent is not None:
                        emit(absent)
                        stop.wait(self.retry_interval)
                        next_tick = time.monotonic()
                        continue
                emit(self.sample())
                next_tick = max(next_tick + self.interval, time.monotonic())
                stop.wait(next_tick - time.monotonic())
        finally:
            self.close()

    def open(self) -> GpuSample | None:
        """Initialise NVML and find the devices; returns the no-GPU/error sample on failure."""
        try:
            self.backend.init()
        except ImportError as exc:
            return self._state("no-driver", f"no NVIDIA GPU: pynvml is not installed ({exc})")
        except Exception as exc:
            status, why = _ABSENT.get(type(exc).__name__, ("error", ""))
            if status == "error":
                return self._state("error", f"NVML initialisation failed: {_reason(exc)}")
            return self._state(status, f"no NVIDIA GPU: {why}")
        try:
            self._driver = self.backend.driver_version()
        except Exception:
            self._driver = ""  # cosmetic only
        try:
            count = self.backend.device_count()
        except Exception as exc:
            self._shutdown()
            return self._state("error", f"NVML device count failed: {_reason(exc)}")
        if count == 0:
            self._shutdown()
            return self._state("no-gpu", "no NVIDIA GPU: the driver reports no devices")
        self._handles, self._handle_errors, self._names = [], [], []
        for i in range(count):
            try:
                h: object | None = self.backend.handle(i)
                err = ""
            except Exception as exc:
                h, err = None, _reason(exc)
            name = f"GPU {i}"
            if h is not None:
                # On failure keep the generic label; the readings say what is wrong.
                with contextlib.suppress(Exception):
                    name = self.backend.name(h)
            self._handles.append(h)
            self._handle_errors.append(err)
            self._names.append(name)
        self._open = True
        return None

    def close(self) -> None:
        """Shut NVML down if it is open. Idempotent."""
        if self._open:
            self._open = False
            self._shutdown()

    def _shutdown(self) -> None:
        with contextlib.suppress(Exception):  # nothing useful to do about a failing shutdown
            self.backend.shutdown()

    def _state(self, status: GpuStatus, message: str) -> GpuSample:
        return GpuSample(ts=time.time(), status=status, message=message, driver=self._driver)

    def sample(self) -> GpuSample:
        """One reading of every device (``open`` must have succeeded)."""
        ts = time.time()
        try:
            tree = self.target_pids()
        except Exception:
            tree = set()
        devices = tuple(self._device(i, tree) for i in range(len(self._handles)))
        return GpuSample(ts=ts, status="ok", devices=devices, driver=self._driver)

    def _device(self, index: int, tree: set[Pid]) -> GpuDevice:
        h = self._handles[index]
        errors: list[tuple[str, str]] = []
        if h is None:
            why = self._handle_errors[index]
            fields = ("util", "mem_used", "mem_total", "power_w", "temp_c", "sm_clock_mhz")
            return GpuDevice(
                index=index,
                name=self._names[index],
                util=None,
                mem_used=None,
                mem_total=None,
                power_w=None,
                temp_c=None,
                sm_clock_mhz=None,
                target_mem=None,
                errors=tuple((f, why) for f in (*fields, "target_mem")),
            )

        def read(fields: tuple[str, ...], fn: Callable[[object], Any]) -> Any:
            try:
                return fn(h)
            except Exception as exc:
                errors.extend((f, _reason(exc)) for f in fields)
                return None

        unsupported = self._unsupported.setdefault(index, set())

        def optional(field: str, fn: Callable[[object], Any]) -> Any:
            if field in unsupported:
                return None
            try:
                return fn(h)
            except Exception as exc:
                if _not_supported(exc):
                    unsupported.add(field)
                else:
                    errors.append((field, _reason(exc)))
                return None

        b = self.backend
        util = read(("util",), b.utilization)
        mem = read(("mem_used", "mem_total"), b.memory_info)
        power_mw = read(("power_w",), b.power_usage_mw)
        temp = read(("temp_c",), b.temperature_c)
        clock = read(("sm_clock_mhz",), b.sm_clock_mhz)
        procs = self._processes(h, errors)
        target_mem, scope = self._target_mem(procs, tree, mem)
        target_util = self._target_util(index, h, tree, scope, util, unsupported, errors)
        limit = optional("power_limit", b.power_limit_mw)
        mem_clock = optional("mem_clock", b.mem_clock_mhz)
        clock_max = optional("sm_clock_max", b.sm_clock_max_mhz)
        throttle = optional("throttle", b.throttle_reasons)
        mig = optional("mig", b.mig_mode)
        instances = optional("mig_instances", b.mig_devices) if mig else None
        return GpuDevice(
            index=index,
            name=self._names[index],
            util=None if util is None else float(util),
            mem_used=None if mem is None else mem[0],
            mem_total=None if mem is None else mem[1],
            power_w=None if power_mw is None else power_mw / 1000.0,
            temp_c=None if temp is None else float(temp),
            sm_clock_mhz=None if clock is None else float(clock),
            target_mem=target_mem,
            errors=tuple(errors),
            target_util=target_util,
            target_scope=scope,
            power_limit_w=None if limit is None else limit / 1000.0,
            mem_clock_mhz=None if mem_clock is None else float(mem_clock),
            sm_clock_max_mhz=None if clock_max is None else float(clock_max),
            throttle=None if throttle is None else throttle_names(int(throttle)),
            mig=None if mig is None else bool(mig),
            mig_instances=tuple(instances or ()),
        )

    def _processes(self, h: object, errors: list[tuple[str, str]]) -> list[GpuProcess] | None:
        """Both running-process lists; None when neither could be read."""
        out: list[GpuProcess] = []
        failed: list[str] = []
        for fn in (self.backend.compute_processes, self.backend.graphics_processes):
            try:
                out.extend(fn(h))
            except Exception as exc:
                failed.append(_reason(exc))
        if len(failed) == 2:
            errors.append(("target_mem", failed[0]))
            return None
        return out

    def _foreign(self, procs: list[GpuProcess]) -> bool:
        """NVML lists processes, and none of them exists in this PID namespace."""
        try:
            return bool(procs) and not any(self.pid_visible(p.pid) for p in procs)
        except Exception:
            return False

    def _target_mem(
        self, procs: list[GpuProcess] | None, tree: set[Pid], mem: tuple[Bytes, Bytes] | None
    ) -> tuple[Bytes | None, TargetScope | None]:
        """GPU memory of the target tree's processes, and how it was found."""
        if procs is None:
            return None, None
        used: dict[Pid, Bytes] = {}
        if self._foreign(procs):
            # a container: NVML speaks of the host's PIDs; the device's total stands in
            for p in procs:
                used[p.pid] = max(used.get(p.pid, 0), p.used_memory or 0)
            total = sum(used.values())
            return (total or (mem[0] if mem is not None else None)), "device"
        for p in procs:
            # A process with CUDA and graphics contexts is listed twice for the same memory.
            if p.used_memory is not None and p.pid in tree:
                used[p.pid] = max(used.get(p.pid, 0), p.used_memory)
        return sum(used.values()), "pids"

    def _target_util(
        self,
        index: int,
        h: object,
        tree: set[Pid],
        scope: TargetScope | None,
        util: int | None,
        unsupported: set[str],
        errors: list[tuple[str, str]],
    ) -> float | None:
        """SM utilisation of the tree's processes since the last reading (the device's when
        NVML's PIDs are foreign)."""
        if scope == "device":
            return None if util is None else float(util)
        if "target_util" in unsupported:
            return None
        since = self._util_since.get(index, 0)
        try:
            samples = self.backend.process_utilization(h, since)
        except Exception as exc:
            name = type(exc).__name__
            if name == "NVMLError_NotFound":
                return 0.0  # no process ran a kernel since the last reading
            if _not_supported(exc):
                unsupported.add("target_util")
            else:
                errors.append(("target_util", _reason(exc)))
            return None
        per_pid: dict[Pid, list[int]] = {}
        for pid, sm, ts in samples:
            per_pid.setdefault(pid, []).append(sm)
            self._util_since[index] = max(self._util_since.get(index, 0), ts)
        return float(sum(sum(v) / len(v) for pid, v in per_pid.items() if pid in tree))


def probe_gpus(backend: NvmlBackend | None = None) -> GpuSample:
    """One reading of the GPUs (or the no-GPU state) and NVML shut down again; for doctor."""
    collector = GpuCollector(lambda: set(), backend=backend)
    absent = collector.open()
    if absent is not None:
        return absent
    try:
        return collector.sample()
    finally:
        collector.close()
