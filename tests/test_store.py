"""Session store: round trips, durability rules and refusal of files it cannot read."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.samples import (
    Event,
    Frame,
    GpuDevice,
    GpuSample,
    ProcessSample,
    ProcInfo,
    StackCount,
    StackWindow,
    StepSample,
)
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.store import SCHEMA_VERSION, SessionStore


def _proc(ts: float, cpu: float, read: int) -> ProcessSample:
    p = ProcInfo(
        42,
        1,
        "python",
        ("python", "train.py"),
        1000.0,
        cpu,
        3,
        10 << 20,
        read,
        0,
        7,
        "running",
        role="target",
    )
    return ProcessSample(ts, 42, True, (p,), cpu, 10 << 20, read, 0, 3)


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "s.sofa"
    store = SessionStore(path)
    store.set_meta(mode="record", target={"pid": 42})
    frames = (Frame("<module>", "train.py", 1), Frame("step", "train.py", 9))
    store.write(
        [
            _proc(100.0, 50.0, 0),
            _proc(101.0, 150.0, 1000),
            GpuSample(
                100.5,
                "ok",
                (
                    GpuDevice(
                        0,
                        "H200",
                        87.0,
                        5 << 30,
                        140 << 30,
                        None,
                        50.0,
                        1980.0,
                        1 << 30,
                        (("power", "NotSupported"),),
                    ),
                ),
            ),
            StackWindow(
                100.0,
                101.0,
                97.0,
                97,
                (StackCount(42, 7, "MainThread", frames, 97, "python"),),
                2.5,
            ),
            StepSample(101.0, 1, 100.0, 1.0, 0.4, "torch-dataloader", 32, 42),
            Event(101.5, "target-exit", "target exited (code 0)", {"exit_code": 0}),
        ]
    )
    store.close(ended=102.0, exit_code=0)

    r = SessionReader(path)
    meta = r.meta()
    assert meta["schema_version"] == SCHEMA_VERSION
    assert meta["target"] == {"pid": 42} and meta["exit_code"] == 0
    assert [v for _, v, _ in r.points("tree.cpu")] == [50.0, 150.0]
    # The rate comes from two cumulative readings one second apart.
    assert r.points("tree.read_rate")[-1][1] == pytest.approx(1000.0)
    power = r.points("gpu.0.power")
    assert power == [(100.5, None, "NotSupported")]
    assert r.points("gpu.0.util")[0][1] == 87.0
    (w,) = list(r.stack_windows())
    assert w.stacks[0].frames == frames and w.stacks[0].count == 97 and w.rate_hz == 97.0
    (step,) = r.steps()
    assert step.input_wait_s == 0.4 and step.batch_size == 32
    assert r.events("target-exit")[0].data == {"exit_code": 0}
    assert r.processes()[0]["cmdline"] == ["python", "train.py"]
    assert r.time_range() == (100.0, 101.0)


def test_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "s.sofa"
    path.write_text("precious")
    with pytest.raises(UserError, match="already exists"):
        SessionStore(path)
    assert path.read_text() == "precious"


def test_unwritable_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UserError, match="cannot write session file"):
        SessionStore(blocker / "s.sofa")


def test_reader_rejects_garbage_truncated_and_future(tmp_path: Path) -> None:
    garbage = tmp_path / "g.sofa"
    garbage.write_bytes(b"\x00\xffnot sqlite at all" * 100)
    with pytest.raises(UserError, match="not a readable sofa-top session"):
        SessionReader(garbage)

    good = tmp_path / "ok.sofa"
    s = SessionStore(good)
    s.write([_proc(1.0, 1.0, 0)])
    s.close()
    truncated = tmp_path / "t.sofa"
    truncated.write_bytes(good.read_bytes()[:1500])
    with pytest.raises(UserError):
        r = SessionReader(truncated)
        r.points("tree.cpu")

    future = tmp_path / "f.sofa"
    s = SessionStore(future)
    s.close()
    db = sqlite3.connect(future)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(UserError, match="upgrade sofa-top"):
        SessionReader(future)

    with pytest.raises(UserError, match="no such session"):
        SessionReader(tmp_path / "missing.sofa")


def test_reader_sees_committed_data_while_writer_is_open(tmp_path: Path) -> None:
    path = tmp_path / "live.sofa"
    store = SessionStore(path)
    store.write([_proc(1.0, 10.0, 0)])
    store.commit()
    store.write([_proc(2.0, 20.0, 0)])  # not committed yet
    r = SessionReader(path)
    assert [v for _, v, _ in r.points("tree.cpu")] == [10.0]
    store.commit()
    assert [v for _, v, _ in r.points("tree.cpu")] == [10.0, 20.0]
    store.close()


def test_steps_keep_their_wait_cpu_and_v1_files_still_read(tmp_path: Path) -> None:
    path = tmp_path / "s.sofa"
    store = SessionStore(path)
    steps = [
        StepSample(2.0, 0, 1.0, 1.0, 0.5, "torch-dataloader", 8, 42, 0.25),
        StepSample(3.0, 1, 2.0, 1.0, 0.5, "torch-dataloader", 8, 42, None),
    ]
    store.write(steps)
    store.close(ended=3.0)
    reader = SessionReader(path)
    assert reader.steps() == steps
    assert reader.steps_before(3.0, 10) == steps
    reader.close()
    # a v1 file (before wait_cpu_s existed) reads with the measure unknown
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE steps DROP COLUMN wait_cpu_s")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    reader = SessionReader(path)
    assert [s.wait_cpu_s for s in reader.steps()] == [None, None]
    assert reader.steps()[0].input_wait_s == 0.5
    reader.close()


def reader_steps_collective(path: Path) -> list[float | None]:
    reader = SessionReader(path)
    try:
        return [s.collective_s for s in reader.steps()]
    finally:
        reader.close()


def test_gpu_step_times_and_cuda_readings_round_trip_and_v2_files_still_read(
    tmp_path: Path,
) -> None:
    from sofa_top.datamodel.samples import CudaSample, CudaWindow

    path = tmp_path / "s.sofa"
    store = SessionStore(path)
    steps = [
        StepSample(2.0, 0, 1.0, 1.0, 0.1, "torch-dataloader", 8, 42, 0.05, 0.2,
                   gpu_span_s=0.9, gpu_busy_s=0.6, gpu_busy_source="profiler"),
        StepSample(3.0, 1, 2.0, 1.0, 0.1, "torch-dataloader", 8, 42, 0.05,
                   gpu_span_s=0.9, gpu_busy_s=0.6, gpu_busy_source="estimate"),
        StepSample(4.0, 2, 3.0, 1.0, 0.1, "torch-dataloader", 8, 42, 0.05),
    ]  # fmt: skip
    window = CudaWindow(5, 0.05, 0.01, 0.0, 500, 0.01, 2e-5, 495, 0.03, 4, 0.005, 5, 1e-3,
                        5 << 20, 5, 1e-3, 5, 5, 1e-4, 500, 10, 0, 0)  # fmt: skip
    cuda = CudaSample(3.5, 42, 0, "NVIDIA H200", True, "9.0", 1 << 30, 2 << 30, 140 << 30,
                      130 << 30, 0, 0, window)  # fmt: skip
    store.write([*steps, cuda])
    store.close(ended=4.0)
    reader = SessionReader(path)
    assert reader.steps() == steps
    assert steps[0].gpu_busy_fraction == pytest.approx(0.6)
    assert reader.cuda_samples() == [cuda]
    assert [v for _, v, _ in reader.points("step.gpu_busy_fraction")] == [0.6, 0.6]
    reader.close()
    assert reader_steps_collective(path) == [0.2, None, None]
    # a v2 file (before the GPU and collective columns) reads with them unknown
    db = sqlite3.connect(path)
    for col in ("gpu_span_s", "gpu_busy_s", "gpu_busy_source", "collective_s"):
        db.execute(f"ALTER TABLE steps DROP COLUMN {col}")
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()
    reader = SessionReader(path)
    assert [(s.gpu_span_s, s.gpu_busy_s, s.gpu_busy_source) for s in reader.steps()] == [
        (None, None, None)
    ] * 3
    assert reader.steps()[0].wait_cpu_s == 0.05
    reader.close()
