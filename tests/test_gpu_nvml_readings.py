"""NVML's readings beyond the basic ones: the target's share, power limit, clocks, throttle
reasons, MIG, PIDs of another namespace, one failing field; and how they reach the store and
``record --json``.

NOTE: no GPU on the test machines. These tests drive the real ``GpuCollector`` with
``RecordedNvmlBackend``: a REPLAY of hand-made recordings in tests/data/nvml/ (each file's
"source" says so), raising the real pynvml.NVMLError_* classes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import validate_record_json

from sofa_top.collectors.gpu import GpuCollector, MiB, RecordedNvmlBackend, probe_gpus
from sofa_top.datamodel.samples import GpuSample, ProcessSample, ProcInfo
from sofa_top.recording.report import session_summary
from sofa_top.recording.store import SessionStore

DATA = Path(__file__).parent / "data" / "nvml"


def _samples(name: str, tree: set[int], n: int) -> list[GpuSample]:
    collector = GpuCollector(lambda: tree, backend=RecordedNvmlBackend(DATA / name))
    assert collector.open() is None
    try:
        return [collector.sample() for _ in range(n)]
    finally:
        collector.close()


def test_the_target_share_power_limit_clocks_and_throttle() -> None:
    s = _samples("h200_gpu_loop.json", {4242, 1}, 4)
    d = [x.devices[0] for x in s]
    assert [x.target_util for x in d] == [36.0, 40.0, 39.0, 0.0]  # PID 9001 is not ours
    assert all(x.target_scope == "pids" and x.target_mem == 8790 * MiB for x in d)
    assert {x.power_limit_w for x in d} == {700.0}
    assert {x.sm_clock_max_mhz for x in d} == {1980.0}
    assert [x.throttle for x in d] == [(), (), ("sw-power-cap",), ()]
    assert d[2].sm_clock_mhz == 1755.0
    assert all(x.mig is False and x.mig_instances == () for x in d)
    # one field fails in the last reading: it alone is missing, with NVML's reason
    assert d[3].mem_clock_mhz is None and dict(d[3].errors) == {"mem_clock": "Unknown Error"}
    assert d[3].util == 39.0 and d[3].power_w == 226.0
    assert all(x.errors == () for x in d[:3])


def test_mig_instances_are_shown_per_device() -> None:
    (s,) = _samples("a100_mig.json", {4242}, 1)
    (d,) = s.devices
    assert d.mig is True
    assert [m.name.rsplit(" ", 1)[-1] for m in d.mig_instances] == [
        "3g.40gb",
        "2g.20gb",
        "1g.10gb",
    ]
    assert d.mig_instances[0].mem_used == 28610 * MiB
    assert d.mig_instances[0].mem_total == 40192 * MiB
    # MIG mode has no device utilisation: said so, and the rest is read
    assert d.util is None and dict(d.errors) == {"util": "Not Supported"}
    assert d.target_mem == 28004 * MiB and d.target_util is None  # per-process util unsupported


def test_pids_of_another_namespace_fall_back_to_the_device() -> None:
    (s,) = _samples("container_foreign_pids.json", {17, 18}, 1)
    (d,) = s.devices
    assert d.target_scope == "device"
    assert d.target_mem == (40448 + 512) * MiB  # every listed process: the device's share
    assert d.target_util == 93.0  # the device's utilisation
    # the same processes in this namespace (no fallback): the target's own share
    backend = RecordedNvmlBackend(DATA / "container_foreign_pids.json")
    collector = GpuCollector(lambda: {812345}, backend=backend, pid_visible=lambda _pid: True)
    assert collector.open() is None
    d2 = collector.sample().devices[0]
    collector.close()
    assert (d2.target_scope, d2.target_mem, d2.target_util) == ("pids", 40448 * MiB, 91.0)


def test_old_recordings_have_no_new_readings_and_no_new_errors() -> None:
    (s,) = _samples("h200_one_gpu.json", {4242}, 1)
    (d,) = s.devices
    assert (d.power_limit_w, d.mem_clock_mhz, d.throttle, d.mig, d.target_util) == (None,) * 5
    assert d.errors == ()  # NotSupported for a reading the device lacks is not an error


def test_a_lost_gpu_keeps_its_new_readings_missing_with_the_reason() -> None:
    lost = {
        "source": "hand-made: a GPU with every reading, lost in its second frame",
        "devices": [{"name": "NVIDIA H200"}],
        "frames": [
            {"devices": [{**_full_frame()}]},
            {"devices": [{**_full_frame(), "errors": {"*": "GpuIsLost"}}]},
        ],
    }
    collector = GpuCollector(lambda: {4242}, backend=RecordedNvmlBackend.from_dict(lost))
    assert collector.open() is None
    ok, gone = collector.sample().devices[0], collector.sample().devices[0]
    collector.close()
    assert ok.errors == () and ok.throttle == ()
    assert gone.util is None and gone.throttle is None and gone.power_limit_w is None
    reasons = dict(gone.errors)
    for field in ("util", "power_limit", "mem_clock", "throttle", "mig", "target_util"):
        assert reasons[field] == "GPU is lost", field


def _full_frame() -> dict[str, object]:
    return {
        "util": 50, "mem_used_mib": 100, "mem_total_mib": 143771, "power_mw": 300000,
        "temp_c": 40, "sm_clock_mhz": 1980, "compute_processes": [{"pid": 4242, "used_mib": 90}],
        "graphics_processes": [], "process_utilization": [{"pid": 4242, "sm_util": 48}],
        "power_limit_mw": 700000, "mem_clock_mhz": 2619, "sm_clock_max_mhz": 1980,
        "throttle_reasons": 0, "mig_mode": False, "mig_devices": [],
    }  # fmt: skip


def test_probe_gpus_reads_names_and_driver_for_the_device_check() -> None:
    s = probe_gpus(RecordedNvmlBackend(DATA / "h200_gpu_loop.json"))
    assert s.status == "ok" and s.driver == "570.124.06"
    assert [d.name for d in s.devices] == ["NVIDIA H200"]


def test_nvml_readings_reach_record_json(tmp_path: Path) -> None:
    path = tmp_path / "g.sofa"
    store = SessionStore(path)
    store.set_meta(mode="record", target={"pid": 4242, "name": "python", "cmdline": []})
    t0 = time.time()
    proc = ProcInfo(4242, 1, "python", ("python",), t0, 100.0, 4, 1 << 30, 0, 0, 0, "running")
    store.write([ProcessSample(t0, 4242, True, (proc,), 100.0, 1 << 30, 0, 0, 4)])
    for i, s in enumerate(_samples("h200_gpu_loop.json", {4242}, 4)):
        store.write([GpuSample(t0 + i, s.status, s.devices, s.message, s.driver)])
    store.close(ended=t0 + 4)
    out = session_summary(path)
    validate_record_json(out)
    (d,) = out["gpu"]["devices"]
    assert d["target_util_mean_percent"] == pytest.approx((36 + 40 + 39 + 0) / 4)
    assert d["target_mem_max_bytes"] == 8790 * MiB
    assert d["power_limit_w"] == 700.0
    assert d["throttle_reasons"] == ["sw-power-cap"]
    assert d["mig"] is False and d["target_from_device"] is False
    assert d["errors"] == {"mem_clock": "Unknown Error"}
    assert out["cuda"] is None  # no agent in this session
