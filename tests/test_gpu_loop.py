"""GPU loops end to end: real PyTorch training loops (on the CPU) under ``sofa-top`` launch mode,
with the real agent, socket, hub, store and ``record --json`` summary.

NOTE: no test machine has a GPU. The workloads (tests/workloads/cuda_shapes.py --fake SHAPE)
give the agent's CUDA hook ``FakeCuda`` (tests/workloads/fake_cuda.py), a MODELLED GPU that
says so; everything downstream of the CUDA calls is the production path. The same workloads run
on a real GPU in ``benchmarks/gpu_check.py``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import WORKLOADS, log_lines, validate_record_json

from sofa_top.datamodel.snapshot import Snapshot
from sofa_top.launch import LaunchRequest, Sampling, open_launch
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.replay import ReplaySource
from sofa_top.recording.report import session_summary

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
pytest.importorskip("torch")

SETTINGS = {"cuda_first_window_s": 0.5, "cuda_window_s": 2.0, "cuda_window_steps": 4}


def _cmd(shape: str, fake: str | None, *args: str) -> tuple[str, ...]:
    cmd = [sys.executable, str(WORKLOADS / "cuda_shapes.py"), "--shape", shape, "--seconds", "240"]
    if fake:
        cmd += ["--fake", fake]
    return (*cmd, *args)


def _window_seen(s: Snapshot, steps_after: int = 12) -> bool:
    """A profiler window arrived and ``steps_after`` steps carry busy times."""
    return (
        s.cuda is not None
        and s.cuda.window is not None
        and sum(1 for x in s.steps if x.gpu_busy_s is not None) >= steps_after
    )


def _record(
    tmp_path: Path,
    cmd: tuple[str, ...],
    until: Callable[[Snapshot], bool],
    timeout_s: float = 200.0,
) -> tuple[dict[str, Any], Path, Snapshot | None]:
    """Launch ``cmd`` as ``record`` would, stop once ``until(snapshot)`` (or the target
    exited), and summarize the session file."""
    path = tmp_path / "gpu.sofa"
    run = open_launch(
        LaunchRequest(
            cmd=cmd, mode="record", output=str(path), settings=SETTINGS,
            sampling=Sampling(interval_s=0.2, stacks=False),
        )
    )  # fmt: skip
    seen = threading.Event()
    last: list[Snapshot] = []  # the snapshot that met the condition (or saw the exit)

    def on_snapshot(s: Snapshot) -> None:
        if not seen.is_set() and (until(s) or s.target_exited):
            last[:] = [s]
            seen.set()

    run.start(on_snapshot)
    try:
        assert seen.wait(timeout_s), "the condition was never met"
        if last and last[0].target_exited:
            run.session.wait(30.0)  # it ends by itself ("target exited")
    finally:
        run.finish("test done")
    out = session_summary(path)
    validate_record_json(out)
    return out, path, (last[0] if last else None)


def test_launch_bound_loop_is_told_apart(tmp_path: Path) -> None:
    out, path, snap = _record(tmp_path, _cmd("tiny", "launch", "--layers", "20"), _window_seen)
    v = out["verdict"]
    assert v["kind"] == "gpu-underutilized", v["headline"]
    assert v["evidence"]["cause"] == "launch" and v["evidence"]["device"] == "gpu"
    assert "reduce-overhead" in v["recommendations"][0]
    assert out["steps"]["gpu_busy_fraction"] < 0.5
    assert out["cuda"]["windows"] >= 1 and out["cuda"]["device_name"].startswith("FAKE GPU")
    assert out["cuda"]["last_window"]["kernels"] > 0
    reader = SessionReader(path)
    try:
        info = reader.events("agent")[-1].data
        assert "torch-cuda" in info["hooks_applied"]
        steps = reader.steps()
        cuda = reader.cuda_samples()
    finally:
        reader.close()
    assert out["cuda"]["windows"] == sum(1 for c in cuda if c.window is not None)
    assert {s.gpu_busy_source for s in steps if s.gpu_busy_s is not None} == {
        "profiler",
        "estimate",
    }
    assert snap is not None and snap.verdict is not None and snap.verdict.kind == v["kind"]
    # every step had its GPU span, but those still waiting for their CUDA events when the
    # stop (SIGINT, as Ctrl-C) ended the loop: sent at its exit, unmeasured
    measured = [i for i, s in enumerate(steps) if s.gpu_span_s is not None]
    tail = len(steps) - 1 - measured[-1]
    assert tail <= 16, tail
    assert all(s.gpu_span_s is not None for s in steps[-10 - tail : len(steps) - tail])
    # a replay shows the same: the CUDA reading with its window, GPU busy per step
    replay = ReplaySource(path)
    try:
        at = replay.snapshot_at(steps[-1].ts)
    finally:
        replay.stop()
    assert at.cuda is not None and at.cuda.window is not None
    assert any(s.gpu_busy_s is not None for s in at.steps)
    assert not any(e.kind == "cuda" for e in at.events)


def test_gpu_compute_bound_loop_is_told_apart(tmp_path: Path) -> None:
    out, _path, _snap = _record(tmp_path, _cmd("matmul", "compute", "--size", "64"), _window_seen)
    v = out["verdict"]
    assert v["kind"] == "compute-bound", v["headline"]
    assert v["evidence"]["device"] == "gpu" and v["evidence"]["gpu_busy_fraction"] >= 0.8
    assert "bfloat16" in v["recommendations"][0]


def test_gpu_input_bound_loop_is_told_apart(tmp_path: Path) -> None:
    out, _path, _snap = _record(tmp_path, _cmd("input", "input"), _window_seen)
    v = out["verdict"]
    assert v["kind"] == "input-bound", v["headline"]
    assert v["evidence"]["device"] == "gpu" and v["evidence"]["gpu_busy_fraction"] < 0.5
    assert any("pin_memory=True" in r for r in v["recommendations"])
    assert any("num_workers" in r for r in v["recommendations"])


def test_a_gpu_lost_mid_run_stops_only_the_gpu_readings(tmp_path: Path) -> None:
    def errored_then_steps(s: Snapshot) -> bool:
        err = [e for e in s.events if e.kind == "cuda-error"]
        return bool(err) and sum(1 for x in s.steps if x.ts > err[-1].ts) >= 10

    cmd = _cmd("tiny", "launch", "--layers", "10", "--fail-after", "40")
    out, path, snap = _record(tmp_path, cmd, errored_then_steps)
    assert snap is not None and not snap.target_exited  # the workload ran on
    (error,) = out["cuda"]["errors"]
    assert "CUDA readings stopped" in error and "unspecified launch failure" in error
    reader = SessionReader(path)
    try:
        (event,) = reader.events("cuda-error")
        after = [s for s in reader.steps() if s.ts > event.ts]
        info = reader.events("agent")[-1].data
    finally:
        reader.close()
    assert len(after) >= 10 and all(s.gpu_span_s is None for s in after)
    assert dict(info["hooks_skipped"])["torch-cuda"].startswith("stopped: RuntimeError")


@pytest.mark.parametrize(
    ("kind", "text"),
    [("oom", "OutOfMemoryError: CUDA out of memory"), ("cuda-error", "illegal memory access")],
)
def test_the_workloads_own_cuda_failure_is_reported_as_its_own(
    tmp_path: Path, kind: str, text: str
) -> None:
    cmd = _cmd("tiny", "launch", "--layers", "10", "--fail-at-step", "30", "--fail-with", kind)
    out, path, _snap = _record(tmp_path, cmd, lambda s: False)
    assert out["exit_code"] == 1 and out["end_reason"] == "target exited"
    assert any(text in line for line in log_lines(path))  # its traceback, in its log
    assert out["steps"]["count"] >= 25  # what ran before is kept
    assert out["cuda"] is not None and out["cuda"]["errors"] == []  # not sofa-top's failure


def test_a_cpu_loop_never_initialises_cuda(tmp_path: Path) -> None:
    def steps(s: Snapshot) -> bool:
        return len(s.steps) >= 15 and s.agent is not None

    out, _path, snap = _record(tmp_path, _cmd("tiny", None, "--layers", "5"), steps)
    assert out["cuda"] is None and out["steps"]["gpu_busy_fraction"] is None
    assert snap is not None and snap.agent is not None
    skipped = dict(snap.agent.hooks_skipped)
    assert skipped["torch-cuda"] == "the workload has not initialised CUDA"
    assert out["verdict"]["kind"] != "gpu-underutilized"
