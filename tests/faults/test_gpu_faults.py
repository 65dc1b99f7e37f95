"""Fault matrix, GPU side.

NOTE: there is no NVIDIA GPU on this machine (nor in CI). The GPU here is the RECORDED NVML
backend (``RecordedNvmlBackend`` replaying hand-made recordings in tests/data/nvml/, raising
the real ``pynvml.NVMLError_*`` classes). Everything else is real: a real target process, the
real process and GPU collectors, session hub and SQLite store, the real summary and export.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from faults.conftest import REPO, running, sofa, target_argv, wait_committed
from sofa_top.collectors.gpu import GpuCollector, RecordedNvmlBackend
from sofa_top.collectors.process import ProcessCollector
from sofa_top.datamodel.snapshot import Snapshot, TargetInfo
from sofa_top.recording.hub import Session
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.report import session_summary
from sofa_top.recording.store import SessionStore

NVML = REPO / "tests" / "data" / "nvml"


@dataclass
class GpuRun:
    session: Path
    snapshot: Snapshot  # the last one the dashboard would have drawn
    backend: RecordedNvmlBackend


def _record(path: Path, backend: RecordedNvmlBackend) -> GpuRun:
    """About a second and a half of a busy target with the recorded GPU(s)."""
    snapshots: list[Snapshot] = []
    argv = target_argv("busy")
    with running(argv) as target:
        process = ProcessCollector(target.pid, interval=0.1)
        gpu = GpuCollector(process.tree_pids, interval=0.05, backend=backend, retry_interval=0.3)
        session = Session(
            TargetInfo(target.pid, "python", tuple(argv)),
            [process, gpu],
            SessionStore(path),
            mode="record",
            snapshot_interval=0.1,
        )
        session.start(snapshots.append)
        wait_committed(path, 15)
        session.stop("duration reached")
        assert target.poll() is None
    assert not SessionReader(path).events("collector-failed")
    return GpuRun(path, snapshots[-1], backend)


@pytest.mark.parametrize(
    "recording, status, message",
    [
        (
            {"source": "hand-made: no libnvidia-ml", "init_error": "LibraryNotFound"},
            "no-driver",
            "no NVIDIA GPU: NVML library not found (no NVIDIA driver)",
        ),
        (
            json.loads((NVML / "no_devices.json").read_text()),
            "no-gpu",
            "no NVIDIA GPU: the driver reports no devices",
        ),
    ],
    ids=["nvml-missing", "no-devices"],
)
def test_no_usable_gpu_is_a_state(
    tmp_path: Path, recording: dict[str, object], status: str, message: str
) -> None:
    """NVML missing, or present without devices: the GPU pane states it, NVML is retried
    now and then (not every tick), and CPU/memory/stacks are recorded as ever."""
    run = _record(tmp_path / "g.sofa", RecordedNvmlBackend.from_dict(recording))
    gpu = run.snapshot.gpu
    assert gpu is not None and (gpu.status, gpu.message) == (status, message)
    # retried every 0.3 s, not at every 50 ms tick: fewer tries than process samples (10 Hz)
    ticks = len(SessionReader(run.session).points("tree.cpu"))
    assert 1 <= run.backend.init_calls <= ticks / 2, (run.backend.init_calls, ticks)
    if status == "no-gpu":
        assert run.backend.shutdown_calls == run.backend.init_calls  # each attempt released
    summary = session_summary(run.session)
    assert summary["gpu"] is None
    assert summary["cpu"]["tree_mean_percent"] is not None


def test_gpu_lost_mid_run(tmp_path: Path) -> None:
    """GPU 1 falls off the bus after two readings: its series carry the reason from then on,
    GPU 0 keeps reporting, the session goes on to its end."""
    run = _record(tmp_path / "lost.sofa", RecordedNvmlBackend(NVML / "gpu_lost_midrun.json"))
    r = SessionReader(run.session)
    lost = r.points("gpu.1.util")
    assert [v for _, v, _ in lost[:2]] == [96.0, 97.0]
    assert len(lost) > 5 and all(v is None and e == "GPU is lost" for _, v, e in lost[2:])
    alive = [v for _, v, _ in r.points("gpu.0.util")]
    assert len(alive) == len(lost) and all(v is not None for v in alive)
    assert max(ts for ts, _, _ in r.points("tree.cpu")) > lost[2][0]  # recording went on
    gpu = run.snapshot.gpu
    assert gpu is not None and gpu.status == "ok" and len(gpu.devices) == 2
    assert dict(gpu.devices[1].errors)["util"] == "GPU is lost"
    assert r.meta()["end_reason"] == "duration reached"


def test_eight_gpus(tmp_path: Path) -> None:
    """Eight devices: all recorded, summarized and exported as counter tracks."""
    run = _record(tmp_path / "eight.sofa", RecordedNvmlBackend(NVML / "eight_gpus.json"))
    summary = session_summary(run.session)
    devices = summary["gpu"]["devices"]
    assert [d["index"] for d in devices] == list(range(8))
    assert all(d["util_mean_percent"] and d["util_mean_percent"] > 90 for d in devices)
    out = tmp_path / "eight.json"
    proc = sofa("export", str(run.session), "--format", "chrome", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    names = {e.get("name") for e in json.loads(out.read_text())["traceEvents"]}
    assert {f"GPU {i} utilization" for i in range(8)} <= names
