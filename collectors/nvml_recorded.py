"""``RecordedNvmlBackend``: NVML readings replayed from a JSON recording (tests and demos: CI
has no GPU), raising the real ``pynvml.NVMLError_*`` classes."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from sofa_top.collectors.nvml import GpuProcess, MiB
from sofa_top.datamodel.samples import MigInstance
from sofa_top.datamodel.units import Bytes, Pid

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
    "process_utilization",
    "power_limit",
    "mem_clock",
    "sm_clock_max",
    "throttle_reasons",
    "mig_mode",
    "mig_devices",
)
# recording keys of the readings only some devices have: a frame without one is NotSupported
_OPTIONAL_KEYS = {
    "process_utilization": "process_utilization",
    "power_limit": "power_limit_mw",
    "mem_clock": "mem_clock_mhz",
    "sm_clock_max": "sm_clock_max_mhz",
    "throttle_reasons": "throttle_reasons",
    "mig_mode": "mig_mode",
    "mig_devices": "mig_devices",
}


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
                                  "process_utilization": [{"pid": 4242, "sm_util": 96}],
                                  "power_limit_mw": 700000, "mem_clock_mhz": 2619,
                                  "sm_clock_max_mhz": 1980, "throttle_reasons": 4,
                                  "mig_mode": false, "mig_devices": [],
                                  "errors": {"power_usage": "NotSupported"}}]}]}

    ``errors`` maps a call name (one of ``_CALLS``, or ``"*"`` for all of them) to the NVML
    error it raises in that frame. Each call on each device has its own cursor: its k-th call
    reads frame k, and the last frame repeats. The keys from ``process_utilization`` on are
    optional (recordings made before them): a frame without one raises ``NotSupported``, as a
    device without that reading does. An empty ``process_utilization`` raises ``NotFound``
    (NVML: no samples since the timestamp).
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

    def pid_visible(self, pid: Pid) -> bool:
        """Whether ``pid`` exists in the recording's PID namespace: every PID does, unless the
        recording says NVML reported another namespace's (``"foreign_pids": true``: a
        container whose NVML speaks of the host's processes)."""
        return not self._data.get("foreign_pids", False)

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

    def _optional(self, handle: object, call: str) -> Any:
        frame = self._frame(_index(handle), call)
        key = _OPTIONAL_KEYS[call]
        if key not in frame:
            _raise("NotSupported")
        return frame[key]

    def process_utilization(self, handle: object, since_us: int) -> list[tuple[Pid, int, int]]:
        samples = self._optional(handle, "process_utilization")
        if not samples:
            _raise("NotFound")
        now = int(time.time() * 1e6)
        return [(int(x["pid"]), int(x["sm_util"]), now) for x in samples]

    def power_limit_mw(self, handle: object) -> int:
        return int(self._optional(handle, "power_limit"))

    def mem_clock_mhz(self, handle: object) -> int:
        return int(self._optional(handle, "mem_clock"))

    def sm_clock_max_mhz(self, handle: object) -> int:
        return int(self._optional(handle, "sm_clock_max"))

    def throttle_reasons(self, handle: object) -> int:
        return int(self._optional(handle, "throttle_reasons"))

    def mig_mode(self, handle: object) -> bool:
        return bool(self._optional(handle, "mig_mode"))

    def mig_devices(self, handle: object) -> list[MigInstance]:
        return [
            MigInstance(
                i,
                str(m.get("name", f"MIG {i}")),
                None if m.get("mem_used_mib") is None else int(m["mem_used_mib"]) * MiB,
                None if m.get("mem_total_mib") is None else int(m["mem_total_mib"]) * MiB,
            )
            for i, m in enumerate(self._optional(handle, "mig_devices"))
        ]


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
