"""GpuCollector.

NOTE: CI (and the machine these tests were written on) has no NVIDIA GPU. Except for the last
tests, which use the real pynvml on this machine (and so exercise the clean no-GPU state), these
tests drive the collector with RecordedNvmlBackend: a REPLAY of hand-made NVML recordings in
tests/data/nvml/ (see each file's "source" field), raising the real pynvml.NVMLError_* classes.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pynvml
import pytest
from procs import wait_for

from sofa_top.collectors.gpu import (
    GpuCollector,
    GpuProcess,
    MiB,
    PynvmlBackend,
    RecordedNvmlBackend,
    probe_gpus,
)
from sofa_top.datamodel.samples import GpuSample, Sample

DATA = Path(__file__).parent / "data" / "nvml"


def _run(collector: GpuCollector, n: int, timeout: float = 60.0) -> list[GpuSample]:
    """Run the collector in its own thread until it has emitted ``n`` samples."""
    out: list[Sample] = []
    stop = threading.Event()
    t = threading.Thread(target=collector.run, args=(out.append, stop))
    t.start()
    try:
        wait_for(lambda: len(out) >= n, timeout, f"{n} samples")
    finally:
        stop.set()
        t.join(30)
    assert not t.is_alive(), "collector did not stop"
    assert all(isinstance(s, GpuSample) for s in out)
    return [s for s in out if isinstance(s, GpuSample)][:n]


def _gaps(samples: list[Sample]) -> list[float]:
    return [b.ts - a.ts for a, b in itertools.pairwise(samples) if isinstance(a, GpuSample)]


def test_recordings_say_they_are_hand_made() -> None:
    for path in DATA.glob("*.json"):
        assert "hand-made" in RecordedNvmlBackend(path).source.lower(), path


def test_one_h200() -> None:
    backend = RecordedNvmlBackend(DATA / "h200_one_gpu.json")
    samples = _run(GpuCollector(lambda: {4242, 1}, interval=0.001, backend=backend), 10)
    assert all(s.status == "ok" and s.driver == "570.124.06" for s in samples)
    devs = [s.devices[0] for s in samples]
    assert {d.name for d in devs} == {"NVIDIA H200"}
    assert {d.mem_total for d in devs} == {143771 * MiB}
    assert [d.util for d in devs[:4]] == [0.0, 0.0, 34.0, 97.0]
    assert devs[0].power_w == pytest.approx(118.412)
    assert devs[4].power_w == pytest.approx(688.017)
    assert all(d.power_w is not None and 100 <= d.power_w <= 700 for d in devs)
    assert max(d.sm_clock_mhz or 0 for d in devs) == 1980
    assert devs[3].temp_c == 47.0 and devs[3].mem_used == 71813 * MiB
    # target_mem: nothing before the process opened its context, then its usage
    assert [d.target_mem for d in devs[:4]] == [0, 518 * MiB, 16904 * MiB, 71234 * MiB]
    assert all(d.errors == () for d in devs)
    assert devs[9] == devs[7]  # the last frame repeats
    assert backend.shutdown_calls == 1 and not backend.initialized


def test_target_mem_counts_only_the_target_tree() -> None:
    backend = RecordedNvmlBackend(DATA / "h200_one_gpu.json")
    (s,) = _run(GpuCollector(lambda: {9999}, interval=0.001, backend=backend), 1)
    assert s.devices[0].target_mem == 0


def test_eight_gpus() -> None:
    backend = RecordedNvmlBackend(DATA / "eight_gpus.json")
    ranks = {5001 + i for i in range(8)}
    samples = _run(GpuCollector(lambda: ranks, interval=0.001, backend=backend), 3)
    s = samples[2]
    assert s.status == "ok" and len(s.devices) == 8
    assert [d.index for d in s.devices] == list(range(8))
    assert {d.name for d in s.devices} == {"NVIDIA H100 80GB HBM3"}
    assert all(d.target_mem == 62318 * MiB for d in s.devices)
    # GPU 7 also runs someone else's process (PID 7777): in mem_used, not in target_mem.
    gpu7 = s.devices[7]
    assert gpu7.mem_used == (62318 + 507 + 2031) * MiB
    assert [d.util for d in s.devices] == [97.0, 96.0, 97.0, 98.0, 97.0, 96.0, 97.0, 96.0]


def test_gpu_lost_midrun_and_unsupported_power() -> None:
    backend = RecordedNvmlBackend(DATA / "gpu_lost_midrun.json")
    samples = _run(GpuCollector(lambda: {4242, 4243}, interval=0.001, backend=backend), 5)
    assert all(s.status == "ok" and len(s.devices) == 2 for s in samples)
    gpu0 = [s.devices[0] for s in samples]
    gpu1 = [s.devices[1] for s in samples]
    # GPU 0 has no power reading, ever; everything else on it keeps going.
    assert all(d.power_w is None and d.errors == (("power_w", "Not Supported"),) for d in gpu0)
    assert [d.util for d in gpu0] == [95.0, 97.0, 96.0, 98.0, 98.0]
    assert all(d.target_mem == 40448 * MiB for d in gpu0)
    # GPU 1 works, then is lost: every field unavailable, with the reason.
    assert gpu1[1].util == 97.0 and gpu1[1].power_w == 671.0 and gpu1[1].errors == ()
    for d in gpu1[2:]:
        assert (d.util, d.mem_used, d.mem_total, d.power_w, d.temp_c, d.sm_clock_mhz) == (
            (None,) * 6
        )
        assert d.target_mem is None
        assert dict(d.errors) == {
            f: "GPU is lost"
            for f in (
                "util",
                "mem_used",
                "mem_total",
                "power_w",
                "temp_c",
                "sm_clock_mhz",
                "target_mem",
            )
        }
        assert d.name == "NVIDIA H200"


def test_replay_raises_the_real_pynvml_errors() -> None:
    backend = RecordedNvmlBackend(DATA / "gpu_lost_midrun.json")
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        backend.device_count()
    backend.init()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        backend.power_usage_mw(backend.handle(0))
    h1 = backend.handle(1)
    backend.utilization(h1)
    backend.utilization(h1)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        backend.utilization(h1)


def test_no_devices_is_a_clean_state_emitted_periodically() -> None:
    backend = RecordedNvmlBackend(DATA / "no_devices.json")
    collector = GpuCollector(lambda: set(), interval=0.001, backend=backend, retry_interval=0.2)
    out: list[Sample] = []
    stop = threading.Event()
    t = threading.Thread(target=collector.run, args=(out.append, stop))
    t.start()
    try:
        wait_for(lambda: len(out) >= 4, 60, "four no-GPU states")
    finally:
        stop.set()
        t.join(30)
    assert not t.is_alive()
    # once, then once per retry_interval: not once per (1 ms) tick (each gap is at least the
    # retry interval, a lower bound that a slow machine only lengthens)
    assert min(_gaps(out)) >= 0.95 * 0.2, _gaps(out)
    for s in out:
        assert isinstance(s, GpuSample)
        assert s.status == "no-gpu" and s.devices == ()
        assert s.message == "no NVIDIA GPU: the driver reports no devices"
    assert backend.init_calls == len(out)
    assert backend.shutdown_calls == len(out)  # each failed attempt releases NVML


def test_library_missing_is_no_driver() -> None:
    backend = RecordedNvmlBackend.from_dict(
        {
            "source": "hand-made: nvmlInit raises NVMLError_LibraryNotFound",
            "init_error": "LibraryNotFound",
        }
    )
    (s,) = _run(GpuCollector(lambda: set(), backend=backend), 1)
    assert s.status == "no-driver"
    assert s.message == "no NVIDIA GPU: NVML library not found (no NVIDIA driver)"
    assert probe_gpus(backend).status == "no-driver"


def test_driver_not_loaded_is_no_driver() -> None:
    backend = RecordedNvmlBackend.from_dict({"init_error": "DriverNotLoaded"})
    assert probe_gpus(backend).message == "no NVIDIA GPU: NVIDIA driver not loaded"


def test_other_init_failure_is_an_error_state() -> None:
    backend = RecordedNvmlBackend.from_dict({"init_error": "NoPermission"})
    s = probe_gpus(backend)
    assert (s.status, s.message) == (
        "error",
        "NVML initialisation failed: Insufficient Permissions",
    )


class _NoPynvml(PynvmlBackend):
    """PynvmlBackend as it behaves when nvidia-ml-py is not installed."""

    def init(self) -> None:
        raise ModuleNotFoundError("No module named 'pynvml'")


def test_pynvml_not_installed_is_no_driver() -> None:
    s = probe_gpus(_NoPynvml())
    assert s.status == "no-driver"
    assert s.message.startswith("no NVIDIA GPU: pynvml is not installed")


def test_recording_typos_fail_at_load() -> None:
    with pytest.raises(ValueError, match="unknown NVML error"):
        RecordedNvmlBackend.from_dict({"init_error": "LibaryNotFound"})
    frame = {"devices": [{"util": 1, "errors": {"powr": "NotSupported"}}]}
    with pytest.raises(ValueError, match="unknown call"):
        RecordedNvmlBackend.from_dict({"devices": [{"name": "x"}], "frames": [frame]})


def test_stop_is_prompt_while_waiting_to_retry() -> None:
    """Stop ends the wait for the next attempt: it does not wait out an hour-long retry."""
    backend = RecordedNvmlBackend(DATA / "no_devices.json")
    collector = GpuCollector(lambda: set(), backend=backend, retry_interval=3600.0)
    out: list[Sample] = []
    stop = threading.Event()
    t = threading.Thread(target=collector.run, args=(out.append, stop))
    t.start()
    try:
        wait_for(lambda: out, 60, "the first state")
    finally:
        t0 = time.monotonic()
        stop.set()
        t.join(60)
    assert not t.is_alive() and time.monotonic() - t0 < 30


def test_target_pids_failure_does_not_stop_sampling() -> None:
    def broken() -> set[int]:
        raise RuntimeError("process collector not ready")

    backend = RecordedNvmlBackend(DATA / "h200_one_gpu.json")
    samples = _run(GpuCollector(broken, interval=0.001, backend=backend), 2)
    assert [s.devices[0].target_mem for s in samples] == [0, 0]


def test_duplicate_compute_and_graphics_entries_count_once() -> None:
    class Both(RecordedNvmlBackend):
        def graphics_processes(self, handle: object) -> list[GpuProcess]:
            return self.compute_processes(handle)

    data: dict[str, Any] = {
        "devices": [{"name": "NVIDIA H200"}],
        "frames": [
            {
                "devices": [
                    {
                        "util": 1,
                        "mem_used_mib": 2,
                        "mem_total_mib": 143771,
                        "power_mw": 120000,
                        "temp_c": 30,
                        "sm_clock_mhz": 1980,
                        "compute_processes": [{"pid": 1, "used_mib": 100}],
                    }
                ]
            }
        ],
    }
    backend = Both.from_dict(data)
    assert probe_gpus(backend).devices[0].target_mem == 0  # probe has no target tree
    collector = GpuCollector(lambda: {1}, backend=Both.from_dict(data))
    assert collector.open() is None
    assert collector.sample().devices[0].target_mem == 100 * MiB
    collector.close()


# --------------------------------------------------------------------------- the real NVML


def test_real_pynvml_backend_on_this_machine() -> None:
    """Real NVML. On a machine without an NVIDIA driver (CI) this is the clean no-GPU state."""
    s = probe_gpus(PynvmlBackend())
    if s.status == "ok":  # a GPU machine
        assert s.devices and all(d.mem_total for d in s.devices)
    else:
        assert s.status in ("no-driver", "no-gpu"), s
        assert s.message.startswith("no NVIDIA GPU: "), s.message


def test_real_collector_loop_without_gpu_is_quiet() -> None:
    collector = GpuCollector(lambda: set(), interval=0.001, retry_interval=0.3)
    out: list[Sample] = []
    stop = threading.Event()
    t = threading.Thread(target=collector.run, args=(out.append, stop))
    t.start()
    try:
        wait_for(lambda: len(out) >= 3, 60, "three states")
    finally:
        stop.set()
        t.join(30)
    assert not t.is_alive()
    states = [s.status for s in out if isinstance(s, GpuSample)]
    if "ok" in states:
        pytest.skip("this machine has a GPU")
    assert len(states) == len(out)
    # quiet: one state per retry interval, not one per (1 ms) tick
    assert min(_gaps(out)) >= 0.95 * 0.3, _gaps(out)
