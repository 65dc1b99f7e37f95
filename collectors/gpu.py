"""GPU collector over NVML (nvidia-ml-py), behind a small backend protocol.

``GpuCollector`` talks to an ``NvmlBackend``: ``PynvmlBackend`` is the real NVML, and
``RecordedNvmlBackend`` replays readings from a JSON recording (tests and demos: CI has no GPU).

No GPU is a state, not an error: when pynvml is missing or NVML cannot initialise, the collector
emits ``GpuSample(status="no-driver"/"no-gpu", message="no NVIDIA GPU: <reason>")`` once, then
again every ``retry_interval`` seconds (retrying NVML each time) rather than at every tick. A
reading that fails mid-run (``GPU is lost``, ``Not Supported`` for power on some cards, ...) makes
that field None and is listed in ``GpuDevice.errors``; everything else keeps going.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, Protocol

from sofa_top.collectors.base import Emit
from sofa_top.model.samples import GpuDevice, GpuSample, GpuStatus
from sofa_top.model.units import Bytes, Pid, Seconds

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


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _procs(entries: Sequence[Any]) -> list[GpuProcess]:
    out = []
    for e in entries:
        used = e.usedGpuMemory
        out.append(GpuProcess(int(e.pid), None if used is None else int(used)))
    return out


# --------------------------------------------------------------------------- replay

_CALLS = (
    "handle",
    "name",
    "utilization",
    "memory_info",
    "power_usage",
    "temperature",
    "sm_clock",
    "compute_processes",
    "graphics_processes",
)


class RecordedNvmlBackend:
    """RECORDING REPLAY, not a GPU: replays NVML readings from a JSON file, because CI (and the
    machine this was written on) has no NVIDIA GPU. Errors are raised as the real
    ``pynvml.NVMLError_*`` classes, so the collector's error handling is the production path.

    Format (see tests/data/nvml/*.json)::

        {"source": "where the numbers come from",
         "driver_version": "570.124.06",
         "init_error": null,               # or an NVML error name, e.g. "LibraryNotFound"
         "devices": [{"name": "NVIDIA H200"}],
         "frames": [{"devices": [{"util": 97, "mem_used_mib": 71234, "mem_total_mib": 143771,
                                  "power_mw": 652000, "temp_c": 58, "sm_clock_mhz": 1980,
                                  "compute_processes": [{"pid": 4242, "used_mib": 70656}],
                                  "graphics_processes": [],
                                  "errors": {"power_usage": "NotSupported"}}]}]}

    ``errors`` maps a call name (one of ``handle name utilization memory_info power_usage
    temperature sm_clock compute_processes graphics_processes``, or ``"*"`` for all of them) to
    the NVML error it raises in that frame. Each call on each device has its own cursor: its
    k-th call reads frame k, and the last frame repeats.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._data = _validate(json.loads(Path(path).read_text()), self.path)
        self._cursor: dict[tuple[int, str], int] = {}
        self.initialized = False
        self.init_calls = 0
        self.shutdown_calls = 0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecordedNvmlBackend:
        """A replay from an in-memory recording (same format as the file)."""
        self = cls.__new__(cls)
        self.path = "<dict>"
        self._data = _validate(dict(data), self.path)
        self._cursor = {}
        self.initialized = False
        self.init_calls = 0
        self.shutdown_calls = 0
        return self

    @property
    def source(self) -> str:
        return str(self._data.get("source", ""))

    def init(self) -> None:
        self.init_calls += 1
        err = self._data.get("init_error")
        if err:
            _raise(str(err))
        self.initialized = True

    def shutdown(self) -> None:
        self.shutdown_calls += 1
        self.initialized = False

    def _check_init(self) -> None:
        if not self.initialized:
            _raise("Uninitialized")

    def driver_version(self) -> str:
        self._check_init()
        return str(self._data.get("driver_version", ""))

    def device_count(self) -> int:
        self._check_init()
        return len(self._data["devices"])

    def _frame(self, index: int, call: str) -> Mapping[str, Any]:
        """The frame this call reads, raising the recorded error if it has one."""
        self._check_init()
        if not 0 <= index < len(self._data["devices"]):
            _raise("InvalidArgument")
        frames: list[Mapping[str, Any]] = self._data["frames"]
        k = self._cursor.get((index, call), 0)
        self._cursor[(index, call)] = k + 1
        if not frames:
            return {}
        frame: Mapping[str, Any] = frames[min(k, len(frames) - 1)]["devices"][index]
        errors: Mapping[str, str] = frame.get("errors", {})
        err = errors.get(call) or errors.get("*")
        if err:
            _raise(err)
        return frame

    def handle(self, index: int) -> object:
        self._frame(index, "handle")
        return index

    def name(self, handle: object) -> str:
        i = _index(handle)
        self._frame(i, "name")
        return str(self._data["devices"][i]["name"])

    def utilization(self, handle: object) -> int:
        return int(self._frame(_index(handle), "utilization")["util"])

    def memory_info(self, handle: object) -> tuple[Bytes, Bytes]:
        f = self._frame(_index(handle), "memory_info")
        return int(f["mem_used_mib"]) * MiB, int(f["mem_total_mib"]) * MiB

    def power_usage_mw(self, handle: object) -> int:
        return int(self._frame(_index(handle), "power_usage")["power_mw"])

    def temperature_c(self, handle: object) -> int:
        return int(self._frame(_index(handle), "temperature")["temp_c"])

    def sm_clock_mhz(self, handle: object) -> int:
        return int(self._frame(_index(handle), "sm_clock")["sm_clock_mhz"])

    def compute_processes(self, handle: object) -> list[GpuProcess]:
        return _recorded_procs(self._frame(_index(handle), "compute_processes"), "compute")

    def graphics_processes(self, handle: object) -> list[GpuProcess]:
        return _recorded_procs(self._frame(_index(handle), "graphics_processes"), "graphics")


def _index(handle: object) -> int:
    if not isinstance(handle, int):
        _raise("InvalidArgument")
    return handle


def _recorded_procs(frame: Mapping[str, Any], kind: str) -> list[GpuProcess]:
    out = []
    for p in frame.get(f"{kind}_processes", []):
        used = p.get("used_mib")
        out.append(GpuProcess(int(p["pid"]), None if used is None else int(used) * MiB))
    return out


def _nvml_error_class(name: str) -> type[Exception]:
    import pynvml

    cls = getattr(pynvml, f"NVMLError_{name}", None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        raise ValueError(f"unknown NVML error name {name!r}")
    return cls


def _raise(name: str) -> NoReturn:
    raise _nvml_error_class(name)()


def _validate(data: dict[str, Any], where: str) -> dict[str, Any]:
    """Check a recording up front, so a typo fails loading rather than replaying oddly."""
    devices = data.setdefault("devices", [])
    frames = data.setdefault("frames", [])
    if data.get("init_error"):
        _nvml_error_class(str(data["init_error"]))
    for n, frame in enumerate(frames):
        if len(frame.get("devices", [])) != len(devices):
            raise ValueError(f"{where}: frame {n} does not have {len(devices)} devices")
        for dev in frame["devices"]:
            for call, err in dev.get("errors", {}).items():
                if call != "*" and call not in _CALLS:
                    raise ValueError(f"{where}: frame {n}: unknown call {call!r}")
                _nvml_error_class(str(err))
    return data


# --------------------------------------------------------------------------- collector

# nvmlInit failures that mean "this machine has no usable NVIDIA GPU" rather than a fault.
_ABSENT: dict[str, tuple[GpuStatus, str]] = {
    "NVMLError_LibraryNotFound": ("no-driver", "NVML library not found (no NVIDIA driver)"),
    "NVMLError_DriverNotLoaded": ("no-driver", "NVIDIA driver not loaded"),
    "NVMLError_GpuNotFound": ("no-gpu", "no NVIDIA device found"),
}


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class GpuCollector:
    """Samples every NVIDIA GPU every ``interval`` seconds; ``target_pids`` gives the PIDs of
    the target tree (for ``GpuDevice.target_mem``)."""

    name = "gpu"

    def __init__(
        self,
        target_pids: Callable[[], set[Pid]],
        interval: Seconds = 0.5,
        backend: NvmlBackend | None = None,
        *,
        retry_interval: Seconds = 10.0,
    ) -> None:
        self.target_pids = target_pids
        self.interval = interval
        self.retry_interval = retry_interval
        self.backend: NvmlBackend = backend if backend is not None else PynvmlBackend()
        self._open = False
        self._driver = ""
        self._handles: list[object | None] = []
        self._handle_errors: list[str] = []
        self._names: list[str] = []

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

        b = self.backend
        util = read(("util",), b.utilization)
        mem = read(("mem_used", "mem_total"), b.memory_info)
        power_mw = read(("power_w",), b.power_usage_mw)
        temp = read(("temp_c",), b.temperature_c)
        clock = read(("sm_clock_mhz",), b.sm_clock_mhz)
        target_mem = self._target_mem(h, tree, errors)
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
        )

    def _target_mem(self, h: object, tree: set[Pid], errors: list[tuple[str, str]]) -> Bytes | None:
        """GPU memory of the target tree's processes; None when neither list could be read."""
        used: dict[Pid, Bytes] = {}
        failed: list[str] = []
        for fn in (self.backend.compute_processes, self.backend.graphics_processes):
            try:
                procs = fn(h)
            except Exception as exc:
                failed.append(_reason(exc))
                continue
            for p in procs:
                # A process with CUDA and graphics contexts is listed twice for the same memory.
                if p.used_memory is not None and p.pid in tree:
                    used[p.pid] = max(used.get(p.pid, 0), p.used_memory)
        if len(failed) == 2:
            errors.append(("target_mem", failed[0]))
            return None
        return sum(used.values())


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
